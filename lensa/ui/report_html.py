"""``lensa report RUN --html OUT.html``: the report and the lesson's charts for one run, in one HTML file.

The file stands alone: plotly.js is written into it once (``include_plotlyjs=True``), the charts' data beside it,
no request leaves the page and no server is needed (open it from a disk, attach it to a CI run, mail it). It holds
the text report (``lensa report``'s text, handed in by :mod:`lensa.__main__`: the numbers of
:mod:`lensa.runstats.report`), then the charts steps 2-5
draw for a recorded run, built by the same functions (:mod:`lensa.ui.figures`) from the same records, each with its
title, caption and its data as a table: per kind, its values per binade against FP16's zones (step 2); per gradient
kind, the shares lost at every loss scale (step 3); the share of each layer's updates a 16-bit weight would lose
(step 4); FP16 against BF16, rounded to 0 and mean relative error (step 5). Every word comes from the catalogues,
in the report's language.

This module imports plotly (through :mod:`lensa.ui.figures`) and is imported by ``--html`` alone.
"""

from __future__ import annotations

import copy
import html
import os
from collections.abc import Mapping
from typing import Any

import plotly.io as pio

from lensa.numerics.formats import FORMATS
from lensa.runstats import RunStats, measured
from lensa.ui import figures, i18n

