"""The format inspector page through AppTest: exact stored values, bit flips, links and typing."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import numpy as np
import pytest

from lensa.numerics.exact import try_parse_exact
from lensa.numerics.formats import FORMATS
from lensa.ui.i18n import text
from tests.pagetools import notices, open_page

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def stored(at) -> dict[str, str]:
    table = at.table[0].value
    return dict(zip(table.iloc[:, 0], table.iloc[:, 1], strict=True))


def test_acceptance_x_0_1():
    at = open_page("formats", lang="en", x="0.1")
    assert not at.exception and notices(at) == []
    values = stored(at)
    assert values["FP16"] == "0.0999755859375"
    assert values["BF16"] == "0.10009765625"
    assert values["FP32"] == "0.100000001490116119384765625"


@pytest.mark.parametrize(
    ("x", "fp16", "e4m3"),
    [
        ("0x1p-24", "0.000000059604644775390625", "0"),
        ("65519", "65504", "448"),
        ("65520", "inf", "448"),
        ("-0", "-0", "-0"),
        ("nan", "nan", "nan"),
        ("1.00048828125000000001", "1.0009765625", "1"),  # above the midpoint: no double rounding
        ("1e-9", "0", "0"),
    ],
)
def test_stored_values(x, fp16, e4m3):
    values = stored(open_page("formats", lang="en", x=x))
    assert values["FP16"] == fp16 and values["FP8 E4M3"] == e4m3


def test_indonesian_uses_the_decimal_comma():
    assert stored(open_page("formats", lang="id", x="0.1"))["FP16"] == "0,0999755859375"


def test_flipping_the_sign_bit_negates_and_updates_the_link():
    at = open_page("formats", lang="en", x="0.1")
    sign = next(b for b in at.button_group if b.key and b.key.startswith("bits.fp16.sign."))
    sign.set_value([0]).run()
    assert not at.exception
    assert at.query_params["x"] in ("-0.0999755859375", ["-0.0999755859375"])
    assert stored(at)["FP16"] == "-0.0999755859375"


def test_flipping_a_significand_bit_moves_to_the_neighbour():
    at = open_page("formats", lang="en", x="1")
    significand = next(b for b in at.button_group if b.key and b.key.startswith("bits.fp16.significand."))
    significand.set_value([9]).run()  # the last significand bit: one spacing above 1
    assert stored(at)["FP16"] == "1.0009765625"
    assert try_parse_exact(at.text_input[0].value).as_float() == 1.0009765625


def test_clearing_an_exponent_bit_halves():
    at = open_page("formats", lang="en", x="1")
    exponent = next(b for b in at.button_group if b.key and b.key.startswith("bits.fp16.exponent."))
    exponent.set_value([1, 2, 3]).run()  # 1 is 0 01111 0…: clearing the exponent's last bit (bit 10) gives 0 01110
    assert stored(at)["FP16"] == "0.5"


def test_junk_in_the_link_falls_back_with_a_notice():
    at = open_page("formats", lang="en", x="abc")
    assert not at.exception and len(notices(at)) == 1
    assert stored(at)["FP16"] == "0.0999755859375"


def test_typing_junk_says_so_and_shows_nothing_wrong():
    at = open_page("formats", lang="en")
    at.text_input[0].set_value("12,3,4").run()
    assert not at.exception
    assert at.error and "is not a number the inspector can read" in at.error[0].value
    assert not at.table


def test_huge_numbers_overflow_everywhere():
    at = open_page("formats", lang="en", x="1e999999")
    assert not at.exception and at.info
    values = stored(at)
    assert values["FP32"] == "inf" and values["FP8 E4M3"] == "448"


def rows(at, lang: str) -> dict[str, dict[str, str]]:
    """The table's rows by format label, each as {column key: cell} (``stored``, ``category``, ``bits``...)."""
    table = at.table[0].value
    keys = {text(lang, f"formats.col_{k}"): k for k in ("format", "stored", "category", "error", "exponent", "bits")}
    return {row.iloc[0]: {keys[c]: row[c] for c in table.columns} for _, row in table.iterrows()}


@pytest.mark.parametrize("lang", ["en", "id"])
def test_nan_in_a_format_without_nan_says_so_and_what_ml_dtypes_gives(lang):
    at = open_page("formats", lang=lang, x="nan")
    assert not at.exception
    table, cards = rows(at, lang), " ".join(m.value for m in at.markdown)
    for f in FORMATS.values():
        if f.dtype is None:
            continue  # TF32: no type to cast to
        cast = np.array([math.nan]).astype(f.dtype)  # ml_dtypes decides which formats have a NaN
        row = table[f.label]
        if np.isnan(cast.astype(np.float64)[0]):
            assert row["category"] == "NaN" and row["stored"] == "nan", f.label
            continue
        assert row["category"] == text(lang, "formats.no_nan") and row["stored"] == row["bits"] == "—", f.label
        value = format(Decimal(float(cast.astype(np.float64)[0])), "f")  # -0
        code = int(cast.view(np.uint8)[0])
        bits = format(code, f"0{f.bits}b")
        spaced = f"{bits[0]} {bits[1 : 1 + f.exponent_bits]} {bits[1 + f.exponent_bits :]}"
        assert text(lang, "formats.no_nan_cast", value=f"`{value}`", bits=f"`{spaced}`") in cards, f.label
        assert not any(b.key and b.key.startswith(f"bits.{f.name}.") for b in at.button_group), f.label


