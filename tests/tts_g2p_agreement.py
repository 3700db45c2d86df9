"""How often dasllama's lexicon G2P agrees with espeak-ng (piper-tts's bundled copy, GPL-3, a
test tool only): exact-match rate and phoneme error rate on the most frequent English words
(wordfreq's list, a pinned wheel) and on sentences after `normalize()`. A measurement, not a
test: `python -m tests.tts_g2p_agreement [N_WORDS] [--show K]` prints the figures (it needs
`pip install msgpack` to read the word list).

Symbols are counted as piper counts them: the NFD code points of the IPA string, one id each.
"""
import gzip
import sys
import unicodedata
import zipfile

from tests.assets import AssetUnavailable, _sha256, _wheel

WORDFREQ = "wordfreq==3.1.1"
WORDFREQ_SHA256 = "4b1c6ecffc6198be3396d5cf871c4423ca71c907c231348d352dd54d62b97473"

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Dr. Smith paid $3.50 for a cup of coffee on 2026-12-03.",
    "We will meet at 10:30 near St. Louis, if the weather holds.",
    "She was born in 1999 and finished 21st in the race.",
    "Prices rose by 12.5% last year, more than anyone expected.",
    "My brother lives in a small house near the river with his four cats.",
    "Can you tell me how to get to the train station from here?",
    "The committee approved the budget after a long discussion.",
    "It is about 5 km from the airport to the city centre.",
    "I think that music makes people happy, don't you agree?",
    "The temperature dropped to -5 degrees during the night.",
    "Please send the report to Mr. Jones before Friday afternoon.",
    "Our company hired twenty new engineers this summer.",
    "He read the book twice, but he still didn't understand the ending.",
    "The children played in the garden until it got dark.",
    "A good breakfast gives you energy for the whole morning.",
    "The museum opens at 9:00 on weekdays and closes at 5:00.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "They paid €12 each for the tickets, e.g. the evening show.",
    "Technology changes quickly, so we must keep learning every day.",
)


def frequent_words(n):
    """The `n` most frequent purely alphabetic English words (wordfreq small_en), lowercase."""
    import msgpack  # a test-time need of this script only

    wheel = _wheel(WORDFREQ)
    if _sha256(wheel) != WORDFREQ_SHA256:
        raise AssetUnavailable(f"{wheel.name}: sha256 is not the pinned one")
    with zipfile.ZipFile(wheel) as z:
        bins = msgpack.unpackb(gzip.decompress(z.read("wordfreq/data/small_en.msgpack.gz")))
    words = []
    for frequency_bin in bins[1:]:  # bins[0] is the format header
        for word in frequency_bin:
            if word.isascii() and word.isalpha() and (len(word) > 1 or word in "ai"):
                words.append(word)
                if len(words) == n:
                    return words
    return words


def symbols(ipa):
    return list(unicodedata.normalize("NFD", ipa))


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def espeak():
    """text -> espeak-ng en-us IPA through piper's bundled espeak-ng (core.tts.espeak), all
    sentences joined."""
    import unicodedata

    from dasllama.core.tts import espeak as bridge

    return lambda text: unicodedata.normalize(
        "NFC", "".join("".join(s) for s in bridge.phonemize(text, "en-us")))


def agreement(pairs):
    """(exact-match rate, phoneme error rate, mismatches) over (ours, espeak's) pairs."""
    exact, errors, total, mismatches = 0, 0, 0, []
    for text, ours, ref in pairs:
        distance = edit_distance(symbols(ours), symbols(ref))
        exact += distance == 0
        errors += distance
        total += len(symbols(ref))
        if distance:
            mismatches.append((text, ours, ref))
    return exact / len(pairs), errors / total, mismatches


def main(argv):
    from dasllama.core.tts.g2p import phonemize
    from dasllama.core.tts.text import normalize

    n_words = int(argv[0]) if argv and argv[0].isdigit() else 1000
    show = int(argv[argv.index("--show") + 1]) if "--show" in argv else 0
    reference = espeak()
    words = frequent_words(n_words)
    word_rate, word_per, word_misses = agreement(
        [(w, phonemize(w), reference(w)) for w in words])
    normalised = [normalize(s) for s in SENTENCES]
    sentence_rate, sentence_per, sentence_misses = agreement(
        [(s, phonemize(s), reference(s)) for s in normalised])
    print(f"words: {len(words)}, exact match {word_rate:.1%}, phoneme error rate {word_per:.2%}")
    print(f"sentences: {len(normalised)}, exact match {sentence_rate:.1%}, "
          f"phoneme error rate {sentence_per:.2%}")
    for text, ours, ref in (word_misses[:show] + sentence_misses[:show // 10]):
        print(f"  {text!r}: ours {ours}  espeak {ref}")


if __name__ == "__main__":
    main(sys.argv[1:])
