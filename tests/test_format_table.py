"""Steps 2, 3 and 5's table of formats side by side: its range column and the heading over it.

The range ends are checked against ml_dtypes' own limits (an implementation independent of lensa.numerics.formats);
the heading against the formats the table under it lists.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from lensa.models.gradients import gradient_sample
from lensa.numerics.formats import FORMATS
from lensa.ui import format_table
from lensa.ui.frame import Page
from lensa.ui.i18n import text
from lensa.ui.site import ALSO_GROUPS, PAGES_BY_KEY
from tests.pagetools import open_page

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

DTYPES = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
}
SHOWN = (*format_table.SIXTEEN_BIT_KEYS, *format_table.also_keys("all"))
ALSO_PAGES = ("fp16_range", "loss_scaling", "bf16")  # the steps with the "also show" choice


def _read(cell: str, lang: str) -> tuple[float, bool]:
    """A number as the table writes it, and whether it is written in e-notation (rounded)."""
    group, dec = (",", ".") if lang == "en" else (".", ",")
    return float(cell.replace(group, "").replace(dec, ".")), "e" in cell


def _range_cells(lang: str) -> dict[str, str]:
    page = Page(PAGES_BY_KEY["fp16_range"], lang)
    rows = format_table.format_rows(page, gradient_sample(1e-6), SHOWN)
    head = text(lang, "common.col_format"), text(lang, "common.col_range")
    return {row[head[0]]: row[head[1]] for row in rows}


def test_every_format_of_the_table_is_checked():
    assert set(SHOWN) == set(DTYPES)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_range_ends_are_the_formats_limits_exact_unless_in_e_notation(lang):
    cells = _range_cells(lang)
    for key in SHOWN:
        info = ml_dtypes.finfo(DTYPES[key])
        low, high = cells[FORMATS[key].label].split(" … ")
        for cell, limit in ((low, float(info.smallest_subnormal)), (high, float(info.max))):
            value, rounded = _read(cell, lang)
            if rounded:  # e-notation: two significant digits
                assert value == pytest.approx(limit, rel=0.05), (key, cell)
            else:
                assert value == limit, (key, cell)


def test_fp6_e2m3_reads_0_125_to_7_5_in_both_languages():
    assert _range_cells("en")["FP6 E2M3"] == "0.125 … 7.5"
    assert _range_cells("id")["FP6 E2M3"] == "0,125 … 7,5"


def test_ranges_stay_short():
    for cell in _range_cells("en").values():
        assert all(len(end) <= 7 for end in cell.split(" … ")), cell


def _families(keys: tuple[str, ...]) -> set[str]:
    return {FORMATS[k].label.split()[0] for k in keys}


@pytest.mark.parametrize("lang", ["en", "id"])
@pytest.mark.parametrize("page_key", ALSO_PAGES)
def test_the_heading_names_the_format_families_shown_and_no_other(page_key, lang):
    page = Page(PAGES_BY_KEY[page_key], lang)
    every = _families(format_table.also_keys("all"))
    for also in ALSO_GROUPS:
        if also == "none":
            continue
        heading = format_table.also_title(page, also)
        shown = _families(format_table.also_keys(also))
        assert {f for f in every if f in heading} == shown, (also, heading)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_step2_with_every_group_heads_its_table_with_every_family(lang):
    at = open_page("fp16_range", lang=lang, also="all")
    assert not at.exception
    table = at.dataframe[0].value
    families = {label.split()[0] for label in table[text(lang, "common.col_format")]} - {"FP16", "BF16"}
    assert families == {"FP8", "FP6", "FP4"}
    heading = [h.value for h in at.subheader if any(f in h.value for f in families)]
    assert len(heading) == 1 and all(f in heading[0] for f in families), heading
