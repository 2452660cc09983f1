"""Plotly figures, built by pure functions: core results and translated labels in, go.Figure out.

Titles are not drawn inside the figures: the page writes each figure's
heading as text above it (``widgets.chart``), where it wraps on a phone.

One colour means one thing on every page. The palette is Okabe and Ito's,
chosen to stay distinct for the common forms of colour blindness, and every
colour is a mid tone that reads on both Streamlit's light and dark themes.
Neutral marks (the gradient sample, reference lines) use a translucent grey
for the same reason; text is left to the theme.

Axes over many decades plot log10 of the value with ticks labelled ``1e-8``,
so bars can be drawn as exact bins and hover text can say exact values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from lensa.ui import i18n

# What FP16 (or any format) does to a value.
CATEGORY_COLOURS = {
    "zero": "#D55E00",  # vermillion
    "subnormal": "#F0E442",  # yellow
    "normal": "#009E73",  # bluish green
    "overflow": "#CC79A7",  # reddish purple
}
# Which format a value is stored in.
FORMAT_COLOURS = {
    "fp32": "#0072B2",  # blue
    "bf16": "#56B4E9",  # sky blue
    "fp16": "#E69F00",  # orange
}
ARM_DASHES = {"fp32": "solid", "fp16": "dash", "bf16": "dot"}
NEUTRAL = "rgba(128,128,128,0.85)"
NEUTRAL_LIGHT = "rgba(128,128,128,0.25)"
OUTLINE = "rgba(60,60,60,0.55)"  # keeps the yellow legible on white
TENSOR_CORE_PATTERN = "/"  # TF32: FP32 data, tensor-core arithmetic
ACTIVATION_PATTERN = "x"

FONT = {"size": 13}


def _hatch(shape: str) -> dict:
    """White hatching drawn over the bar's own colour (or none)."""
    if not shape:
        return {"shape": ""}
    return {"shape": shape, "fillmode": "overlay", "fgcolor": "rgba(255,255,255,0.8)", "size": 9, "solidity": 0.3}


def _layout(fig: go.Figure, height: int, **extra: object) -> go.Figure:
    fig.update_layout(
        height=height,
        margin={"l": 8, "r": 8, "t": 36, "b": 8},
        font=FONT,
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "xanchor": "left",
            "x": 0,
            "title": None,
            "traceorder": "normal",
        },
        hoverlabel={"align": "left"},
        bargap=0.08,
        **extra,
    )
    return fig


def exact(x: float, lang: str) -> str:
    """A value to full float precision, written the local way (for hover text)."""
    if not math.isfinite(x):
        return i18n.sci(x, lang)
    text = f"{x:.17g}"
    if "e" in text:
        m, e = text.split("e")
        return f"{m.replace('.', ',') if lang == 'id' else m}e{int(e)}"
    return text.replace(".", ",") if lang == "id" else text


def decade_ticks(lo: int, hi: int, every: int = 2) -> dict:
    """Tick values and labels for a log10 axis from 10**lo to 10**hi."""
    values = list(range(lo, hi + 1, every))
    labels = ["1" if v == 0 else f"1e{v}" for v in values]
    return {"tickvals": values, "ticktext": labels, "range": [lo, hi]}


# --- step 1 -------------------------------------------------------------------


@dataclass(frozen=True)
class BarPart:
    label: str
    gb: float
    colour: str
    pattern: str = ""
    hover: str = ""


def stacked_memory(parts: Sequence[BarPart], gpu_gb: float, gpu_label: str, axis_title: str, lang: str) -> go.Figure:
    """One stacked column of training memory, each part labelled beside it; a dashed GPU line."""
    fig = go.Figure()
    bottom = 0.0
    for part in parts:
        fig.add_bar(
            x=[0],
            y=[part.gb],
            base=[bottom],
            width=0.5,
            name=part.label,
            marker={
                "color": part.colour,
                "line": {"color": "rgba(255,255,255,0.9)", "width": 1.5},
                "pattern": _hatch(part.pattern),
            },
            hovertemplate=(part.hover or part.label) + "<extra></extra>",
            showlegend=False,
        )
        fig.add_annotation(
            x=0.3, y=bottom + part.gb / 2, text=part.label, showarrow=False, xanchor="left", font={"size": 12}
        )
        bottom += part.gb
    top = max(200.0, math.ceil(bottom * 1.1 / 50) * 50)
    fig.add_hline(y=gpu_gb, line={"dash": "dash", "color": NEUTRAL, "width": 2})
    fig.add_annotation(x=1.9, y=gpu_gb, text=gpu_label, showarrow=False, yshift=10, xanchor="right", font={"size": 12})
    fig.update_xaxes(range=[-0.3, 1.9], visible=False, fixedrange=True)
    fig.update_yaxes(range=[0, top], title=axis_title, fixedrange=True, separatethousands=True)
    _layout(fig, 440, barmode="overlay", separators=_separators(lang))
    return fig


