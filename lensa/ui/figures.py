"""Plotly figures, built by pure functions: core results and translated labels in, go.Figure out.

Each builder writes the figure as plain plotly JSON (dicts and lists) and
wraps it in a :class:`SpecFigure`, a go.Figure that hands that spec straight
to ``st.plotly_chart``. Building through
plotly's object API (``add_bar``, ``add_annotation``, ``update_layout``)
validates every property on every call and cost 15 ms of a 30 ms rerun;
writing the spec takes well under a millisecond. The specs are validated by
the tests instead (tests/test_figures.py).

Titles are not drawn inside the figures: the page writes each figure's
heading as text above it (``display.chart``), where it wraps on a phone.

One colour means one thing on every page. The palette is Okabe and Ito's,
chosen to stay distinct for the common forms of colour blindness, and every
colour is a mid tone that reads on both Streamlit's light and dark themes.
Neutral marks (the gradient sample, reference lines) use a translucent grey
for the same reason; text is left to the theme.

Axes over many decades plot log10 of the value with ticks labelled ``1e-8``,
so bars can be drawn as exact bins and hover text can say exact values.

Colour never carries a meaning alone: the zones of a histogram also differ by
hatching, lines by dashes, and every figure carries the values it plots as a
:class:`DataTable` (``fig.table``), which the page shows under the chart for
screen readers and anyone who wants the numbers, plus a short text
alternative (``fig.alt``) that a page may replace with its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from lensa.lessons.common import FormatLimits, LogHistogram
from lensa.numerics.formats import FORMATS
from lensa.ui import i18n

# What FP16 (or any format) does to a value.
CATEGORY_COLOURS = {
    "zero": "#D55E00",  # vermillion
    "subnormal": "#F0E442",  # yellow
    "normal": "#009E73",  # bluish green
    "overflow": "#CC79A7",  # reddish purple
}
# Which format a value is stored in: one colour per format of the registry that stores values (TF32, a
# tensor-core mode, is FP32's colour with TENSOR_CORE_PATTERN). Okabe and Ito's blue, sky blue and orange;
# Tol's purple and rose for FP8 (Tol's olive was too close to the orange for protanopes); for FP6, FP4 and the
# E8M0 scale the colours that stay farthest from all the others under protanopia, deuteranopia and tritanopia
# (tests/test_palette.py). All mid tones, so they read on light and dark backgrounds.
_COLOUR_OF = {
    "fp32": "#0072B2",  # blue
    "fp16": "#E69F00",  # orange
    "bf16": "#56B4E9",  # sky blue
    "fp8_e4m3": "#AA3377",  # purple
    "fp8_e5m2": "#CC6677",  # rose
    "fp6_e3m2": "#666600",  # dark olive
    "fp6_e2m3": "#664444",  # brown
    "fp4_e2m1": "#EE2244",  # red
    "e8m0": "#AAAAAA",  # grey: a block's scale, never a bar of values
}
FORMAT_COLOURS = {key: _COLOUR_OF[key] for key, f in FORMATS.items() if f.dtype_name is not None}
# The same zones told apart without colour (plotly pattern shapes; normal, the common case, is plain).
CATEGORY_PATTERNS = {"zero": "x", "subnormal": ".", "normal": "", "overflow": "/"}
# Formats side by side in one bar chart (FP16 against BF16 and FP8 on a recorded run), told apart the same way;
# the E8M0 scale has no pattern: it is never a bar.
_PATTERN_OF = {
    "fp16": "",
    "bf16": "/",
    "fp8_e4m3": "x",
    "fp8_e5m2": ".",
    "fp32": "-",
    "fp6_e3m2": "\\",
    "fp6_e2m3": "|",
    "fp4_e2m1": "+",
}
FORMAT_PATTERNS = {key: _PATTERN_OF[key] for key in FORMAT_COLOURS if FORMATS[key].signed}
ARM_DASHES = {"fp32": "solid", "fp16": "dash", "bf16": "dot"}
NEUTRAL = "rgba(128,128,128,0.85)"
OUTLINE = "rgba(60,60,60,0.55)"  # keeps the yellow legible on white
TENSOR_CORE_PATTERN = "/"  # TF32: FP32 data, tensor-core arithmetic
ACTIVATION_PATTERN = "x"

FONT = {"size": 13}
HIDE_TRACE_NAME = "<extra></extra>"
# A plotly figure, trace, layout or shape as the plain dict plotly.js reads.
Spec = dict[str, Any]


@dataclass(frozen=True)
class DataTable:
    """The values a figure plots, as text cells already written for the page's language."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    lang: str = "en"


class SpecFigure(go.Figure):  # type: ignore[misc]  # plotly has no types, so go.Figure is Any
    """A go.Figure that hands over the spec it was built from.

    ``st.plotly_chart`` asks a figure for ``to_dict()`` and serialises that;
    a plain go.Figure would first load the spec into plotly's object tree and
    then copy it back out (frames and all), which is pure overhead here.
    The plotly object API (``.data``, ``.layout``) of this figure is empty:
    read the spec through ``to_dict()``.
    """

    # Declared on the class: plotly's figures refuse to set attributes they do not know.
    table: DataTable | None = None
    alt: str = ""

    def __init__(self, spec: Spec, table: DataTable | None = None, alt: str = "") -> None:
        super().__init__()
        self._lensa_spec = spec
        self.table = table
        self.alt = alt

    def to_dict(self) -> Spec:
        return self._lensa_spec


def _figure(
    data: list[Spec],
    layout: Spec,
    frames: list[Spec] | None = None,
    table: DataTable | None = None,
    alt: str = "",
) -> SpecFigure:
    spec: Spec = {"data": data, "layout": layout}
    if frames:
        spec["frames"] = frames
    return SpecFigure(spec, table, alt)


def _table(lang: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> DataTable:
    return DataTable(tuple(str(h) for h in headers), tuple(tuple(str(c) for c in row) for row in rows), lang)


def _words(lang: str, key: str, **values: object) -> str:
    return i18n.text(lang, f"figure.{key}", **values)


def _layout(height: int, lang: str = "en", **extra: object) -> Spec:
    layout: Spec = {
        "height": height,
        "margin": {"l": 8, "r": 8, "t": 36, "b": 8},
        "font": FONT,
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        },
        "hoverlabel": {"align": "left"},
        "bargap": 0.08,
        "separators": ",." if lang == "id" else ".,",
    }
    layout.update(extra)
    return layout


def _hatch(shape: str, fgcolor: str = "rgba(255,255,255,0.8)") -> Spec:
    """Hatching drawn over the bar's own colour (or none): white by default, dark on light colours."""
    if not shape:
        return {"shape": ""}
    return {"shape": shape, "fillmode": "overlay", "fgcolor": fgcolor, "size": 9, "solidity": 0.3}


def _category_bars(cat: str, name: str, x: list[float], y: list[int], width: float, hovertext: list[str]) -> Spec:
    """One category's stacked bars of a value histogram: its colour, outline and hatching, hover text only."""
    return {
        "type": "bar",
        "x": x,
        "y": y,
        "width": width,
        "name": name,
        "marker": {
            "color": CATEGORY_COLOURS[cat],
            "line": {"color": OUTLINE, "width": 0.5},
            "pattern": _hatch(CATEGORY_PATTERNS[cat], "rgba(0,0,0,0.5)"),
        },
        "hovertext": hovertext,
        "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
        "showlegend": True,  # an empty category too: the legend names all four at every stop of a slider
    }


def _vline(x: float, dash: str = "dot", width: float = 1.5) -> Spec:
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"dash": dash, "color": NEUTRAL, "width": width},
    }


def _log_marks(marks: Sequence[tuple[float, str]], lo: float, hi: float) -> tuple[list[Spec], list[Spec]]:
    """Dotted vertical lines at each value of ``marks`` on a log10 axis from ``lo`` to ``hi``, each labelled across
    the top of the plot beside its line (to the right of it in the axis's left part, to the left in its right part),
    each mark a row (:data:`MARK_ROW_PX`) lower than the one before, so no two labels overlap; the counts axis
    leaves room for them (:data:`MARK_HEADROOM`). The rows are pixels, not a share of the plot: on a phone's short
    chart a share of it was less than a line of text and the labels piled up (issue 41)."""
    shapes: list[Spec] = []
    annotations: list[Spec] = []
    for n, (x, label) in enumerate(marks):
        lx = math.log10(x)
        shapes.append(_vline(lx))
        left = (lx - lo) / (hi - lo) < MARK_FLIP_AT if hi > lo else True
        annotations.append(
            {
                "x": lx,
                "y": 1,
                "yref": "paper",
                "yshift": -MARK_ROW_PX * n,
                "text": label,
                "showarrow": False,
                "xanchor": "left" if left else "right",
                "xshift": 3 if left else -3,
                "yanchor": "top",
                "font": {"size": MARK_FONT_PX},
            }
        )
    return shapes, annotations


def _hline(y: float) -> Spec:
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"dash": "dash", "color": NEUTRAL, "width": 2},
    }


def _floats(values: Sequence[float] | np.ndarray) -> list[float]:
    return [float(v) for v in values]


