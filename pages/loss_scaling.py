"""Step 3 · Loss scaling: shift the gradients into range, then shift them back."""

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from lensa.lessons.common import limits_of
from lensa.lessons.loss_scaling import FP4, SPIKES, LossScalingView, illustrative_run, loss_scaling_view
from lensa.models.scaling import TORCH_INIT_SCALE
from lensa.numerics.formats import FORMATS
from lensa.runstats import measured
from lensa.ui import display, figures, format_table, i18n, jobs, layout, live_view, recorded_run, widgets, zone_charts
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup
from lensa.ui.i18n import power_of_two

FP16 = FORMATS["fp16"]
COMPACT_CHART_PX = 220
REAL_RUN = "loss_scaling.real_trace"
REAL_JOB = "loss_scaling.real_job"
# A bad batch in the real run: its gradients times any scale this run reaches overflow FP16,
# while ordinary steps (|g| ~ 1e-2 at S <= 2^20) stay far below 65504.
REAL_SPIKE_FACTOR = 1e4
REGIME_KEYS = {
    "over": "explain_over",
    "fits": "explain_fits",
    "subnormal": "explain_subnormal",
    "none": "explain_none",
    "some": "explain_some",
}


def _steps_text(page, numbers: Sequence[int]) -> str:
    return ", ".join(page.num(n) for n in numbers) if numbers else page.t("real_none")


@st.cache_resource(max_entries=8)
def run_figure(lang: str, real: tuple[float, ...] | None):
    """The animated run (40 frames) depends only on the language and a real overlay: build it once for each."""
    run = illustrative_run()
    overlay = None if real is None else (i18n.text(lang, "loss_scaling.real_line"), live_view.log2(real))
    return figures.scaler_run(run.steps, run.log2_scales, run.skipped, _run_labels(lang), overlay=overlay, lang=lang)


def _run_labels(lang: str) -> figures.RunLabels:
    t = lambda key: i18n.text(lang, f"loss_scaling.{key}")  # noqa: E731
    return figures.RunLabels(
        axis_step=t("run_axis_step"),
        axis_scale=t("run_axis_scale"),
        clean=t("run_clean"),
        skipped=t("run_skipped"),
        hover_clean=t("run_hover"),
        hover_skipped=t("run_hover_skipped"),
        play=t("play"),
        pause=t("pause"),
    )


@st.cache_resource(max_entries=8)
def recorded_run_figure(lang: str, steps: tuple[int, ...], log2_scales: tuple[float, ...], skipped: tuple[bool, ...]):
    """A recorded GradScaler history, animated (at most 40 frames): built once per run and language."""
    return figures.scaler_run(steps, log2_scales, skipped, _run_labels(lang), max_frames=40, lang=lang)


def _scale_text(k: int | None) -> str:
    return "—" if k is None else power_of_two(k)


def bounds_sentence(bounds: measured.ScaleBounds, kind: str) -> str:
    """What the two loss scales of a recorded tensor say: none, only one, a window between them, or a clash."""
    if bounds.keep_k is None and bounds.safe_k is None:
        return page.t("loss_scaling_data.bounds_empty", kind=kind)
    if bounds.safe_k is None:
        return page.t("loss_scaling_data.bounds_no_safe", kind=kind, keep=_scale_text(bounds.keep_k))
    if bounds.keep_k is None:
        return page.t("loss_scaling_data.bounds_no_keep", kind=kind, safe=_scale_text(bounds.safe_k))
    key = "bounds_one" if bounds.keep_k == bounds.safe_k else "bounds_window" if bounds.window else "bounds_clash"
    return page.t(
        f"loss_scaling_data.{key}", kind=kind, keep=_scale_text(bounds.keep_k), safe=_scale_text(bounds.safe_k)
    )


