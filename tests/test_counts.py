"""A count typed as a person writes it (step 1's custom model size): reading, writing, and back again."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lensa.ui import i18n
from lensa.ui.controls import CountControl, Reading, engineering_text, parse_count

PARAMS = CountControl("params", 7e9, 1e8, 1e12)


@pytest.mark.parametrize(
    ("typed", "count"),
    [
        ("175e9", 175_000_000_000),  # GPT-3
        ("175B", 175_000_000_000),
        ("175 billion", 175_000_000_000),
        ("175 miliar", 175_000_000_000),
        ("7.5B", 7_500_000_000),  # the ZeRO paper's worked example
        ("7,5B", 7_500_000_000),  # Indonesian decimal comma
        ("7,5 miliar", 7_500_000_000),
        ("7.5e9", 7_500_000_000),
        (" 7.5 b ", 7_500_000_000),
        ("1.3e9", 1_300_000_000),
        ("1.3E+9", 1_300_000_000),
        ("124M", 124_000_000),
        ("124 juta", 124_000_000),
        ("1.5T", 1_500_000_000_000),
        ("1,5 triliun", 1_500_000_000_000),
        ("7,500,000,000", 7_500_000_000),  # what the English page shows back
        ("7.500.000.000", 7_500_000_000),  # what the Indonesian page shows back
        ("7 500 000 000", 7_500_000_000),
        ("6740000000", 6_740_000_000),
        ("0.1234567891e10", 1_234_567_891),  # decimal, exact: no binary rounding on the way
        ("-7B", -7_000_000_000),  # a number, out of every range: the control clamps it
    ],
)
def test_counts_are_read_exactly(typed, count):
    assert parse_count(typed) == count


@pytest.mark.parametrize(
    "junk", ["", "abc", "nan", "inf", "0x10", "1e", "e9", "7.5 X", "7.5BB", "1,000.5", "--7B", "10**9", "７B", "1" * 65]
)
def test_junk_is_not_a_count(junk):
    assert parse_count(junk) is None
    assert PARAMS.read(junk) == Reading(7e9, "not_a_number")


def test_a_lone_group_is_a_decimal_comma():
    # "1,300" could be 1300 (English) or 1.3 (Indonesian); with one mark it is read as a decimal, like every URL value.
    assert parse_count("1,300") == 1 and parse_count("1,300,000") == 1_300_000


def test_beyond_float_range_is_out_of_range_not_junk():
    assert parse_count("1e999") == math.inf and parse_count("-1e999") == -math.inf
    assert parse_count("1e-999") == 0
    assert PARAMS.read("1e999").value == 1e12 and PARAMS.read("1e999").problem == "out_of_range"
    assert PARAMS.read("-7B").value == 1e8 and PARAMS.read("50M").problem == "out_of_range"


@pytest.mark.parametrize(
    ("count", "url", "en", "id_"),
    [
        (7e9, "7e9", "7B", "7 miliar"),
        (7.5e9, "7.5e9", "7.5B", "7,5 miliar"),
        (175e9, "175e9", "175B", "175 miliar"),
        (124e6, "124e6", "124M", "124 juta"),
        (1e12, "1e12", "1T", "1 triliun"),
        (1_234_567_891, "1.234567891e9", "1.234567891B", "1,234567891 miliar"),
        (999, "999", "999", "999"),
    ],
)
def test_counts_are_written_exactly(count, url, en, id_):
    assert engineering_text(count) == url
    assert i18n.compact_exact(count, "en") == en and i18n.compact_exact(count, "id") == id_


@given(st.integers(min_value=100_000_000, max_value=10**12))
def test_every_spelling_the_page_writes_reads_back(n):
    # The URL, the box and the count shown under it each read back as the very same count, in both languages.
    assert parse_count(engineering_text(n)) == n
    for lang in i18n.LANGUAGES:
        assert parse_count(i18n.compact_exact(n, lang)) == n
        assert parse_count(i18n.number(n, lang)) == n
    assert PARAMS.read(PARAMS.to_url(n)).value == n


def test_engineering_text_refuses_what_is_not_a_count():
    for bad in (-1.0, 0.5, math.inf, math.nan):
        with pytest.raises(ValueError):
            engineering_text(bad)
