"""Block scaling: one block of gradients with one outlier, as FP8, MX and NVFP4 recipes store it."""

import numpy as np
import streamlit as st

from lensa import blockscale
from lensa.ui import display, figures, layout, quiz, recorded_run, widgets
from lensa.ui.frame import setup

# Side by side: MXFP8 with OCP's scale and with the scale rounded up, MXFP6, MXFP4 and NVFP4.
SHOWN = ("mxfp8_e4m3", "mxfp8_e4m3_ceil", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4")
OUTLIER_AT = 5  # the value the learner drags (the sixth)
SEED = 21


def gradient_block(n: int, grad: float, outlier: float) -> np.ndarray:
    """``n`` gradient-like values (a fixed normal sample times ``grad``), value 6 set to 2**outlier times the
    largest of the others."""
    x = (np.random.default_rng(SEED).standard_normal(32)[:n] * grad).astype(np.float32)
    others = np.abs(np.delete(x, OUTLIER_AT))
    x[OUTLIER_AT] = np.float32(float(others.max()) * 2.0**outlier)
    return x


def scale_text(enc: blockscale.Encoded, recipe: blockscale.Recipe) -> str:
    """The block scale(s) as stored: E8M0 powers of two, or NVFP4's E4M3 block scales times its FP32 tensor scale."""
    if recipe.two_level and enc.tensor_scale is not None:
        blocks = " · ".join(short(s, 4) if s >= 1 else page.sci(s, 3) for s in enc.block_scales)
        return page.t("scale_two_level", blocks=blocks, tensor=page.sci(enc.tensor_scale, 3))
    return " · ".join(f"2^{int(np.log2(s))}" for s in enc.block_scales)


def short(x: float, places: int) -> str:
    """A number with at most ``places`` decimals and no trailing zeros, in the page's language."""
    text = page.num(x, places)
    mark = "," if page.lang == "id" else "."
    return text.rstrip("0").rstrip(mark) if mark in text else text


def times(k: float) -> str:
    """2**k as a multiple: 1.7, 3.4, 256, 65,536."""
    return short(2.0**k, 1 if k < 4 else 0)


def db(x: float) -> str:
    return "∞" if x == float("inf") else f"{page.num(x, 1)} dB"


def lesson() -> None:
    """One block as each recipe stores it; with a recorded run (``data=``), every recipe on the run's tensors too."""
    selection = recorded_run.data_controls(page)
    n = int(widgets.slider(page, "n", page.t("n"), lambda v: page.num(v), help=page.t("n_help")))
    grad = widgets.slider(page, "grad", page.t("grad"), page.sci, help=page.t("grad_help"))
    outlier = widgets.slider(
        page,
        "outlier",
        page.t("outlier"),
        lambda k: page.t("outlier_stop", k=short(k, 2), times=times(k)),
        help=page.t("outlier_help"),
    )
    layout.after_controls(page)
    x = gradient_block(n, grad, outlier)
    recipes = [blockscale.RECIPES[k] for k in SHOWN]
    label = {k: page.t(f"recipe_{k}") for k in SHOWN}
    encoded = {r.key: blockscale.encode(x, r) for r in recipes}
    lost = {r.key: blockscale.lost(x, r) for r in recipes}
    names = {o: page.t(f"outcome_{o}") for o in blockscale.OUTCOMES}
    charts = display.figure_area()
    display.metric_row(
        [
            (page.t("metric_flushed", recipe=label["mxfp4_e2m1"]), page.pct(lost["mxfp4_e2m1"].flushed)),
            (page.t("metric_flushed", recipe=label["nvfp4"]), page.pct(lost["nvfp4"].flushed)),
            (page.t("metric_saturated", recipe=label["mxfp8_e4m3"]), page.pct(lost["mxfp8_e4m3"].saturated)),
        ]
    )
    with charts:
        display.chart(
            figures.block_strips(
                strip_rows(x, encoded, label, names),
                [page.sci(float(v), 3) for v in x],
                names,
                page.t("axis_index"),
                page.lang,
            ),
            page.t("figure_title", n=n),
            page.t("caption", i=OUTLIER_AT + 1),
        )
    recipe_table(recipes, label, encoded, lost)
    layout.explain(page, explanation(lost, outlier, blockscale.floor_regime(x)), page.t("try"))
    if selection is not None:
        recorded_run.recipe_section(page, selection)


def strip_rows(
    x: np.ndarray,
    encoded: dict[str, blockscale.Encoded],
    label: dict[str, str],
    names: dict[str, str],
) -> list[figures.BlockRow]:
    """A strip per recipe: what became of each value, the value stored, and a hover saying both."""
    rows = []
    for key, enc in encoded.items():
        marks = blockscale.outcomes(x, enc)
        stored = [page.sci(float(v), 3) for v in enc.stored]
        hovers = [
            page.t("hover", recipe=label[key], i=i + 1, x=page.sci(float(x[i]), 3), stored=stored[i], what=names[m])
            for i, m in enumerate(marks)
        ]
        rows.append(figures.BlockRow(label[key], [str(m) for m in marks], stored, hovers))
    return rows


def recipe_table(
    recipes: list[blockscale.Recipe],
    label: dict[str, str],
    encoded: dict[str, blockscale.Encoded],
    lost: dict[str, blockscale.Lost],
) -> None:
    """A row per recipe: its block scale(s), the share flushed to 0 and saturated, and the SQNR."""
    st.dataframe(
        [
            {
                page.t("col_recipe"): label[r.key],
                page.t("col_scale"): scale_text(encoded[r.key], r),
                page.t("col_flushed"): page.pct(lost[r.key].flushed),
                page.t("col_saturated"): page.pct(lost[r.key].saturated),
                page.t("col_sqnr"): db(lost[r.key].sqnr_db),
            }
            for r in recipes
        ],
        hide_index=True,
        width="stretch",
    )


def explanation(lost: dict[str, blockscale.Lost], outlier: float, regime: blockscale.FloorRegime) -> str:
    """What the block shows: which 4-bit recipes flush values to 0, and where MXFP8's OCP scale stands (``regime``)."""
    mx4, nv4 = lost["mxfp4_e2m1"], lost["nvfp4"]
    floor, ceil = lost["mxfp8_e4m3"], lost["mxfp8_e4m3_ceil"]
    values = {
        "mx4": page.pct(mx4.flushed),
        "nv4": page.pct(nv4.flushed),
        "times": times(outlier),
        "floor_sat": page.pct(floor.saturated),
        "floor_db": db(floor.sqnr_db),
        "ceil_db": db(ceil.sqnr_db),
    }
    if mx4.flushed > nv4.flushed:
        paragraph = page.t("explain_flush", **values)
    elif mx4.flushed > 0:
        paragraph = page.t("explain_both_flush", **values)
    else:
        paragraph = page.t("explain_nothing_flushed", **values)
    return paragraph + " " + page.t(f"explain_floor_{regime}", **values)


page = setup("blocks")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")
st.markdown(page.t("intro"))
layout.lesson(page, lesson)
layout.notes(
    page,
    page.t("notes"),
    [page.t("refs.ocp_mx"), page.t("refs.mxfp8_recipes"), page.t("refs.nvfp4"), page.t("refs.deepseek_v3")],
)
quiz.check_yourself(page, 2)
