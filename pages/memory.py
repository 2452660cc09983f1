"""Step 1 · Memory per parameter: 16 bytes for every weight with Adam."""

from lensa.memory import SEVEN_B, training_memory
from lensa.ui import figures, widgets
from lensa.ui.frame import setup

GPU_GB = 80
DTYPE_COLOURS = {"fp16": figures.FORMAT_COLOURS["fp16"], "fp32": figures.FORMAT_COLOURS["fp32"]}

page = setup("memory")
widgets.step_header(page)

precision = widgets.choice(page, "precision", page.t("precision"), lambda v: page.t(f"precision_{v}"))
tokens = widgets.slider(page, "tokens", page.t("tokens"), page.num, help=page.t("tokens_help"))
widgets.after_controls(page)

memory = training_memory(SEVEN_B, tokens, precision)
other = training_memory(SEVEN_B, tokens, "fp32" if precision == "mixed" else "mixed")
act_dtype = "fp16" if precision == "mixed" else "fp32"

parts = [
    figures.BarPart(
        label=page.t(
            "component",
            name=f"{page.t('part_' + c.key)} {c.dtype.upper()}",
            bpp=page.num(c.bytes_per_param),
            gb=page.gb(b),
        ),
        gb=b / 1e9,
        colour=DTYPE_COLOURS[c.dtype],
    )
    for c, b in memory.states
]
parts.append(
    figures.BarPart(
        label=page.t("activations_part", tokens=page.num(tokens), gb=page.gb(memory.activations)),
        gb=memory.activations / 1e9,
        colour=DTYPE_COLOURS[act_dtype],
        pattern=figures.ACTIVATION_PATTERN,
    )
)
widgets.chart(
    figures.stacked_memory(parts, GPU_GB, page.t("gpu_line"), page.t("axis"), page.lang),
    page.t("figure_title"),
    page.t(
        "caption",
        params=page.t("common.billions", n=page.sig(SEVEN_B.params / 1e9, 3)),
        bpp=page.num(memory.bytes_per_param),
        states=page.gb(memory.model_states),
    ),
)

widgets.metric_row(
    [
        (page.t("metric_bpp"), page.num(memory.bytes_per_param)),
        (page.t("metric_states"), page.gb(memory.model_states)),
        (page.t("metric_activations"), page.gb(memory.activations)),
        (page.t("metric_total"), page.gb(memory.total)),
    ]
)

values = {
    "bpp": page.num(memory.bytes_per_param),
    "act": page.gb(memory.activations),
    "act_other": page.gb(other.activations),
    "tokens": page.num(tokens),
    "states": page.gb(memory.model_states),
    "total": page.gb(memory.total),
}
paragraph = page.t(f"explain_{precision}", **values)
if memory.model_states > GPU_GB * 1e9:
    paragraph += " " + page.t("fit_states_over", **values)
elif memory.total > GPU_GB * 1e9:
    paragraph += " " + page.t("fit_total_over", **values)
else:
    paragraph += " " + page.t("fit_all", **values)
widgets.explain(page, paragraph, page.t("try"))
widgets.notes(page, page.t("notes"), [page.t("refs.zero"), page.t("refs.korthikanti"), page.t("refs.flash")])
widgets.check_yourself(page, 2)
widgets.step_footer(page)
