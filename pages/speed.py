"""Step 6 · Why it is faster: tensor cores, memory, and FP8."""

import streamlit as st

from lensa.memory import SEVEN_B, training_memory
from lensa.speed import DEFAULT_GPU, DEFAULT_MFU, GPUS, step_time_s
from lensa.ui import figures, live_view, widgets
from lensa.ui.frame import setup

GPU_GB = 80
MEASURED = "speed.measured"
MODES = (  # (peak key, label key, colour, pattern, memory precision)
    ("fp32", "bar_fp32", figures.FORMAT_COLOURS["fp32"], "", "fp32"),
    ("tf32", "bar_tf32", figures.FORMAT_COLOURS["fp32"], figures.TENSOR_CORE_PATTERN, "fp32"),
    ("bf16", "bar_bf16", figures.FORMAT_COLOURS["bf16"], "", "mixed"),
)

page = setup("speed")
widgets.step_header(page)
tokens = int(widgets.slider(page, "tokens", page.t("tokens"), page.num, help=page.t("tokens_help")))
widgets.after_controls(page)

gpu = GPUS[DEFAULT_GPU]
names = [page.t(label) for _, label, _, _, _ in MODES]
times = [step_time_s(SEVEN_B.params, tokens, gpu.peak(mode), DEFAULT_MFU) for mode, *_ in MODES]
memories = [training_memory(SEVEN_B, tokens, precision) for *_, precision in MODES]

widgets.chart(
    figures.labelled_bars(
        names,
        times,
        [c for _, _, c, _, _ in MODES],
        [page.sec(t) for t in times],
        axis_title=page.t("axis_time"),
        patterns=[p for _, _, _, p, _ in MODES],
        hovers=[
            page.t("hover_time", mode=n, time=page.sec(t), peak=page.sig(gpu.peak(m) / 1e12, 3))
            for n, t, (m, *_) in zip(names, times, MODES, strict=True)
        ],
        lang=page.lang,
    ),
    page.t("time_title"),
    page.t("time_subtitle", mfu=page.pct(DEFAULT_MFU)),
)
widgets.chart(
    figures.labelled_bars(
        names,
        [m.total / 1e9 for m in memories],
        [c for _, _, c, _, _ in MODES],
        [page.gb(m.total) for m in memories],
        axis_title=page.t("axis_memory"),
        patterns=[p for _, _, _, p, _ in MODES],
        hovers=[
            page.t(
                "hover_memory",
                mode=n,
                states=page.gb(m.model_states),
                act=page.gb(m.activations),
                total=page.gb(m.total),
            )
            for n, m in zip(names, memories, strict=True)
        ],
        line=(GPU_GB, page.t("gpu_line")),
        x_max=max(200.0, max(m.total for m in memories) / 1e9 * 1.2),
        lang=page.lang,
    ),
    page.t("memory_title"),
)

fp32_time, bf16_time = times[0], times[2]
widgets.metric_row(
    [
        (page.t("metric_fp32"), page.sec(fp32_time)),
        (page.t("metric_bf16"), page.sec(bf16_time)),
        (page.t("metric_speedup"), page.ratio(fp32_time / bf16_time)),
        (page.t("metric_memory"), page.gb(memories[2].total)),
    ]
)
paragraph = page.t(
    "explain",
    tokens=page.num(tokens),
    bf16=page.sec(bf16_time),
    fp32=page.sec(fp32_time),
    speedup=page.ratio(fp32_time / bf16_time),
    act32=page.gb(memories[0].activations),
    act16=page.gb(memories[2].activations),
) + page.t("fp8_line")
widgets.explain(page, paragraph, page.t("try"))

with st.expander(page.t("measure_title"), icon=":material/speed:", expanded=MEASURED in st.session_state):
    st.markdown(page.t("measure_intro"))
    if not live_view.torch_available():
        st.info(page.t("live.torch_missing"))
    elif st.button(page.t("measure_run"), key="speed.measure", icon=":material/play_arrow:"):
        from lensa import live  # torch only now, when the learner asked for a measurement

        try:
            with st.spinner(page.t("measure_running")):
                st.session_state[MEASURED] = (live.device_info(), live.matmul_benchmark())
        except live.LiveError as exc:
            st.error(live_view.error_text(page, exc), icon=":material/error:")
    if MEASURED in st.session_state:
        info, rows = st.session_state[MEASURED]
        st.markdown(f"{page.t('live.this_machine')}: {live_view.device_line(page, info)}")
        st.dataframe(live_view.benchmark_table(page, rows, gpu), hide_index=True, width="stretch")
        measured = {r["mode"]: r["tflops"] for r in rows if r["tflops"]}
        if "fp32" in measured and "bf16" in measured:
            st.markdown(
                page.t(
                    "measure_ratio",
                    n=page.num(rows[0]["size"]),
                    ratio=page.ratio(measured["bf16"] / measured["fp32"]),
                    datasheet=page.ratio(gpu.peak("bf16") / gpu.peak("fp32")),
                )
            )
        st.caption(page.t("lab.noisy"))
widgets.notes(page, page.t("notes"), [page.t("refs.kaplan"), page.t("refs.a100"), page.t("refs.fp8")])
widgets.check_yourself(page, 2)
widgets.step_footer(page)