def sweep_chart(sel: recorded_run.Selection, bounds: measured.ScaleBounds, k: int, kind: str, source: str) -> None:
    """The shares lost to 0 and to inf at every S of the slider, the two loss scales marked, and what they say."""
    sweep = measured.scale_sweep(sel.stats, page.info.control("scale").stops, "fp16")
    sentence = bounds_sentence(bounds, kind)
    labels = figures.SweepLabels(
        axis_scale=page.t("loss_scaling_data.sweep_axis"),
        axis_share=page.t("loss_scaling_data.sweep_share"),
        zero=page.t("loss_scaling_data.sweep_zero"),
        overflow=page.t("loss_scaling_data.sweep_overflow"),
        keep=page.t("loss_scaling_data.sweep_keep"),
        safe=page.t("loss_scaling_data.sweep_safe"),
        current=page.t("loss_scaling_data.sweep_current", s=power_of_two(k)),
        hover=page.t("loss_scaling_data.sweep_hover"),
    )
    display.chart(
        figures.scale_sweep(sweep.ks, sweep.zero, sweep.overflow, bounds.keep_k, bounds.safe_k, k, labels, page.lang),
        page.t("loss_scaling_data.sweep_title", kind=kind),
        source,
        alt=sentence,
    )
    st.markdown(sentence)


def recorded_scaler_chart(sel: recorded_run.Selection) -> measured.ScalerHistory | None:
    """The run's own GradScaler, animated; a note instead where the run recorded none. Returns its history."""
    history = measured.scaler_history(sel.source.scaler) if sel.source.scaler is not None else None
    if history is None:
        st.info(page.t("loss_scaling_data.no_history"), icon=":material/info:")
        return None
    display.chart(
        recorded_run_figure(page.lang, history.steps, history.log2_scales, history.skipped),
        page.t("loss_scaling_data.run_title"),
        page.t(
            "loss_scaling_data.run_caption",
            start=_scale_text(history.first_k),
            skipped=page.num(len(history.skipped_steps)),
            steps=_steps_text(page, list(history.skipped_steps)),
        )
        + " "
        + recorded_run.scaler_line(page, sel.source),
        alt=page.t(
            "loss_scaling_data.alt_run",
            n=page.num(len(history.steps)),
            start=_scale_text(history.first_k),
            end=_scale_text(history.last_k),
            skipped=page.num(len(history.skipped_steps)),
        ),
    )
    return history


def measured_fp8_table(sel: recorded_run.Selection, k: int) -> None:
    """FP16 at the chosen S beside the FP8 formats unscaled, then each FP8 format that its safe scale changes."""
    stats = sel.stats
    st.subheader(page.t("fp8_title"))
    st.markdown(page.t("loss_scaling_data.fp8_explain"))
    scaled = measured.rescaled_formats(stats, format_table.FP8_KEYS)
    rows = [
        *recorded_run.format_rows(page, stats, ("fp16",), {"fp16": k}),
        *recorded_run.format_rows(page, stats, format_table.FP8_KEYS, dict.fromkeys(format_table.FP8_KEYS, 0)),
        *(recorded_run.format_rows(page, stats, tuple(scaled), scaled) if scaled else ()),
    ]
    st.dataframe(rows, hide_index=True)


def show_measured(sel: recorded_run.Selection, also: str) -> None:
    """The recorded gradients instead of the illustration: scaled, swept over S, and the run's own scaler."""
    k = int(widgets.slider(page, "scale", page.t("scale"), lambda v: power_of_two(int(v)), help=page.t("scale_help")))
    layout.after_controls(page)
    stats = sel.stats
    kind = recorded_run.kind_words(page, sel.kind)
    shares = measured.zone_shares(stats, "fp16", k)
    pct = recorded_run.pcts(page, shares)  # parts of one whole, as step 2's cards
    bounds = measured.scale_bounds(stats, "fp16")
    source = recorded_run.source_line(page, sel)
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_zero"), pct["zero"]),
            (page.t("metric_overflow"), pct["overflow"]),
            (page.t("loss_scaling_data.metric_keep"), _scale_text(bounds.keep_k)),
            (page.t("loss_scaling_data.metric_safe"), _scale_text(bounds.safe_k)),
        ]
    )
    with charts:
        display.chart(
            zone_charts.fp16_binades(page, measured.zone_histogram(stats, "fp16", k)),
            page.t("loss_scaling_data.figure_title", kind=kind),
            " ".join([page.t("caption"), recorded_run.shares_note(page, stats), source]),
            alt=page.t(
                "loss_scaling_data.alt_hist", kind=kind, s=power_of_two(k), zero=pct["zero"], over=pct["overflow"]
            ),
        )
        sweep_chart(sel, bounds, k, kind, source)
        history = recorded_scaler_chart(sel)
    sentences = [
        page.t("loss_scaling_data.explain", s=power_of_two(k), kind=kind, zero=pct["zero"], over=pct["overflow"])
    ]
    if history is not None:
        sentences.append(
            page.t(
                "loss_scaling_data.explain_run",
                start=_scale_text(history.first_k),
                end=_scale_text(history.last_k),
                skipped=page.num(len(history.skipped_steps)),
                n=page.num(len(history.steps)),
            )
        )
    layout.explain(page, " ".join(sentences), page.t("loss_scaling_data.try"))
    if format_table.shows(also, "narrow"):
        st.caption(page.t("also.measured_note"))
    if format_table.shows(also, "fp8"):
        measured_fp8_table(sel, k)
    if also != "none":  # every block recipe, from the run's own values (file version 2)
        recorded_run.recipe_section(page, sel)


