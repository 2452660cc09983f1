"""Step 1 · Memory per parameter: 16 bytes for every weight with Adam."""

import streamlit as st

from lensa.memory import (
    activation_format,
    fit_on_gpu,
    other_precision,
    split_bytes_per_param,
    training_memory,
    zero_divisor,
)
from lensa.models import PRESETS, others_comparison, shape_for_params
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


def lesson() -> None:
    """The controls and what they change: the memory of one training step, part by part."""
    precision = widgets.choice(page, "precision", page.t("precision"), lambda v: page.t(f"precision_{v}"))
    tokens = widgets.slider(page, "tokens", page.t("tokens"), page.num, help=page.t("tokens_help"))
    customised = any(k in st.query_params for k in SETUP_CONTROLS)
    with st.expander(page.t("setup_title"), icon=":material/tune:", expanded=customised):
        model_key = widgets.dropdown(page, "model", page.t("model"), lambda k: page.t(f"model_{k.replace('-', '_')}"))
        if model_key == "custom":
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
        else:
            model = PRESETS[model_key].shape()
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

    flash = attention == "flash"
    memory = training_memory(model, tokens, precision, optimizer, zero, gpus, checkpointing, flash)
    other = training_memory(model, tokens, other_precision(precision), optimizer, 0, 1, checkpointing, flash)

    def part_label(component, n_bytes: float) -> str:
        divisor = zero_divisor(component.group, zero, gpus)
        bpp = page.num(component.bytes_per_param) + ("" if divisor == 1 else f" ÷ {page.num(divisor)}")
        part = page.t(f"part_{component.key}")
        name = f"{part} {component.dtype.upper()}"
        return page.t("component", name=name, bpp=bpp, gb=page.gb(n_bytes))

    parts = [figures.BarPart(part_label(c, b), b, DTYPE_COLOURS[c.dtype]) for c, b in memory.states]
    parts.append(
        figures.BarPart(
            page.t("activations_part", tokens=page.num(tokens), gb=page.gb(memory.activations)),
            memory.activations,
            DTYPE_COLOURS[activation_format(precision)],
            pattern=figures.ACTIVATION_PATTERN,
        )
    )
    formula = states_formula(model.params, *split_bytes_per_param(precision, optimizer, zero, gpus), gpus, page.lang)
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_bpp"), page.num(memory.bytes_per_param)),
            (page.t("metric_states"), page.gb(memory.model_states)),
            (page.t("metric_activations"), page.gb(memory.activations)),
            (page.t("metric_total"), page.gb(memory.total)),
        ]
    )
    with charts:
        display.chart(
            figures.stacked_memory(parts, gpu_gb, page.t("gpu_line", gb=page.num(gpu_gb)), page.t("axis"), page.lang),
            page.t("figure_title", model=page.t(f"model_{model_key.replace('-', '_')}")),
            page.t("caption", formula=formula, states=page.gb(memory.model_states)),
            alt=page.t(
                "alt",
                model=page.t(f"model_{model_key.replace('-', '_')}"),
                states=page.gb(memory.model_states),
                act=page.gb(memory.activations),
                total=page.gb(memory.total),
                gpu=page.t("gpu_line", gb=page.num(gpu_gb)),
            ),
        )

    parts_text = " + ".join(
        page.t("part_bytes", b=page.num(c.bytes_per_param), name=page.t(f"part_{c.key}"), dtype=c.dtype.upper())
        for c, _ in memory.states
    )
    values = {
        "bpp": page.num(memory.bytes_per_param),
        "parts": parts_text,
        "act": page.gb(memory.activations),
        "act_other": page.gb(other.activations),
        "tokens": page.num(tokens),
        "states": page.gb(memory.model_states),
        "total": page.gb(memory.total),
        "gpu": page.t("gpu_line", gb=page.num(gpu_gb)),
        "formula": formula,
        "stage": page.num(zero),
        "gpus": page.num(gpus),
    }
    paragraph = page.t(f"explain_{precision}", **values)
    if precision == "mixed" or optimizer != "adam":
        paragraph += " " + page.t(f"opt_note_{optimizer}")
    paragraph += " " + page.t(f"act_{precision}", **values)
    if zero > 0 and gpus > 1:
        paragraph += " " + page.t(f"explain_zero{zero}", **values)
    if checkpointing != "none":
        paragraph += " " + page.t(f"explain_ckpt_{checkpointing}", **values)
    elif not flash:
        paragraph += " " + page.t("explain_scores", **values)
    paragraph += " " + page.t(FIT_KEYS[fit_on_gpu(memory, gpu_gb)], **values)
    layout.explain(page, paragraph, page.t("try"))

    with st.expander(page.t("others_title"), icon=":material/calculate:"):
        comparison = others_comparison(model_key, model, gpus)
        st.markdown(
            page.t("others_intro", model=page.t(f"model_{model_key.replace('-', '_')}"), gpus=page.num(comparison.gpus))
        )
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


page = setup("memory")
layout.step_header(page)
layout.lesson(page, lesson)
layout.step_end(page, page.t("notes"), [page.t("refs.zero"), page.t("refs.korthikanti"), page.t("refs.flash")])
