"""Step 6 · Why it is faster: tensor cores, memory, and FP8."""

import streamlit as st

from lensa.live import LiveError
from lensa.memory import SEVEN_B, MemoryBreakdown
from lensa.speed import (
    GPUS,
    Gpu,
    StepTimes,
    days_to_train,
    gpu_days_to_train,
    measured_speedup,
    mixed_precision_mode,
    peak_speedup,
    step_memories,
    step_times,
    tokens_per_second,
)
from lensa.ui import display, figures, jobs, layout, live_view, widgets
from lensa.ui.frame import setup
from lensa.ui.i18n import compact, teraflops

MEASURED = "speed.measured"
MEASURING = "speed.measuring"
MODE_STYLE = {  # peak key: (colour, pattern)
    "fp32": (figures.FORMAT_COLOURS["fp32"], ""),
    "tf32": (figures.FORMAT_COLOURS["fp32"], figures.TENSOR_CORE_PATTERN),
    "bf16": (figures.FORMAT_COLOURS["bf16"], ""),
    "fp16": (figures.FORMAT_COLOURS["fp16"], ""),
    "fp8": (figures.FORMAT_COLOURS["fp8_e4m3"], ""),
}


Controls = tuple[int, str, float, float, int]  # tokens, GPU key, MFU, token budget, GPUs in the cluster


def controls() -> Controls:
    """The step's controls: tokens per step, and the hardware expander (GPU, MFU, budget, cluster)."""
    tokens = int(widgets.slider(page, "tokens", page.t("tokens"), page.num, help=page.t("tokens_help")))
    customised = any(k in st.query_params for k in ("gpu", "mfu", "budget", "cluster"))
    with st.expander(page.t("hardware_title"), icon=":material/memory:", expanded=customised):
        # The notes name the chosen GPU's datasheet: a change of GPU redraws the whole page.
        gpu_key = widgets.dropdown(page, "gpu", page.t("gpu"), lambda k: GPUS[k].name, whole_page=True)
        left, right = st.columns(2)
        with left:
            mfu = widgets.slider(page, "mfu", page.t("mfu"), page.pct, help=page.t("mfu_help"))
            budget = widgets.slider(page, "budget", page.t("budget"), lambda v: compact(v, page.lang))
        with right:
            cluster = int(widgets.slider(page, "cluster", page.t("cluster"), page.num))
    layout.after_controls(page)
    return tokens, gpu_key, mfu, budget, cluster


def time_chart(gpu: Gpu, timing: StepTimes, mfu: float) -> None:
    """Seconds a step takes in each of the chip's modes."""
    modes, times = timing.modes, timing.seconds
    names = [page.t(f"bar_{m}") for m in modes]
    display.chart(
        figures.step_time_bars(
            names,
            times,
            [MODE_STYLE[m][0] for m in modes],
            [page.seconds(t) for t in times],
            axis_title=page.t("axis_time"),
            patterns=[MODE_STYLE[m][1] for m in modes],
            hovers=[
                page.t("hover_time", mode=n, time=page.seconds(t), peak=teraflops(gpu.peak(m), page.lang))
                for n, t, m in zip(names, times, modes, strict=True)
            ],
            lang=page.lang,
        ),
        page.t("time_title", gpu=gpu.name),
        page.t("time_subtitle", mfu=page.pct(mfu)),
        alt=page.t(
            "time_alt",
            gpu=gpu.name,
            mfu=page.pct(mfu),
            bars="; ".join(f"{n} {page.seconds(t)}" for n, t in zip(names, times, strict=True)),
        ),
    )


def memory_chart(gpu: Gpu, memories: dict[str, MemoryBreakdown]) -> None:
    """Training memory in each mode whose memory is modelled, against the chip's own memory."""
    names = {m: page.t(f"bar_{m}") for m in memories}
    display.chart(
        figures.memory_total_bars(
            list(names.values()),
            [b.total for b in memories.values()],
            [MODE_STYLE[m][0] for m in memories],
            [page.gb(b.total) for b in memories.values()],
            axis_title=page.t("axis_memory"),
            patterns=[MODE_STYLE[m][1] for m in memories],
            hovers=[
                page.t(
                    "hover_memory",
                    mode=names[m],
                    states=page.gb(b.model_states),
                    act=page.gb(b.activations),
                    total=page.gb(b.total),
                )
                for m, b in memories.items()
            ],
            gpu_line=(gpu.memory_gb, page.t("gpu_line", gb=page.num(gpu.memory_gb))),
            lang=page.lang,
        ),
        page.t("memory_title"),
        alt=page.t(
            "memory_alt",
            bars="; ".join(f"{names[m]} {page.gb(b.total)}" for m, b in memories.items()),
            gpu=gpu.name,
            gb=page.num(gpu.memory_gb),
        ),
    )