def _separators(lang: str) -> str:
    """Plotly's decimal and thousands marks for the language."""
    return ",." if lang == "id" else ".,"


# --- steps 2, 3 -------------------------------------------------------------------

HIST_LO, HIST_HI = -12, 8
BINS_PER_DECADE = 4


def category_histogram(
    values: np.ndarray,
    categories: np.ndarray,
    labels: dict[str, str],
    marks: Sequence[tuple[float, str]],
    axis_title: str,
    count_title: str,
    hover: str,
    lang: str,
) -> go.Figure:
    """Stacked counts per quarter-decade bin, coloured by what the format does to each value.

    ``hover`` is a template with {lo}, {hi}, {n}, {category}. Values outside
    the axis are counted in its first or last bin.
    """
    edges = np.linspace(HIST_LO, HIST_HI, (HIST_HI - HIST_LO) * BINS_PER_DECADE + 1)
    logs = np.clip(np.log10(np.asarray(values, dtype=np.float64)), HIST_LO, HIST_HI - 1e-9)
    index = np.digitize(logs, edges) - 1
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure()
    for cat, colour in CATEGORY_COLOURS.items():
        counts = np.bincount(index[categories == cat], minlength=len(centres))
        if not counts.any():
            continue
        texts = [
            hover.format(
                lo=i18n.sci(10 ** edges[i], lang),
                hi=i18n.sci(10 ** edges[i + 1], lang),
                n=int(c),
                category=labels[cat],
            )
            for i, c in enumerate(counts)
        ]
        fig.add_bar(
            x=centres,
            y=counts,
            width=1 / BINS_PER_DECADE,
            name=labels[cat],
            marker={"color": colour, "line": {"color": OUTLINE, "width": 0.5}},
            hovertext=texts,
            hovertemplate="%{hovertext}<extra></extra>",
        )
    for x, label in marks:
        lx = math.log10(x)
        fig.add_vline(x=lx, line={"dash": "dot", "color": NEUTRAL, "width": 1.5})
        fig.add_annotation(
            x=lx,
            y=1,
            yref="paper",
            text=label,
            showarrow=False,
            textangle=-90,
            xanchor="right",
            yanchor="top",
            font={"size": 11},
        )
    fig.update_xaxes(title=axis_title, **decade_ticks(HIST_LO, HIST_HI), fixedrange=True)
    fig.update_yaxes(title=count_title, fixedrange=True, rangemode="tozero")
    return _layout(fig, 360, barmode="stack")


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
) -> go.Figure:
    """log2 S per step, skipped steps marked ×.

    ``animate`` adds a Play button that replays the run in the browser.
    ``overlay`` (label, log2 S per step) draws a second run over the first,
    dashed, such as a real GradScaler over the illustration.
    """
    steps = list(steps)
    ys = [float(y) for y in log2_scales]
    texts = [
        (labels.hover_skipped if s else labels.hover_clean).format(step=st, scale=i18n.power_of_two(round(y)))
        for st, y, s in zip(steps, ys, skipped, strict=True)
    ]

    def traces(n: int) -> list[go.Scatter]:
        xs, yv, tv, sk = steps[:n], ys[:n], texts[:n], skipped[:n]
        return [
            go.Scatter(
                x=xs,
                y=yv,
                mode="lines+markers",
                name=labels.clean,
                line={"shape": "hv", "color": colour},
                marker={"size": 6, "color": colour},
                hovertext=tv,
                hovertemplate="%{hovertext}<extra></extra>",
            ),
            go.Scatter(
                x=[x for x, s in zip(xs, sk, strict=True) if s],
                y=[y for y, s in zip(yv, sk, strict=True) if s],
                mode="markers",
                name=labels.skipped,
                marker={
                    "symbol": "x-thin-open",
                    "size": 14,
                    "color": CATEGORY_COLOURS["overflow"],
                    "line": {"width": 3},
                },
                hoverinfo="skip",
            ),
        ]

    fig = go.Figure(data=traces(len(steps)))
    all_ys = list(ys)
    if overlay is not None:
        name, other = overlay
        other = [float(y) for y in other]
        all_ys += other
        fig.add_trace(
            go.Scatter(
                x=steps[: len(other)],
                y=other,
                mode="lines",
                name=name,
                line={"shape": "hv", "color": NEUTRAL, "width": 3, "dash": "dash"},
                hovertemplate=f"{name}: %{{y}}<extra></extra>",
            )
        )
    lo, hi = min(all_ys) - 1, max(all_ys) + 1
    fig.update_xaxes(title=labels.axis_step, range=[0.5, len(steps) + 0.5], fixedrange=True)
    fig.update_yaxes(title=labels.axis_scale, range=[lo, hi], dtick=1 if hi - lo <= 16 else None, fixedrange=True)
    _layout(fig, 340)
    if animate:
        fig.frames = [go.Frame(data=traces(n), name=str(n), traces=[0, 1]) for n in range(1, len(steps) + 1)]
        fig.update_layout(
            updatemenus=[
                {
                    "type": "buttons",
                    "direction": "left",
                    "x": 0,
                    "y": -0.3,
                    "xanchor": "left",
                    "yanchor": "top",
                    "showactive": False,
                    "buttons": [
                        {
                            "label": labels.play,
                            "method": "animate",
                            "args": [
                                None,
                                {
                                    "frame": {"duration": 180, "redraw": True},
                                    "fromcurrent": False,
                                    "transition": {"duration": 0},
                                    "mode": "immediate",
                                },
                            ],
                        },
                        {
                            "label": labels.pause,
                            "method": "animate",
                            "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}],
                        },
                    ],
                }
            ],
            margin={"l": 8, "r": 8, "t": 36, "b": 90},
        )
    return fig


