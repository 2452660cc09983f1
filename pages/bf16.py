"""Step 5 · BF16: FP32's range with fewer significand bits."""

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from lensa.lessons.bf16 import Bf16View, bf16_view, precision_grids
from lensa.numerics.formats import FORMATS, fp16_against_bf16
from lensa.runstats import measured
from lensa.ui import display, figures, format_table, layout, recorded_run, widgets, zone_charts
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup

COMPACT_RANGE_PX = 230


def show_measured(sel: recorded_run.Selection, also: str) -> None:
    """The recorded values instead of the illustration: FP16 against BF16 (and FP8) on what to 0 and the error."""
    layout.after_controls(page)
    stats = sel.stats
    keys = (*format_table.SIXTEEN_BIT_KEYS, *(format_table.FP8_KEYS if format_table.shows(also, "fp8") else ()))
    zero = {f: measured.zone_shares(stats, f)["zero"] for f in keys}
    errors = measured.mean_relative_errors(stats, keys)
    over16 = measured.zone_shares(stats, "fp16")["overflow"]
    values = {
        "kind": recorded_run.kind_words(page, sel.kind),
        "z16": recorded_run.pct(page, zero["fp16"]),
        "zbf": recorded_run.pct(page, zero["bf16"]),
        "e16": recorded_run.pct(page, errors["fp16"]),
        "ebf": recorded_run.pct(page, errors["bf16"]),
        "over": recorded_run.pct(page, over16),
    }
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_fp16_zero"), values["z16"]),
            (page.t("metric_bf16_zero"), values["zbf"]),
            (page.t("metric_fp16_err"), values["e16"]),
            (page.t("metric_bf16_err"), values["ebf"]),
        ]
    )
    with charts:
        measured_charts(sel, keys, zero, errors, values)
    verdict = fp16_against_bf16(over16, errors["fp16"], errors["bf16"])
    layout.explain(page, page.t(f"bf16_data.explain_{verdict}", **values), page.t("bf16_data.try"))
    layer_table(sel)
    recorded_run.measured_also(page, sel, also, page.t("fp8_explain"))


def measured_charts(
    sel: recorded_run.Selection,
    keys: tuple[str, ...],
    zero: dict[str, float],
    errors: dict[str, float],
    values: dict[str, str],
) -> None:
    """The run's share rounded to 0 and its mean relative error, a bar per format, then the precision ticks."""
    source = recorded_run.source_line(page, sel)
    names = [FORMATS[f].label for f in keys]
    colours = [figures.FORMAT_COLOURS[f] for f in keys]
    display.chart(
        figures.labelled_bars(
            names,
            [zero[f] for f in keys],
            colours,
            [recorded_run.pct(page, zero[f]) for f in keys],
            axis_title=page.t("bf16_data.axis_zero"),
            x_max=recorded_run.bar_top([zero[f] for f in keys], floor=0.01),
            lang=page.lang,
            percent=True,
        ),
        page.t("bf16_data.zero_title", kind=values["kind"]),
        " ".join([recorded_run.shares_note(page, sel.stats), source]),
        alt=page.t("bf16_data.alt_zero", **values),
    )
    shown, top = recorded_run.finite_bars([errors[f] for f in keys])
    display.chart(
        figures.labelled_bars(
            names,
            shown,
            colours,
            [recorded_run.pct(page, errors[f]) for f in keys],
            axis_title=page.t("bf16_data.axis_error"),
            x_max=top,
            lang=page.lang,
            percent=True,
        ),
        page.t("bf16_data.error_title", kind=values["kind"]),
        " ".join([page.t("bf16_data.error_caption"), source]),
        alt=page.t("bf16_data.alt_error", **values),
    )
    precision_chart()


def precision_caption() -> str:
    """The caption under the precision ticks: each 16-bit format's machine epsilon."""
    return page.t("precision_caption", fp16=page.sci(FORMATS["fp16"].eps, 3), bf16=page.sci(FORMATS["bf16"].eps, 3))


def layer_table(sel: recorded_run.Selection) -> None:
    """Per layer at the chosen step: what FP16 and BF16 round to 0, and their mean relative error."""
    st.subheader(page.t("bf16_data.layers_title"))
    columns = [
        (page.t("metric_fp16_zero"), "fp16", "zero"),
        (page.t("metric_bf16_zero"), "bf16", "zero"),
        (page.t("metric_fp16_err"), "fp16", "error"),
        (page.t("metric_bf16_err"), "bf16", "error"),
    ]
    rows = measured.layer_rows(sel.run, sel.kind, sel.step, ("fp16", "bf16"))
    st.dataframe(recorded_run.layer_frame(page, rows, columns), hide_index=True)