def lesson() -> None:
    """The controls and what they change: step times, memory, throughput, and a measurement on this machine."""
    tokens, gpu_key, mfu, budget, cluster = controls()
    gpu = GPUS[gpu_key]
    mixed = mixed_precision_mode(gpu)  # BF16 where the chip has it, FP16 on the V100 and T4
    timing = step_times(gpu, SEVEN_B.params, tokens, mfu)
    memories = step_memories(timing.modes, SEVEN_B, tokens)

    charts = display.figure_area()  # the two figures above the cards, sent after them
    fp32_time, mixed_time = timing.of("fp32"), timing.of(mixed)
    label = mixed.upper()
    display.metric_row(
        [
            (page.t("metric_fp32"), page.seconds(fp32_time)),
            (page.t("metric_mixed", mode=label), page.seconds(mixed_time)),
            (page.t("metric_speedup"), page.ratio(timing.speedup(mixed))),
            (page.t("metric_memory", mode=label), page.gb(memories[mixed].total)),
        ]
    )
    fastest = timing.fastest
    rate = tokens_per_second(gpu.peak(fastest), SEVEN_B.params, mfu)
    days = days_to_train(SEVEN_B.params, budget, gpu.peak(fastest), cluster, mfu)
    display.metric_row(
        [
            (page.t("metric_throughput", mode=fastest.upper()), page.t("per_second", n=page.num(rate))),
            (
                page.t("metric_days", budget=compact(budget, page.lang), gpus=page.num(cluster)),
                page.t("days", n=page.significant(days, 3)),
            ),
        ]
    )
    with charts:
        time_chart(gpu, timing, mfu)
        memory_chart(gpu, memories)
    paragraph = page.t(
        "explain",
        tokens=page.num(tokens),
        mode=label,
        mixed=page.seconds(mixed_time),
        fp32=page.seconds(fp32_time),
        speedup=page.ratio(timing.speedup(mixed)),
        act32=page.gb(memories["fp32"].activations),
        act16=page.gb(memories[mixed].activations),
    )
    if gpu.peak("fp8") is not None:
        paragraph += " " + page.t(
            "fp8_here", fp8=page.seconds(timing.of("fp8")), ratio=page.ratio(timing.speedup("fp8"))
        )
    else:
        paragraph += page.t("fp8_line")
    paragraph += " " + page.t(
        "explain_budget",
        budget=compact(budget, page.lang),
        gpus=page.num(cluster),
        days=page.significant(days, 3),
        mode=fastest.upper(),
        gpu_days=page.num(gpu_days_to_train(SEVEN_B.params, budget, gpu.peak(fastest), mfu)),
    )
    layout.explain(page, paragraph, page.t("try"))
    measurement(gpu, mixed)


def measurement(gpu: Gpu, mixed: str) -> None:
    """A matmul benchmark on this machine, run in the lab's worker, beside the datasheet's ratio."""
    with st.expander(page.t("measure_title"), icon=":material/speed:", expanded=MEASURED in st.session_state):
        st.markdown(page.t("measure_intro"))
        if not live_view.torch_available():
            st.info(live_view.torch_missing_text(page))
        elif st.button(
            page.t("measure_run"),
            key="speed.measure",
            icon=":material/play_arrow:",
            disabled=MEASURING in st.session_state,
        ):
            # The measurement runs in the lab's worker process, queued with the lab's runs: this page never
            # imports torch.
            st.session_state[MEASURING] = jobs.submit("matmul")
        job = st.session_state.get(MEASURING)
        if job is not None:
            ok, rows = jobs.settle(page, job, MEASURING, "speed.measure_cancel", page.t("measure_running"))
            if ok:
                try:
                    st.session_state[MEASURED] = (jobs.device_info(), rows, jobs.clock())
                except LiveError as exc:
                    st.error(live_view.error_text(page, exc), icon=":material/error:")
        if MEASURED in st.session_state:
            info, rows, clock = st.session_state[MEASURED]
            st.markdown(f"{page.t('live.this_machine')}: {live_view.device_line(page, info)}")
            st.dataframe(live_view.benchmark_table(page, rows, gpu), hide_index=True, width="stretch")
            for note in live_view.matmul_emulation_notes(page, rows, clock):
                st.info(note, icon=":material/speed:")
            measured = measured_speedup(rows, mixed)
            if measured is not None:
                st.markdown(
                    page.t(
                        "measure_ratio",
                        n=page.num(rows[0]["size"]),
                        mode=mixed.upper(),
                        gpu=gpu.name,
                        ratio=page.ratio(measured),
                        datasheet=page.ratio(peak_speedup(gpu, mixed)),
                    )
                )
            st.caption(page.t("lab.noisy"))


page = setup("speed")
layout.step_header(page)
layout.lesson(page, lesson)
gpu_key = str(widgets.current(page, "gpu"))  # the lesson's choice (a change of it redraws the page)
layout.step_end(
    page,
    page.t("notes"),
    [page.t("refs.kaplan"), f"{GPUS[gpu_key].name}: {page.t(f'source_{gpu_key}')}", page.t("refs.fp8")],
)
