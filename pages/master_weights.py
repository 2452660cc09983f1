"""Step 4 · FP32 master weights: small updates vanish in FP16."""

import streamlit as st

from lensa import measured
from lensa.formats import get_format, spacing
from lensa.master import (
    EXAMPLE_GRAD,
    EXAMPLE_LR,
    MASTER_FORMAT,
    NOTICEABLE_ROUNDING,
    MasterWeightExample,
    UpdateOutcome,
    master_weight_example,
    update_outcome,
)
from lensa.ui import display, figures, i18n, layout, recorded_run, widgets
from lensa.ui.frame import setup

STEPS = 1000
TICKS_EACH_SIDE = 4
LOW_PRECISION = ("fp16", "bf16")
EXAMPLE_FORMAT = "fp16"  # the format the illustration's weight is held in, beside its FP32 master copy
SHOWN = (*LOW_PRECISION, MASTER_FORMAT)  # the weight held in 16 bits, then the FP32 master copy
MAX_LAYER_BARS = 12  # a chart a phone can hold; the table below lists every layer


def over_training_chart(sel: recorded_run.Selection, labels: dict[str, str]) -> None:
    """The share each format loses at every recorded step (of the chosen layer, or all), where there are two."""
    steps, over = measured.lost_over_training(sel.run, sel.layer, SHOWN)
    if len(steps) > 1:
        hover = page.t("master_weights_data.hover")
        lines = [
            (
                f,
                labels[f],
                over[f],
                [
                    hover.format(step=page.num(s), share=recorded_run.pct(page, v))
                    for s, v in zip(steps, over[f], strict=True)
                ],
            )
            for f in SHOWN
        ]
        display.chart(
            figures.share_lines(
                steps,
                lines,
                page.t("master_weights_data.axis_step"),
                page.t("master_weights_data.axis_share"),
                page.lang,
            ),
            page.t("master_weights_data.over_title", layer=recorded_run.layer_words(page, sel.layer)),
            recorded_run.source_line(page, sel, every_step=True),
            alt=page.t(
                "master_weights_data.alt_over",
                first=recorded_run.pct(page, over["fp16"][0]),
                last=recorded_run.pct(page, over["fp16"][-1]),
                n=page.num(len(steps)),
            ),
        )


def layer_table(rows: list[measured.LostRow], labels: dict[str, str]) -> None:
    """Every layer's share of lost updates in each format, in model order (the chart shows the worst few)."""
    st.dataframe(
        [
            {
                page.t("data.col_layer"): r.name,
                page.t("data.col_values"): page.num(r.nonzero),
                **{labels[f]: recorded_run.pct(page, r.lost[f]) for f in SHOWN},
            }
            for r in rows
        ],
        hide_index=True,
    )


def show_measured(sel: recorded_run.Selection) -> None:
    """The recorded updates instead of the illustration: how many an FP16 or BF16 weight would lose."""
    run, stats = sel.run, sel.stats
    pct = {f: recorded_run.pct(page, measured.lost_share(stats, f)) for f in SHOWN}
    master = pct[MASTER_FORMAT]
    source = recorded_run.source_line(page, sel)
    labels = {
        "fp16": page.t("master_weights_data.bar_fp16"),
        "bf16": page.t("master_weights_data.bar_bf16"),
        MASTER_FORMAT: page.t("master_weights_data.bar_master"),
    }
    rows = measured.lost_by_layer(run, sel.step, SHOWN)
    shown = measured.most_lost(rows, "fp16", MAX_LAYER_BARS)
    series = [
        (f, labels[f], [r.lost[f] for r in shown], [recorded_run.pct(page, r.lost[f]) for r in shown]) for f in SHOWN
    ]
    caption = page.t("master_weights_data.layers_caption", shown=page.num(len(shown)), n=page.num(len(rows)))
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("master_weights_data.metric_fp16"), pct["fp16"]),
            (page.t("master_weights_data.metric_bf16"), pct["bf16"]),
            (page.t("master_weights_data.metric_master"), master),
            (page.t("master_weights_data.metric_count"), page.num(stats.nonzero)),
        ]
    )
    with charts:
        display.chart(
            figures.grouped_share_bars(
                [r.name for r in shown], series, page.t("master_weights_data.axis_share"), page.lang
            ),
            page.t("master_weights_data.layers_title", step=page.num(sel.step)),
            caption + " " + source,
            alt=page.t("master_weights_data.alt_layers", n=page.num(len(rows)), fp16=pct["fp16"], bf16=pct["bf16"]),
        )
        over_training_chart(sel, labels)
    paragraph = page.t(
        "master_weights_data.explain",
        step=page.num(sel.step),
        n=page.num(stats.nonzero),
        layer=recorded_run.layer_words(page, sel.layer),
        fp16=pct["fp16"],
        bf16=pct["bf16"],
        master=master,
    )
    layout.explain(page, paragraph, page.t("master_weights_data.try"))
    layer_table(rows, labels)


