"""The figure builders write plain plotly specs without validation; here every one is validated."""

from __future__ import annotations

import itertools
import json

import numpy as np
import plotly.graph_objects as go
import pytest

from lensa.lessons.common import log_histogram
from lensa.models.gradients import gradient_sample
from lensa.models.scaling import dynamic_run
from lensa.numerics.formats import FORMATS, classify, representable_between
from lensa.ui import figures
from lensa.ui.components import scrub
from lensa.ui.site import PAGES
from tests.pagetools import open_page, scrub_data, scrub_elements

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def validated(fig: go.Figure) -> dict:
    """Rebuild the figure with plotly's validation on; raises on any invalid property."""
    spec = fig.to_dict()
    go.Figure(spec)  # validates data, layout and frames
    return spec


def test_palette_gives_each_meaning_its_own_colour():
    colours = list(figures.CATEGORY_COLOURS.values()) + list(figures.FORMAT_COLOURS.values())
    assert len(colours) == len(set(colours))


def test_builders_make_valid_figures():
    sample = gradient_sample(1e-6)
    labels = {"zero": "0", "subnormal": "sub", "normal": "normal", "overflow": "inf"}
    run = dynamic_run()
    run_labels = figures.RunLabels("step", "log2 S", "clean", "skipped", "{step} {scale}", "{step} {scale} x", "P", "S")
    fp16 = FORMATS["fp16"]
    ranges = [figures.FormatRange("fp16", "FP16", fp16.smallest_subnormal, fp16.smallest_normal, fp16.max)]
    range_labels = {"gradients": "g", "subnormal": "{fmt} s", "normal": "{fmt} n", "hover": "{fmt}{lo}{hi}"}
    marks = {"w": "w", "exact": "e", "stored": "s", "half": "h"}
    grid = representable_between(0.996, 1.004, "fp16")
    built = [
        figures.stacked_memory([figures.BarPart("w · 2 B", 13.5e9, "#E69F00", "x")], 80, "80 GB", "GB", "id"),
        figures.category_histogram(
            log_histogram(sample, classify(sample, "fp16")),
            labels,
            [(2**-24, "sub")],
            "x",
            "n",
            "{lo}{hi}{n}{category}",
            "en",
        ),
        figures.scaler_run(
            [s.step for s in run], [np.log2(s.scale) for s in run], [s.skipped for s in run], run_labels
        ),
        figures.scaler_run([1, 2], [16, 15], [True, False], run_labels, animate=False, overlay=("real", [16, 15])),
        figures.loss_curves([("fp32", "FP32", [0.7, 0.5]), ("bf16", "BF16", [0.7, 0.51])], "step", "loss", "en"),
        figures.number_line(1.0, 1e-6, 1.0, grid, 2**-10, marks, "d", "en"),
        figures.labelled_bars(["a", "b"], [1.0, 2.0], ["#0072B2", "#56B4E9"], ["1", "2"], patterns=["/", ""]),
        figures.format_ranges(ranges, (float(sample.min()), float(sample.max())), range_labels, "en"),
        figures.format_ranges(ranges, None, range_labels, "en", -12, 8, every=2),
        figures.precision_ticks([("fp16", "FP16", representable_between(1, 1.0625, "fp16"))], "en"),
    ]
    for fig in built:
        spec = validated(fig)
        assert spec["data"]
    animated = validated(built[2])
    assert len(animated["frames"]) == len(run)


CHARTLESS = ("overview", "lab", "formats", "summary", "glossary")  # no chart, or one drawn only on a click


@pytest.mark.parametrize("key", [p.key for p in PAGES if p.key not in CHARTLESS])
def test_every_chart_a_page_draws_is_valid(key):
    """Streamlit's charts, and every chart of every stop of every scrub slider (what the browser may show)."""
    at = open_page(key, lang="id")
    charts = at.get("plotly_chart")
    scrubs = scrub_elements(at)
    assert charts or scrubs
    for chart in charts:
        go.Figure(json.loads(chart.proto.spec))
    for element in scrubs:
        for part in scrub_data(element)["parts"]:
            for i in range(len(part["stops"])):
                for block in scrub.frame_at(part, i):
                    if block["k"] == "chart":
                        go.Figure(block["fig"])


