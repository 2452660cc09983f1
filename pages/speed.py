"""Step 6 · Why it is faster: tensor cores, memory, and FP8."""

from collections.abc import Sequence

import streamlit as st

from lensa.lessons.speed import Hardware, SpeedView, memory_axis_top_gb, speed_view, time_axis_top_s
from lensa.live import LiveError
from lensa.models.speed import GPUS, Gpu, mixed_precision_mode
from lensa.ui import figures, jobs, layout, live_view, widgets
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
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


def hardware_controls() -> Hardware:
    """The chip, utilisation, token budget and cluster, in an expander under the picture (open when a link sets
    any of them)."""
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
    return Hardware(gpu_key, mfu, budget, cluster)


def time_chart(view: SpeedView, axis_top: float) -> scrub.Chart:
    """Seconds a step takes in each of the chip's modes, on one axis for every stop of the tokens slider."""
    gpu, timing, mfu = view.gpu_spec, view.timing, view.hardware.mfu
    modes, times = timing.modes, timing.seconds
    names = [page.t(f"bar_{m}") for m in modes]
    return scrub.Chart(
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
            axis_top_s=axis_top,
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


def memory_chart(view: SpeedView, axis_top: float) -> scrub.Chart:
    """Training memory in each mode whose memory is modelled, against the chip's own memory, on one axis."""
    gpu, memories = view.gpu_spec, view.memories
    names = {m: page.t(f"bar_{m}") for m in memories}
    return scrub.Chart(
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
            axis_top_gb=axis_top,
        ),
        page.t("memory_title"),
        alt=page.t(
            "memory_alt",
            bars="; ".join(f"{names[m]} {page.gb(b.total)}" for m, b in memories.items()),
            gpu=gpu.name,
            gb=page.num(gpu.memory_gb),
        ),
    )


def frame(view: SpeedView, time_top: float, memory_top: float) -> scrub.Frame:
    """What the component shows at one stop of the tokens slider: times, the cards, memory, throughput and days."""
    label, budget, cluster = view.mixed.upper(), view.hardware.budget, view.hardware.cluster
    cards = scrub.Cards(
        (
            (page.t("metric_fp32"), page.seconds(view.fp32_s)),
            (page.t("metric_mixed", mode=label), page.seconds(view.mixed_s)),
            (page.t("metric_speedup"), page.ratio(view.speedup)),
            (page.t("metric_memory", mode=label), page.gb(view.memories[view.mixed].total)),
        )
    )
    more = scrub.Cards(
        (
            (
                page.t("metric_throughput", mode=view.fastest.upper()),
                page.t("per_second", n=page.num(view.tokens_per_s)),
            ),
            (
                page.t("metric_days", budget=compact(budget, page.lang), gpus=page.num(cluster)),
                page.t("days", n=page.significant(view.days, 3)),
            ),
        )
    )
    return (time_chart(view, time_top), cards, memory_chart(view, memory_top), more)


def frames(hardware: Hardware) -> scrub.Build:
    """The frames of the tokens slider's stops, on one time axis and one memory axis: the bars grow with the
    tokens (FP32's sixteen times as fast as BF16's), instead of keeping their proportions while the axis moves."""

    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        views = [speed_view(hardware, int(state["tokens"])) for state in states]
        time_top, memory_top = time_axis_top_s(views), memory_axis_top_gb(views)
        return [frame(v, time_top, memory_top) for v in views]

    return build


def explanation(view: SpeedView) -> str:
    """The paragraph under the picture: the step times, the activations, FP8 and the days to train."""
    timing, label = view.timing, view.mixed.upper()
    sentences = [
        page.t(
            "explain",
            tokens=page.num(view.tokens),
            mode=label,
            mixed=page.seconds(view.mixed_s),
            fp32=page.seconds(view.fp32_s),
            speedup=page.ratio(view.speedup),
            act32=page.gb(view.memories["fp32"].activations),
            act16=page.gb(view.memories[view.mixed].activations),
        )
    ]
    if view.has_fp8:
        sentences.append(
            " " + page.t("fp8_here", fp8=page.seconds(timing.of("fp8")), ratio=page.ratio(timing.speedup("fp8")))
        )
    else:
        sentences.append(page.t("fp8_line"))
    sentences.append(
        " "
        + page.t(
            "explain_budget",
            budget=compact(view.hardware.budget, page.lang),
            gpus=page.num(view.hardware.cluster),
            days=page.significant(view.days, 3),
            mode=view.fastest.upper(),
            gpu_days=page.num(view.gpu_days),
        )
    )
    return "".join(sentences)


def lesson() -> None:
    """The tokens slider with the times, cards and memory; the hardware under them; a measurement on this machine."""
    picture = st.container()
    hardware = hardware_controls()
    tokens_slider = scrub.Slider(
        widgets.declared(page, "tokens", NumberControl), page.t("tokens"), page.num, page.t("tokens_help")
    )
    with picture:
        tokens = int(scrub.scrub(page, [tokens_slider], frames(hardware), hardware, page.t("try"))["tokens"])
    layout.after_controls(page)
    view = speed_view(hardware, tokens)
    layout.explain(page, explanation(view), None)  # the scrub shows Try this
    measurement(view.gpu_spec, mixed_precision_mode(view.gpu_spec))


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
            ratio_text = live_view.matmul_ratio_text(page, rows, mixed, gpu)
            if ratio_text is not None:
                st.markdown(ratio_text)
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