def decade_ticks(lo: int, hi: int, every: int = 2) -> Spec:
    """Tick values and labels for a log10 axis from 10**lo to 10**hi."""
    values = list(range(lo, hi + 1, every))
    labels = ["1" if v == 0 else f"1e{v}" for v in values]
    return {"tickvals": values, "ticktext": labels, "range": [lo, hi]}


# --- step 1 -------------------------------------------------------------------


BYTES_PER_GB = 1e9  # the figures' memory axes are in decimal gigabytes


@dataclass(frozen=True)
class BarPart:
    """One part of a stacked memory column, in bytes (drawn in GB)."""

    label: str
    n_bytes: float
    colour: str
    pattern: str = ""
    hover: str = ""

    @property
    def gb(self) -> float:
        return self.n_bytes / BYTES_PER_GB


# Step 1's column: at x = 0, its parts labelled to its right; the GPU's dashed line crosses the column only and is
# named in the legend, so it never runs through a part's label and needs no room of its own.
COLUMN_X_RANGE = (-0.35, 1.55)
COLUMN_HALF_WIDTH = 0.25
PART_LABEL_X = 0.32
GPU_LINE_END_X = 0.3
COLUMN_HEIGHT_PX = 300
# On a phone the labels are a size smaller (the component's compact layout).
COMPACT_COLUMN_FONT = 10.5
# A part's label sits at its middle unless its neighbour's would overlap it; then the labels are pushed this many
# font sizes apart and a short line leads from each to its part (2 GB weights are a few pixels tall on a phone).
COLUMN_LABEL_GAP = 1.35


def _column_label_ys(middles: Sequence[float], top: float, plot_px: float, font_px: float) -> list[float]:
    """Where the column's labels go (GB): each part's middle, pushed up (or, near the axis's top, down) just
    enough that neighbours stand ``COLUMN_LABEL_GAP`` font sizes apart on a plot ``plot_px`` tall."""
    gap = COLUMN_LABEL_GAP * font_px * top / plot_px
    ys: list[float] = []
    for middle in middles:
        ys.append(max(middle, gap / 2, ys[-1] + gap if ys else 0.0))
    for i in reversed(range(len(ys))):
        ys[i] = min(ys[i], top - gap / 2, ys[i + 1] - gap if i + 1 < len(ys) else top)
    return ys


def _column_annotations(parts: Sequence[BarPart], top: float, plot_px: float, font_px: float) -> list[Spec]:
    """Each part's label beside the column, with a line from the column's edge to it (see _column_label_ys)."""
    middles, bottom = [], 0.0
    for part in parts:
        middles.append(bottom + part.gb / 2)
        bottom += part.gb
    return [
        {
            "x": COLUMN_HALF_WIDTH,
            "y": middle,
            "ax": PART_LABEL_X,
            "ay": y,
            "axref": "x",
            "ayref": "y",
            "text": part.label,
            "showarrow": True,
            "arrowhead": 0,
            "arrowwidth": 1,
            "arrowcolor": NEUTRAL,
            "xanchor": "left",
        }
        for part, middle, y in zip(parts, middles, _column_label_ys(middles, top, plot_px, font_px), strict=True)
    ]


def _column_plot_px(height: int) -> int:
    """The height of the column's plot: the chart's less its top and bottom margins (``_layout``'s)."""
    margin = _layout(height)["margin"]
    return int(height - margin["t"] - margin["b"])


def compact_column_layout(parts: Sequence[BarPart], axis_top_gb: float, height: int) -> Spec:
    """What a phone changes in :func:`stacked_memory`'s layout, ``height`` px tall: a smaller font, and the labels
    spread for it."""
    font = COMPACT_COLUMN_FONT
    return {
        "font": {"size": font},
        "annotations": _column_annotations(parts, axis_top_gb, _column_plot_px(height), font),
    }


def stacked_memory(
    parts: Sequence[BarPart],
    gpu_gb: float,
    gpu_label: str,
    axis_title: str,
    lang: str,
    axis_top_gb: float | None = None,
) -> go.Figure:
    """One stacked column of training memory, each part labelled beside it; a dashed line at the GPU's memory.

    The axis reaches ``axis_top_gb`` when given (the same for every stop of the tokens slider, so the column
    grows), else 0-200 GB grown to fit the column.
    """
    data = []
    bottom = 0.0
    for part in parts:
        data.append(
            {
                "type": "bar",
                "x": [0],
                "y": [part.gb],
                "base": [bottom],
                "width": 2 * COLUMN_HALF_WIDTH,
                "name": part.label,
                "marker": {
                    "color": part.colour,
                    "line": {"color": "rgba(255,255,255,0.9)", "width": 1.5},
                    "pattern": _hatch(part.pattern),
                },
                "hovertemplate": (part.hover or part.label) + HIDE_TRACE_NAME,
                "showlegend": False,
            }
        )
        bottom += part.gb
    top = axis_top_gb if axis_top_gb is not None else max(200.0, math.ceil(bottom * 1.1 / 50) * 50)
    annotations = _column_annotations(parts, top, _column_plot_px(COLUMN_HEIGHT_PX), FONT["size"])
    line = {
        **_hline(gpu_gb),
        "xref": "x",
        "x0": COLUMN_X_RANGE[0],
        "x1": GPU_LINE_END_X,
        "name": gpu_label,
        "showlegend": True,
    }
    layout = _layout(
        COLUMN_HEIGHT_PX,
        lang,
        barmode="overlay",
        shapes=[line],
        annotations=annotations,
        xaxis={"range": list(COLUMN_X_RANGE), "visible": False, "fixedrange": True},
        yaxis={"range": [0, top], "title": {"text": axis_title}, "fixedrange": True, "separatethousands": True},
    )
    rows = [(part.label, i18n.number(part.gb, lang, 1)) for part in parts]
    rows += [(_words(lang, "total"), i18n.number(bottom, lang, 1)), (gpu_label, i18n.number(gpu_gb, lang, 1))]
    table = _table(lang, (_words(lang, "col_part"), axis_title), rows)
    alt = _words(lang, "alt_stack", n=len(parts), total=i18n.number(bottom, lang, 1), line=gpu_label)
    return _figure(data, layout, table=table, alt=alt)


# --- steps 2, 3 -------------------------------------------------------------------

# Room above the tallest bar for the marks' labels: the counts axis reaches this many times the tallest count.
MARK_HEADROOM = 1.6
MARK_FONT_PX = 11
MARK_ROW_PX = 15  # each row of mark labels this far below the one before: a line of MARK_FONT_PX text and a gap
MARK_FLIP_AT = 0.6  # a mark past this share of the axis has its label on its left
HISTOGRAM_HEIGHT_PX = 300


def _stacked_counts_layout(
    marks: Sequence[tuple[float, str]],
    axis_title: str,
    ticks: Spec,
    count_title: str,
    lang: str,
    count_top: float | None = None,
    **counts_axis: object,
) -> Spec:
    """The layout of counts stacked by category on a log10 axis (``ticks``), the format's limits marked; the counts
    axis reaches ``count_top`` when given (the same for every stop of a slider), else follows the bars."""
    lo, hi = ticks["range"]
    shapes, annotations = _log_marks(marks, lo, hi)
    counts: Spec = {"title": {"text": count_title}, "fixedrange": True, "rangemode": "tozero", **counts_axis}
    if count_top is not None:
        counts["range"] = [0, count_top]
    return _layout(
        HISTOGRAM_HEIGHT_PX,
        lang,
        barmode="stack",
        shapes=shapes,
        annotations=annotations,
        xaxis={"title": {"text": axis_title}, **ticks, "fixedrange": True},
        yaxis=counts,
    )


ALIGNED_LEFT_MARGIN_PX = 84  # room for "gradients" and its ticks, or for a format's name: both charts line up


def _fix_left_margin(layout: Spec, px: int) -> None:
    layout["margin"] = {**layout.get("margin", {}), "l": px}
    layout["yaxis"] = {**layout.get("yaxis", {}), "automargin": False}


def compact_marks(hist: LogHistogram, marks: Sequence[tuple[float, str]]) -> Spec:
    """What a phone changes in :func:`category_histogram`'s layout: its marks labelled with shorter words (the
    limits' values alone, which the caption names), since the full labels of three limits are wider than the plot
    there; as a scrub chart's ``compact_layout``, whose list of annotations replaces the figure's."""
    lo, hi = decade_ticks(round(hist.edges[0]), round(hist.edges[-1]))["range"]
    return {"annotations": _log_marks(marks, lo, hi)[1]}


def count_axis_top(histograms: Sequence[LogHistogram]) -> float:
    """One counts axis for every histogram of a slider's stops: the tallest bar of any, with room for the marks'
    labels above it (at least 1)."""
    return max([1, *(h.tallest for h in histograms)]) * MARK_HEADROOM


