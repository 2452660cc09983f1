"""What steps 2, 3 and 5 share: the FP16 histogram of the gradient sample, and a table of formats side by side."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lensa.formats import FORMATS, category_shares, classify, relative_error
from lensa.ui import figures
from lensa.ui.frame import Page

FP8_KEYS = ("fp8_e4m3", "fp8_e5m2")


def fp16_histogram(page: Page, values: np.ndarray) -> object:
    """The gradient sample on a log axis, coloured by what FP16 does to each value, with FP16's limits marked."""
    fp16 = FORMATS["fp16"]
    labels = {
        "zero": page.t("category.zero"),
        "subnormal": page.t("category.subnormal"),
        "normal": page.t("category.normal_fp16"),
        "overflow": page.t("category.overflow"),
    }
    marks = [
        (fp16.smallest_subnormal, f"{page.t('fp16_range.mark_subnormal')} {page.sci(fp16.smallest_subnormal)}"),
        (fp16.smallest_normal, f"{page.t('fp16_range.mark_normal')} {page.sci(fp16.smallest_normal)}"),
        (fp16.max, f"{page.t('fp16_range.mark_max')} {page.num(fp16.max)}"),
    ]
    return figures.category_histogram(
        values,
        classify(values, fp16),
        labels,
        marks,
        page.t("fp16_range.axis"),
        page.t("fp16_range.count"),
        page.t("fp16_range.hover"),
        page.lang,
    )


def format_rows(page: Page, values: np.ndarray, keys: Sequence[str], scales: dict[str, float] | None = None) -> list:
    """Per format: its range, what it does to ``values`` (times that format's scale, if any), and the error.

    The mean relative error is measured after dividing by the scale again, so
    it is the error the gradients really carry; a value lost to 0 counts 100%.
    """
    head = {k: page.t(f"common.col_{k}") for k in ("format", "range", "zero", "subnormal", "overflow", "error")}
    rows = []
    for key in keys:
        f = FORMATS[key]
        scale = (scales or {}).get(key, 1.0)
        scaled = np.asarray(values, dtype=np.float64) * scale
        shares = category_shares(scaled, f)
        error = float(relative_error(scaled, f).mean())
        row = {
            head["format"]: f.label + ("" if scale == 1.0 else f" × 2^{int(np.log2(scale))}"),
            head["range"]: f"{page.sci(f.smallest_subnormal)} … {page.num(f.max) if f.max < 1e6 else page.sci(f.max)}",
            head["zero"]: page.pct(shares["zero"]),
            head["subnormal"]: page.pct(shares["subnormal"]),
            head["overflow"]: page.pct(shares["overflow"]),
            head["error"]: page.pct(error) if np.isfinite(error) else "∞",
        }
        rows.append(row)
    return rows
