"""Step 1 · Memory per parameter: 16 bytes for every weight with Adam."""

from collections.abc import Sequence

import streamlit as st

from lensa.lessons.memory import MemorySetup, MemoryView, StatePart, memory_view, shared_axis_top_gb
from lensa.models.configs import PRESETS, model_text_key, others_comparison, shape_for_params
from lensa.models.memory import Fit, ModelShape
from lensa.ui import display, figures, layout, widgets
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup
from lensa.ui.i18n import compact_exact, states_formula

DTYPE_COLOURS = {
    "fp16": figures.FORMAT_COLOURS["fp16"],
    "fp32": figures.FORMAT_COLOURS["fp32"],
    "int8": figures.NEUTRAL,
}
FIT_KEYS: dict[Fit, str] = {"states_over": "fit_states_over", "total_over": "fit_total_over", "fits": "fit_all"}
SETUP_CONTROLS = ("model", "params", "optimizer", "zero", "gpus", "checkpointing", "attention", "gpu_gb")
COMPACT_CHART_PX = 215


def model_controls() -> tuple[str, ModelShape]:
    """The model choice, and for a custom size its parameter count and the shape that follows from it."""
    model_key = widgets.dropdown(page, "model", page.t("model"), lambda k: page.t(model_text_key(k)))
    if model_key != "custom":
        return model_key, PRESETS[model_key].shape()
    params_control = page.info.control("params")
    show_count = lambda v: compact_exact(v, page.lang)  # noqa: E731
    params_help = page.t("params_help", lo=show_count(params_control.lo), hi=show_count(params_control.hi))
    params = widgets.count(page, "params", page.t("params"), show_count, help=params_help)
    model = shape_for_params(params)
    st.caption(
        page.t(
            "params_count",
            count=page.num(model.params),
            layers=page.num(model.layers),
            d_model=page.num(model.d_model),
            heads=page.num(model.heads),
        )
    )
    return model_key, model


def setup_controls(precision: str) -> tuple[str, MemorySetup]:
    """The model and training setup, in an expander under the picture (open when a link sets any of it)."""
    customised = any(k in st.query_params for k in SETUP_CONTROLS)
    with st.expander(page.t("setup_title"), icon=":material/tune:", expanded=customised):
        model_key, model = model_controls()
        optimizer = widgets.choice(page, "optimizer", page.t("optimizer"), lambda v: page.t(f"optimizer_{v}"))
        left, right = st.columns(2)
        with left:
            zero = int(widgets.slider(page, "zero", page.t("zero"), page.num, help=page.t("zero_help")))
            checkpointing = widgets.choice(
                page, "checkpointing", page.t("checkpointing"), lambda v: page.t(f"ckpt_{v}")
            )
        with right:
            gpus = int(widgets.slider(page, "gpus", page.t("gpus"), page.num))
            attention = widgets.choice(page, "attention", page.t("attention"), lambda v: page.t(f"attention_{v}"))
        gpu_gb = int(widgets.slider(page, "gpu_gb", page.t("gpu_gb"), lambda v: f"{page.num(v)} GB"))
    memory_setup = MemorySetup(
        precision,  # type: ignore[arg-type]  # the control's options are the precisions
        model,
        optimizer,  # type: ignore[arg-type]  # the control's options are the optimizers
        zero,
        gpus,
        checkpointing,  # type: ignore[arg-type]  # the control's options are the checkpointing modes
        attention == "flash",
        gpu_gb,
    )
    return model_key, memory_setup


def bar_parts(view: MemoryView) -> list[figures.BarPart]:
    """The stacked bar's parts: each model state with its bytes a parameter (÷ GPUs where ZeRO splits it), then
    the activations."""

    def part_label(part: StatePart) -> str:
        component, divisor = part.component, part.divisor
        split = "" if divisor == 1 else f" ÷ {page.num(divisor)}"
        bpp = f"{page.num(component.bytes_per_param)}{split}"
        name = f"{page.t(f'part_{component.key}')} {component.dtype.upper()}"
        return page.t("component", name=name, bpp=bpp, gb=page.gb(part.n_bytes))

    parts = [figures.BarPart(part_label(p), p.n_bytes, DTYPE_COLOURS[p.component.dtype]) for p in view.parts]
    parts.append(
        figures.BarPart(
            page.t("activations_part", tokens=page.num(view.tokens), gb=page.gb(view.memory.activations)),
            view.memory.activations,
            DTYPE_COLOURS[view.activation_format],
            pattern=figures.ACTIVATION_PATTERN,
        )
    )
    return parts


def formula(view: MemoryView) -> str:
    setup_ = view.setup
    return states_formula(setup_.model.params, view.whole_bpp, view.split_bpp, setup_.gpus, page.lang)