MAX_LAYER_BARS = 12  # the layers of step 4's chart: those that lose most (the table lists every one)
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #1a1a1a; }
h1 { font-size: 1.6rem; overflow-wrap: anywhere; }
pre { font-size: 0.8rem; overflow-x: auto; background: #f6f6f6; padding: 1rem; }
figure { margin: 2rem 0; } figcaption { font-size: 0.9rem; color: #444; }
table { border-collapse: collapse; font-size: 0.8rem; } td, th { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
details { margin-top: 0.5rem; }
"""


class _Page:
    """The catalogue's words and the pages' numbers, in one language (what a chart's labels need)."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def t(self, key: str, **values: object) -> str:
        return i18n.text(self.lang, key, **values).replace("**", "").replace("*", "")

    def pct(self, share: float) -> str:
        if share != share:  # NaN: no values
            return "—"
        return "∞" if share == float("inf") else i18n.percent(share, self.lang)


def _figure_html(fig: Any, title: str, caption: str, first: bool) -> str:
    """One chart: its title, the plot (plotly.js written in with the first one), caption, and data table."""
    spec = copy.deepcopy(fig.to_dict())
    layout = spec.setdefault("layout", {})
    for axis in {"xaxis", "yaxis", *(k for k in layout if k.startswith(("xaxis", "yaxis")))}:
        layout.setdefault(axis, {})["automargin"] = True  # Streamlit's theme does this on the pages
    plot = pio.to_html(
        spec,
        full_html=False,
        include_plotlyjs=first,
        validate=False,
        config={"displayModeBar": False, "responsive": True},
    )
    parts = [f"<figure><h3>{html.escape(title)}</h3>", plot, f"<figcaption>{html.escape(caption)}</figcaption>"]
    table = getattr(fig, "table", None)
    if table is not None and table.rows:
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in table.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in table.rows)
        summary = html.escape(i18n.text(table.lang, "figure.table"))
        parts.append(f"<details><summary>{summary}</summary><table><tr>{head}</tr>{body}</table></details>")
    parts.append("</figure>")
    return "\n".join(parts)


def _zone_labels(p: _Page) -> dict[str, str]:
    return {
        "zero": p.t("category.zero"),
        "subnormal": p.t("category.subnormal"),
        "normal": p.t("category.normal_fp16"),
        "overflow": p.t("category.overflow"),
    }


def _fp16_marks(p: _Page) -> list[tuple[float, str]]:
    fp16 = FORMATS["fp16"]
    return [
        (fp16.smallest_subnormal, f"{p.t('fp16_range.mark_subnormal')} {i18n.sci(fp16.smallest_subnormal, p.lang)}"),
        (fp16.smallest_normal, f"{p.t('fp16_range.mark_normal')} {i18n.sci(fp16.smallest_normal, p.lang)}"),
        (fp16.max, f"{p.t('fp16_range.mark_max')} {i18n.number(fp16.max, p.lang)}"),
    ]


def charts(run: RunStats, doc: Mapping[str, Any], lang: str) -> list[tuple[str, Any, str, str]]:
    """The lesson's charts for the run: (step's page title, figure, chart title, caption), in the steps' order."""
    p = _Page(lang)
    out: list[tuple[str, Any, str, str]] = []
    for kind, section in doc["kinds"].items():
        if kind == "update":
            continue
        stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, section["step"])
        hist = measured.zone_histogram(stats, "fp16")
        words = p.t(f"data.kind_{kind}")
        fig = figures.binade_zones(
            hist.exponents,
            hist.counts,
            _zone_labels(p),
            _fp16_marks(p),
            p.t("data.axis"),
            p.t("data.count"),
            p.t("data.hover"),
            lang,
        )
        caption = p.t(
            "report.kind_head",
            kind=words,
            step=i18n.number(section["step"], lang),
            n=i18n.number(stats.nonzero, lang),
            layers=i18n.number(len(section["layers"]), lang),
        )
        out.append((p.t("nav.fp16_range"), fig, p.t("fp16_range_data.figure_title", kind=words), caption))
    for kind, band in doc["loss_scale"].items():
        stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, band["step"])
        ks = list(range(-24, 41))
        sweep = measured.scale_sweep(stats, ks, "fp16")
        labels = figures.SweepLabels(
            axis_scale=p.t("loss_scaling_data.sweep_axis"),
            axis_share=p.t("loss_scaling_data.sweep_share"),
            zero=p.t("loss_scaling_data.sweep_zero"),
            overflow=p.t("loss_scaling_data.sweep_overflow"),
            keep=p.t("loss_scaling_data.sweep_keep"),
            safe=p.t("loss_scaling_data.sweep_safe"),
            current=p.t("loss_scaling_data.sweep_current", s=i18n.power_of_two(0)),
            hover=p.t("loss_scaling_data.sweep_hover"),
        )
        fig = figures.scale_sweep(sweep.ks, sweep.zero, sweep.overflow, band["keep_k"], band["safe_k"], 0, labels, lang)
        words = p.t(f"data.kind_{kind}")
        caption = p.t("report.scale_head", kind=words, step=i18n.number(band["step"], lang))
        out.append((p.t("nav.loss_scaling"), fig, p.t("loss_scaling_data.sweep_title", kind=words), caption))
    updates = doc.get("updates")
    if updates is not None and updates["layers"]:
        rows = measured.lost_by_layer(run, updates["step"], ("fp16", "bf16", "fp32"))
        shown = measured.most_lost(rows, "fp16", MAX_LAYER_BARS)
        names = {"fp16": "master_weights_data.bar_fp16", "bf16": "master_weights_data.bar_bf16"}
        names["fp32"] = "master_weights_data.bar_master"
        series = [
            (f, p.t(key), [r.lost[f] for r in shown], [p.pct(r.lost[f]) for r in shown]) for f, key in names.items()
        ]
        fig = figures.grouped_share_bars([r.name for r in shown], series, p.t("master_weights_data.axis_share"), lang)
        caption = p.t(
            "master_weights_data.layers_caption", shown=i18n.number(len(shown), lang), n=i18n.number(len(rows), lang)
        )
        title = p.t("master_weights_data.layers_title", step=i18n.number(updates["step"], lang))
        out.append((p.t("nav.master_weights"), fig, title, caption))
    keys = ("fp16", "bf16")
    for kind, section in doc["kinds"].items():
        if kind == "update":
            continue
        every = section["all"]
        words = p.t(f"data.kind_{kind}")
        colours = [figures.FORMAT_COLOURS[f] for f in keys]
        labels_ = [FORMATS[f].label for f in keys]
        zero = [every["shares"][f]["zero"] or 0.0 for f in keys]
        fig = figures.labelled_bars(
            labels_,
            zero,
            colours,
            [p.pct(z) for z in zero],
            axis_title=p.t("bf16_data.axis_zero"),
            x_max=max([0.01, *zero]) * 1.3,
            lang=lang,
            percent=True,
        )
        out.append((p.t("nav.bf16"), fig, p.t("bf16_data.zero_title", kind=words), p.t("report.verdict_head")))
        errors = [every["error"][f] for f in keys]
        finite = [e if e is not None else 0.0 for e in errors]
        fig = figures.labelled_bars(
            labels_,
            finite,
            colours,
            [p.pct(e) if e is not None else "∞" for e in errors],
            axis_title=p.t("bf16_data.axis_error"),
            x_max=max([0.01, *finite]) * 1.3,
            lang=lang,
            percent=True,
        )
        out.append((p.t("nav.bf16"), fig, p.t("bf16_data.error_title", kind=words), p.t("bf16_data.error_caption")))
    return out


def page(doc: Mapping[str, Any], runs: RunStats | Mapping[str, RunStats], lang: str, text: str) -> str:
    """The whole HTML document (a string): the text report ``text``, then :func:`charts`."""
    arms = measured.arms_of(runs)
    run = arms[measured.tensors_arm(arms)]
    title = i18n.text(lang, "report.title", file=doc["file"])
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<pre>{html.escape(text)}</pre>",
    ]
    section = None
    for i, (step_title, fig, chart_title, caption) in enumerate(charts(run, doc, lang)):
        if step_title != section:
            parts.append(f"<h2>{html.escape(step_title)}</h2>")
            section = step_title
        parts.append(_figure_html(fig, chart_title, caption, first=i == 0))
    parts.append("</body></html>")
    return "\n".join(parts)


def write(
    doc: Mapping[str, Any],
    runs: RunStats | Mapping[str, RunStats],
    lang: str,
    path: str | os.PathLike[str],
    text: str,
) -> None:
    """Write :func:`page` (the report's ``text``, then its charts) to ``path``, atomically: a file beside it, renamed
    over it."""
    data = page(doc, runs, lang, text).encode("utf-8")
    target = os.fspath(path)
    temp = f"{target}.part"
    with open(temp, "wb") as fh:
        fh.write(data)
    os.replace(temp, target)