def range_chart(view: Bf16View) -> scrub.Chart:
    """Each format's range (FP32, the 16-bit formats and those "also show" adds) under the gradients' extent."""
    ranges = view.ranges
    z16, zbf = page.pct(view.fp16_zero), page.pct(view.bf16_zero)
    extent = (float(view.sample.min()), float(view.sample.max()))
    return scrub.Chart(
        figures.format_ranges(ranges, extent, zone_charts.range_labels(page), page.lang),
        page.t("range_title"),
        page.t("common.illustration"),
        alt=page.t(
            "range_alt",
            ranges="; ".join(f"{r.label} {page.sci(r.smallest_subnormal)} … {page.sci(r.max)}" for r in ranges),
            grad=page.sci(view.grad),
            z16=z16,
            zbf=zbf,
        ),
        compact_height=COMPACT_RANGE_PX,
    )


def frame(view: Bf16View) -> scrub.Frame:
    """What the component shows at one stop: the ranges under the gradients, then the four cards."""
    cards = scrub.Cards(
        (
            (page.t("metric_fp16_zero"), page.pct(view.fp16_zero)),
            (page.t("metric_bf16_zero"), page.pct(view.bf16_zero)),
            (page.t("metric_fp16_err"), page.pct(view.errors["fp16"])),
            (page.t("metric_bf16_err"), page.pct(view.errors["bf16"])),
        )
    )
    return (range_chart(view), cards)


def frames(also: tuple[str, ...]) -> scrub.Build:
    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        return [frame(bf16_view(state["grad"], also)) for state in states]

    return build


def illustration(picture: DeltaGenerator, also: str) -> None:
    """The seed's illustration: 400 gradients of a typical size against each format's range, and the precision."""
    keys = format_table.also_keys(also)
    grad_slider = scrub.Slider(
        widgets.declared(page, "grad", NumberControl), page.t("grad"), page.sci, page.t("grad_help")
    )
    with picture:
        grad = scrub.scrub(page, [grad_slider], frames(keys), keys, page.t("try"))["grad"]
    layout.after_controls(page)
    view = bf16_view(grad, keys)
    values = {
        "grad": page.sci(grad),
        "z16": page.pct(view.fp16_zero),
        "zbf": page.pct(view.bf16_zero),
        "e16": page.pct(view.errors["fp16"]),
        "ebf": page.pct(view.errors["bf16"]),
    }
    layout.explain(page, page.t(f"explain_{view.verdict}", **values), None)  # the scrub shows Try this
    precision_chart()
    if also == "none":
        return
    format_table.also_table(page, view.sample, also)
    if format_table.shows(also, "fp8"):
        st.markdown(page.t("fp8_explain"))
    if format_table.shows(also, "narrow") and view.fp4_shares is not None:
        st.markdown(page.t("also.explain_bf16", e2m1_zero=page.pct(view.fp4_shares["zero"])))


def precision_chart() -> None:
    """The values FP16 and BF16 can hold between 1 and 1.0625, with their count in the alt text."""
    grids = dict(precision_grids())
    display.chart(
        figures.precision_ticks([(key, FORMATS[key].label, grid) for key, grid in grids.items()], page.lang),
        page.t("precision_title"),
        precision_caption(),
        alt=page.t(
            "precision_alt",
            n16=page.num(len(grids["fp16"])),
            nbf=page.num(len(grids["bf16"])),
            fp16=page.sci(FORMATS["fp16"].eps, 3),
            bf16=page.sci(FORMATS["bf16"].eps, 3),
        ),
    )


page = setup("bf16")
layout.step_header(page)
layout.lesson(page, lambda: recorded_run.illustration_or_run(page, illustration, show_measured))
BF16, FP32 = FORMATS["bf16"], FORMATS["fp32"]
layout.step_end(
    page,
    page.t(
        "notes",
        bf16_max=page.sci(BF16.max, 5),
        fp32_max=page.sci(FP32.max, 5),
        bf16_overflow=page.sci(BF16.overflow_threshold, 5),
        bf16_tiny=page.sci(BF16.smallest_subnormal, 3),
        fp32_tiny=page.sci(FP32.smallest_subnormal, 3),
    ),
    [page.t("refs.kalamkar"), page.t("refs.ieee754")],
)
