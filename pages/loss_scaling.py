"""Step 3 · Loss scaling: shift the gradients into range, then shift them back."""

import numpy as np
import streamlit as st

from lensa.formats import FORMATS
from lensa.gradients import gradient_sample
from lensa.scaling import SpikeModel, dynamic_run, per_tensor_scale, static_shift_shares
from lensa.ui import compare, figures, i18n, live_view, widgets
from lensa.ui.frame import setup
from lensa.ui.i18n import power_of_two

FP16 = FORMATS["fp16"]
TYPICAL = 1e-6  # the step-2 sample at its default
SPIKES = SpikeModel()
REAL_RUN = "loss_scaling.real_trace"
# A bad batch in the real run: its gradients times any scale this run reaches overflow FP16,
# while ordinary steps (|g| ~ 1e-2 at S <= 2^20) stay far below 65504.
REAL_SPIKE_FACTOR = 1e4


def _list(page, numbers: list[int]) -> str:
    return ", ".join(page.num(n) for n in numbers) if numbers else page.t("real_none")


@st.cache_data(max_entries=1)
def illustrative_run() -> tuple[list[int], list[float], list[bool]]:
    run = dynamic_run(SPIKES)
    return [s.step for s in run], [float(np.log2(s.scale)) for s in run], [s.skipped for s in run]


@st.cache_resource(max_entries=8)
def run_figure(lang: str, real: tuple[float, ...] | None):
    """The animated run (40 frames) depends only on the language and a real overlay: build it once for each."""
    steps, log2_scales, skipped = illustrative_run()
    t = lambda key: i18n.text(lang, f"loss_scaling.{key}")  # noqa: E731
    labels = figures.RunLabels(
        axis_step=t("run_axis_step"),
        axis_scale=t("run_axis_scale"),
        clean=t("run_clean"),
        skipped=t("run_skipped"),
        hover_clean=t("run_hover"),
        hover_skipped=t("run_hover_skipped"),
        play=t("play"),
        pause=t("pause"),
    )
    overlay = None if real is None else (t("real_line"), live_view.log2(real))
    return figures.scaler_run(steps, log2_scales, skipped, labels, overlay=overlay, lang=lang)


page = setup("loss_scaling")
widgets.step_header(page)
k = int(widgets.slider(page, "scale", page.t("scale"), lambda v: power_of_two(int(v)), help=page.t("scale_help")))
fp8 = widgets.toggle(page, "fp8", page.t("common.fp8_toggle"), help=page.t("common.fp8_help"))
widgets.after_controls(page)

scaled = np.ldexp(gradient_sample(TYPICAL), k)
shares = static_shift_shares(gradient_sample(TYPICAL), k)
widgets.chart(
    compare.fp16_histogram(page, scaled),
    page.t("figure_title"),
    page.t("caption"),
    alt=page.t("alt", s=power_of_two(k), zero=page.pct(shares["zero"]), over=page.pct(shares["overflow"])),
)

steps, log2_scales, skipped = illustrative_run()
real = st.session_state.get(REAL_RUN)
widgets.chart(
    run_figure(page.lang, None if real is None else tuple(s.scale for s in real)),
    page.t("run_title"),
    alt=page.t(
        "run_alt",
        n=page.num(len(steps)),
        start=power_of_two(int(log2_scales[0])),
        interval=page.num(SPIKES.growth_interval),
        skipped=page.num(sum(skipped)),
        end=power_of_two(int(log2_scales[-1])),
    ),
)
with st.expander(page.t("real_title"), icon=":material/science:", expanded=real is not None):
    overflow_steps = [n for n, s in zip(steps, skipped, strict=True) if s]
    st.markdown(page.t("real_intro", interval=page.num(SPIKES.growth_interval), steps=_list(page, overflow_steps)))
    if not live_view.torch_available():
        st.info(page.t("live.torch_missing"))
    elif st.button(page.t("real_run"), key="loss_scaling.real_run", icon=":material/play_arrow:"):
        from lensa import live  # torch only now, when the learner asked for a real run

        try:
            with st.spinner(page.t("real_running")):
                real = live.gradscaler_trace(
                    len(steps),
                    init_scale=2.0**16,
                    growth_interval=SPIKES.growth_interval,
                    spike_steps=tuple(overflow_steps),
                    spike_factor=REAL_SPIKE_FACTOR,
                )
            st.session_state[REAL_RUN] = real
            st.rerun()
        except live.LiveError as exc:
            st.error(live_view.error_text(page, exc), icon=":material/error:")
    if real is not None:
        same = [s.scale for s in real] == [2.0**y for y in log2_scales]
        real_overflows = [s.step for s in real if s.found_inf]
        key = "real_match" if same else "real_differs"
        st.markdown(page.t(key, steps=_list(page, real_overflows)))

widgets.metric_row(
    [
        (page.t("metric_zero"), page.pct(shares["zero"])),
        (page.t("metric_overflow"), page.pct(shares["overflow"])),
        (page.t("metric_run_start"), power_of_two(int(log2_scales[0]))),
        (page.t("metric_run_skipped"), page.num(sum(skipped))),
    ]
)

values = {"s": power_of_two(k), "zero": page.pct(shares["zero"]), "over": page.pct(shares["overflow"])}
if shares["overflow"] > 0:
    paragraph = page.t("explain_over", **values)
elif shares["zero"] == 0:
    paragraph = page.t("explain_fits", **values)
elif k == 0:
    paragraph = page.t("explain_none", **values)
else:
    paragraph = page.t("explain_some", **values)
paragraph += " " + page.t(
    "explain_run",
    start=power_of_two(int(log2_scales[0])),
    first=page.t("first_overflow" if skipped[0] else "first_clean"),
    interval=page.num(SPIKES.growth_interval),
    skipped=page.num(sum(skipped)),
)
widgets.explain(page, paragraph, page.t("try"))
if fp8:
    sample = gradient_sample(TYPICAL)
    scales = {key: per_tensor_scale(sample, key) for key in compare.FP8_KEYS}
    st.subheader(page.t("fp8_title"))
    st.markdown(
        page.t(
            "fp8_explain",
            amax=page.sci(float(sample.max())),
            e4m3_scale=power_of_two(int(np.log2(scales["fp8_e4m3"]))),
            e5m2_scale=power_of_two(int(np.log2(scales["fp8_e5m2"]))),
        )
    )
    rows = compare.format_rows(page, sample, ("fp16",), {"fp16": 2.0**k})
    rows += compare.format_rows(page, sample, compare.FP8_KEYS)
    rows += compare.format_rows(page, sample, compare.FP8_KEYS, scales)
    st.dataframe(rows, hide_index=True)
widgets.notes(
    page,
    page.t(
        "notes",
        interval=page.num(SPIKES.growth_interval),
        typical=page.sci(SPIKES.typical_max),
        spike_pct=page.pct(SPIKES.spike_probability),
    ),
    [page.t("refs.micikevicius2017"), page.t("refs.torch_amp")],
)
widgets.check_yourself(page, 2)
widgets.step_footer(page)
