"""Live lab: FP32, FP16 + GradScaler and BF16 autocast trained on this machine, and a real scaler provoked."""

from collections.abc import Sequence

import streamlit as st

from lensa.models.scaling import scale_from_exp
from lensa.runstats.measured import ScalerHistory, history_of
from lensa.ui import display, figures, jobs, layout, live_view, recorded_run, widgets
from lensa.ui.frame import setup
from lensa.ui.i18n import power_of_two
from lensa.ui.jobs import Job

JOB = "lab.job"
RECIPES_JOB = "lab.recipes_job"
TRACE = "lab.trace"
TRACE_JOB = "lab.trace_job"

page = setup("lab")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")

if not live_view.torch_available():
    layout.after_controls(page)
    st.error(live_view.torch_missing_text(page), icon=":material/error:")
    st.stop()

from lensa import live  # noqa: E402  (settings and tables only: the runs themselves happen in the worker process)


def scale_chart(history: ScalerHistory, line: str, overlay: tuple[str, Sequence[float]] | None = None) -> object:
    """A loss scale's history, not animated, its line called ``line``; ``overlay`` (name, log2 scales) over it."""
    labels = figures.RunLabels(
        axis_step=page.t("step_axis"),
        axis_scale="log2 S",
        clean=line,
        skipped=page.t("loss_scaling.run_skipped"),
        hover_clean=page.t("loss_scaling.run_hover"),
        hover_skipped=page.t("loss_scaling.run_hover_skipped"),
    )
    return figures.scaler_run(
        history.steps, history.log2_scales, history.skipped, labels, animate=False, overlay=overlay, lang=page.lang
    )


st.markdown(page.t("intro"))

# Containers in reading order, filled below in the order the work needs: every control is read
# before the navigation is drawn, so its links carry this page's values even during a run.
settings_area, run_area, results_area = st.container(), st.container(), st.container()
st.divider()
recipes_area, recipes_results_area = st.container(), st.container()
st.divider()
trace_area, trace_result_area = st.container(), st.container()

RUN_FIELDS = {"width": "width", "batch": "batch_size", "steps": "steps"}
"""The lab's controls whose defaults the calibration chooses, with their RunConfig field."""

with settings_area:
    st.subheader(page.t("settings_title"))
    device = widgets.choice(page, "device", page.t("device"), lambda v: page.t(f"device_{v}"))
    # This machine, as the worker sees it, and its clock: the worker times each arm once when it starts.
    info = clock = kind = None
    device_error: Exception | None = None
    try:
        info, clock = jobs.ready(page, device)
        kind = info.device
    except live.LiveError as exc:
        device_error = exc
    chosen = None
    if clock is not None:
        chosen = live.defaults_for(clock)
        # The calibrated defaults go where the page's own would be, into the URL (so the sliders read them as a
        # link's): only when the URL names none of the run's size, so a link's or the learner's settings win.
        if not any(name in st.query_params for name in (*RUN_FIELDS, "depth")):
            for name, field in RUN_FIELDS.items():
                if getattr(chosen, field) != getattr(live.RunConfig(), field):
                    st.query_params[name] = str(getattr(chosen, field))
    left, right = st.columns(2)
    with left:
        width = int(widgets.slider(page, "width", page.t("width"), page.num))
        depth = int(widgets.slider(page, "depth", page.t("depth"), page.num))
        lr = widgets.slider(page, "lr", page.t("lr"), page.sci)
    with right:
        batch = int(widgets.slider(page, "batch", page.t("batch"), page.num))
        steps = int(widgets.slider(page, "steps", page.t("steps"), page.num))
with trace_area:
    st.subheader(page.t("trace_title"))
    st.markdown(page.t("trace_intro"))
    col_a, col_b = st.columns(2)
    with col_a:
        trace_k = int(widgets.slider(page, "trace_k", page.t("trace_k"), lambda v: power_of_two(int(v))))
        spike_step = int(
            widgets.slider(
                page, "trace_spike", page.t("trace_spike"), lambda v: page.num(v) if v else page.t("trace_none")
            )
        )
    with col_b:
        spike_factor = widgets.slider(page, "trace_factor", page.t("trace_factor"), page.sci)
        growth = int(widgets.slider(page, "trace_growth", page.t("trace_growth"), page.num))
    trace_clicked = st.button(page.t("trace_run"), key="lab.trace_run", icon=":material/science:")