def test_measured_builders_make_valid_figures():
    from lensa.runstats import measured, summarize

    stats = summarize(np.concatenate([gradient_sample(1e-6), [7e4, 1e5]]))
    hist = measured.zone_histogram(stats, "fp16")
    labels = {"zero": "0", "subnormal": "sub", "normal": "normal", "overflow": "inf"}
    sweep = measured.scale_sweep(stats, range(25))
    sweep_labels = figures.SweepLabels("S", "share", "0", "inf", "keep", "safe", "S = 2^3", "{scale}: {share}")
    run_labels = figures.RunLabels("step", "log2 S", "clean", "skipped", "{step} {scale}", "{step} {scale} x", "P", "S")
    built = [
        figures.binade_zones(
            hist.exponents,
            hist.counts,
            labels,
            [(2**-24, "sub"), (65504, "max")],
            "x",
            "n",
            "{lo}{hi}{n}{category}",
            "id",
        ),
        figures.scale_sweep(sweep.ks, sweep.zero, sweep.overflow, 11, 18, 3, sweep_labels, "en"),
        figures.scale_sweep(sweep.ks, sweep.zero, sweep.overflow, None, None, 0, sweep_labels, "en"),
        figures.share_lines([1, 10, 20], [("fp16", "FP16", [0.5, 0.4, 0.6], ["a", "b", "c"])], "step", "share", "en"),
        figures.grouped_share_bars(
            ["a.weight", "b.weight"],
            [("fp16", "FP16", [0.2, 0.5], ["20%", "50%"]), ("fp32", "FP32", [0, 0], ["0%", "0%"])],
            "share",
            "en",
        ),
        figures.labelled_bars(["FP16", "BF16"], [0.2, 0.0], ["#E69F00", "#56B4E9"], ["20%", "0%"], percent=True),
    ]
    for fig in built:
        assert validated(fig)["data"]
    # the overflowing values sit in FP16's overflow zone, stacked on their own binades
    overflow = next(t for t in built[0].to_dict()["data"] if t["name"] == "inf")
    assert sum(overflow["y"]) == 2
    # a long recorded run animates in at most max_frames frames, the last one the whole run
    steps = list(range(1, 201))
    spec = validated(figures.scaler_run(steps, [16.0] * 200, [False] * 200, run_labels, max_frames=60))
    assert len(spec["frames"]) <= 61 and spec["frames"][-1]["name"] == "200"


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_number_line_draws_and_names_the_format_it_is_given(fmt):
    from lensa.numerics.formats import quantize, spacing

    w, update = 1.0, 1e-3
    gap = float(spacing(w, fmt))
    grid = representable_between(w - 4 * gap, w + 4 * gap, fmt)
    stored = float(quantize(w + update, fmt))
    marks = {"w": "w", "exact": "e", "stored": "s", "half": "h"}
    fig = figures.number_line(w, update, stored, grid, gap, marks, "d", "en", fmt=fmt)
    spec = validated(fig)
    ticks, label = spec["data"][0], FORMATS[fmt].label
    assert ticks["name"] == label and ticks["marker"]["color"] == figures.FORMAT_COLOURS[fmt]
    assert ticks["hovertemplate"].startswith(f"{label}: ")
    # The ticks stand at the format's own values (as distances from w), and the table lists the same values.
    np.testing.assert_array_equal(np.array(ticks["x"]) + w, grid)
    assert [float(v) for name, v in fig.table.rows if name == label] == list(grid)
    # Every other format's label is absent: nothing is named FP16 unless the grid is FP16's.
    others = {f.label for key, f in FORMATS.items() if key != fmt and f.label not in label}
    assert not any(o in json.dumps(spec) for o in others)


