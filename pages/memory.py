"""Step 1 · Memory per parameter: 16 bytes for every weight with Adam."""

from dataclasses import dataclass

import streamlit as st

from lensa.memory import (
    Checkpointing,
    MemoryBreakdown,
    ModelShape,
    Optimizer,
    Precision,
    StateComponent,
    activation_format,
    fit_on_gpu,
    other_precision,
    split_bytes_per_param,
    training_memory,
    zero_divisor,
)
from lensa.models import PRESETS, model_text_key, others_comparison, shape_for_params
from lensa.ui import display, figures, layout, widgets
from lensa.ui.frame import setup
from lensa.ui.i18n import compact_exact, states_formula

DTYPE_COLOURS = {
    "fp16": figures.FORMAT_COLOURS["fp16"],
    "fp32": figures.FORMAT_COLOURS["fp32"],
    "int8": figures.NEUTRAL,
}
FIT_KEYS = {"states_over": "fit_states_over", "total_over": "fit_total_over", "fits": "fit_all"}
SETUP_CONTROLS = ("model", "params", "optimizer", "zero", "gpus", "checkpointing", "attention", "gpu_gb")


@dataclass(frozen=True)
class Setup:
    """What the controls chose: the precision and tokens above, the rest in the setup expander."""

    precision: Precision
    tokens: int
    model_key: str
    model: ModelShape
    optimizer: Optimizer
    zero: int
    gpus: int
    checkpointing: Checkpointing
    flash: bool
    gpu_gb: int


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


def controls() -> Setup:
    """The step's controls: precision and tokens, then the model and training setup in an expander."""
    precision = widgets.choice(page, "precision", page.t("precision"), lambda v: page.t(f"precision_{v}"))
    tokens = widgets.slider(page, "tokens", page.t("tokens"), page.num, help=page.t("tokens_help"))
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
    layout.after_controls(page)
    return Setup(
        precision, tokens, model_key, model, optimizer, zero, gpus, checkpointing, attention == "flash", gpu_gb
    )


def bar_parts(s: Setup, memory: MemoryBreakdown) -> list[figures.BarPart]:
    """The stacked bar's parts: each model state with its bytes a parameter (÷ GPUs where ZeRO splits it), then
    the activations."""

    def part_label(component: StateComponent, n_bytes: float) -> str:
        divisor = zero_divisor(component.group, s.zero, s.gpus)
        bpp = page.num(component.bytes_per_param) + ("" if divisor == 1 else f" ÷ {page.num(divisor)}")
        part = page.t(f"part_{component.key}")
        name = f"{part} {component.dtype.upper()}"
        return page.t("component", name=name, bpp=bpp, gb=page.gb(n_bytes))

    parts = [figures.BarPart(part_label(c, b), b, DTYPE_COLOURS[c.dtype]) for c, b in memory.states]
    parts.append(
        figures.BarPart(
            page.t("activations_part", tokens=page.num(s.tokens), gb=page.gb(memory.activations)),
            memory.activations,
            DTYPE_COLOURS[activation_format(s.precision)],
            pattern=figures.ACTIVATION_PATTERN,
        )
    )
    return parts


def explanation(s: Setup, memory: MemoryBreakdown, other: MemoryBreakdown, formula: str) -> str:
    """The paragraph under the chart: what the bytes are, the activations, ZeRO, recomputation, and the fit."""
    parts_text = " + ".join(
        page.t("part_bytes", b=page.num(c.bytes_per_param), name=page.t(f"part_{c.key}"), dtype=c.dtype.upper())
        for c, _ in memory.states
    )
    values = {
        "bpp": page.num(memory.bytes_per_param),
        "parts": parts_text,
        "act": page.gb(memory.activations),
        "act_other": page.gb(other.activations),
        "tokens": page.num(s.tokens),
        "states": page.gb(memory.model_states),
        "total": page.gb(memory.total),
        "gpu": page.t("gpu_line", gb=page.num(s.gpu_gb)),
        "formula": formula,
        "stage": page.num(s.zero),
        "gpus": page.num(s.gpus),
    }
    precision, optimizer, zero, checkpointing = s.precision, s.optimizer, s.zero, s.checkpointing
    paragraph = page.t(f"explain_{precision}", **values)
    if precision == "mixed" or optimizer != "adam":
        paragraph += " " + page.t(f"opt_note_{optimizer}")
    paragraph += " " + page.t(f"act_{precision}", **values)
    if zero > 0 and s.gpus > 1:
        paragraph += " " + page.t(f"explain_zero{zero}", **values)
    if checkpointing != "none":
        paragraph += " " + page.t(f"explain_ckpt_{checkpointing}", **values)
    elif not s.flash:
        paragraph += " " + page.t("explain_scores", **values)
    return paragraph + " " + page.t(FIT_KEYS[fit_on_gpu(memory, s.gpu_gb)], **values)


def how_others_count(s: Setup) -> None:
    """The expander comparing how other calculators count the same model's states."""
    with st.expander(page.t("others_title"), icon=":material/calculate:"):
        comparison = others_comparison(s.model_key, s.model, s.gpus)
        st.markdown(page.t("others_intro", model=page.t(model_text_key(s.model_key)), gpus=page.num(comparison.gpus)))
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
    """The controls and what they change: the memory of one training step, part by part."""
    s = controls()
    memory = training_memory(s.model, s.tokens, s.precision, s.optimizer, s.zero, s.gpus, s.checkpointing, s.flash)
    # The other precision on one GPU without ZeRO: the paragraph compares activations, which neither divides.
    other = training_memory(
        s.model, s.tokens, other_precision(s.precision), s.optimizer, 0, 1, s.checkpointing, s.flash
    )
    split = split_bytes_per_param(s.precision, s.optimizer, s.zero, s.gpus)
    formula = states_formula(s.model.params, *split, s.gpus, page.lang)
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_bpp"), page.num(memory.bytes_per_param)),
            (page.t("metric_states"), page.gb(memory.model_states)),
            (page.t("metric_activations"), page.gb(memory.activations)),
            (page.t("metric_total"), page.gb(memory.total)),
        ]
    )
    model_name = page.t(model_text_key(s.model_key))
    gpu_line = page.t("gpu_line", gb=page.num(s.gpu_gb))
    with charts:
        display.chart(
            figures.stacked_memory(bar_parts(s, memory), s.gpu_gb, gpu_line, page.t("axis"), page.lang),
            page.t("figure_title", model=model_name),
            page.t("caption", formula=formula, states=page.gb(memory.model_states)),
            alt=page.t(
                "alt",
                model=model_name,
                states=page.gb(memory.model_states),
                act=page.gb(memory.activations),
                total=page.gb(memory.total),
                gpu=gpu_line,
            ),
        )
    layout.explain(page, explanation(s, memory, other, formula), page.t("try"))
    how_others_count(s)


page = setup("memory")
layout.step_header(page)
layout.lesson(page, lesson)
layout.step_end(page, page.t("notes"), [page.t("refs.zero"), page.t("refs.korthikanti"), page.t("refs.flash")])
