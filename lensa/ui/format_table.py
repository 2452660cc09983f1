"""Steps 2, 3 and 5's "also show" choice and the table of formats side by side that it fills: each format's
range, what it does to the gradients and the error it leaves."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from lensa.models.scaling import loss_scaled
from lensa.numerics.formats import FORMATS, category_shares, formats_in, relative_error
from lensa.ui import widgets
from lensa.ui.frame import Page
from lensa.ui.i18n import exact_or_sci, power_of_two
from lensa.ui.site import ALSO_GROUPS

# The formats the steps list side by side, by the registry's groups.
SIXTEEN_BIT_KEYS = formats_in("16bit")
FP8_KEYS = formats_in("fp8")
NARROW_KEYS = formats_in("narrow")  # FP6 and FP4


def also_keys(also: str) -> tuple[str, ...]:
    """The formats the steps' "also show" choice adds to FP16 and BF16, from the registry's groups."""
    return formats_in(*ALSO_GROUPS[also])


def shows(also: str, group: str) -> bool:
    """Whether the "also show" choice ``also`` includes the format group ``group`` (``"fp8"`` or ``"narrow"``)."""
    return group in ALSO_GROUPS[also]


def also_title(page: Page, also: str) -> str:
    """The heading over the narrower formats, naming the groups the choice shows: the page's own FP8 heading,
    FP6 and FP4's, or one naming all three."""
    if shows(also, "fp8") and shows(also, "narrow"):
        return page.t("also.all_title")
    return page.t("fp8_title" if shows(also, "fp8") else "also.narrow_title")


def also_table(page: Page, values: np.ndarray, also: str) -> None:
    """Steps 2 and 5's table of FP16 and BF16 beside the chosen narrower formats, under its heading."""
    st.subheader(also_title(page, also))
    st.dataframe(format_rows(page, values, (*SIXTEEN_BIT_KEYS, *also_keys(also))), hide_index=True)


def also_control(page: Page, compact: bool = False) -> str:
    """Steps 2, 3 and 5's choice of format groups to show beside FP16 and BF16 (URL ``also``); ``compact``: a
    drop-down, for the row of secondary choices under the picture."""
    label, show, help_text = page.t("also.label"), lambda o: page.t(f"also.option_{o}"), page.t("also.help")
    if compact:
        return widgets.dropdown(page, "also", label, show, help=help_text)
    return widgets.choice(page, "also", label, show, help=help_text)


def format_rows(
    page: Page, values: np.ndarray, keys: Sequence[str], scale_exps: dict[str, int] | None = None
) -> list[dict[str, str]]:
    """Per format: its range, what it does to ``values`` (times 2**k, that format's scale exponent if any), and
    the error.

    The mean relative error is measured after dividing by the scale again, so
    it is the error the gradients really carry; a value lost to 0 counts 100%.
    """
    head = {k: page.t(f"common.col_{k}") for k in ("format", "range", "zero", "subnormal", "overflow", "error")}
    rows = []
    for key in keys:
        f = FORMATS[key]
        k = (scale_exps or {}).get(key, 0)
        scaled = loss_scaled(values, k)
        shares = category_shares(scaled, f)
        error = float(relative_error(scaled, f).mean())
        row = {
            head["format"]: f.label + ("" if k == 0 else f" × {power_of_two(k)}"),
            head["range"]: f"{exact_or_sci(f.smallest_subnormal, page.lang)} … {exact_or_sci(f.max, page.lang)}",
            head["zero"]: page.pct(shares["zero"]),
            head["subnormal"]: page.pct(shares["subnormal"]),
            head["overflow"]: page.pct(shares["overflow"]),
            head["error"]: page.pct(error) if np.isfinite(error) else "∞",
        }
        rows.append(row)
    return rows
