"""Training below 16 bits: stochastic rounding, the Hadamard rotation, the recipes trained on the reference model."""

import math

import streamlit as st

from lensa.lessons import low_bits
from lensa.numerics.training_recipes import TRAINING_RECIPES, element_of
from lensa.ui import display, figures, layout, quiz, widgets
from lensa.ui.figures import FORMAT_COLOURS
from lensa.ui.frame import setup


def db(x: float) -> str:
    if x == math.inf:
        return "∞"
    if math.isnan(x) or (math.isinf(x) and x < 0):
        return "−∞"
    return f"{page.num(x, 1)} dB"


def gap(share: float) -> str:
    """A gap (a share of BF16's final loss), signed, written as the chart writes its bars."""
    if math.isnan(share):
        return page.t("lab.not_finite")
    return page.signed_pct(share)


def arm_name(arm: str) -> str:
    return page.t(f"lab.arm_{arm}")


def short(x: float) -> str:
    """A number with at most one decimal and no trailing zero, in the page's language."""
    text = page.num(x, 1)
    mark = "," if page.lang == "id" else "."
    return text.rstrip("0").rstrip(mark) if mark in text else text


def lesson() -> None:
    """Three parts: a value rounded again and again, a block rotated, and the recipes' recorded comparison."""
    rounding_area, rotation_area, recorded_area = st.container(), st.container(), st.container()
    with rounding_area:
        st.subheader(page.t("rounding_title"))
        st.markdown(page.t("rounding_intro"))
        position = widgets.slider(
            page,
            "position",
            page.t("position"),
            lambda p: page.t("position_stop", value=page.num(low_bits.rounding_view(p).value, 3)),
            help=page.t("position_help"),
        )
    with rotation_area:
        st.subheader(page.t("rotation_title"))
        st.markdown(page.t("rotation_intro", n=page.num(low_bits.ROTATION_SIZE)))
        outlier = widgets.slider(
            page,
            "outlier",
            page.t("outlier"),
            lambda k: page.t("outlier_stop", k=short(k), times=page.significant(low_bits.outlier_times(k), 3)),
            help=page.t("outlier_help", i=low_bits.OUTLIER_POSITION),
        )
    with recorded_area:
        st.subheader(page.t("recorded_title"))
        data = low_bits.recorded()
        view = low_bits.comparison_view("nvfp4_recipe", data)
        st.markdown(
            page.t("recorded_intro", steps=page.num(view.steps), seed=page.num(view.seed), command=view.command)
        )
        arm = widgets.dropdown(page, "arm", page.t("arm"), arm_name)
    layout.after_controls(page)

    with rounding_area:
        rounding(low_bits.rounding_view(position))
    with rotation_area:
        rotation(low_bits.rotation_view(outlier))
    with recorded_area:
        recorded(low_bits.comparison_view(arm, data))


def rounding(v: low_bits.RoundingView) -> None:
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_nearest", nearest=page.num(v.nearest, 1)), page.num(v.nearest_error, 3)),
            (page.t("metric_mean", n=page.num(v.draws), mean=page.num(v.mean, 3)), page.num(v.mean_error, 3)),
            (page.t("metric_p_up", high=page.num(v.high, 1)), page.pct(v.p_up)),
        ]
    )
    labels = figures.RoundingLabels(
        axis_draws=page.t("r_axis_draws"),
        axis_value=page.t("r_axis_value"),
        mean=page.t("r_mean"),
        value=page.t("r_value"),
        nearest=page.t("r_nearest"),
        grid=page.t("r_grid"),
    )
    with charts:
        display.chart(
            figures.rounding_means(v.means, v.value, v.nearest, v.low, v.high, labels, page.lang),
            page.t("rounding_chart_title", n=page.num(v.draws)),
            page.t(
                "rounding_caption",
                low=page.num(v.low, 1),
                high=page.num(v.high, 1),
                seed=page.num(low_bits.ROUNDING_SEED),
            ),
        )
    values = {
        "value": page.num(v.value, 3),
        "low": page.num(v.low, 1),
        "high": page.num(v.high, 1),
        "nearest": page.num(v.nearest, 1),
        "lost": page.num(v.nearest_error, 3),
        "p": page.pct(v.p_up),
        "n": page.num(v.draws),
        "ups": page.num(v.ups),
        "mean": page.num(v.mean, 3),
        "error": page.num(v.mean_error, 3),
        "se": page.num(v.standard_error, 3),
    }
    key = "explain_rounding_on_grid" if v.nearest_error == 0 else "explain_rounding"
    layout.explain(page, page.t(key, **values), page.t("rounding_try"), links=False)


