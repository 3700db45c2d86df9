"""The text front end on concrete cases: what a voice is given to read."""
import pytest

from dasllama.core.tts.text import cardinal, normalize, ordinal, sentences, year


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (21, "twenty-one"), (100, "one hundred"),
    (1234, "one thousand two hundred thirty-four"), (2_500_000, "two million five hundred thousand"),
    (-7, "minus seven"),
])
def test_cardinal(n, words):
    assert cardinal(n) == words


@pytest.mark.parametrize("n, words", [
    (1, "first"), (2, "second"), (3, "third"), (12, "twelfth"), (20, "twentieth"),
    (21, "twenty-first"), (103, "one hundred third"),
])
def test_ordinal(n, words):
    assert ordinal(n) == words


@pytest.mark.parametrize("n, words", [
    (1999, "nineteen ninety-nine"), (2005, "two thousand five"), (2026, "twenty twenty-six"),
    (1900, "nineteen hundred"), (1905, "nineteen oh five"), (2000, "two thousand"),
])
def test_year(n, words):
    assert year(n) == words


@pytest.mark.parametrize("text, spoken", [
    ("It was 1999, the 21st century.", "It was nineteen ninety-nine, the twenty-first century."),
    ("In the 1980s.", "In the nineteen eighties."),
    ("Pi is 3.14, not -2.", "Pi is three point one four, not minus two."),
    ("We sold 1,250 books.", "We sold one thousand two hundred fifty books."),
    ("Due 2026-12-03.", "Due December third, twenty twenty-six."),
    ("See you Dec 3.", "See you December third."),
    ("Born on March 5th, 1990.", "Born on March fifth, nineteen ninety."),
    ("At 10:30 or 10:05 pm or 9:00.", "At ten thirty or ten oh five p m or nine o'clock."),
    ("It costs $3.50.", "It costs three dollars and fifty cents."),
    ("Only $1 or €12 or £5.", "Only one dollar or twelve euros or five pounds."),
    ("A $3 billion deal.", "A three billion dollars deal."),
    ("Up 12.5% today.", "Up twelve point five percent today."),
    ("Dr. Smith met Mr. and Mrs. Jones.", "Doctor Smith met Mister and Missus Jones."),
    ("Cats vs. dogs, e.g. pets.", "Cats versus dogs, for example pets."),
    ("We met at St. Louis on Baker St.", "We met at Saint Louis on Baker Street."),
    ("Bread, milk, etc.", "Bread, milk, et cetera."),
    ("It is 5 km away and weighs 1 kg.", "It is five kilometers away and weighs one kilogram."),
    ("Call me ☺ at #1 & more…", "Call me at number one and more"),
    ("Made in the U.S. and run on llama.cpp.", "Made in the U S and run on llama dot cpp."),
    ("# Heading", "Heading"),
])
def test_normalize_english(text, spoken):
    assert normalize(text) == spoken


def test_normalize_names_the_languages_it_has():
    with pytest.raises(ValueError, match="supported: en"):
        normalize("Hallo", lang="de")


def test_sentences_split_at_ends_not_at_abbreviations_or_decimals():
    text = ("Dr. Smith paid 3.14 dollars, e.g. a lot. He left! Did J. Smith stay? Yes.\n\n"
            "A new paragraph")
    assert sentences(text) == [
        "Dr. Smith paid 3.14 dollars, e.g. a lot.", "He left!", "Did J. Smith stay?", "Yes.",
        "A new paragraph",
    ]


def test_sentences_of_empty_text():
    assert sentences("  \n ") == []