with recipes_area:
    st.subheader(page.t("recipes_title"))
    st.markdown(page.t("recipes_intro"))
    group = widgets.choice(page, "recipes", page.t("recipes_group"), lambda v: page.t(f"recipes_group_{v}"))
    recipes_job: Job | None = st.session_state.get(RECIPES_JOB)
    with recipes_results_area:
        recipes_summary_area, recipes_layers_area = st.container(), st.container()
layout.after_controls(page)

with settings_area:
    if device_error is not None:
        st.error(live_view.error_text(page, device_error), icon=":material/memory:")
        if getattr(device_error, "kind", None) == "not_ready":
            st.button(page.t("live.try_again"), key="lab.try_again", icon=":material/refresh:")

    if info is not None:
        st.markdown(f"{page.t('live.this_machine')}: {live_view.device_line(page, info)}")
        if info.device == "cpu":
            key = live_view.cpu_bf16_key(info)
            if key is not None:
                st.caption(page.t(key))

    # Always recorded, for the lesson's measured data: a dozen steps, costed in the estimate and kept off the clock.
    config = live.RunConfig(width=width, depth=depth, batch_size=batch, steps=steps, lr=lr, device=device, record=True)
    problem = None
    if kind is not None and clock is not None:
        base = live.RunConfig()
        if chosen is not None and any(getattr(chosen, f) != getattr(base, f) for f in RUN_FIELDS.values()):
            st.caption(
                page.t(
                    "defaults_chosen",
                    width=page.num(chosen.width),
                    batch=page.num(chosen.batch_size),
                    steps=page.num(chosen.steps),
                    target=page.seconds(live.DEFAULT_RUN_SECONDS),
                    seconds=page.seconds(chosen.estimate_seconds(kind, clock=clock)),
                )
            )
        estimate = config.estimate_seconds(kind, clock=clock)
        limit = live.MAX_RUN_SECONDS[kind]
        st.caption(
            page.t(
                "estimate",
                params=page.num(config.parameters()),
                seconds=page.seconds(estimate),
                device=kind.upper(),
                cal=page.seconds(clock.calibration_s),
                limit=page.seconds(limit),
            )
        )
        if estimate > limit:
            problem = page.t("too_long", seconds=f"{page.significant(estimate, 3)} s", limit=page.seconds(limit))
            st.warning(problem, icon=":material/timer:")

# --- run, stop, progress -------------------------------------------------------------------
with run_area:
    job: Job | None = st.session_state.get(JOB)
    run_col, stop_col = st.columns([3, 1])
    run_clicked = run_col.button(
        page.t("run"),
        type="primary",
        key="lab.run",
        disabled=kind is None or problem is not None or (job is not None and not job.done),
        icon=":material/play_arrow:",
    )
    stop_clicked = stop_col.button(
        page.t("stop"), key="lab.stop", disabled=job is None or job.done, icon=":material/stop:"
    )
    if stop_clicked and job is not None:
        job.cancel()  # leaves the queue, or stops the run within a step
    if run_clicked and (job is None or job.done):
        st.session_state[JOB] = jobs.submit("compare", config=config)
        st.rerun()  # draw Stop enabled: this run drew it before the job existed, and would keep it so while waiting

    if job is not None and not job.done:
        jobs.follow(page, job, lambda j: page.t("running_pct", pct=page.pct(j.fraction)))
        st.rerun()  # draw Stop disabled and the finished run: this run drew Stop while the job ran