def category_histogram(
    hist: LogHistogram,
    labels: dict[str, str],
    marks: Sequence[tuple[float, str]],
    axis_title: str,
    count_title: str,
    hover: str,
    lang: str,
    count_top: float | None = None,
    left_margin: int | None = None,
) -> go.Figure:
    """Stacked counts per quarter-decade bin (a :class:`lensa.lessons.common.LogHistogram`), coloured by what the
    format does to each value.

    Every category has its trace, an empty one too, so the legend names all four at every stop. ``hover`` is a
    template with {lo}, {hi}, {n}, {category}; ``count_top`` fixes the counts axis (:func:`count_axis_top`);
    ``left_margin`` (px) fixes the room left of the plot, so a chart under it on the same axis lines up.
    """
    centres, edges = hist.centres, hist.edges
    bounds = [i18n.sci(10**e, lang) for e in edges]
    data, columns = [], {}
    for cat in CATEGORY_COLOURS:
        counts = hist.counts[cat]
        used = [i for i, n in enumerate(counts) if n]
        if used:
            columns[cat] = counts
        hovertext = [hover.format(lo=bounds[i], hi=bounds[i + 1], n=counts[i], category=labels[cat]) for i in used]
        if used:
            xs, ys = [centres[i] for i in used], [counts[i] for i in used]
        else:  # plotly leaves an empty trace out of the legend: a bar of no height, left of the axis, keeps it in
            xs, ys = [edges[0] - 1.0], [0]
        data.append(_category_bars(cat, labels[cat], xs, ys, hist.width, hovertext))
    ticks = decade_ticks(round(edges[0]), round(edges[-1]))
    layout = _stacked_counts_layout(marks, axis_title, ticks, count_title, lang, count_top)
    if left_margin is not None:
        _fix_left_margin(layout, left_margin)
    occupied = hist.occupied()
    table = _table(
        lang,
        (axis_title, *(labels[c] for c in columns)),
        [(f"{bounds[i]} … {bounds[i + 1]}", *(c[i] for c in columns.values())) for i in occupied],
    )
    shares = ", ".join(f"{labels[c]} {i18n.percent(hist.share(c), lang)}" for c in CATEGORY_COLOURS)
    alt = _words(lang, "alt_histogram", n=i18n.number(hist.total, lang), axis=axis_title, shares=shares)
    return _figure(data, layout, table=table, alt=alt)


@dataclass(frozen=True)
class RunLabels:
    """The words of a loss-scale chart; ``hover_*`` take {step} and {scale}."""

    axis_step: str
    axis_scale: str
    clean: str
    skipped: str
    hover_clean: str
    hover_skipped: str
    play: str = ""
    pause: str = ""


def scaler_run(
    steps: Sequence[int],
    log2_scales: Sequence[float],
    skipped: Sequence[bool],
    labels: RunLabels,
    animate: bool = True,
    overlay: tuple[str, Sequence[float]] | None = None,
    colour: str = FORMAT_COLOURS["fp16"],
    max_frames: int | None = None,
    lang: str = "en",
) -> go.Figure:
    """log2 S per step, skipped steps marked ×.

    ``animate`` adds a Play button that replays the run in the browser.
    ``overlay`` (label, log2 S per step) draws a second run over the first,
    dashed, such as a real GradScaler over the illustration. ``max_frames``
    caps the animation of a long recorded run: the frames then advance
    several steps at a time (the last frame is always the whole run).
    ``lang`` is the language of the data table and the text alternative.
    """
    run = _Run.of([int(s) for s in steps], _floats(log2_scales), list(skipped), labels, colour)
    data = run.traces(len(run.steps))
    all_ys = list(run.ys)
    headers = [labels.axis_step, f"{labels.clean}: S", labels.skipped]
    rows = [
        [st, _log2_scale(y), _words(lang, "yes" if s else "no")]
        for st, y, s in zip(run.steps, run.ys, run.skipped, strict=True)
    ]
    if overlay is not None:
        name, other = overlay[0], _floats(overlay[1])
        all_ys += other
        headers.append(f"{name}: S")
        for row, y in zip(rows, other, strict=False):  # a real run may stop short of the illustration
            row.append(_log2_scale(y))
        data.append(_overlay_trace(name, run.steps[: len(other)], other))
    layout = _run_layout(run.steps, all_ys, labels)
    frames = None
    if animate:
        frames = run.frames(max_frames)
        layout["updatemenus"] = [_play_buttons(labels)]
        layout["margin"] = {"l": 8, "r": 8, "t": 36, "b": 90}
    alt = _words(
        lang,
        "alt_run",
        name=labels.clean,
        n=i18n.number(len(run.steps), lang),
        start=_log2_scale(run.ys[0]) if run.ys else "",
        end=_log2_scale(run.ys[-1]) if run.ys else "",
        skipped=i18n.number(sum(bool(s) for s in run.skipped), lang),
    )
    return _figure(data, layout, frames, table=_table(lang, headers, rows), alt=alt)


def _log2_scale(y: float) -> str:
    """A loss scale given as log2 S, written as the power of two it is."""
    return i18n.power_of_two(round(y))


@dataclass(frozen=True)
class _Run:
    """One loss-scale run as :func:`scaler_run` draws it: the line of S and the crosses of skipped steps."""

    steps: list[int]
    ys: list[float]  # log2 S
    skipped: list[bool]
    labels: RunLabels
    colour: str
    hovers: list[str]

    @classmethod
    def of(cls, steps: list[int], ys: list[float], skipped: list[bool], labels: RunLabels, colour: str) -> _Run:
        hovers = [
            (labels.hover_skipped if s else labels.hover_clean).format(step=st, scale=_log2_scale(y))
            for st, y, s in zip(steps, ys, skipped, strict=True)
        ]
        return cls(steps, ys, skipped, labels, colour, hovers)

    def traces(self, n: int) -> list[Spec]:
        """The line and the crosses of the first ``n`` steps."""
        xs, yv, sk = self.steps[:n], self.ys[:n], self.skipped[:n]
        return [
            {
                "type": "scatter",
                "x": xs,
                "y": yv,
                "mode": "lines+markers",
                "name": self.labels.clean,
                "line": {"shape": "hv", "color": self.colour},
                "marker": {"size": 6, "color": self.colour},
                "hovertext": self.hovers[:n],
                "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
            },
            {
                "type": "scatter",
                "x": [x for x, s in zip(xs, sk, strict=True) if s],
                "y": [y for y, s in zip(yv, sk, strict=True) if s],
                "mode": "markers",
                "name": self.labels.skipped,
                "marker": {
                    "symbol": "x-thin-open",
                    "size": 14,
                    "color": CATEGORY_COLOURS["overflow"],
                    "line": {"width": 3},
                },
                "hoverinfo": "skip",
            },
        ]

    def frames(self, max_frames: int | None) -> list[Spec]:
        """The animation's frames: the run so far, one step (or, past ``max_frames``, several) at a time."""
        n = len(self.steps)
        every = 1 if not max_frames or n <= max_frames else math.ceil(n / max_frames)
        counts = sorted({*range(every, n + 1, every), n})
        # A frame's traces are merged into the drawn ones, which keep the whole run's hover texts: frames
        # leave them out (a recorded run of 300 steps would otherwise send each text once per frame).
        return [
            {
                "data": [{k: v for k, v in t.items() if k != "hovertext"} for t in self.traces(c)],
                "name": str(c),
                "traces": [0, 1],
            }
            for c in counts
        ]


def _overlay_trace(name: str, steps: list[int], log2_scales: list[float]) -> Spec:
    """A second run drawn over the first, dashed and grey."""
    return {
        "type": "scatter",
        "x": steps,
        "y": log2_scales,
        "mode": "lines",
        "name": name,
        "line": {"shape": "hv", "color": NEUTRAL, "width": 3, "dash": "dash"},
        "hovertemplate": f"{name}: %{{y}}" + HIDE_TRACE_NAME,
    }


def _run_layout(steps: list[int], all_ys: list[float], labels: RunLabels) -> Spec:
    """Steps across, log2 S up, one tick a power of two while the range is short enough to read them."""
    lo, hi = min(all_ys) - 1, max(all_ys) + 1
    return _layout(
        340,
        xaxis={"title": {"text": labels.axis_step}, "range": [steps[0] - 0.5, steps[-1] + 0.5], "fixedrange": True},
        yaxis={
            "title": {"text": labels.axis_scale},
            "range": [lo, hi],
            "dtick": 1 if hi - lo <= 16 else None,
            "fixedrange": True,
        },
    )


def _play_buttons(labels: RunLabels) -> Spec:
    """Play and Pause under the chart: replay the frames from the start, or stop where they are."""
    play_args = {
        "frame": {"duration": 180, "redraw": True},
        "fromcurrent": False,
        "transition": {"duration": 0},
        "mode": "immediate",
    }
    return {
        "type": "buttons",
        "direction": "left",
        "x": 0,
        "y": -0.3,
        "xanchor": "left",
        "yanchor": "top",
        "showactive": False,
        "buttons": [
            {"label": labels.play, "method": "animate", "args": [None, play_args]},
            {
                "label": labels.pause,
                "method": "animate",
                "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}],
            },
        ],
    }