def example_charts(example: MasterWeightExample) -> None:
    """The number line around the weight, then what the updates add exactly, to the master copy and in 16 bits."""
    w, update, gap, stored = example.w, example.update, example.spacing, example.after_one
    exact, change32, change16 = example.exact_change, example.fp32_change, example.low_change
    display.chart(
        figures.number_line(
            example.w_stored,
            update,
            stored,
            example.grid,
            gap,
            {
                "w": page.t("mark_w"),
                "exact": page.t("mark_exact"),
                "stored": page.t("mark_stored"),
                "half": page.t("mark_half"),
            },
            page.t("axis_offset"),
            page.lang,
            fmt=EXAMPLE_FORMAT,
        ),
        page.t("figure_title", spacing=page.sci(gap, 3)),
        alt=page.t(
            "alt",
            w=page.decimal(w),
            spacing=page.sci(gap, 3),
            ratio=page.sci(example.ratio),
            stored=i18n.full_precision(stored, page.lang),
        ),
    )
    display.chart(
        figures.labelled_bars(
            [page.t("bar_exact"), page.t("bar_master"), page.t("bar_fp16")],
            [exact, change32, change16],
            [figures.NEUTRAL, figures.FORMAT_COLOURS[MASTER_FORMAT], figures.FORMAT_COLOURS[EXAMPLE_FORMAT]],
            [page.sci(exact, 3), page.sci(change32, 3), page.sci(change16, 3)],
            lang=page.lang,
            hovers=[
                f"{page.t('bar_exact')}: {i18n.full_precision(exact, page.lang)}",
                f"{page.t('bar_master')}: {i18n.full_precision(change32, page.lang)}",
                f"{page.t('bar_fp16')}: {i18n.full_precision(change16, page.lang)}",
            ],
            headroom=1.3,
        ),
        page.t("bars_title", steps=page.num(STEPS)),
        alt=page.t(
            "bars_alt",
            steps=page.num(STEPS),
            exact=page.sci(exact, 3),
            master=page.sci(change32, 3),
            fp16=page.sci(change16, 3),
        ),
    )


def illustration(update: float, w: float) -> None:
    """The seed's example: one weight, one small update, stored in FP16 or kept in an FP32 master copy."""
    example = master_weight_example(w, update, STEPS, EXAMPLE_FORMAT, TICKS_EACH_SIDE)
    gap = example.spacing
    exact, change32, change16 = example.exact_change, example.fp32_change, example.low_change

    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_spacing"), page.sci(gap, 3)),
            (page.t("metric_ratio"), page.sci(example.ratio)),
            (page.t("metric_fp16"), page.sci(change16, 3)),
            (page.t("metric_master"), page.sci(change32, 3)),
        ]
    )
    outcomes = {f: update_outcome(w, update, f) for f in (*LOW_PRECISION, "fp32")}
    display.metric_row([(page.t(f"outcome_{f}"), outcome_words(outcomes[f])) for f in ("fp16", "bf16", "fp32")])
    with charts:
        example_charts(example)

    master = outcomes["fp32"]
    values = {
        "ratio": page.sci(example.ratio),
        "w": page.decimal(w),
        "update": page.sci(update),
        "steps": page.num(STEPS),
        "master": page.sci(change32, 3),
        "exact": page.sci(exact, 3),
        "fp16": page.sci(change16, 3),
        "fp32_spacing": page.sci(master.spacing, 3),
        "fp32_applied": page.sci(master.applied, 3),
        "fp32_error": page.pct(abs(master.error)),
        "threshold": page.significant(NOTICEABLE_ROUNDING * 100, 1) + "%",
    }
    paragraph = page.t("explain_lost" if outcomes["fp16"].kind == "lost" else "explain_kept", **values)
    paragraph += page.t(f"explain_fp32_{master.regime}", **values)
    layout.explain(page, paragraph, page.t("try"))


def outcome_words(outcome: UpdateOutcome) -> str:
    """A card's value: lost, exact, or the share by which one update is rounded up or down."""
    return page.t(f"outcome_{outcome.direction}", pct=page.pct(abs(outcome.error)))


def lesson() -> None:
    """The controls and what they change; a recorded run replaces the illustration."""
    selection = recorded_run.data_controls(page)
    if selection is None:
        update = widgets.slider(page, "update", page.t("update"), lambda v: page.sci(v, 3), help=page.t("update_help"))
        w = widgets.slider(page, "w", page.t("w"), page.decimal)
    layout.after_controls(page)
    if selection is None:
        illustration(update, w)
    else:
        show_measured(selection)


page = setup("master_weights")
layout.step_header(page)
layout.lesson(page, lesson)


def notes_values() -> dict[str, str]:
    """The notes' numbers: the worked example of an update at w = 1 and w = 10, from the formats themselves."""
    update = EXAMPLE_LR * EXAMPLE_GRAD
    fp32_at_1 = float(spacing(1.0, "fp32"))
    example = update_outcome(1.0, update, "fp32")
    return {
        "fp16_at_1": page.sci(float(spacing(1.0, "fp16")), 3),
        "fp16_at_10": page.sci(float(spacing(10.0, "fp16"))),
        "fp16_needed": page.sci(float(spacing(1.0, "fp16")) / 2),
        "lr": page.sci(EXAMPLE_LR, 1),
        "grad": page.sci(EXAMPLE_GRAD, 1),
        "update": page.sci(update, 1),
        "extra_bits": page.num(get_format("fp32").significand_bits - get_format("fp16").significand_bits),
        "fp32_at_1": page.sci(fp32_at_1, 3),
        "fp32_at_10": page.sci(float(spacing(10.0, "fp32")), 3),
        "fp32_applied": page.sci(example.applied, 3),
        "fp32_error": page.pct(abs(example.error)),
        "adam_spacings": page.num(EXAMPLE_LR / fp32_at_1),
        "adam_error": page.pct(fp32_at_1 / 2 / EXAMPLE_LR),
    }


layout.step_end(
    page,
    page.t("notes", **notes_values()),
    [
        page.t("refs.micikevicius2017"),
        page.t("refs.ieee754"),
        page.t("refs.gupta2015"),
        page.t("refs.zamirai2020"),
    ],
)