def test_the_format_ranges_table_writes_each_limit_exactly_where_it_is_short():
    """The table under step 5's range chart: FP16's largest value is 65,504 (not 66,000), FP6 E2M3's 7.5."""
    import ml_dtypes

    labels = {"gradients": "g", "subnormal": "{fmt} s", "normal": "{fmt} n", "hover": "{fmt}{lo}{hi}"}
    ranges = [
        figures.FormatRange(
            k, FORMATS[k].label, FORMATS[k].smallest_subnormal, FORMATS[k].smallest_normal, FORMATS[k].max
        )
        for k in ("fp16", "fp6_e2m3")
    ]
    sample = gradient_sample(1e-6)
    extent = (float(sample.min()), float(sample.max()))
    rows = {row[0]: row[1:] for row in figures.format_ranges(ranges, extent, labels, "en").table.rows}
    fp16, e2m3 = ml_dtypes.finfo(np.float16), ml_dtypes.finfo(ml_dtypes.float6_e2m3fn)
    assert float(fp16.max) == 65504 and float(e2m3.max) == 7.5 and float(e2m3.smallest_subnormal) == 0.125
    assert rows[FORMATS["fp16"].label] == ("6.0e-8", "6.1e-5", "65,504")
    assert rows[FORMATS["fp6_e2m3"].label] == ("0.125", "1", "7.5")


@pytest.mark.parametrize("lang", ["en", "id"])
def test_step5s_legend_names_a_look_no_normal_range_has(lang):
    """Issue 41: the legend's "subnormal range" swatch (plotly draws a trace's first bar: FP32's, lighter) was the
    shade of BF16's normal range, a lighter blue. A subnormal part is dotted and no normal range is, so the
    swatch's look (colour and pattern) is never a normal range's, whatever the colours."""
    from tests.pagetools import chart_specs

    at = open_page("bf16", lang=lang)
    (spec,) = [s for s in chart_specs(at) if any("base" in t for t in s["data"])]
    legend = {t["name"]: t for t in spec["data"] if t.get("showlegend")}
    sub = legend[figures.i18n.text(lang, "views.legend_subnormal")]
    normal = legend[figures.i18n.text(lang, "views.legend_normal")]

    def looks(trace):
        shape = trace["marker"].get("pattern", {}).get("shape", "")
        return {(colour, shape) for colour in trace["marker"]["color"]}

    assert sub["marker"]["pattern"]["shape"] and not normal["marker"].get("pattern", {}).get("shape")
    assert not looks(sub) & looks(normal)
    assert len(normal["marker"]["color"]) == 3  # FP32, BF16 and FP16: every normal range is in the look test


@pytest.mark.parametrize("key", ["fp16_range", "loss_scaling"])
@pytest.mark.parametrize("lang", ["en", "id"])
def test_fp16s_limit_labels_sit_on_rows_of_their_own_beside_their_lines(key, lang):
    """Issue 41: on a phone the three limits' labels piled up (rows a share of the plot's height: less than a line
    of text on a short chart) and "largest finite 65,504" hung far from its line. Each label is a row of pixels
    below the one before, at any height, anchored at its own line; on a phone (the chart's compact layout) it is
    the limit's value alone, which the caption under the chart names."""
    from tests.pagetools import scrub_frame

    at = open_page(key, lang=lang)
    chart = next(b for b in scrub_frame(at) if b["k"] == "chart")
    layout = chart["fig"]["layout"]
    lines = sorted(s["x0"] for s in layout["shapes"] if s.get("type") == "line" and s.get("xref") == "x")
    if key == "loss_scaling":  # its caption names no limit: its phone keeps the full labels, on their own rows
        compact = layout["annotations"]
        assert chart["compact"]["layout"] == {}
    else:
        compact = chart["compact"]["layout"]["annotations"]
    fp16 = FORMATS["fp16"]
    values = [figures.i18n.sci(fp16.smallest_subnormal, lang), figures.i18n.sci(fp16.smallest_normal, lang)]
    values.append(figures.i18n.number(fp16.max, lang))
    assert [a["text"].rpartition(" ")[2] if key == "loss_scaling" else a["text"] for a in compact] == values
    for labels in (layout["annotations"], compact):
        assert len(labels) == len(lines) == 3
        assert len({a["y"] for a in labels}) == 1 and {a["yref"] for a in labels} == {"paper"}
        rows = sorted(a.get("yshift", 0) for a in labels)
        assert all(b - a >= figures.MARK_FONT_PX + 2 for a, b in itertools.pairwise(rows)), rows
        for a, x in zip(labels, lines, strict=True):
            assert a["x"] == x and abs(a["xshift"]) <= 3  # its end at its own line, on the side away from it
            assert a["xanchor"] == ("left" if a["xshift"] > 0 else "right")
    if key == "fp16_range":
        for value in values:
            assert value in chart["caption"]  # what a phone's label leaves out, the caption says