def loss_curves(
    series: Sequence[tuple[str, str, Sequence[float]]], axis_step: str, axis_loss: str, lang: str
) -> go.Figure:
    """Training loss per step, one line per arm: (format key for the colour, label, losses)."""
    data: list[Spec] = [
        {
            "type": "scatter",
            "x": list(range(1, len(losses) + 1)),
            "y": _floats(losses),
            "mode": "lines",
            "name": label,
            # The arms often overlap exactly; the dashes keep each one visible.
            "line": {"color": FORMAT_COLOURS[key], "width": 2, "dash": ARM_DASHES.get(key, "solid")},
            "hovertemplate": f"{label}: %{{y:.4f}}" + HIDE_TRACE_NAME,
        }
        for key, label, losses in series
    ]
    layout = _layout(
        300,
        lang,
        xaxis={"title": {"text": axis_step}, "fixedrange": True},
        yaxis={"title": {"text": axis_loss}, "fixedrange": True, "rangemode": "tozero"},
    )
    longest = max((len(losses) for _, _, losses in series), default=0)

    def cell(losses: Sequence[float], i: int) -> str:
        return i18n.number(float(losses[i]), lang, 4) if i < len(losses) else "—"

    table = _table(
        lang,
        (axis_step, *(label for _, label, _ in series)),
        [(i + 1, *(cell(losses, i) for _, _, losses in series)) for i in range(longest)],
    )
    last = ", ".join(f"{label} {cell(losses, len(losses) - 1)}" for _, label, losses in series if len(losses))
    alt = _words(lang, "alt_lines", y=axis_loss, x=axis_step, n=i18n.number(longest, lang), last=last)
    return _figure(data, layout, table=table, alt=alt)