# --- results ---------------------------------------------------------------------------------------
with results_area:
    if job is not None and job.done:
        if job.error is not None:
            st.error(live_view.error_text(page, job.error), icon=":material/error:")
        recordings_kept = recorded_run.keep_lab_recordings(job)
        comparison = job.result
        if comparison is not None and comparison.arms:
            st.subheader(page.t("results_title"))
            if comparison.cancelled:
                st.warning(page.t("cancelled"), icon=":material/stop_circle:")
            arms = comparison.arms
            bf16_speed = live.speedup(comparison, "bf16")
            fp16_speed = live.speedup(comparison, "fp16")
            cards = []
            if bf16_speed is not None:
                cards.append((page.t("metric_speedup_bf16"), page.ratio(bf16_speed)))
            if fp16_speed is not None:
                cards.append((page.t("metric_speedup_fp16"), page.ratio(fp16_speed)))
            gap = live.loss_gap(comparison, "bf16")
            if gap is not None:
                cards.append((page.t("metric_loss_gap"), page.num(gap, 4)))
            if "fp16" in arms:
                cards.append((page.t("metric_skipped"), page.num(arms["fp16"].skipped_steps)))
            if cards:
                display.metric_row(cards)
            st.dataframe(live_view.comparison_table(page, comparison), hide_index=True, width="stretch")
            if bf16_speed is not None:
                key = "explain_fast" if live.clearly_faster(comparison, "bf16") else "explain_slow"
                gap = live.loss_gap(comparison, "bf16", magnitude=True)
                st.markdown(page.t(key, speedup=page.ratio(bf16_speed), gap=page.num(gap, 4)))
            dtypes = {a: (r.layer_output_dtypes[0] if r.layer_output_dtypes else "?") for a, r in arms.items()}
            loss_dtype = next(iter(arms.values())).loss_dtype
            st.markdown(
                page.t(
                    "dtypes",
                    fp32=dtypes.get("fp32", "—"),
                    fp16=dtypes.get("fp16", "—"),
                    bf16=dtypes.get("bf16", "—"),
                    loss=loss_dtype,
                )
            )
            for note in live_view.emulation_notes(page, comparison, clock):
                st.info(note, icon=":material/speed:")
            st.caption(page.t("noisy"))
            first = next(iter(arms.values()))
            if first.recorded_steps and first.timed_steps < comparison.config.steps:
                n_recorded, n_steps = len(first.recorded_steps), comparison.config.steps
                st.caption(page.t("recorded_note", n=page.num(n_recorded), steps=page.num(n_steps)))
            st.markdown(f"**{page.t('memory_title')}**")
            st.dataframe(live_view.memory_table(page, comparison), hide_index=True, width="stretch")
            st.caption(page.t("memory_caption"))
            display.chart(
                figures.loss_curves(
                    [(a, page.t(f"lab.arm_{a}"), r.losses) for a, r in arms.items()],
                    page.t("step_axis"),
                    page.t("loss_axis"),
                    page.lang,
                ),
                page.t("loss_title"),
            )
            if "fp16" in arms:
                fp16 = live.arm_scale_history(arms["fp16"])
                display.chart(scale_chart(fp16, page.t("arm_fp16")), page.t("scale_title"))
            st.download_button(
                page.t("download"),
                live.rows_to_csv(live.comparison_rows(comparison)),
                file_name="lensa-live-comparison.csv",
                mime="text/csv",
                icon=":material/download:",
            )
            recordings = comparison.recordings()
            if not recordings_kept:
                st.info(page.t("limits.recordings_busy"), icon=":material/hourglass_top:")
            if recordings and st.button(
                page.t("show_in_lesson"),
                key="lab.show_in_lesson",
                help=page.t("show_in_lesson_help"),
                icon=":material/school:",
            ):
                recorded_run.show_lab_run(page.lang, recordings)

# --- a real GradScaler, provoked ---------------------------------------------------------------------
with trace_result_area:
    pending = st.session_state.get(TRACE_JOB)
    if trace_clicked and pending is None:
        kwargs = {"init_scale": scale_from_exp(trace_k), "growth_interval": growth}
        job = jobs.submit(
            "trace",
            steps=24,
            spike_steps=(spike_step,) if spike_step else (),
            spike_factor=float(spike_factor),
            device=device,
            **kwargs,
        )
        pending = st.session_state[TRACE_JOB] = (job, kwargs)
    if pending is not None:
        trace_job, kwargs = pending
        ok, trace = jobs.settle(page, trace_job, TRACE_JOB, "lab.trace_cancel", page.t("running"))
        if ok:
            st.session_state[TRACE] = (trace, kwargs["init_scale"], kwargs["growth_interval"])
    if TRACE in st.session_state:
        trace, init_scale, interval = st.session_state[TRACE]
        predicted, differs = live_view.trace_against_prediction(trace, init_scale, interval)
        real = history_of(trace)
        overlay = (page.t("trace_predicted"), history_of(predicted).log2_scales)
        display.chart(scale_chart(real, page.t("trace_real"), overlay), page.t("trace_chart"))
        skipped = len(real.skipped_steps)
        if differs is None:
            st.success(
                page.t("trace_match", n=page.num(len(trace)), skipped=page.num(skipped)), icon=":material/check:"
            )
        else:
            st.warning(page.t("trace_mismatch", step=page.num(differs)), icon=":material/warning:")

