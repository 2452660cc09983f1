"""Step 2 · FP16's narrow range: small gradients round to zero."""

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from lensa.lessons.common import limits_of, shares_of
from lensa.lessons.fp16_range import Fp16RangeView, fp16_range_view
from lensa.numerics.formats import FORMATS, most_common_category
from lensa.runstats import measured
from lensa.ui import display, figures, format_table, i18n, layout, recorded_run, widgets, zone_charts
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup

FP16 = FORMATS["fp16"]
COMPACT_CHART_PX = 220


def show_measured(sel: recorded_run.Selection, also: str) -> None:
    """The recorded tensors instead of the illustration: their histogram over FP16's zones, and who loses most."""
    stats = sel.stats
    shares = measured.zone_shares(stats, "fp16")
    pct = recorded_run.pcts(page, shares)  # the four cards are one whole: they add up to 100%
    kind = recorded_run.kind_words(page, sel.kind)
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_zero"), pct["zero"]),
            (page.t("metric_subnormal"), pct["subnormal"]),
            (page.t("metric_normal"), pct["normal"]),
            (page.t("fp16_range_data.metric_overflow"), pct["overflow"]),
        ]
    )
    with charts:
        display.chart(
            zone_charts.fp16_binades(page, measured.zone_histogram(stats, "fp16")),
            page.t("fp16_range_data.figure_title", kind=kind),
            " ".join([recorded_run.shares_note(page, stats), recorded_run.source_line(page, sel)]),
            alt=page.t("fp16_range_data.alt", kind=kind, zero=pct["zero"], sub=pct["subnormal"], normal=pct["normal"]),
        )
    values = {
        "kind": kind,
        "step": page.num(sel.step),
        "zero": pct["zero"],
        "sub": pct["subnormal"],
        "normal": pct["normal"],
        "over": pct["overflow"],
        "normal_limit": page.sci(FP16.smallest_normal),
    }
    regime = most_common_category(shares) if stats.nonzero else "zero"
    paragraph = page.t(f"fp16_range_data.explain_{regime}", **values)
    if shares["overflow"] > 0:
        paragraph += page.t("explain_overflow", **values)
    layout.explain(page, paragraph, page.t("fp16_range_data.try"))
    st.subheader(page.t("fp16_range_data.layers_title"))
    st.caption(page.t("fp16_range_data.layers_intro", kind=kind, step=page.num(sel.step)))
    columns = [
        (page.t("common.col_zero"), "fp16", "zero"),
        (page.t("common.col_subnormal"), "fp16", "subnormal"),
        (page.t("common.col_overflow"), "fp16", "overflow"),
    ]
    rows = measured.layer_rows(sel.run, sel.kind, sel.step, ("fp16",))
    st.dataframe(recorded_run.layer_frame(page, rows, columns), hide_index=True)
    recorded_run.measured_also(page, sel, also)


def frame(view: Fp16RangeView, count_top: float) -> scrub.Frame:
    """What the component shows at one stop: the histogram (with the extra formats' ranges under it), the cards."""
    pct = i18n.percents(view.shares, page.lang)  # the cards are parts of one whole: they add up to 100%
    chart = scrub.Chart(
        zone_charts.fp16_histogram(page, view.histogram, count_top, aligned=bool(view.also)),
        page.t("figure_title"),
        " ".join(
            [
                page.t(
                    "caption",
                    sub=page.sci(FP16.smallest_subnormal),
                    normal=page.sci(FP16.smallest_normal),
                    max=page.num(FP16.max),
                ),
                page.t("common.illustration"),
            ]
        ),
        alt=page.t(
            "alt",
            grad=page.sci(view.grad),
            zero=pct["zero"],
            sub=pct["subnormal"],
            normal=pct["normal"],
            over=pct["overflow"],
            largest=page.sci(view.largest),
        ),
        compact_height=COMPACT_CHART_PX,
        compact_layout=zone_charts.fp16_compact_marks(page, view.histogram),
    )
    blocks: list[scrub.Block] = [chart]
    if view.also:
        strip = zone_charts.format_strip(page, [limits_of("fp16"), *(f.limits for f in view.also)])
        blocks.append(scrub.Chart(strip, page.t("views.strip_title"), alt=page.t("views.strip_alt")))
    blocks.append(
        scrub.Cards(
            (
                (page.t("metric_zero"), pct["zero"]),
                (page.t("metric_subnormal"), pct["subnormal"]),
                (page.t("metric_normal"), pct["normal"]),
                (page.t("metric_largest"), page.sci(view.largest)),
            )
        )
    )
    return tuple(blocks)


