"""The text front end: split text into sentences and spell out what a voice cannot read as
written (numbers, dates, times, money, abbreviations, units), per language. Pure Python."""
import re
import unicodedata

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                  "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_MONTH_ABBR = {m[:3].lower(): m for m in _MONTHS} | {"sept": "September"}

# Abbreviations read the same wherever they stand; "St." depends on its neighbours (below).
_ABBREVIATIONS = {
    "mr": "mister", "mrs": "missus", "ms": "miz", "dr": "doctor", "prof": "professor",
    "jr": "junior", "sr": "senior", "etc": "et cetera", "vs": "versus", "approx": "approximately",
    "dept": "department", "mt": "mount", "ave": "avenue", "e.g": "for example", "i.e": "that is",
}
# Abbreviations a sentence does not end at ("Dr. Smith"): the split in `sentences` skips them.
_NO_SPLIT = {"mr", "mrs", "ms", "dr", "prof", "jr", "sr", "st", "vs", "mt", "no", "e.g", "i.e",
             "approx", "dept", "ave", "fig", "vol"}

_UNITS = {  # symbol -> (singular, plural); only after a number
    "km": ("kilometer", "kilometers"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "m": ("meter", "meters"), "mi": ("mile", "miles"),
    "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "ft": ("foot", "feet"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "l": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"), "kb": ("kilobyte", "kilobytes"),
    "mb": ("megabyte", "megabytes"), "gb": ("gigabyte", "gigabytes"),
    "tb": ("terabyte", "terabytes"), "hz": ("hertz", "hertz"), "khz": ("kilohertz", "kilohertz"),
    "mhz": ("megahertz", "megahertz"), "ghz": ("gigahertz", "gigahertz"),
    "ms": ("millisecond", "milliseconds"), "°c": ("degree Celsius", "degrees Celsius"),
    "°f": ("degree Fahrenheit", "degrees Fahrenheit"), "°": ("degree", "degrees"),
}
_CURRENCIES = {  # symbol -> (unit, units, hundredth, hundredths)
    "$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "sen", "sen"),
}
_SYMBOLS = {"&": " and ", "+": " plus ", "@": " at ", "=": " equals "}
# Characters kept after normalising: letters, apostrophes, hyphens and the punctuation a voice
# pauses at. Everything else is unspeakable and dropped.
_KEEP_PUNCT = set(".,!?;:'-\"")


