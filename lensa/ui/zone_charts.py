"""Steps 2 and 3's charts of the gradients coloured by what FP16 does to each (zero, subnormal, normal, overflow),
with FP16's limits marked: for the illustration's sample and for a recorded run's binades."""

from __future__ import annotations

from collections.abc import Sequence

from lensa.lessons.common import HIST_HI, HIST_LO, FormatLimits, LogHistogram
from lensa.numerics.formats import FORMATS
from lensa.runstats.measured import ZoneHistogram
from lensa.ui import figures
from lensa.ui.frame import Page


def _zone_labels(page: Page) -> dict[str, str]:
    return {
        "zero": page.t("category.zero"),
        "subnormal": page.t("category.subnormal"),
        "normal": page.t("category.normal_fp16"),
        "overflow": page.t("category.overflow"),
    }


def _fp16_marks(page: Page, words: bool = True) -> list[tuple[float, str]]:
    """FP16's three limits and their labels: what each is and its value, or (``words`` False) the value alone."""
    fp16 = FORMATS["fp16"]
    limits = [
        (fp16.smallest_subnormal, "fp16_range.mark_subnormal", page.sci(fp16.smallest_subnormal)),
        (fp16.smallest_normal, "fp16_range.mark_normal", page.sci(fp16.smallest_normal)),
        (fp16.max, "fp16_range.mark_max", page.num(fp16.max)),
    ]
    return [(x, f"{page.t(key)} {value}" if words else value) for x, key, value in limits]


def fp16_histogram(page: Page, hist: LogHistogram, count_top: float | None = None, aligned: bool = False) -> object:
    """The gradient sample per quarter decade on a log axis, coloured by what FP16 does to each value, with FP16's
    limits marked; ``count_top`` fixes the counts axis (the same at every stop of a slider); ``aligned``: its
    plot lines up with a :func:`format_strip` under it."""
    return figures.category_histogram(
        hist,
        _zone_labels(page),
        _fp16_marks(page),
        page.t("fp16_range.axis"),
        page.t("fp16_range.count"),
        page.t("fp16_range.hover"),
        page.lang,
        count_top,
        figures.ALIGNED_LEFT_MARGIN_PX if aligned else None,
    )


def fp16_compact_marks(page: Page, hist: LogHistogram) -> dict[str, object]:
    """:func:`fp16_histogram` on a phone: its limits labelled by their values alone (the caption under the chart
    says which limit each is), each still beside its line."""
    return figures.compact_marks(hist, _fp16_marks(page, words=False))


def range_labels(page: Page) -> dict[str, str]:
    """The words of a range chart (:func:`lensa.ui.figures.format_ranges`), from step 5's section."""
    return {
        "gradients": page.t("bf16.range_gradients"),
        "subnormal": page.t("bf16.range_subnormal"),
        "normal": page.t("bf16.range_normal"),
        "hover": page.t("bf16.range_hover"),
        "legend_subnormal": page.t("views.legend_subnormal"),
        "legend_normal": page.t("views.legend_normal"),
    }


def format_strip(page: Page, formats: Sequence[FormatLimits]) -> object:
    """The ranges of FP16 and the formats "also show" adds, on the histogram's own axis, to sit right under it."""
    labels = range_labels(page)
    margin = figures.ALIGNED_LEFT_MARGIN_PX
    return figures.format_ranges(formats, None, labels, page.lang, HIST_LO, HIST_HI, every=2, left_margin=margin)


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
