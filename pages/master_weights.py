"""Step 4 · FP32 master weights: small updates vanish in FP16."""

from collections.abc import Sequence

import streamlit as st

from lensa.lessons.master_weights import (
    EXAMPLE_FORMAT,
    LOW_PRECISION,
    MASTER_FORMAT,
    STEPS,
    MasterWeightsView,
    master_weights_view,
    notes_numbers,
)
from lensa.models.master import UpdateOutcome
from lensa.runstats import measured
from lensa.ui import display, figures, i18n, layout, recorded_run, widgets
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup

SHOWN = (*LOW_PRECISION, MASTER_FORMAT)  # the weight held in 16 bits, then the FP32 master copy
COMPACT_LINE_PX = 230
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
            " ".join([caption, source]),
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


def number_line(view: MasterWeightsView) -> scrub.Chart:
    """The number line around the weight: every FP16 value a tick, w, w + update exactly, and what FP16 stores."""
    example = view.example
    gap, below = example.spacing, view.spacing_below
    chart = figures.number_line(
        example.w_stored,
        example.update,
        example.after_one,
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
    )
    words = {"w": page.decimal(view.w), "ratio": page.sci(example.ratio)}
    stored = i18n.full_precision(example.after_one, page.lang)
    if view.spacing_changes_at_w:  # w a power of two: the values below it are half as far apart
        title = page.t("views.master_weights_title_split", above=page.sci(gap, 3), below=page.sci(below, 3))
        alt = page.t(
            "views.master_weights_alt_split", above=page.sci(gap, 3), below=page.sci(below, 3), stored=stored, **words
        )
    else:
        title = page.t("figure_title", spacing=page.sci(gap, 3))
        alt = page.t("alt", spacing=page.sci(gap, 3), stored=stored, **words)
    return scrub.Chart(chart, title, alt=alt, compact_height=COMPACT_LINE_PX)


def totals_bars(view: MasterWeightsView) -> scrub.Chart:
    """What the updates add after STEPS steps: exactly, to the FP32 master copy and to the FP16 weight."""
    example = view.example
    exact, change32, change16 = example.exact_change, example.fp32_change, example.low_change
    bars = figures.labelled_bars(
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
    )
    return scrub.Chart(
        bars,
        page.t("bars_title", steps=page.num(STEPS)),
        alt=page.t(
            "bars_alt",
            steps=page.num(STEPS),
            exact=page.sci(exact, 3),
            master=page.sci(change32, 3),
            fp16=page.sci(change16, 3),
        ),
    )


def frame(view: MasterWeightsView) -> scrub.Frame:
    """What the component shows at one (update, w): the number line, the cards, the totals, what one update does."""
    example = view.example
    cards = scrub.Cards(
        (
            (page.t("metric_spacing"), page.sci(example.spacing, 3)),
            (page.t("metric_ratio"), page.sci(example.ratio)),
            (page.t("metric_fp16"), page.sci(example.low_change, 3)),
            (page.t("metric_master"), page.sci(example.fp32_change, 3)),
        )
    )
    outcomes = scrub.Cards(tuple((page.t(f"outcome_{f}"), outcome_words(view.outcomes[f])) for f in SHOWN))
    return (number_line(view), cards, totals_bars(view), outcomes)


def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
    """The frames of one slider's stops (the other slider where it is)."""
    return [frame(master_weights_view(state["update"], state["w"])) for state in states]


def illustration() -> None:
    """The seed's example: one weight, one small update, stored in FP16 or kept in an FP32 master copy."""
    update_control = widgets.declared(page, "update", NumberControl)
    w_control = widgets.declared(page, "w", NumberControl)
    sliders = [
        scrub.Slider(update_control, page.t("update"), lambda v: page.sci(v, 3), page.t("update_help")),
        scrub.Slider(w_control, page.t("w"), page.decimal),
    ]
    values = scrub.scrub(page, sliders, build, try_this=page.t("try"))
    layout.after_controls(page)
    update, w = values["update"], values["w"]
    view = master_weights_view(update, w)
    example, master = view.example, view.master
    notes = notes_numbers()
    values_text = {
        "ratio": page.sci(example.ratio),
        "w": page.decimal(w),
        "update": page.sci(update),
        "steps": page.num(STEPS),
        "master": page.sci(example.fp32_change, 3),
        "exact": page.sci(example.exact_change, 3),
        "fp16": page.sci(example.low_change, 3),
        "fp32_spacing": page.sci(master.spacing, 3),
        "fp32_applied": page.sci(master.applied, 3),
        "fp32_error": page.pct(master.error_size),
        "threshold": f"{page.significant(notes.noticeable_pct, 1)}%",
    }
    paragraph = "".join(
        [
            page.t("explain_lost" if view.fp16_lost else "explain_kept", **values_text),
            page.t(f"explain_fp32_{master.regime}", **values_text),
        ]
    )
    layout.explain(page, paragraph, None)  # the scrub shows Try this


def outcome_words(outcome: UpdateOutcome) -> str:
    """A card's value: lost, exact, or the share by which one update is rounded up or down."""
    return page.t(f"outcome_{outcome.direction}", pct=page.pct(outcome.error_size))


def lesson() -> None:
    """The controls and what they change; a recorded run replaces the illustration."""
    picture = st.container()
    data, _ = recorded_run.secondary_choices(page, also=False)
    selection = recorded_run.data_controls(page, data)
    if selection is None:
        with picture:
            illustration()
    else:
        layout.after_controls(page)
        show_measured(selection)


page = setup("master_weights")
layout.step_header(page)
layout.lesson(page, lesson)


def notes_values() -> dict[str, str]:
    """The notes' numbers: the worked example of an update at w = 1 and w = 10, from the formats themselves."""
    n = notes_numbers()
    return {
        "fp16_at_1": page.sci(n.fp16_at_1, 3),
        "fp16_at_10": page.sci(n.fp16_at_10),
        "fp16_needed": page.sci(n.fp16_needed),
        "lr": page.sci(n.lr, 1),
        "grad": page.sci(n.grad, 1),
        "update": page.sci(n.update, 1),
        "extra_bits": page.num(n.extra_bits),
        "fp32_at_1": page.sci(n.fp32_at_1, 3),
        "fp32_at_10": page.sci(n.fp32_at_10, 3),
        "fp32_applied": page.sci(n.fp32_applied, 3),
        "fp32_error": page.pct(n.fp32_error),
        "adam_spacings": page.num(n.adam_spacings),
        "adam_error": page.pct(n.adam_error),
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