def cardinal(n):
    """An integer in words: 1234 -> 'one thousand two hundred thirty-four'."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("-" + _ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + (" " + cardinal(rest) if rest else "")
    for scale, name in _SCALES:
        if n >= scale:
            head, rest = divmod(n, scale)
            return cardinal(head) + " " + name + (" " + cardinal(rest) if rest else "")
    raise AssertionError(n)


def ordinal(n):
    """An integer as an ordinal: 21 -> 'twenty-first'."""
    words = cardinal(n)
    head, sep, last = words.rpartition(" " if "-" not in words.rsplit(" ", 1)[-1] else "-")
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def year(n):
    """A year as it is said: 1999 -> 'nineteen ninety-nine', 2005 -> 'two thousand five',
    2026 -> 'twenty twenty-six', 1900 -> 'nineteen hundred'."""
    if n < 1000 or n >= 10000 or 2000 <= n < 2010 or n % 1000 == 0:
        return cardinal(n)
    head, tail = divmod(n, 100)
    if tail == 0:
        return cardinal(head) + " hundred"
    return cardinal(head) + (" oh " if tail < 10 else " ") + cardinal(tail)


def _digits(s):
    return " ".join(_ONES[int(d)] for d in s)


def _number(s):
    """A number as written ('1,234', '3.14', '-2'): in words."""
    s = s.replace(",", "")
    sign = "minus " if s.startswith(("-", "−")) else ""
    s = s.lstrip("-−")
    whole, _, frac = s.partition(".")
    words = cardinal(int(whole or "0"))
    if frac:
        words += " point " + _digits(frac)
    return sign + words


def _plural(n_text, one, many):
    return one if n_text in ("1", "1.0") else many


_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_SCALE_WORDS = r"(?:thousand|million|billion|trillion)"


def _currency(m):
    symbol, amount, scale = m.group(1), m.group(2), m.group(3)
    one, many, cent, cents = _CURRENCIES[symbol]
    if scale:
        return f"{_number(amount)} {scale} {many}"
    whole, _, frac = amount.replace(",", "").partition(".")
    words = f"{cardinal(int(whole))} {_plural(whole, one, many)}"
    if frac and int(frac[:2].ljust(2, "0")):
        n_cents = int(frac[:2].ljust(2, "0"))
        words += f" and {cardinal(n_cents)} {cent if n_cents == 1 else cents}"
    return words


def _iso_date(m):
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return m.group(0)
    return f"{_MONTHS[mo - 1]} {ordinal(d)}, {year(y)}"


def _month_day(m):
    month = _MONTH_ABBR[m.group(1).lower()[:4].rstrip(".")] if m.group(1).lower()[:4] == "sept" \
        else _MONTH_ABBR[m.group(1).lower()[:3]]
    words = f"{month} {ordinal(int(m.group(2)))}"
    if m.group(3):
        words += f", {year(int(m.group(3)))}"
    return words


def _time(m):
    hours, minutes, half = int(m.group(1)), int(m.group(2)), m.group(3)
    words = cardinal(hours)
    if minutes == 0:
        words += "" if half else " o'clock"
    else:
        words += (" oh " if minutes < 10 else " ") + cardinal(minutes)
    if half:
        words += " " + " ".join(half.lower().replace(".", ""))
    return words


def _year_or_decade(m):
    words = year(int(m.group(1)))
    if m.group(2):  # "the 1980s"
        words = words[:-1] + "ies" if words.endswith("y") else words + "s"
    return words


def _unit(m):
    number, unit = m.group(1), m.group(2)
    one, many = _UNITS[unit.lower()]
    return f"{_number(number)} {_plural(number, one, many)}"


def _saint_or_street(m):
    # "at St. Louis" is a saint, "Baker St." a street: the words around it decide.
    before = re.search(r"(\w+)\W*$", m.string[:m.start()])
    named_before = bool(before) and before.group(1)[0].isupper()
    return "Saint " if m.group(1) and not named_before else "Street" + _kept_stop(m) + \
        (" " if m.group(1) else "")


def _kept_stop(m):
    """The full stop of an abbreviation when it also ends the sentence."""
    rest = m.string[m.end():]
    return "." if not rest.strip() or re.match(r"\s*[A-Z]", rest) else ""


def _english_numbers(text):
    text = re.sub(r"\b(\d{4})-(\d{2})-(\d{2})\b", _iso_date, text)
    months = "|".join(m[:3] for m in _MONTHS) + "|Sept"
    text = re.sub(rf"\b({months})[a-z]*\.? (\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? (\d{{4}})\b)?",
                  _month_day, text)
    text = re.sub(r"\b(\d{1,2}):(\d{2})\b(?:\s*([AaPp]\.?[Mm]\.?)(?!\w))?", _time, text)
    text = re.sub(rf"([$€£¥])\s?({_NUM})(?:\s({_SCALE_WORDS}))?", _currency, text)
    text = re.sub(rf"(-?{_NUM})\s?%", lambda m: _number(m.group(1)) + " percent", text)
    units = "|".join(sorted((re.escape(u) for u in _UNITS), key=len, reverse=True))
    text = re.sub(rf"(?<![\w.])(-?{_NUM})\s?({units})(?![\w/])", _unit, text, flags=re.I)
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: ordinal(int(m.group(1))), text)
    text = re.sub(r"\b(?:No|no)\.\s?(?=\d)|#(?=\d)", "number ", text)
    # A bare four-digit number from 1100 to 2099 reads as a year ("in 1999"), others as amounts.
    text = re.sub(r"(?<![\d,.])(1[1-9]\d\d|20\d\d)(s?)(?!\d|,\d|\.\d)", _year_or_decade, text)
    text = re.sub(rf"(?<![\w.])([-−]?(?:{_NUM}))(?![\w])", lambda m: _number(m.group(1)), text)
    return text


def _dotted_acronym(m):
    # "U.S." -> "U S": read letter by letter; its last dot may also end the sentence.
    return " ".join(m.group(1).replace(".", "").upper()) + _kept_stop(m)


def _english_abbreviations(text):
    text = re.sub(r"\bSt\.(?: (?=([A-Z])))?", _saint_or_street, text)
    for short, long in _ABBREVIATIONS.items():
        pattern = r"\b" + re.escape(short) + r"\.(?=\W|$)"
        text = re.sub(pattern, lambda m, long=long: (long if m.group(0)[0].islower()
                      else long[0].upper() + long[1:]) + _kept_stop_after(m, long), text,
                      flags=re.I)
    text = re.sub(r"(?<![\w.])((?:[A-Za-z]\.){2,})(?!\w)", _dotted_acronym, text)
    return text


def _kept_stop_after(m, long):
    # Titles ("Dr. Smith") never end a sentence; "etc." and "vs." can.
    return "" if long in ("mister", "missus", "miz", "doctor", "professor", "mount", "versus") \
        else _kept_stop(m)


def _drop_unspeakable(text):
    text = re.sub(r"(?<=\w\w)\.(?=[A-Za-z]{2})", " dot ", text)  # "llama.cpp", "example.com"
    for symbol, words in _SYMBOLS.items():
        text = text.replace(symbol, words)
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    text = re.sub(r"[—–]", ", ", text)
    kept = []
    for ch in unicodedata.normalize("NFC", text):
        category = unicodedata.category(ch)
        if category[0] in "LN" or ch in _KEEP_PUNCT:
            kept.append(ch)
        elif category[0] == "Z" or ch in "\t\n\r/()[]{}":
            kept.append(" ")
    return re.sub(r"\s+", " ", "".join(kept)).strip()


def _normalize_english(sentence):
    text = _english_abbreviations(sentence)
    text = _english_numbers(text)
    return _drop_unspeakable(text)


_NORMALIZERS = {"en": _normalize_english}


def normalize(sentence, lang="en"):
    """`sentence` with numbers, dates, times, money, abbreviations and units written out as
    words and unspeakable characters dropped, ready for G2P."""
    base = lang.split("-")[0].lower()
    if base not in _NORMALIZERS:
        raise ValueError(f"no text normaliser for language {lang!r}; "
                         f"supported: {', '.join(sorted(_NORMALIZERS))}")
    return _NORMALIZERS[base](sentence)


_SENTENCE_END = re.compile(r"([.!?]+[\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")


def sentences(text):
    """The sentences of `text`, in order, stripped. A full stop after an abbreviation ("Dr.",
    "e.g.") or an initial ("J. Smith") does not end a sentence; "3.14" has no space after it."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.group(1) and m.group(1).startswith(".") and len(m.group(1)) == 1:
            word = re.search(r"([\w.]+)\.$", text[start:m.start(1) + 1])
            word = word.group(1).lower() if word else ""
            if word in _NO_SPLIT or (len(word) == 1 and word.isalpha()):
                continue
        end = m.end(1) if m.group(1) else m.start()
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = m.end()
    piece = text[start:].strip()
    if piece:
        out.append(piece)
    return out
