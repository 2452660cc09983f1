"""The format inspector page through AppTest: exact stored values, bit flips, links and typing."""

from __future__ import annotations

import pytest

from lensa.exact import try_parse_exact
from tests.pagetools import notices, open_page

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def stored(at) -> dict[str, str]:
    table = at.dataframe[0].value
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
    assert not at.dataframe


def test_huge_numbers_overflow_everywhere():
    at = open_page("formats", lang="en", x="1e999999")
    assert not at.exception and at.info
    values = stored(at)
    assert values["FP32"] == "inf" and values["FP8 E4M3"] == "448"