def frame(view: MemoryView, axis_top: float, model_name: str) -> scrub.Frame:
    """What the component shows at one stop of the tokens slider: the column, then the cards."""
    memory, gpu_gb = view.memory, view.setup.gpu_gb
    gpu_line = page.t("gpu_line", gb=page.num(gpu_gb))
    parts = bar_parts(view)
    chart = scrub.Chart(
        figures.stacked_memory(parts, gpu_gb, gpu_line, page.t("axis"), page.lang, axis_top),
        page.t("figure_title", model=model_name),
        page.t(f"caption_{view.setup.precision}", formula=formula(view), states=page.gb(memory.model_states)),
        alt=page.t(
            "alt",
            model=model_name,
            states=page.gb(memory.model_states),
            act=page.gb(memory.activations),
            total=page.gb(memory.total),
            gpu=gpu_line,
        ),
        compact_height=COMPACT_CHART_PX,
        compact_layout=figures.compact_column_layout(parts, axis_top, COMPACT_CHART_PX),
    )
    cards = scrub.Cards(
        (
            (page.t("metric_bpp"), page.num(memory.bytes_per_param)),
            (page.t("metric_states"), page.gb(memory.model_states)),
            (page.t("metric_activations"), page.gb(memory.activations)),
            (page.t("metric_total"), page.gb(memory.total)),
        )
    )
    return (chart, cards)


def frames(memory_setup: MemorySetup, model_name: str) -> scrub.Build:
    """The frames of the tokens slider's stops: one axis for all of them and for both precisions, so the column
    grows with the tokens and FP32's is drawn taller than mixed precision's."""

    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        tokens = [int(state["tokens"]) for state in states]
        views = [memory_view(memory_setup, t) for t in tokens]
        top = shared_axis_top_gb(memory_setup, tokens)
        return [frame(v, top, model_name) for v in views]

    return build


def explanation(view: MemoryView) -> str:
    """The paragraph under the chart: what the bytes are, the activations, ZeRO, recomputation, and the fit."""
    s, memory, other = view.setup, view.memory, view.other
    parts_text = " + ".join(
        page.t("part_bytes", b=page.num(c.bytes_per_param), name=page.t(f"part_{c.key}"), dtype=c.dtype.upper())
        for c, _ in memory.states
    )
    values = {
        "bpp": page.num(memory.bytes_per_param),
        "parts": parts_text,
        "act": page.gb(memory.activations),
        "act_other": page.gb(other.activations),
        "tokens": page.num(view.tokens),
        "states": page.gb(memory.model_states),
        "total": page.gb(memory.total),
        "gpu": page.t("gpu_line", gb=page.num(s.gpu_gb)),
        "formula": formula(view),
        "stage": page.num(s.zero),
        "gpus": page.num(s.gpus),
    }
    sentences = [page.t(f"explain_{s.precision}", **values)]
    if s.precision == "mixed" or s.optimizer != "adam":
        sentences.append(page.t(f"opt_note_{s.optimizer}"))
    sentences.append(page.t(f"act_{s.precision}", **values))
    if s.zero > 0 and s.gpus > 1:
        sentences.append(page.t(f"explain_zero{s.zero}", **values))
    if s.checkpointing != "none":
        sentences.append(page.t(f"explain_ckpt_{s.checkpointing}", **values))
    elif not s.flash:
        sentences.append(page.t("explain_scores", **values))
    sentences.append(page.t(FIT_KEYS[view.fit], **values))
    return " ".join(sentences)


def how_others_count(model_key: str, memory_setup: MemorySetup) -> None:
    """The expander comparing how other calculators count the same model's states."""
    with st.expander(page.t("others_title"), icon=":material/calculate:"):
        comparison = others_comparison(model_key, memory_setup.model, memory_setup.gpus)
        st.markdown(page.t("others_intro", model=page.t(model_text_key(model_key)), gpus=page.num(comparison.gpus)))
        # A small fixed table: Markdown, not a dataframe, so a rerun does not convert it through pandas.
        st.markdown(
            display.markdown_table(
                [page.t("others_col_tool"), page.t("others_col_gb"), page.t("others_col_gib")],
                [
                    [page.t(f"others_{row.key}"), page.gb(row.bytes), page.t("common.gib", n=page.num(row.gib, 2))]
                    for row in comparison.rows
                ],
            )
        )
        st.markdown(page.t("others_notes"))


def lesson() -> None:
    """The precision, then the tokens slider with the column and the cards; the setup under them."""
    precision = widgets.choice(page, "precision", page.t("precision"), lambda v: page.t(f"precision_{v}"))
    picture = st.container()
    model_key, memory_setup = setup_controls(precision)
    model_name = page.t(model_text_key(model_key))
    tokens_control = widgets.declared(page, "tokens", NumberControl)
    tokens_slider = scrub.Slider(tokens_control, page.t("tokens"), page.num, page.t("tokens_help"))
    with picture:
        build = frames(memory_setup, model_name)
        tokens = int(scrub.scrub(page, [tokens_slider], build, (memory_setup, model_key), page.t("try"))["tokens"])
    layout.after_controls(page)
    layout.explain(page, explanation(memory_view(memory_setup, tokens)), None)  # the scrub shows Try this
    how_others_count(model_key, memory_setup)


page = setup("memory")
layout.step_header(page)
layout.lesson(page, lesson)
layout.step_end(page, page.t("notes"), [page.t("refs.zero"), page.t("refs.korthikanti"), page.t("refs.flash")])