def loss_facets(
    panels: Sequence[tuple[str, str, Sequence[float]]],
    references: Sequence[tuple[str, str, Sequence[float]]],
    axis_step: str,
    axis_loss: str,
    lang: str,
    columns: int = 3,
) -> go.Figure:
    """One small chart per arm below 16 bits, each its loss per step over the ``references`` (FP32's and BF16's,
    the same lines in every chart): ``panels`` are (format key for the colour, label, losses), ``references``
    (arm key: ``"fp32"`` or ``"bf16"``, label, losses). Every chart shares the y axis's range, so the gaps compare."""
    rows = max(1, -(-len(panels) // columns))
    every = [v for _k, _l, losses in (*panels, *references) for v in losses if math.isfinite(v)]
    top = max(every, default=1.0)
    data: list[Spec] = []
    annotations: list[Spec] = []
    layout_axes: Spec = {}
    for i, (key, label, losses) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        for ref_key, ref_label, ref in references:
            data.append(
                {
                    "type": "scatter",
                    "x": list(range(1, len(ref) + 1)),
                    "y": _floats(ref),
                    "mode": "lines",
                    "name": ref_label,
                    "legendgroup": ref_key,
                    "showlegend": i == 0,
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "line": {"color": FORMAT_COLOURS[ref_key], "width": 1.5, "dash": ARM_DASHES.get(ref_key, "solid")},
                    "hovertemplate": f"{ref_label}: %{{y:.4f}}" + HIDE_TRACE_NAME,
                }
            )
        data.append(
            {
                "type": "scatter",
                "x": list(range(1, len(losses) + 1)),
                "y": _floats(losses),
                "mode": "lines",
                "name": label,
                "showlegend": False,
                "xaxis": f"x{axis}",
                "yaxis": f"y{axis}",
                "line": {"color": FORMAT_COLOURS.get(key, NEUTRAL), "width": 2.5},
                "hovertemplate": f"{label}: %{{y:.4f}}" + HIDE_TRACE_NAME,
            }
        )
        row, col = divmod(i, columns)
        layout_axes[f"xaxis{axis}"] = {
            "fixedrange": True,
            "showticklabels": row == rows - 1,
            "title": {"text": axis_step if row == rows - 1 else ""},
        }
        layout_axes[f"yaxis{axis}"] = {
            "fixedrange": True,
            "range": [0, top * 1.05],
            "showticklabels": col == 0,
            "title": {"text": axis_loss if col == 0 else ""},
        }
        annotations.append(
            {
                "text": label,
                "xref": f"x{axis} domain",
                "yref": f"y{axis} domain",
                "x": 0.5,
                "y": 1.0,
                "xanchor": "center",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 11},
            }
        )
    layout = _layout(
        max(220, 170 * rows + 60),
        lang,
        grid={"rows": rows, "columns": columns, "pattern": "independent", "ygap": 0.35, "xgap": 0.08},
        annotations=annotations,
        **layout_axes,
    )
    # The legend above the first row's titles: the grid takes the whole plotting area, so the room is margin.
    layout["margin"] = {"l": 8, "r": 8, "t": 64, "b": 8}
    layout["legend"] = {**layout["legend"], "y": 1.0 + 40 / max(220, 170 * rows + 60 - 72)}
    series = [*references, *panels]
    longest = max((len(losses) for _, _, losses in series), default=0)

    def cell(losses: Sequence[float], i: int) -> str:
        return i18n.number(float(losses[i]), lang, 4) if i < len(losses) else "—"

    table = _table(
        lang,
        (axis_step, *(label for _, label, _ in series)),
        [(i + 1, *(cell(losses, i) for _, _, losses in series)) for i in range(longest)],
    )
    last = ", ".join(f"{label} {cell(losses, len(losses) - 1)}" for _, label, losses in series if len(losses))
    alt = _words(lang, "alt_facets", n=i18n.number(len(panels), lang), y=axis_loss, x=axis_step, last=last)
    return _figure(data, layout, table=table, alt=alt)


# --- step 4 ----------------------------------------------------------------------


def number_line(
    w: float,
    update: float,
    stored: float,
    grid: np.ndarray,
    spacing: float,
    labels: dict[str, str],
    axis_title: str,
    lang: str,
    fmt: str = "fp16",
) -> go.Figure:
    """The values of ``fmt`` (a key of :data:`lensa.numerics.formats.FORMATS`) around w as ticks; marks for w, the exact
    w + update, and what ``fmt`` stores.

    ``grid`` and ``spacing`` are ``fmt``'s values and spacing near w, and ``stored`` is w + update as ``fmt``
    stores it. The x axis is the distance from w, so the picture is the same at every w and the hover text
    gives the exact values.
    """
    name, colour = FORMATS[fmt].label, FORMAT_COLOURS[fmt]
    offsets = np.asarray(grid) - w
    marks = (
        _Mark(0.0, w, labels["w"], NEUTRAL, "circle", 0.6, "middle left"),
        _Mark(update, w + update, labels["exact"], FORMAT_COLOURS["fp32"], "diamond", 0.3, "middle right"),
        _Mark(stored - w, stored, labels["stored"], colour, "star", -0.35, "middle right"),
    )
    data = [_grid_ticks(name, colour, offsets, grid, lang), *(m.point(lang) for m in marks)]
    shapes = [_half_spacing_band(spacing), *(m.stem() for m in marks)]
    reach = max(float(np.abs(offsets).max()), abs(update), spacing) * 1.08
    layout = _number_line_layout(shapes, reach, labels["half"], axis_title, lang)
    rows = [(m.label, i18n.full_precision(m.value, lang)) for m in marks]
    rows += [(name, i18n.full_precision(float(v), lang)) for v in grid]
    table = _table(lang, (_words(lang, "col_point"), _words(lang, "col_value")), rows)
    alt = _words(
        lang,
        "alt_number_line",
        w=i18n.full_precision(w, lang),
        exact_label=labels["exact"],
        exact=i18n.full_precision(w + update, lang),
        stored_label=labels["stored"],
        stored=i18n.full_precision(stored, lang),
        spacing=i18n.sci(spacing, lang, 3),
    )
    return _figure(data, layout, table=table, alt=alt)


def _number_line_layout(shapes: list[Spec], reach: float, half_label: str, axis_title: str, lang: str) -> Spec:
    """Distances from w across, from -``reach`` to ``reach``; no y axis; the half-spacing band's label below."""
    return _layout(
        280,
        lang,
        showlegend=False,
        shapes=shapes,
        annotations=[
            {
                "x": 0,
                "y": -0.8,
                "text": half_label,
                "showarrow": False,
                "font": {"size": 11, "color": CATEGORY_COLOURS["zero"]},
            }
        ],
        xaxis={
            "title": {"text": axis_title},
            "range": [-reach, reach],
            "exponentformat": "e",
            "zeroline": False,
            "fixedrange": True,
        },
        yaxis={"visible": False, "range": [-1, 1], "fixedrange": True},
    )


@dataclass(frozen=True)
class _Mark:
    """A labelled point of the number line: at ``x`` (the distance from w), standing for ``value``, drawn at
    height ``y`` with a dotted stem down to the axis."""

    x: float
    value: float
    label: str
    colour: str
    symbol: str
    y: float
    text_position: str

    def point(self, lang: str) -> Spec:
        return {
            "type": "scatter",
            "x": [self.x],
            "y": [self.y],
            "mode": "markers+text",
            "name": self.label,
            "text": [self.label],
            "textposition": self.text_position,
            "marker": {"symbol": self.symbol, "size": 13, "color": self.colour},
            "hovertext": [f"{self.label}: {i18n.full_precision(self.value, lang)}"],
            "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
            "showlegend": False,
        }

    def stem(self) -> Spec:
        return {
            "type": "line",
            "x0": self.x,
            "x1": self.x,
            "y0": 0,
            "y1": self.y,
            "line": {"color": self.colour, "width": 1, "dash": "dot"},
        }


def _grid_ticks(name: str, colour: str, offsets: np.ndarray, grid: np.ndarray, lang: str) -> Spec:
    """A format's values as upright ticks on the line, each with its exact value on hover."""
    return {
        "type": "scatter",
        "x": _floats(offsets),
        "y": [0.0] * len(offsets),
        "mode": "markers",
        "name": name,
        "marker": {"symbol": "line-ns-open", "size": 26, "color": colour, "line": {"width": 2}},
        "hovertext": [i18n.full_precision(float(v), lang) for v in grid],
        "hovertemplate": f"{name}: %{{hovertext}}" + HIDE_TRACE_NAME,
    }


def _half_spacing_band(spacing: float) -> Spec:
    """The band within half a spacing of w: an update that lands in it rounds back to w."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": -spacing / 2,
        "x1": spacing / 2,
        "y0": 0,
        "y1": 1,
        "fillcolor": CATEGORY_COLOURS["zero"],
        "opacity": 0.12,
        "line": {"width": 0},
        "layer": "below",
    }


def labelled_bars(
    names: Sequence[str],
    values: Sequence[float],
    colours: Sequence[str],
    texts: Sequence[str],
    axis_title: str | None = None,
    patterns: Sequence[str] | None = None,
    hovers: Sequence[str] | None = None,
    line: tuple[float, str] | None = None,
    x_max: float | None = None,
    height: int = 240,
    lang: str = "en",
    percent: bool = False,
    headroom: float = 1.25,
) -> go.Figure:
    """Horizontal bars, one per row top to bottom, each with its value written beside it.

    ``percent``: the values are shares (0..1) and the axis is labelled in percent. Without ``x_max`` the axis
    reaches ``headroom`` times the longest bar (or the line), leaving room for the written values.
    """
    data = _bar_traces(names, values, colours, texts, patterns, hovers)
    shapes, annotations = _labelled_line(line)
    top = x_max if x_max is not None else max([*values, line[0] if line else 0.0]) * headroom or 1.0
    layout = _layout(
        height,
        lang,
        shapes=shapes,
        annotations=annotations,
        margin={"l": 8, "r": 24, "t": 24 if line else 8, "b": 8},
        xaxis={
            "title": {"text": axis_title or ""},
            "range": [0, top],
            "fixedrange": True,
            "exponentformat": "e",
            **({"tickformat": ".0%"} if percent else {}),
        },
        yaxis={
            "range": [len(names) - 0.5, -0.5],
            "tickvals": list(range(len(names))),
            "ticktext": list(names),
            "fixedrange": True,
            "showgrid": False,
        },
    )
    rows = [(name, text) for name, text in zip(names, texts, strict=True)]
    if line is not None:
        rows.append((line[1], i18n.decimal(line[0], lang)))
    table = _table(lang, (_words(lang, "col_item"), axis_title or _words(lang, "col_value")), rows)
    alt = _words(lang, "alt_bars", bars="; ".join(f"{name}: {text}" for name, text in rows))
    return _figure(data, layout, table=table, alt=alt)


def _bar_traces(
    names: Sequence[str],
    values: Sequence[float],
    colours: Sequence[str],
    texts: Sequence[str],
    patterns: Sequence[str] | None,
    hovers: Sequence[str] | None,
) -> list[Spec]:
    """A horizontal bar per row, its value written beside it; the hover says ``hovers[i]`` or "name: text"."""
    return [
        {
            "type": "bar",
            "y": [i],  # numeric rows with labelled ticks draw faster than a category axis
            "x": [float(value)],
            "orientation": "h",
            "marker": {"color": colour, "pattern": _hatch(patterns[i] if patterns else "")},
            "text": [text],
            "textposition": "outside",
            "cliponaxis": False,
            "hovertext": [hovers[i] if hovers else f"{name}: {text}"],
            "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
            "showlegend": False,
        }
        for i, (name, value, colour, text) in enumerate(zip(names, values, colours, texts, strict=True))
    ]


def _labelled_line(line: tuple[float, str] | None) -> tuple[list[Spec], list[Spec]]:
    """The shapes and annotations of a dashed vertical line at ``line``'s value, its label above the plot."""
    if line is None:
        return [], []
    at, label = line
    annotation = {
        "x": at,
        "y": 1,
        "yref": "paper",
        "text": label,
        "showarrow": False,
        "yanchor": "bottom",
        "font": {"size": 12},
    }
    return [_vline(at, dash="dash", width=2)], [annotation]


# Step 6's two bar charts: a row per math mode, over room for the axis (and the GPU line's label above).
BAR_ROW_PX = 45
TIME_BARS_FRAME_PX = 150
MEMORY_BARS_FRAME_PX = 110
MEMORY_AXIS_MIN_GB = 200.0  # step 1's column starts at 0-200 GB too, so the two pages read alike
MEMORY_AXIS_HEADROOM = 1.2  # room beside the longest bar for its label


def step_time_bars(
    names: Sequence[str],
    times_s: Sequence[float],
    colours: Sequence[str],
    texts: Sequence[str],
    axis_title: str,
    patterns: Sequence[str],
    hovers: Sequence[str],
    lang: str,
    axis_top_s: float | None = None,
) -> go.Figure:
    """Seconds a training step takes in each mode, a bar each (:func:`labelled_bars`, sized to its rows); the axis
    reaches ``axis_top_s`` when given (the same for every stop of the tokens slider, so the bars grow)."""
    height = TIME_BARS_FRAME_PX + BAR_ROW_PX * len(names)
    return labelled_bars(
        names, times_s, colours, texts, axis_title, patterns, hovers, x_max=axis_top_s, height=height, lang=lang
    )


def memory_total_bars(
    names: Sequence[str],
    totals_bytes: Sequence[float],
    colours: Sequence[str],
    texts: Sequence[str],
    axis_title: str,
    patterns: Sequence[str],
    hovers: Sequence[str],
    gpu_line: tuple[float, str],
    lang: str,
    axis_top_gb: float | None = None,
) -> go.Figure:
    """Training memory in each mode in decimal GB, a bar each, with the GPU's memory (GB, label) as a line.

    The axis reaches ``axis_top_gb`` when given (the same for every stop of a slider), else at least
    :data:`MEMORY_AXIS_MIN_GB` and past the longest bar.
    """
    gbs = [t / BYTES_PER_GB for t in totals_bytes]
    return labelled_bars(
        names,
        gbs,
        colours,
        texts,
        axis_title,
        patterns,
        hovers,
        line=gpu_line,
        x_max=axis_top_gb if axis_top_gb is not None else max(MEMORY_AXIS_MIN_GB, max(gbs) * MEMORY_AXIS_HEADROOM),
        height=MEMORY_BARS_FRAME_PX + BAR_ROW_PX * len(names),
        lang=lang,
    )


# --- step 5 -------------------------------------------------------------------------

RANGE_LO, RANGE_HI = -46, 40
FormatRange = FormatLimits  # a format's smallest subnormal, smallest normal and largest finite, as drawn
RANGE_ROW_PX = 44  # a row of the range chart
SUBNORMAL_ALPHA = 0.4  # a format's subnormal range is its colour, lighter and dotted (bars and legend swatch)


def _translucent(hex_colour: str, alpha: float) -> str:
    """``#RRGGBB`` as ``rgba(r,g,b,alpha)`` (itself at alpha 1)."""
    if alpha >= 1:
        return hex_colour
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


RANGE_FRAME_PX = 120  # the range chart's axis, legend and margins


def _range_bars(ranges: Sequence[FormatRange], labels: dict[str, str], lang: str, first_row: int) -> list[Spec]:
    """One bar trace per kind (subnormal, normal) with a bar per format, on a log10 axis: fewer traces to draw.

    The two traces are named in the legend (``labels["legend_subnormal"]``, ``labels["legend_normal"]``): the
    lighter, dotted part of each bar is its subnormal range. Dotted as well as lighter: plotly draws a trace's
    legend swatch in its first bar's colour, FP32's lighter blue, which is near BF16's own sky blue (issue 41);
    the dots (step 2's subnormal hatching) are what no normal range has."""
    data: list[Spec] = []
    for kind, low, high, alpha in (
        ("subnormal", "smallest_subnormal", "smallest_normal", SUBNORMAL_ALPHA),
        ("normal", "smallest_normal", "max", 1.0),
    ):
        pattern = _hatch(CATEGORY_PATTERNS["subnormal"] if kind == "subnormal" else "", "rgba(0,0,0,0.5)")
        names = [labels[kind].format(fmt=r.label) for r in ranges]
        lows = [getattr(r, low) for r in ranges]
        highs = [getattr(r, high) for r in ranges]
        data.append(
            {
                "type": "bar",
                "y": list(range(first_row, first_row + len(ranges))),
                "x": [math.log10(h) - math.log10(lo) for lo, h in zip(lows, highs, strict=True)],
                "base": [math.log10(lo) for lo in lows],
                "orientation": "h",
                "width": 0.6,
                "name": labels.get(f"legend_{kind}", kind),
                "marker": {"color": [_translucent(FORMAT_COLOURS[r.key], alpha) for r in ranges], "pattern": pattern},
                "showlegend": f"legend_{kind}" in labels,
                "hovertext": [
                    labels["hover"].format(fmt=n, lo=i18n.sci(lo, lang), hi=i18n.sci(h, lang))
                    for n, lo, h in zip(names, lows, highs, strict=True)
                ],
                "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
            }
        )
    return data


def _extent_bar(extent: tuple[float, float], name: str, lang: str) -> Spec:
    """The gradients' extent, smallest to largest, as one grey bar in row 0 of the range chart."""
    lo, hi = (math.log10(v) for v in extent)
    return {
        "type": "bar",
        "y": [0],
        "x": [hi - lo],
        "base": [lo],
        "orientation": "h",
        "width": 0.45,
        "name": name,
        "marker": {"color": NEUTRAL, "line": {"color": OUTLINE, "width": 1}},
        "showlegend": False,
        "hovertext": [f"{name}: {i18n.sci(extent[0], lang)} … {i18n.sci(extent[1], lang)}"],
        "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
    }


def format_ranges(
    ranges: Sequence[FormatRange],
    extent: tuple[float, float] | None,
    labels: dict[str, str],
    lang: str,
    lo: int = RANGE_LO,
    hi: int = RANGE_HI,
    every: int = 10,
    left_margin: int | None = None,
) -> go.Figure:
    """Each format's subnormal and normal range on one log axis (``lo`` to ``hi`` decades, a tick every ``every``);
    above them, when ``extent`` is given, the gradients' (smallest, largest) as a bar of their own.

    A range reaching past the axis is cut at its edge; the table gives its true ends.
    """
    first = 0 if extent is None else 1
    data = _range_bars(ranges, labels, lang, first)
    ticktext = [r.label for r in ranges]
    if extent is not None:
        data.append(_extent_bar(extent, labels["gradients"], lang))
        ticktext = [labels["gradients"], *ticktext]
    rows_drawn = len(ticktext)
    layout = _layout(
        RANGE_FRAME_PX + RANGE_ROW_PX * rows_drawn,
        lang,
        barmode="overlay",
        yaxis={
            "tickvals": list(range(rows_drawn)),
            "ticktext": ticktext,
            "range": [rows_drawn - 0.5, -0.5],
            "fixedrange": True,
            "showgrid": False,
            "automargin": True,
        },
        xaxis={**decade_ticks(lo, hi, every=every), "fixedrange": True},
    )
    if left_margin is not None:
        _fix_left_margin(layout, left_margin)
    rows = [
        (r.label, *(i18n.exact_or_sci(v, lang) for v in (r.smallest_subnormal, r.smallest_normal, r.max)))
        for r in ranges
    ]
    headers = (_words(lang, "col_format"), *(_words(lang, k) for k in ("col_subnormal", "col_normal", "col_max")))
    alt = _words(lang, "alt_ranges", ranges="; ".join(f"{r[0]}: {r[1]} … {r[3]}" for r in rows))
    if extent is not None:  # the gradients' extent: its smallest value under "smallest", its largest under "largest"
        rows.append((labels["gradients"], i18n.sci(extent[0], lang), "—", i18n.sci(extent[1], lang)))
    return _figure(data, layout, table=_table(lang, headers, rows), alt=alt)


def precision_ticks(grids: Sequence[tuple[str, str, np.ndarray]], lang: str) -> go.Figure:
    """Every stored value of each format in a small interval, as a row of ticks."""
    data: list[Spec] = [
        {
            "type": "scatter",
            "x": _floats(values),
            "y": [row] * len(values),
            "mode": "markers",
            "name": label,
            "marker": {"symbol": "line-ns-open", "size": 22, "color": FORMAT_COLOURS[key], "line": {"width": 2}},
            "customdata": _floats(values),
            "hovertemplate": f"{label}: %{{customdata:.17~g}}" + HIDE_TRACE_NAME,
            "showlegend": False,
        }
        for row, (key, label, values) in enumerate(grids)
    ]
    layout = _layout(
        180,
        lang,
        yaxis={
            "fixedrange": True,
            "range": [len(grids) - 0.5, -0.5],
            "tickvals": list(range(len(grids))),
            "ticktext": [label for _, label, _ in grids],
            "showgrid": False,
        },
        xaxis={"fixedrange": True},
    )
    rows = [
        (label, i18n.number(len(values), lang), ", ".join(i18n.full_precision(float(v), lang) for v in values))
        for _, label, values in grids
    ]
    headers = (_words(lang, "col_format"), _words(lang, "col_count"), _words(lang, "col_values"))
    alt = _words(lang, "alt_ticks", rows="; ".join(_words(lang, "alt_ticks_row", fmt=r[0], n=r[1]) for r in rows))
    return _figure(data, layout, table=_table(lang, headers, rows), alt=alt)


# --- measured runs (steps 2-5 with data) ------------------------------------------------------

LOG10_2 = math.log10(2)


def binade_zones(
    exponents: ArrayLike,
    counts: Mapping[str, ArrayLike],
    labels: dict[str, str],
    marks: Sequence[tuple[float, str]],
    axis_title: str,
    count_title: str,
    hover: str,
    lang: str,
) -> go.Figure:
    """Counts per binade [2**e, 2**(e+1)) on a log10 axis, stacked by zone (``counts``: zone -> count per e).

    ``hover`` is a template with {lo}, {hi}, {n}, {category}. The axis spans the data and the marks.
    """
    exps = np.asarray(exponents, dtype=np.int64)
    data: list[Spec] = []
    used_all = np.zeros(len(exps), bool)
    for cat in CATEGORY_COLOURS:
        c = np.asarray(counts.get(cat, ()), dtype=np.int64)
        used = np.flatnonzero(c)
        if not used.size:
            continue
        used_all[used] = True
        hovertext = [
            hover.format(
                lo=i18n.power_of_two(int(exps[i])),
                hi=i18n.power_of_two(int(exps[i]) + 1),
                n=i18n.number(int(c[i]), lang),
                category=labels[cat],
            )
            for i in used
        ]
        xs = [float((exps[i] + 0.5) * LOG10_2) for i in used]
        data.append(_category_bars(cat, labels[cat], xs, [int(c[i]) for i in used], LOG10_2, hovertext))
    mark_logs = [math.log10(x) for x, _ in marks]
    present = exps[used_all]
    data_lo = float(present.min()) * LOG10_2 if present.size else min(mark_logs, default=0.0)
    data_hi = float(present.max() + 1) * LOG10_2 if present.size else max(mark_logs, default=0.0)
    lo = math.floor(min([data_lo, *mark_logs])) - 1
    hi = math.ceil(max([data_hi, *mark_logs])) + 1
    every = 2 if hi - lo <= 24 else 4
    ticks = decade_ticks(lo, hi, every)
    stacked = np.zeros(len(exps), np.int64)
    for cat in CATEGORY_COLOURS:
        c = np.asarray(counts.get(cat, ()), dtype=np.int64)
        if c.size:
            stacked += c
    top = max(1, int(stacked.max()) if stacked.size else 1) * MARK_HEADROOM
    layout = _stacked_counts_layout(marks, axis_title, ticks, count_title, lang, top, separatethousands=True)
    zones = [cat for cat in CATEGORY_COLOURS if np.asarray(counts.get(cat, ()), dtype=np.int64).any()]
    rows = [
        (
            f"{i18n.power_of_two(int(exps[i]))} … {i18n.power_of_two(int(exps[i]) + 1)}",
            *(i18n.number(int(np.asarray(counts[cat], dtype=np.int64)[i]), lang) for cat in zones),
        )
        for i in np.flatnonzero(used_all)
    ]
    return _figure(data, layout, table=_table(lang, (axis_title, *(labels[cat] for cat in zones)), rows))


@dataclass(frozen=True)
class SweepLabels:
    """The words of the loss-scale sweep; ``hover`` takes {scale} and {share}; ``keep``/``safe`` name the marks."""

    axis_scale: str
    axis_share: str
    zero: str
    overflow: str
    keep: str
    safe: str
    current: str
    hover: str


def scale_sweep(
    ks: Sequence[int],
    zero: Sequence[float],
    overflow: Sequence[float],
    keep_k: int | None,
    safe_k: int | None,
    current_k: int,
    labels: SweepLabels,
    lang: str,
) -> go.Figure:
    """Share of the gradients lost to 0 and to inf at each S = 2**k; the two loss scales and the chosen one marked.

    Shares are fractions (0..1); where a keep and a safe scale exist with keep <= safe, the band between
    them is shaded: every S in it keeps the gradients and overflows none.
    """
    xs = [int(k) for k in ks]
    data = [
        _sweep_line(labels.zero, xs, zero, CATEGORY_COLOURS["zero"], "solid", labels.hover, lang),
        _sweep_line(labels.overflow, xs, overflow, CATEGORY_COLOURS["overflow"], "dash", labels.hover, lang),
    ]
    shapes, annotations = _sweep_marks(xs, keep_k, safe_k, current_k, labels)
    tick_every = 2 if len(xs) <= 30 else 4
    layout = _layout(
        320,
        lang,
        shapes=shapes,
        annotations=annotations,
        xaxis={
            "title": {"text": labels.axis_scale},
            "tickvals": xs[::tick_every],
            "ticktext": [i18n.power_of_two(k) for k in xs[::tick_every]],
            "range": [xs[0] - 0.5, xs[-1] + 0.5] if xs else None,
            "fixedrange": True,
        },
        # Real gradients often lose a fraction of a percent: the axis follows the largest share, not 100%.
        yaxis={
            "title": {"text": labels.axis_share},
            "tickformat": ".2~%",
            "range": [0, max([0.001, *[float(v) for v in (*zero, *overflow) if math.isfinite(v)]]) * 1.15],
            "rangemode": "tozero",
            "fixedrange": True,
        },
    )
    rows = [
        (i18n.power_of_two(k), i18n.percent(float(z), lang), i18n.percent(float(o), lang))
        for k, z, o in zip(xs, zero, overflow, strict=True)
    ]
    return _figure(data, layout, table=_table(lang, (labels.axis_scale, labels.zero, labels.overflow), rows))


def _sweep_line(
    name: str, xs: list[int], values: Sequence[float], colour: str, dash: str, hover: str, lang: str
) -> Spec:
    """One share (lost to 0, or to inf) at each k, with the scale and the share on hover."""
    return {
        "type": "scatter",
        "x": xs,
        "y": _floats(values),
        "mode": "lines+markers",
        "name": name,
        "line": {"color": colour, "width": 2.5, "dash": dash},
        "marker": {"size": 5, "color": colour},
        "hovertext": [
            hover.format(scale=i18n.power_of_two(k), share=i18n.percent(float(v), lang))
            for k, v in zip(xs, values, strict=True)
        ],
        "hovertemplate": f"{name}: %{{hovertext}}" + HIDE_TRACE_NAME,
    }


def _sweep_marks(
    xs: list[int], keep_k: int | None, safe_k: int | None, current_k: int, labels: SweepLabels
) -> tuple[list[Spec], list[Spec]]:
    """The shaded window between the keep and the safe scale (where keep <= safe), and a labelled line at each
    of the keep, safe and current scales that lies on the axis (dotted, and solid for the current one)."""
    shapes: list[Spec] = []
    annotations: list[Spec] = []
    if keep_k is not None and safe_k is not None and keep_k <= safe_k:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": max(keep_k, xs[0]) - 0.5 if xs else keep_k,
                "x1": min(safe_k, xs[-1]) + 0.5 if xs else safe_k,
                "y0": 0,
                "y1": 1,
                "fillcolor": CATEGORY_COLOURS["normal"],
                "opacity": 0.12,
                "line": {"width": 0},
                "layer": "below",
            }
        )
    lines = (
        (keep_k, labels.keep, 1.0, "dot"),
        (safe_k, labels.safe, 0.8, "dot"),
        (current_k, labels.current, 0.6, "solid"),
    )
    for k, label, y, dash in lines:
        if k is None or not xs or not xs[0] <= k <= xs[-1]:
            continue
        shapes.append(_vline(k, dash=dash, width=1.5))
        annotations.append(
            {
                "x": k,
                "y": y,
                "yref": "paper",
                "text": label,
                "showarrow": False,
                "xanchor": "left",
                "font": {"size": MARK_FONT_PX},
            }
        )
    return shapes, annotations