def real_run_section(run: measured.ScalerHistory, real: Sequence[measured.ScaleStep] | None) -> None:
    """The same run by torch's own GradScaler, in the lab's worker: a button, then whether it matches."""
    with st.expander(page.t("real_title"), icon=":material/science:", expanded=real is not None):
        st.markdown(
            page.t(
                "real_intro",
                interval=page.num(SPIKES.growth_interval),
                steps=_steps_text(page, list(run.skipped_steps)),
            )
        )
        job = st.session_state.get(REAL_JOB)
        if not live_view.torch_available():
            st.info(live_view.torch_missing_text(page))
        elif st.button(
            page.t("real_run"), key="loss_scaling.real_run", icon=":material/play_arrow:", disabled=job is not None
        ):
            # The run happens in the lab's worker process: this page never imports torch.
            job = st.session_state[REAL_JOB] = jobs.submit(
                "trace",
                steps=len(run.steps),
                init_scale=TORCH_INIT_SCALE,
                growth_interval=SPIKES.growth_interval,
                spike_steps=run.skipped_steps,
                spike_factor=REAL_SPIKE_FACTOR,
            )
        if job is not None:
            ok, result = jobs.settle(page, job, REAL_JOB, "loss_scaling.real_cancel", page.t("real_running"))
            if ok:
                st.session_state[REAL_RUN] = result
                st.rerun()  # the run's chart, above, gains the real line
        if real is not None:
            same = measured.history_of(real).log2_scales == run.log2_scales
            real_overflows = [s.step for s in real if s.found_inf]
            key = "real_match" if same else "real_differs"
            st.markdown(page.t(key, steps=_steps_text(page, real_overflows)))


def frame(view: LossScalingView, count_top: float) -> scrub.Frame:
    """What the component shows at one stop of S: the scaled histogram (the extra formats' ranges under it) and the
    cards, which all follow S."""
    pct = i18n.percents(view.shares, page.lang)  # parts of one whole, as step 2's cards
    chart = scrub.Chart(
        zone_charts.fp16_histogram(page, view.histogram, count_top, aligned=bool(view.extra)),
        page.t("figure_title"),
        " ".join([page.t("caption"), page.t("common.illustration")]),
        alt=page.t("alt", s=power_of_two(view.k), zero=pct["zero"], over=pct["overflow"]),
        compact_height=COMPACT_CHART_PX,
    )
    blocks: list[scrub.Block] = [chart]
    if view.extra:
        strip = zone_charts.format_strip(page, [limits_of("fp16"), *(e.on_sample.limits for e in view.extra)])
        blocks.append(scrub.Chart(strip, page.t("views.strip_title"), alt=page.t("views.strip_alt")))
    blocks.append(
        scrub.Cards(
            (
                (page.t("metric_zero"), pct["zero"]),
                (page.t("fp16_range.metric_subnormal"), pct["subnormal"]),
                (page.t("metric_overflow"), pct["overflow"]),
                (page.t("views.loss_scaling_largest"), page.sci(view.largest_scaled)),
            )
        )
    )
    return tuple(blocks)


def frames(also: tuple[str, ...]) -> scrub.Build:
    """The frames of the loss-scale slider's stops, on one counts axis."""

    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        views = [loss_scaling_view(int(state["scale"]), also) for state in states]
        top = figures.count_axis_top([v.histogram for v in views])
        return [frame(v, top) for v in views]

    return build


