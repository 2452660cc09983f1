"""Step 2 · FP16's narrow range: small gradients round to zero."""

import streamlit as st

from lensa.formats import FORMATS, category_shares
from lensa.gradients import gradient_sample
from lensa.ui import compare, widgets
from lensa.ui.frame import setup

FP16 = FORMATS["fp16"]

page = setup("fp16_range")
widgets.step_header(page)
grad = widgets.slider(page, "grad", page.t("grad"), page.sci, help=page.t("grad_help"))
fp8 = widgets.toggle(page, "fp8", page.t("common.fp8_toggle"), help=page.t("common.fp8_help"))
widgets.after_controls(page)

sample = gradient_sample(grad)
shares = category_shares(sample, FP16)
widgets.chart(
    compare.fp16_histogram(page, sample),
    page.t("figure_title"),
    page.t(
        "caption", sub=page.sci(FP16.smallest_subnormal), normal=page.sci(FP16.smallest_normal), max=page.num(FP16.max)
    )
    + " "
    + page.t("common.illustration"),
    alt=page.t(
        "alt",
        grad=page.sci(grad),
        zero=page.pct(shares["zero"]),
        sub=page.pct(shares["subnormal"]),
        normal=page.pct(shares["normal"]),
        over=page.pct(shares["overflow"]),
        largest=page.sci(float(sample.max())),
    ),
)

widgets.metric_row(
    [
        (page.t("metric_zero"), page.pct(shares["zero"])),
        (page.t("metric_subnormal"), page.pct(shares["subnormal"])),
        (page.t("metric_normal"), page.pct(shares["normal"])),
        (page.t("metric_largest"), page.sci(float(sample.max()))),
    ]
)

values = {
    "zero": page.pct(shares["zero"]),
    "sub": page.pct(shares["subnormal"]),
    "normal": page.pct(shares["normal"]),
    "over": page.pct(shares["overflow"]),
    "normal_limit": page.sci(FP16.smallest_normal),
}
regime = max(("zero", "subnormal", "normal"), key=lambda c: shares[c])
paragraph = page.t(f"explain_{regime}", **values)
if shares["overflow"] > 0:
    paragraph += page.t("explain_overflow", **values)
widgets.explain(page, paragraph, page.t("try"))
if fp8:
    st.subheader(page.t("fp8_title"))
    st.dataframe(compare.format_rows(page, sample, ("fp16", "bf16", *compare.FP8_KEYS)), hide_index=True)
    e4m3 = category_shares(sample, "fp8_e4m3")
    st.markdown(
        page.t(
            "fp8_explain",
            e4m3_zero=page.pct(e4m3["zero"]),
            e5m2_zero=page.pct(category_shares(sample, "fp8_e5m2")["zero"]),
        )
    )
widgets.notes(page, page.t("notes"), [page.t("refs.ieee754"), page.t("refs.micikevicius2017")])
widgets.check_yourself(page, 2)
widgets.step_footer(page)