def share_lines(
    steps: Sequence[int],
    series: Sequence[tuple[str, str, Sequence[float], Sequence[str]]],
    axis_step: str,
    axis_share: str,
    lang: str,
) -> go.Figure:
    """Shares (0..1) per recorded step, one line per format: (format key for the colour, label, shares, hover texts)."""
    xs = [int(s) for s in steps]
    data: list[Spec] = [
        {
            "type": "scatter",
            "x": xs,
            "y": _floats(values),
            "mode": "lines+markers",
            "name": label,
            "line": {"color": FORMAT_COLOURS[key], "width": 2.5, "dash": ARM_DASHES.get(key, "solid")},
            "marker": {"size": 6, "color": FORMAT_COLOURS[key]},
            "hovertext": list(hovers),
            "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
        }
        for key, label, values, hovers in series
    ]
    layout = _layout(
        300,
        lang,
        xaxis={"title": {"text": axis_step}, "fixedrange": True},
        yaxis={"title": {"text": axis_share}, "tickformat": ".0%", "range": [-0.02, 1.02], "fixedrange": True},
    )
    rows = [
        (i18n.number(step, lang), *(i18n.percent(float(values[i]), lang) for _, _, values, _ in series))
        for i, step in enumerate(xs)
    ]
    return _figure(data, layout, table=_table(lang, (axis_step, *(label for _, label, _, _ in series)), rows))