def loss_curves(
    series: Sequence[tuple[str, str, Sequence[float]]], axis_step: str, axis_loss: str, lang: str
) -> go.Figure:
    """Training loss per step, one line per arm: (format key for the colour, label, losses)."""
    fig = go.Figure()
    for key, label, losses in series:
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(losses) + 1)),
                y=list(losses),
                mode="lines",
                name=label,
                # The arms often overlap exactly; the dashes keep each one visible.
                line={"color": FORMAT_COLOURS[key], "width": 2, "dash": ARM_DASHES.get(key, "solid")},
                hovertemplate=f"{label}: %{{y:.4f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title=axis_step, fixedrange=True)
    fig.update_yaxes(title=axis_loss, fixedrange=True, rangemode="tozero")
    return _layout(fig, 300, separators=_separators(lang))


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
) -> go.Figure:
    """FP16 values around w as ticks; marks for w, the exact w + update, and what FP16 stores.

    The x axis is the distance from w, so the picture is the same at every w
    and the hover text gives the exact values.
    """
    fig = go.Figure()
    offsets = grid - w
    fig.add_vrect(
        x0=-spacing / 2,
        x1=spacing / 2,
        fillcolor=CATEGORY_COLOURS["zero"],
        opacity=0.12,
        line_width=0,
    )
    fig.add_trace(
        go.Scatter(
            x=offsets,
            y=np.zeros_like(offsets),
            mode="markers",
            name="FP16",
            marker={"symbol": "line-ns-open", "size": 26, "color": FORMAT_COLOURS["fp16"], "line": {"width": 2}},
            hovertext=[exact(v, lang) for v in grid],
            hovertemplate="FP16: %{hovertext}<extra></extra>",
        )
    )
    marks = [
        (0.0, w, labels["w"], NEUTRAL, "circle", 0.6, "middle left"),
        (update, w + update, labels["exact"], FORMAT_COLOURS["fp32"], "diamond", 0.3, "middle right"),
        (stored - w, stored, labels["stored"], FORMAT_COLOURS["fp16"], "star", -0.35, "middle right"),
    ]
    for x, value, label, colour, symbol, y, position in marks:
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers+text",
                name=label,
                text=[label],
                textposition=position,
                marker={"symbol": symbol, "size": 13, "color": colour},
                hovertext=[f"{label}: {exact(value, lang)}"],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
            )
        )
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=y, line={"color": colour, "width": 1, "dash": "dot"})
    fig.add_annotation(
        x=0, y=-0.8, text=labels["half"], showarrow=False, font={"size": 11, "color": CATEGORY_COLOURS["zero"]}
    )
    reach = max(abs(offsets).max(), abs(update), spacing) * 1.08
    fig.update_xaxes(title=axis_title, range=[-reach, reach], exponentformat="e", zeroline=False, fixedrange=True)
    fig.update_yaxes(visible=False, range=[-1, 1], fixedrange=True)
    return _layout(fig, 280, showlegend=False, separators=_separators(lang))


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
) -> go.Figure:
    """Horizontal bars, one per row top to bottom, each with its value written beside it."""
    fig = go.Figure()
    for i, (name, value, colour, text) in enumerate(zip(names, values, colours, texts, strict=True)):
        pattern = patterns[i] if patterns else ""
        fig.add_bar(
            y=[name],
            x=[value],
            orientation="h",
            marker={
                "color": colour,
                "pattern": _hatch(pattern),
            },
            text=[text],
            textposition="outside",
            cliponaxis=False,
            hovertext=[hovers[i] if hovers else f"{name}: {text}"],
            hovertemplate="%{hovertext}<extra></extra>",
            showlegend=False,
        )
    if line is not None:
        at, label = line
        fig.add_vline(x=at, line={"dash": "dash", "color": NEUTRAL, "width": 2})
        fig.add_annotation(x=at, y=1, yref="paper", text=label, showarrow=False, yanchor="bottom", font={"size": 12})
    top = x_max if x_max is not None else max([*values, line[0] if line else 0.0]) * 1.25 or 1.0
    fig.update_xaxes(title=axis_title, range=[0, top], fixedrange=True, exponentformat="e")
    fig.update_yaxes(autorange="reversed", fixedrange=True)
    _layout(fig, height, separators=_separators(lang))
    fig.update_layout(margin={"l": 8, "r": 24, "t": 24 if line else 8, "b": 8})
    return fig