def frames(also: tuple[str, ...]) -> scrub.Build:
    """The frames of the gradient slider's stops: one counts axis for all of them, so the bars move, not the axis."""

    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        views = [fp16_range_view(state["grad"], also) for state in states]
        top = figures.count_axis_top([v.histogram for v in views])
        return [frame(v, top) for v in views]

    return build


def illustration(picture: DeltaGenerator, also: str) -> None:
    """The seed's illustration: 400 gradients of a typical size over FP16's zones."""
    keys = format_table.also_keys(also)
    grad_slider = scrub.Slider(
        widgets.declared(page, "grad", NumberControl), page.t("grad"), page.sci, page.t("grad_help")
    )
    with picture:
        grad = scrub.scrub(page, [grad_slider], frames(keys), keys, page.t("try"))["grad"]
    layout.after_controls(page)
    view = fp16_range_view(grad, keys)
    pct = i18n.percents(view.shares, page.lang)  # as the cards write them
    values = {
        "zero": pct["zero"],
        "sub": pct["subnormal"],
        "normal": pct["normal"],
        "over": pct["overflow"],
        "normal_limit": page.sci(FP16.smallest_normal),
    }
    sentences = [page.t(f"explain_{view.regime}", **values)]
    if view.overflows:
        sentences.append(page.t("explain_overflow", **values))
    layout.explain(page, "".join(sentences), None)  # the scrub shows Try this
    also_illustrated(view, also)


def also_illustrated(view: Fp16RangeView, also: str) -> None:
    """What "also show" adds to the illustration: the formats' table, and what FP8 and the narrower formats
    round to 0."""
    if also == "none":
        return
    format_table.also_table(page, view.sample, also)
    shares = shares_of(view.also)
    if format_table.shows(also, "fp8"):
        st.markdown(
            page.t(
                "fp8_explain",
                e4m3_zero=page.pct(shares["fp8_e4m3"]["zero"]),
                e5m2_zero=page.pct(shares["fp8_e5m2"]["zero"]),
            )
        )
    if format_table.shows(also, "narrow"):
        st.markdown(
            page.t(
                "also.explain_fp16_range",
                e2m1_zero=page.pct(shares["fp4_e2m1"]["zero"]),
                e3m2_zero=page.pct(shares["fp6_e3m2"]["zero"]),
            )
        )


page = setup("fp16_range")
layout.step_header(page)
layout.lesson(page, lambda: recorded_run.illustration_or_run(page, illustration, show_measured))


def depth_sentence() -> str:
    """What the shipped reference run shows about depth, from its own numbers ("" without a reference run)."""
    arms, _ = recorded_run.reference_run()
    run = (arms or {}).get("fp32")
    found = measured.depth_finding(run) if run is not None else None
    if found is None:
        return ""
    return page.t(
        "notes_depth_furthest" if found.furthest_smallest else "notes_depth_nearest",
        step=page.num(found.step),
        nearest=found.nearest,
        nearest_zero=page.pct(found.nearest_zero),
        furthest=found.furthest,
        furthest_zero=page.pct(found.furthest_zero),
    )


layout.step_end(
    page, page.t("notes", depth=depth_sentence()), [page.t("refs.ieee754"), page.t("refs.micikevicius2017")]
)