def grouped_share_bars(
    names: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float], Sequence[str]]],
    axis_title: str,
    lang: str,
) -> go.Figure:
    """Horizontal bars of shares (0..1), one group per row (a layer), one bar per format in each group.

    ``series``: (format key for the colour, label, share per row, text written beside each bar).
    """
    rows = list(range(len(names)))
    data: list[Spec] = [
        {
            "type": "bar",
            "y": rows,
            "x": _floats(values),
            "orientation": "h",
            "name": label,
            # told apart without colour too: FP16 plain, the others hatched, as in the legend
            "marker": {"color": FORMAT_COLOURS[key], "pattern": _hatch(FORMAT_PATTERNS.get(key, ""))},
            "text": list(texts),
            "textposition": "outside",
            "cliponaxis": False,
            "hovertext": [f"{name} · {label}: {text}" for name, text in zip(names, texts, strict=True)],
            "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
        }
        for key, label, values, texts in series
    ]
    layout = _layout(
        max(220, 60 + len(names) * 22 * max(len(series), 1)),
        lang,
        barmode="group",
        margin={"l": 8, "r": 40, "t": 36, "b": 8},
        xaxis={"title": {"text": axis_title}, "tickformat": ".0%", "range": [0, 1.15], "fixedrange": True},
        yaxis={
            "range": [len(names) - 0.5, -0.5],
            "tickvals": rows,
            "ticktext": list(names),
            "fixedrange": True,
            "showgrid": False,
            "automargin": True,
        },
    )
    table_rows = [(name, *(texts[i] for _, _, _, texts in series)) for i, name in enumerate(names)]
    headers = (_words(lang, "col_item"), *(label for _, label, _, _ in series))
    return _figure(data, layout, table=_table(lang, headers, table_rows))


# What a block recipe did to each value (the block scaling page): colour and marker shape, so colour is not alone.
OUTCOME_COLOURS = {
    "kept": CATEGORY_COLOURS["normal"],
    "rounded": "#56B4E9",  # sky blue
    "flushed": CATEGORY_COLOURS["zero"],
    "saturated": CATEGORY_COLOURS["overflow"],
}
OUTCOME_SYMBOLS = {"kept": "square", "rounded": "diamond", "flushed": "x", "saturated": "triangle-up"}
# A phone of 390 px draws a chart 358 px wide (Streamlit's 16 px either side). There the recipes' names go above
# their strips (:func:`block_strips_phone_layout`), so a block's 32 cells share the plot's whole width, 10.5 px
# apart: a mark of 9 px, its outline included, leaves a gap to the next one; a desktop's cells are 15 px apart.
BLOCK_MARK_PX = 9


@dataclass(frozen=True)
class BlockRow:
    """One recipe's strip: its label, each value's outcome and stored value (as text), and the hover texts."""

    label: str
    outcomes: Sequence[str]
    stored: Sequence[str]
    hovers: Sequence[str]


def _outcome_marker(outcome: str) -> Spec:
    return {
        "symbol": OUTCOME_SYMBOLS[outcome],
        "size": BLOCK_MARK_PX - 1,  # plus half the 1 px outline either side
        "color": OUTCOME_COLOURS[outcome],
        "line": {"color": OUTLINE, "width": 1},
    }


def _outcome_markers(rows: Sequence[BlockRow], outcome: str, name: str) -> Spec:
    """One trace of the cells, in every strip, where the recipe's outcome was ``outcome``."""
    xs, ys, hovers = [], [], []
    for r, row in enumerate(rows):
        for i, o in enumerate(row.outcomes):
            if o == outcome:
                xs.append(i + 1)
                ys.append(r)
                hovers.append(row.hovers[i])
    return {
        "type": "scatter",
        "mode": "markers",
        "x": xs,
        "y": ys,
        "name": name,
        "marker": _outcome_marker(outcome),
        "hovertext": hovers,
        "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
    }


def _templated_markers(
    rows: Sequence[BlockRow], values: Sequence[str], outcome_names: Mapping[str, str], hover: str
) -> list[Spec]:
    """The cells as one trace per outcome, with one hover template each and each cell's recipe, value and stored
    value as its data: a fraction of the bytes of a text per cell (which matters for a slider's 65 frames), and
    four traces for Plotly to redraw at each stop, not one per recipe and outcome."""
    data: list[Spec] = []
    for outcome, name in outcome_names.items():
        template = hover.format(
            recipe="%{customdata[0]}", i="%{x}", x="%{customdata[1]}", stored="%{customdata[2]}", what=name
        )
        cells = [(r, i) for r, row in enumerate(rows) for i, o in enumerate(row.outcomes) if o == outcome]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "marker": _outcome_marker(outcome),
                "x": [i + 1 for _, i in cells],
                "y": [r for r, _ in cells],
                "customdata": [[rows[r].label, values[i], rows[r].stored[i]] for r, i in cells],
                "hovertemplate": template + HIDE_TRACE_NAME,
            }
        )
    return data