# --- step 5 -------------------------------------------------------------------------

RANGE_LO, RANGE_HI = -46, 40


@dataclass(frozen=True)
class FormatRange:
    key: str  # "fp32", "bf16", "fp16"
    label: str
    smallest_subnormal: float
    smallest_normal: float
    max: float


def format_ranges(
    ranges: Sequence[FormatRange],
    sample: np.ndarray,
    labels: dict[str, str],
    lang: str,
) -> go.Figure:
    """Each format's subnormal and normal range on one log axis, with the gradient sample as a strip."""
    fig = go.Figure()
    for row, r in enumerate(ranges, start=1):
        colour = FORMAT_COLOURS[r.key]
        for lo, hi, kind, opacity in (
            (r.smallest_subnormal, r.smallest_normal, "subnormal", 0.4),
            (r.smallest_normal, r.max, "normal", 1.0),
        ):
            name = labels[kind].format(fmt=r.label)
            fig.add_bar(
                y=[row],
                x=[math.log10(hi) - math.log10(lo)],
                base=[math.log10(lo)],
                orientation="h",
                width=0.6,
                marker={"color": colour, "opacity": opacity},
                name=name,
                showlegend=False,
                hovertext=[labels["hover"].format(fmt=name, lo=i18n.sci(lo, lang), hi=i18n.sci(hi, lang))],
                hovertemplate="%{hovertext}<extra></extra>",
            )
    jitter = np.random.default_rng(0).uniform(-0.25, 0.25, len(sample))
    fig.add_trace(
        go.Scatter(
            x=np.log10(sample),
            y=jitter,
            mode="markers",
            name=labels["gradients"],
            marker={"size": 4, "color": NEUTRAL},
            hovertext=[i18n.sci(v, lang, 3) for v in sample],
            hovertemplate="%{hovertext}<extra></extra>",
            showlegend=False,
        )
    )
    fig.update_yaxes(
        tickvals=list(range(len(ranges) + 1)),
        ticktext=[labels["gradients"]] + [r.label for r in ranges],
        range=[len(ranges) + 0.5, -0.5],
        fixedrange=True,
        showgrid=False,
    )
    fig.update_xaxes(**decade_ticks(RANGE_LO, RANGE_HI, every=10), fixedrange=True)
    return _layout(fig, 280, barmode="overlay")


def precision_ticks(grids: Sequence[tuple[str, str, np.ndarray]], lang: str) -> go.Figure:
    """Every stored value of each format in a small interval, as a row of ticks."""
    fig = go.Figure()
    for key, label, values in grids:
        fig.add_trace(
            go.Scatter(
                x=values,
                y=[label] * len(values),
                mode="markers",
                name=label,
                marker={"symbol": "line-ns-open", "size": 22, "color": FORMAT_COLOURS[key], "line": {"width": 2}},
                hovertext=[f"{label}: {exact(v, lang)}" for v in values],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
            )
        )
    fig.update_yaxes(fixedrange=True, autorange="reversed")
    fig.update_xaxes(fixedrange=True)
    return _layout(fig, 180, separators=_separators(lang))
