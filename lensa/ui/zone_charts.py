"""Steps 2 and 3's charts of the gradients coloured by what FP16 does to each (zero, subnormal, normal, overflow),
with FP16's limits marked: for the illustration's sample and for a recorded run's binades."""

from __future__ import annotations

import numpy as np

from lensa.formats import FORMATS, classify
from lensa.measured import ZoneHistogram
from lensa.ui import figures
from lensa.ui.frame import Page


def _zone_labels(page: Page) -> dict[str, str]:
    return {
        "zero": page.t("category.zero"),
        "subnormal": page.t("category.subnormal"),
        "normal": page.t("category.normal_fp16"),
        "overflow": page.t("category.overflow"),
    }


def _fp16_marks(page: Page) -> list[tuple[float, str]]:
    fp16 = FORMATS["fp16"]
    return [
        (fp16.smallest_subnormal, f"{page.t('fp16_range.mark_subnormal')} {page.sci(fp16.smallest_subnormal)}"),
        (fp16.smallest_normal, f"{page.t('fp16_range.mark_normal')} {page.sci(fp16.smallest_normal)}"),
        (fp16.max, f"{page.t('fp16_range.mark_max')} {page.num(fp16.max)}"),
    ]


def fp16_histogram(page: Page, values: np.ndarray) -> object:
    """The gradient sample on a log axis, coloured by what FP16 does to each value, with FP16's limits marked."""
    return figures.category_histogram(
        values,
        classify(values, FORMATS["fp16"]),
        _zone_labels(page),
        _fp16_marks(page),
        page.t("fp16_range.axis"),
        page.t("fp16_range.count"),
        page.t("fp16_range.hover"),
        page.lang,
    )


def fp16_binades(page: Page, hist: ZoneHistogram) -> object:
    """A recorded tensor's values per binade on a log axis, coloured by what FP16 does to them, FP16's limits marked."""
    return figures.binade_zones(
        hist.exponents,
        hist.counts,
        _zone_labels(page),
        _fp16_marks(page),
        page.t("data.axis"),
        page.t("data.count"),
        page.t("data.hover"),
        page.lang,
    )