def block_strips(
    rows: Sequence[BlockRow],
    values: Sequence[str],
    outcome_names: Mapping[str, str],
    axis_index: str,
    lang: str,
    hover: str | None = None,
) -> go.Figure:
    """One strip of cells per recipe, a cell per value of the block, marked by what the recipe did to it.

    ``values`` are the block's values as written for the table; ``outcome_names`` the words for kept,
    rounded, flushed and saturated. The data table lists every value with what each recipe stores. With
    ``hover`` (a template with {recipe}, {i}, {x}, {stored} and {what}) the cells' hover texts are made in the
    browser from it (:func:`_templated_markers`); without it each row's ``hovers`` are used.
    """
    if hover is None:
        data = [_outcome_markers(rows, outcome, name) for outcome, name in outcome_names.items()]
    else:
        data = _templated_markers(rows, values, outcome_names, hover)
    n = max((len(row.outcomes) for row in rows), default=0)
    layout = _layout(
        90 + 42 * len(rows),
        lang,
        xaxis={"title": {"text": axis_index}, "range": [0.3, n + 0.7], "dtick": 4, "fixedrange": True},
        yaxis={
            "range": [len(rows) - 0.5, -0.5],
            "tickvals": list(range(len(rows))),
            "ticktext": [row.label for row in rows],
            "fixedrange": True,
            "showgrid": False,
            "automargin": True,
        },
    )
    headers = (axis_index, _words(lang, "col_value"), *(row.label for row in rows))
    table_rows = [
        (
            str(i + 1),
            value,
            *(f"{row.stored[i]} ({outcome_names[row.outcomes[i]]})" for row in rows),
        )
        for i, value in enumerate(values)
    ]
    counts = "; ".join(
        f"{row.label}: " + ", ".join(f"{sum(o == k for o in row.outcomes)} {name}" for k, name in outcome_names.items())
        for row in rows
    )
    alt = _words(lang, "alt_strips", n=n, rows=counts)
    return _figure(data, layout, table=_table(lang, headers, table_rows), alt=alt)


def block_strips_phone_layout(labels: Sequence[str]) -> Spec:
    """What :func:`block_strips` changes on a phone: each recipe's name written above its strip, from the left
    edge, instead of beside it (a name as long as "MXFP8 E4M3, scale dibulatkan ke atas" took half the width, and
    the 32 cells overlapped in what was left), and no legend (the caption says what each mark means)."""
    return {
        "showlegend": False,
        "margin": {"t": 8},
        "font": {"size": 11},
        "yaxis": {"showticklabels": False, "range": [len(labels) - 0.5, -0.85]},
        "annotations": [
            {
                "text": label,
                "x": 0,
                "xref": "paper",
                "xanchor": "left",
                "y": r,
                "yref": "y",
                "yanchor": "bottom",
                "yshift": BLOCK_MARK_PX / 2 + 1,  # just above the marks
                "showarrow": False,
            }
            for r, label in enumerate(labels)
        ],
    }


# --- training below 16 bits ------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundingLabels:
    """The words of :func:`rounding_means`: axes, the lines' names and their hover texts."""

    axis_draws: str
    axis_value: str
    mean: str
    value: str
    nearest: str
    grid: str


def rounding_means(
    means: Sequence[float],
    value: float,
    nearest: float,
    low: float,
    high: float,
    labels: RoundingLabels,
    lang: str,
) -> go.Figure:
    """The mean of the first n stochastic roundings of ``value`` (n = 1, 2, ...), against the value itself, what
    round-to-nearest gives every time, and the two neighbours of the grid it rounds between."""
    n = list(range(1, len(means) + 1))
    flat = [1, len(means)]
    data: list[Spec] = [
        {
            "type": "scatter",
            "x": flat,
            "y": [nearest, nearest],
            "mode": "lines",
            "name": labels.nearest,
            "line": {"color": FORMAT_COLOURS["fp16"], "width": 2.5, "dash": "dash"},
            "hovertemplate": f"{labels.nearest}: %{{y:.4f}}" + HIDE_TRACE_NAME,
        },
        {
            "type": "scatter",
            "x": flat,
            "y": [value, value],
            "mode": "lines",
            "name": labels.value,
            "line": {"color": FORMAT_COLOURS["fp32"], "width": 2},
            "hovertemplate": f"{labels.value}: %{{y:.4f}}" + HIDE_TRACE_NAME,
        },
        {
            "type": "scatter",
            "x": n,
            "y": _floats(means),
            "mode": "lines",
            "name": labels.mean,
            "line": {"color": FORMAT_COLOURS["fp4_e2m1"], "width": 2.5},
            "hovertemplate": f"{labels.mean} (n = %{{x}}): %{{y:.4f}}" + HIDE_TRACE_NAME,
        },
    ]
    pad = (high - low) * 0.08
    # The grid's two neighbours, as dotted rules (every rounding lands on one of them), named in the caption.
    rules = [{**_hline(y), "line": {"color": NEUTRAL, "width": 1, "dash": "dot"}} for y in (low, high)]
    layout = _layout(
        300,
        lang,
        shapes=rules,
        xaxis={"title": {"text": labels.axis_draws}, "fixedrange": True, "type": "log"},
        yaxis={"title": {"text": labels.axis_value}, "fixedrange": True, "range": [low - pad, high + pad]},
    )
    table = _table(
        lang,
        (labels.axis_draws, labels.mean, labels.value, labels.nearest),
        [(i18n.number(k, lang), *(i18n.number(v, lang, 4) for v in (means[k - 1], value, nearest))) for k in n],
    )
    alt = _words(
        lang,
        "alt_rounding",
        n=i18n.number(len(means), lang),
        mean=i18n.number(float(means[-1]), lang, 4),
        value=i18n.number(value, lang, 4),
        nearest=i18n.number(nearest, lang, 4),
    )
    return _figure(data, layout, table=table, alt=alt)


def rotation_bars(
    values: Sequence[float],
    rotated: Sequence[float],
    names: tuple[str, str],
    axis_index: str,
    axis_value: str,
    lang: str,
) -> go.Figure:
    """A block's values and the same block rotated, a marker per position (the rotated ones hollow diamonds)."""
    idx = list(range(1, len(values) + 1))
    data: list[Spec] = [
        {
            "type": "scatter",
            "x": idx,
            "y": _floats(ys),
            "mode": "lines+markers",
            "name": name,
            "line": {"color": colour, "width": 1, "dash": dash},
            "marker": {"size": 10, "color": colour, "symbol": symbol},
            "hovertemplate": f"{name} %{{x}}: %{{y:.4g}}" + HIDE_TRACE_NAME,
        }
        for name, ys, colour, symbol, dash in (
            (names[0], values, FORMAT_COLOURS["fp32"], "circle", "dot"),
            (names[1], rotated, FORMAT_COLOURS["fp4_e2m1"], "diamond-open", "solid"),
        )
    ]
    layout = _layout(
        300,
        lang,
        xaxis={"title": {"text": axis_index}, "fixedrange": True, "dtick": 1},
        yaxis={"title": {"text": axis_value}, "fixedrange": True, "zeroline": True},
    )
    table = _table(
        lang,
        (axis_index, *names),
        [
            (i, i18n.sci(float(a), lang, 3), i18n.sci(float(b), lang, 3))
            for i, a, b in zip(idx, values, rotated, strict=True)
        ],
    )
    alt = _words(
        lang,
        "alt_rotation",
        n=i18n.number(len(values), lang),
        before=i18n.sci(float(max(abs(v) for v in values)), lang, 3),
        after=i18n.sci(float(max(abs(v) for v in rotated)), lang, 3),
    )
    return _figure(data, layout, table=table, alt=alt)


def signed_bars(
    names: Sequence[str],
    shares: Sequence[float],
    colours: Sequence[str],
    texts: Sequence[str],
    axis_title: str,
    lang: str,
) -> go.Figure:
    """Horizontal bars of shares (0.01 = 1%) that may point either way from 0, one per row top to bottom, each with
    its value written beside it; the axis in percent."""
    values = [float(v) for v in shares]
    reach = max([abs(v) for v in values] + [1e-6]) * 1.4
    data: list[Spec] = [
        {
            "type": "bar",
            "orientation": "h",
            "x": values,
            "y": list(range(len(names))),
            "marker": {"color": list(colours)},
            "text": list(texts),
            "textposition": "outside",
            "cliponaxis": False,
            "hovertext": [f"{n}: {t}" for n, t in zip(names, texts, strict=True)],
            "hovertemplate": "%{hovertext}" + HIDE_TRACE_NAME,
            "showlegend": False,
        }
    ]
    layout = _layout(
        max(200, 26 * len(names) + 60),
        lang,
        margin={"l": 8, "r": 24, "t": 8, "b": 8},
        xaxis={
            "title": {"text": axis_title},
            # room on the left for a negative bar's written value
            "range": [
                min(0.0, min(values, default=0.0) * 1.4 - (0.3 * reach if min(values, default=0.0) < 0 else 0.0)),
                reach,
            ],
            "fixedrange": True,
            "zeroline": True,
            "tickformat": ".1%",
        },
        yaxis={
            "range": [len(names) - 0.5, -0.5],
            "tickvals": list(range(len(names))),
            "ticktext": list(names),
            "fixedrange": True,
            "showgrid": False,
        },
    )
    rows = list(zip(names, texts, strict=True))
    table = _table(lang, (_words(lang, "col_item"), axis_title), rows)
    alt = _words(lang, "alt_bars", bars="; ".join(f"{name}: {text}" for name, text in rows))
    return _figure(data, layout, table=table, alt=alt)
