"""Block scaling: one block of gradients with one outlier, as FP8, MX and NVFP4 recipes store it."""

from collections.abc import Sequence

import streamlit as st

from lensa.lessons.blocks import (
    FP4_FLUSH_TIE,
    FP4_SMALLEST,
    SHOWN,
    BlocksView,
    RecipeOnBlock,
    blocks_view,
    outlier_times,
)
from lensa.numerics import blockscale
from lensa.ui import figures, layout, quiz, recorded_run, widgets
from lensa.ui.components import scrub
from lensa.ui.controls import NumberControl
from lensa.ui.frame import setup

COMPACT_STRIPS_PX = 215


def scale_text(on_block: RecipeOnBlock) -> str:
    """The block scale(s) as stored: E8M0 powers of two, or NVFP4's E4M3 block scales times its FP32 tensor scale."""
    enc, recipe = on_block.encoded, on_block.recipe
    if recipe.two_level and enc.tensor_scale is not None:
        blocks = " · ".join(short(s, 4) if s >= 1 else page.sci(s, 3) for s in enc.block_scales)
        return page.t("scale_two_level", blocks=blocks, tensor=page.sci(enc.tensor_scale, 3))
    return " · ".join(f"2^{k}" for k in on_block.scale_exps)


def short(x: float, places: int) -> str:
    """A number with at most ``places`` decimals and no trailing zeros, in the page's language."""
    text = page.num(x, places)
    mark = "," if page.lang == "id" else "."
    return text.rstrip("0").rstrip(mark) if mark in text else text


def times(view_times: float, outlier: float) -> str:
    """2**k as a multiple: 1.7, 3.4, 256, 65,536."""
    return short(view_times, 1 if outlier < 4 else 0)


def db(x: float) -> str:
    return "∞" if x == float("inf") else f"{page.num(x, 1)} dB"


def labels() -> dict[str, str]:
    return {k: page.t(f"recipe_{k}") for k in SHOWN}


def strip_rows(view: BlocksView) -> list[figures.BlockRow]:
    """A strip per recipe: what became of each value and the value stored (the hover says both)."""
    label = labels()
    return [
        figures.BlockRow(label[key], list(r.outcomes), [page.sci(float(v), 3) for v in r.encoded.stored], [])
        for key, r in view.recipes.items()
    ]


def frame(view: BlocksView) -> scrub.Frame:
    """What the component shows at one position of the outlier: the strips, then the cards."""
    names = {o: page.t(f"outcome_{o}") for o in blockscale.OUTCOMES}
    label = labels()
    rows = strip_rows(view)
    chart = scrub.Chart(
        figures.block_strips(
            rows,
            [page.sci(float(v), 3) for v in view.values],
            names,
            page.t("axis_index"),
            page.lang,
            hover=page.t("hover", recipe="{recipe}", i="{i}", x="{x}", stored="{stored}", what="{what}"),
        ),
        page.t("figure_title", n=view.n),
        page.t("caption", i=view.outlier_position),
        compact_height=COMPACT_STRIPS_PX,
        # on a phone the caption under the strips says what each mark means: the legend's two lines go, so the
        # cards and "Try this" stay on the screen with the slider; the recipes' names go above their strips
        compact_layout=figures.block_strips_phone_layout([row.label for row in rows]),
    )
    lost = {k: r.lost for k, r in view.recipes.items()}
    cards = scrub.Cards(
        (
            (page.t("metric_flushed", recipe=label["mxfp4_e2m1"]), page.pct(lost["mxfp4_e2m1"].flushed)),
            (page.t("metric_flushed", recipe=label["nvfp4"]), page.pct(lost["nvfp4"].flushed)),
            (page.t("metric_saturated", recipe=label["mxfp8_e4m3"]), page.pct(lost["mxfp8_e4m3"].saturated)),
        )
    )
    return (chart, cards)


def frames(n: int, grad: float) -> scrub.Build:
    def build(states: Sequence[scrub.State]) -> list[scrub.Frame]:
        return [frame(blocks_view(n, grad, state["outlier"])) for state in states]

    return build


def recipe_table(view: BlocksView) -> None:
    """A row per recipe: its block scale(s), the share flushed to 0 and saturated, and the SQNR."""
    label = labels()
    st.dataframe(
        [
            {
                page.t("col_recipe"): label[key],
                page.t("col_scale"): scale_text(r),
                page.t("col_flushed"): page.pct(r.lost.flushed),
                page.t("col_saturated"): page.pct(r.lost.saturated),
                page.t("col_sqnr"): db(r.lost.sqnr_db),
            }
            for key, r in view.recipes.items()
        ],
        hide_index=True,
        width="stretch",
    )


def explanation(view: BlocksView) -> str:
    """What the block shows: which 4-bit recipes flush values to 0, and where MXFP8's OCP scale stands."""
    lost = {k: r.lost for k, r in view.recipes.items()}
    floor, ceil = lost["mxfp8_e4m3"], lost["mxfp8_e4m3_ceil"]
    values = {
        "mx4": page.pct(lost["mxfp4_e2m1"].flushed),
        "nv4": page.pct(lost["nvfp4"].flushed),
        "times": times(view.times, view.outlier),
        "tie": short(FP4_FLUSH_TIE, 2),
        "smallest": short(FP4_SMALLEST, 2),
        "floor_sat": page.pct(floor.saturated),
        "floor_db": db(floor.sqnr_db),
        "ceil_db": db(ceil.sqnr_db),
    }
    return " ".join(
        [
            page.t(f"explain_{view.flush_regime}", **values),
            page.t(f"explain_floor_{view.floor_regime}", **values),
        ]
    )


def lesson() -> None:
    """One block as each recipe stores it; with a recorded run (``data=``), every recipe on the run's tensors too."""
    picture = st.container()
    data_column, n_column, grad_column = st.columns(3, gap="small")
    with data_column:
        data = recorded_run.data_choice(page, compact=True)
    with n_column:
        n = int(widgets.slider(page, "n", page.t("n"), lambda v: page.num(v), help=page.t("n_help")))
    with grad_column:
        grad = widgets.slider(page, "grad", page.t("grad"), page.sci, help=page.t("grad_help"))
    selection = recorded_run.data_controls(page, data)
    control = widgets.declared(page, "outlier", NumberControl)
    outlier_slider = scrub.Slider(
        control,
        page.t("outlier"),
        lambda k: page.t("outlier_stop", k=short(k, 2), times=times(outlier_times(k), k)),
        page.t("outlier_help"),
    )
    with picture:
        outlier = scrub.scrub(page, [outlier_slider], frames(n, grad), (n, grad), page.t("try"))["outlier"]
        st.markdown(page.t("intro"))  # under the picture: the slider, the block and its cards come first on the screen
    layout.after_controls(page)
    view = blocks_view(n, grad, outlier)
    recipe_table(view)
    layout.explain(page, explanation(view), None)  # the scrub shows Try this
    if selection is not None:
        recorded_run.recipe_section(page, selection)


page = setup("blocks")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")
layout.lesson(page, lesson)
layout.notes(
    page,
    page.t("notes"),
    [page.t("refs.ocp_mx"), page.t("refs.mxfp8_recipes"), page.t("refs.nvfp4"), page.t("refs.deepseek_v3")],
)
quiz.check_yourself(page, 2)