# Where the inspector's stored value is not ml_dtypes's cast: the legend that says so, and what it must name there
# (E4M3's 448 past its range; E8M0's inf, which the legend once left out).
NOT_ML_DTYPES = {
    ("fp8_e4m3", "inf"): ("formats.legend", r"\b448\b"),
    ("fp8_e4m3", "-inf"): ("formats.legend", r"\b448\b"),
    ("e8m0", "inf"): ("formats_mx.legend", r"\binf\b"),
}


@pytest.mark.parametrize("lang", ["en", "id"])
@pytest.mark.parametrize("x", ["inf", "-inf"])
def test_infinity_in_every_row_is_ml_dtypes_cast_or_the_legend_says_otherwise(lang, x):
    at = open_page("formats", lang=lang, x=x)
    assert not at.exception
    table, captions = rows(at, lang), [c.value for c in at.caption]
    for f in FORMATS.values():
        if f.dtype is None:
            continue
        cast = float(np.array([float(x)]).astype(f.dtype).astype(np.float64)[0])
        shown = table[f.label]["stored"]
        if (f.name, x) in NOT_ML_DTYPES:
            assert math.isnan(cast), f.label  # the legend says the cast gives NaN: hold it to that
            key, names = NOT_ML_DTYPES[(f.name, x)]
            legend = text(lang, key)
            assert legend in captions and f.label in legend and "NaN" in legend and re.search(names, legend), f.label
            assert shown not in ("nan", "NaN"), f.label
        else:
            expected = str(cast) if not math.isfinite(cast) else format(Decimal(cast), "f")  # "inf", "-inf", "nan"
            assert shown == expected.replace(".", "," if lang == "id" else "."), f.label


def url_x(at) -> str:
    """The link's x (the page's default when the link leaves it out)."""
    x = at.query_params.get("x", "0.1")
    return x[0] if isinstance(x, list) else x


def fp32_shown(x: str, lang: str) -> str:
    """FP32's exact value of the decimal ``x``, as numpy rounds it, written the page's way."""
    return format(Decimal(float(np.float32(x))), "f").replace(".", "," if lang == "id" else ".")


@pytest.mark.parametrize(
    ("lang", "typed", "x", "note", "reading"),
    [
        ("id", "65.504", "65504", "grouping", "65504"),  # how the Indonesian lesson writes FP16's largest value
        ("id", "65,504", "65.504", None, ""),
        ("id", "1.234.567,5", "1234567.5", "grouping", "1234567,5"),
        ("id", "0.1", "0.1", "decimal", "0,1"),
        ("id", "1,5e-3", "1.5e-3", "exponent", "0,0015"),
        ("en", "65,504", "65504", "grouping", "65504"),
        ("en", "65.504", "65.504", None, ""),
        ("en", "1,5", "1.5", "decimal", "1.5"),
        ("en", "1e-3", "1e-3", "exponent", "0.001"),
    ],
)
def test_typing_reads_the_languages_marks_and_says_how(lang, typed, x, note, reading):
    at = open_page("formats", lang=lang)
    at.text_input[0].set_value(typed).run()
    assert not at.exception and not at.error
    assert rows(at, lang)["FP32"]["stored"] == fp32_shown(x, lang)
    assert url_x(at) == x  # one spelling for every language: a link means the same number in both
    notes = [c.value for c in at.caption if c.value in {read_note(lang, n, typed, reading) for n in NOTES}]
    assert notes == ([] if note is None else [read_note(lang, note, typed, reading)])


NOTES = ("grouping", "decimal", "exponent")


def read_note(lang: str, note: str, typed: str, reading: str) -> str:
    return text(lang, f"formats.read_{note}", typed=typed, reading=reading)


@pytest.mark.parametrize("x", ["65504", "1.000", "0.1", "-2.5e-3"])
def test_a_link_means_the_same_number_in_both_languages(x):
    pages = {lang: open_page("formats", lang=lang, x=x) for lang in ("en", "id")}
    en, id_ = (rows(pages[lang], lang)["FP32"]["stored"] for lang in ("en", "id"))
    assert id_ == en.replace(".", ",")
    box = pages["id"].text_input[0].value
    assert box == x.replace(".", ",")  # the box writes it the Indonesian way, which reads back the same
    assert url_x(pages["id"]) == x


def test_switching_language_keeps_the_typed_number():
    at = open_page("formats", lang="id")
    at.text_input[0].set_value("65.504").run()
    at.query_params["lang"] = "en"
    at.run()
    assert not at.exception
    assert rows(at, "en")["FP32"]["stored"] == "65504" and url_x(at) == "65504"


def test_the_table_is_static_and_the_switches_show_each_bit():
    at = open_page("formats", lang="en", x="0.1")
    assert not at.dataframe and len(at.table) == 1  # a grid clips FP32's 29-digit value; a static table wraps it
    expected = format(int(np.array([0.1], dtype=np.float32).view(np.uint32)[0]), "032b")  # numpy's bits
    assert rows(at, "en")["FP32"]["bits"].replace(" ", "") == expected
    pills = {b.key.split(".")[2]: b for b in at.button_group if b.key and b.key.startswith("bits.fp32.")}
    shown = "".join(o[0] for field in ("sign", "exponent", "significand") for o in pills[field].options)
    assert shown == expected  # each switch shows its bit's value ...
    numbers = [
        int(o[1:].translate(str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789"))) for f in pills.values() for o in f.options
    ]
    assert numbers == list(range(31, -1, -1))  # ... and its number, for a hover or a screen reader
    assert pills["exponent"].label == "exponent · bits 30 to 23"