# --- the recipes below 16 bits ----------------------------------------------------------------------------------
with recipes_area:
    recipe_arms = live_view.RECIPE_GROUPS[group]
    recipes_config = None
    if kind is not None and clock is not None:
        recipes_config = live.recipes_defaults_for(clock, live.RunConfig(device=device))
        st.caption(
            page.t(
                "recipes_estimate",
                n=page.num(len(recipe_arms)),
                width=page.num(recipes_config.width),
                batch=page.num(recipes_config.batch_size),
                steps=page.num(recipes_config.steps),
                seconds=page.seconds(recipes_config.estimate_seconds(kind, recipe_arms, clock)),
                device=kind.upper(),
            )
        )
    go_col, halt_col = st.columns([3, 1])
    busy = recipes_job is not None and not recipes_job.done
    recipes_clicked = go_col.button(
        page.t("recipes_run"),
        type="primary",
        key="lab.recipes_run",
        disabled=recipes_config is None or busy,
        icon=":material/play_arrow:",
    )
    if halt_col.button(page.t("stop"), key="lab.recipes_stop", disabled=not busy, icon=":material/stop:"):
        assert recipes_job is not None
        recipes_job.cancel()
    if recipes_clicked and recipes_config is not None and not busy:
        st.session_state[RECIPES_JOB] = jobs.submit("compare", config=recipes_config, arms=recipe_arms)
        st.rerun()
    if recipes_job is not None and not recipes_job.done:
        jobs.follow(page, recipes_job, lambda j: page.t("running_pct", pct=page.pct(j.fraction)))
        st.rerun()  # draw the finished run with its controls

with recipes_summary_area:
    if recipes_job is not None and recipes_job.done:
        if recipes_job.error is not None:
            st.error(live_view.error_text(page, recipes_job.error), icon=":material/error:")
        compared = recipes_job.result
        if compared is not None and compared.arms:
            if compared.cancelled:
                st.warning(page.t("cancelled"), icon=":material/stop_circle:")
            verdict = live.recipes_verdict(compared)
            lowp_arms = list(verdict.arms)
            cards = [
                (
                    page.t("recipes_metric_close", within=page.pct(live.CLOSE_TO_BF16)),
                    f"{page.num(len(verdict.close))} / {page.num(len(verdict.arms))}",
                ),
                (page.t("recipes_metric_diverged"), page.num(len(verdict.diverged))),
            ]
            if verdict.worst is not None:
                cards.append(
                    (
                        page.t("recipes_metric_worst", arm=page.t(f"lab.arm_{verdict.worst}")),
                        f"{page.num(verdict.worst_gap_pct, 1)} %",
                    )
                )
            display.metric_row(cards)
            st.dataframe(live_view.recipe_table(page, compared), hide_index=True, width="stretch")
            st.caption(page.t("recipes_table_caption", n=page.num(len(compared.config.counted_steps()))))
            references = [
                (a, page.t(f"lab.arm_{a}"), compared.arms[a].losses) for a in ("fp32", "bf16") if a in compared.arms
            ]
            panels = [(live_view.arm_colour_key(a), page.t(f"lab.arm_{a}"), compared.arms[a].losses) for a in lowp_arms]
            if panels:
                display.chart(
                    figures.loss_facets(panels, references, page.t("step_axis"), page.t("loss_axis"), page.lang),
                    page.t("recipes_chart_title"),
                    page.t("recipes_chart_caption"),
                )
            if lowp_arms:
                with recipes_layers_area:
                    # Not a link's setting: the run lives in this session only.
                    default = "nvfp4_recipe" if "nvfp4_recipe" in lowp_arms else lowp_arms[0]
                    layers_of = st.selectbox(
                        page.t("recipes_layers_of"),
                        lowp_arms,
                        index=lowp_arms.index(default),
                        format_func=lambda v: page.t(f"lab.arm_{v}"),
                        key="lab.recipe_layers",
                    )
                    st.markdown(f"**{page.t('recipes_layers_title', arm=page.t(f'lab.arm_{layers_of}'))}**")
                    st.dataframe(
                        live_view.layer_table(page, compared.arms[layers_of]), hide_index=True, width="stretch"
                    )
                    st.caption(
                        page.t("recipes_layers_caption", n=page.num(len(compared.arms[layers_of].counted_steps)))
                    )
    with recipes_layers_area:
        if recipes_job is not None and recipes_job.done and recipes_job.result is not None and recipes_job.result.arms:
            compared = recipes_job.result
            st.info(page.t("recipes_emulated"), icon=":material/memory:")
            st.download_button(
                page.t("download"),
                live.rows_to_csv(live.recipe_rows(compared)),
                file_name="lensa-live-recipes.csv",
                mime="text/csv",
                icon=":material/download:",
                key="lab.recipes_download",
            )