def run_chart(run: measured.ScalerHistory) -> None:
    """The illustrative dynamic run (with a real GradScaler's over it once run), its two cards, the real run."""
    real = st.session_state.get(REAL_RUN)
    display.chart(
        run_figure(page.lang, None if real is None else tuple(s.scale for s in real)),
        page.t("run_title"),
        alt=page.t(
            "run_alt",
            n=page.num(len(run.steps)),
            start=power_of_two(run.first_k),
            interval=page.num(SPIKES.growth_interval),
            skipped=page.num(len(run.skipped_steps)),
            end=power_of_two(run.last_k),
        ),
    )
    display.metric_row(
        [
            (page.t("metric_run_start"), power_of_two(run.first_k)),
            (page.t("metric_run_skipped"), page.num(len(run.skipped_steps))),
        ]
    )
    real_run_section(run, real)


def illustration(picture: DeltaGenerator, also: str) -> None:
    """The seed's illustration: step 2's sample times S, and an illustrative dynamic run (with a real one)."""
    keys = format_table.also_keys(also)
    control = widgets.declared(page, "scale", NumberControl)
    scale_slider = scrub.Slider(control, page.t("scale"), lambda v: power_of_two(int(v)), page.t("scale_help"))
    with picture:
        # Play animates the dynamic run further down, which does not follow S: the words say where it starts.
        try_this = page.t("try", top=power_of_two(int(control.hi)), start=power_of_two(illustrative_run().first_k))
        k = int(scrub.scrub(page, [scale_slider], frames(keys), keys, try_this)["scale"])
    layout.after_controls(page)
    view = loss_scaling_view(k, keys)
    run = view.run
    pct = i18n.percents(view.shares, page.lang)  # as the cards write them
    values = {"s": power_of_two(k), "zero": pct["zero"], "sub": pct["subnormal"], "over": pct["overflow"]}
    sentences = [
        page.t(REGIME_KEYS[view.regime], **values),
        page.t(
            "explain_run",
            start=power_of_two(run.first_k),
            first=page.t("first_overflow" if run.skipped[0] else "first_clean"),
            interval=page.num(SPIKES.growth_interval),
            skipped=page.num(len(run.skipped_steps)),
        ),
    ]
    layout.explain(page, " ".join(sentences), None)  # the scrub shows Try this
    run_chart(run)
    if also != "none":
        also_formats(view, also)


def also_formats(view: LossScalingView, also: str) -> None:
    """The narrower formats beside FP16: each at its own per-tensor scale, and what that scale keeps."""
    extra = format_table.also_keys(also)
    scale_exps = {e.key: e.scale_exp for e in view.extra}
    st.subheader(format_table.also_title(page, also))
    if format_table.shows(also, "fp8"):
        st.markdown(
            page.t(
                "fp8_explain",
                amax=page.sci(view.amax),
                e4m3_scale=power_of_two(scale_exps["fp8_e4m3"]),
                e5m2_scale=power_of_two(scale_exps["fp8_e5m2"]),
            )
        )
    if format_table.shows(also, "narrow") and view.fp4_at_scale is not None:
        st.markdown(
            page.t(
                "also.explain_loss_scaling",
                e2m1_scale=power_of_two(scale_exps[FP4]),
                e2m1_zero=page.pct(view.fp4_at_scale["zero"]),
            )
        )
    rows = [
        *format_table.format_rows(page, view.sample, ("fp16",), {"fp16": view.k}),
        *format_table.format_rows(page, view.sample, extra),
        *format_table.format_rows(page, view.sample, extra, scale_exps),
    ]
    st.dataframe(rows, hide_index=True)


def lesson() -> None:
    """The controls and what they change; a recorded run replaces the illustration."""
    recorded_run.illustration_or_run(page, illustration, show_measured)


def end_of_step() -> None:
    """Notes, questions and footer: the same under the illustration and under a recorded run."""
    notes = page.t(
        "notes",
        interval=page.num(SPIKES.growth_interval),
        typical=page.sci(SPIKES.typical_max),
        spike_pct=page.pct(SPIKES.spike_probability),
    )
    layout.step_end(page, notes, [page.t("refs.micikevicius2017"), page.t("refs.torch_amp")])


page = setup("loss_scaling")
layout.step_header(page)
layout.lesson(page, lesson)
end_of_step()