def rotation(v: low_bits.RotationView) -> None:
    names = (page.t("rot_before"), page.t("rot_after"))
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_scale"), f"2^{v.scale_exponent} → 2^{v.rotated_scale_exponent}"),
            (page.t("metric_flushed"), f"{page.num(v.flushed)} → {page.num(v.rotated_flushed)}"),
            (page.t("metric_others", before=db(v.others_sqnr_db)), db(v.restored_others_sqnr_db)),
        ]
    )
    with charts:
        display.chart(
            figures.rotation_bars(v.values, v.rotated, names, page.t("axis_index"), page.t("axis_value"), page.lang),
            page.t("rotation_chart_title"),
            page.t("rotation_caption", i=low_bits.OUTLIER_POSITION),
        )
    st.dataframe(
        [
            {
                page.t("col_block"): name,
                page.t("col_amax"): page.sci(amax, 3),
                page.t("col_scale"): f"2^{exponent}",
                page.t("col_flushed"): page.num(flushed),
                page.t("col_sqnr"): db(sqnr),
                page.t("col_others"): db(others),
            }
            for name, amax, exponent, flushed, sqnr, others in (
                (names[0], v.amax, v.scale_exponent, v.flushed, v.sqnr_db, v.others_sqnr_db),
                (
                    names[1],
                    v.rotated_amax,
                    v.rotated_scale_exponent,
                    v.rotated_flushed,
                    v.restored_sqnr_db,
                    v.restored_others_sqnr_db,
                ),
            )
        ],
        hide_index=True,
        width="stretch",
    )
    values = {
        "before": str(v.scale_exponent),
        "after": str(v.rotated_scale_exponent),
        "flushed": page.num(v.flushed),
        "rotated_flushed": page.num(v.rotated_flushed),
        "others": db(v.others_sqnr_db),
        "restored_others": db(v.restored_others_sqnr_db),
        "sqnr": db(v.sqnr_db),
        "restored": db(v.restored_sqnr_db),
    }
    explanation = page.t(f"explain_rotation_{v.verdict}", **values)
    layout.explain(page, explanation, page.t("rotation_try"), links=False)


def recorded(view: low_bits.ComparisonView) -> None:
    by_arm = {s.arm: s for s in view.summaries}
    charts = display.figure_area()
    chosen = by_arm[view.recipe]
    display.metric_row(
        [
            (
                page.t("metric_close", within=page.pct(view.close_share)),
                f"{page.num(len(view.close))} / {page.num(len(view.recipes))}",
            ),
            (page.t("metric_gap", arm=arm_name(view.recipe)), gap(chosen.gap_bf16)),
            (page.t("metric_diverged"), page.num(len(view.diverged))),
        ]
    )
    # A recipe whose loss was not finite has no final loss: the sentence below names it, the chart leaves it out.
    recipes = [s for s in view.summaries if s.arm in TRAINING_RECIPES and math.isfinite(s.gap_bf16_pct)]
    with charts:
        display.chart(
            figures.signed_bars(
                [arm_name(s.arm) for s in recipes],
                [s.gap_bf16 for s in recipes],
                [FORMAT_COLOURS.get(element_of(s.arm), figures.NEUTRAL) for s in recipes],
                [page.pct(s.gap_bf16) for s in recipes],
                page.t("gaps_axis"),
                page.lang,
            ),
            page.t("gaps_title"),
            page.t("gaps_caption"),
        )
        # Every arm saw the same batches, so a step's loss over BF16's is the recipe's doing, not the batch's.
        series = [(element_of(a), arm_name(a), view.relative[a]) for a in ("fp32", view.recipe)]
        display.chart(
            figures.loss_curves(series, page.t("lab.step_axis"), page.t("curves_axis"), page.lang),
            page.t("curves_title", arm=arm_name(view.recipe)),
            page.t("curves_caption", n=page.num(low_bits.RELATIVE_WINDOW)),
        )
    st.markdown(f"**{page.t('layers_title', arm=arm_name(view.recipe))}**")
    st.dataframe(
        [
            {
                page.t("lab.lcol_layer"): layer,
                page.t("lab.lcol_tensor"): page.t(f"lab.role_{role}"),
                page.t("lab.lcol_values"): page.num(values),
                page.t("lab.lcol_flushed"): page.pct(flushed),
                page.t("lab.lcol_saturated"): page.pct(saturated),
            }
            for layer, role, values, flushed, saturated in view.layer_rows
        ],
        hide_index=True,
        width="stretch",
    )
    ablation = {k: gap(v) for k, v in view.ablation_shares.items()}
    values = {
        "close": page.num(len(view.close)),
        "recipes": page.num(len(view.recipes)),
        "within": page.pct(view.close_share),
        "diverged": ", ".join(arm_name(a) for a in view.diverged) or page.t("none_diverged"),
        "mxfp4": gap(by_arm["mxfp4"].gap_bf16) if "mxfp4" in by_arm else "—",
        "mxfp8": gap(by_arm["mxfp8"].gap_bf16) if "mxfp8" in by_arm else "—",
        "mxfp8_ceil": gap(by_arm["mxfp8_ceil"].gap_bf16) if "mxfp8_ceil" in by_arm else "—",
        "fp8": gap(by_arm["fp8_current"].gap_bf16) if "fp8_current" in by_arm else "—",
        **{k: ablation.get(k, "—") for k in low_bits.NVFP4_ABLATION},
        "params": page.num(view.parameters),
        "times_small": page.significant(view.paper_times[0], 2),
        "times_large": page.significant(view.paper_times[1], 2),
    }
    layout.explain(page, page.t("explain_recorded", **values), page.t("recorded_try"))


page = setup("low_bits")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")
st.markdown(page.t("intro"))
layout.lesson(page, lesson, scrubs=False)  # its pictures are st.plotly_chart's
layout.notes(
    page,
    page.t("notes"),
    [
        page.t("refs.nvfp4_pretraining"),
        page.t("refs.fp4_all_the_way"),
        page.t("refs.deepseek_v3"),
        page.t("refs.mxfp8_recipes"),
        page.t("refs.te_nvfp4"),
    ],
)
quiz.check_yourself(page, 2)
