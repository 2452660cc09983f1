"""Step 5 · BF16: FP32's range with fewer significand bits."""

import streamlit as st

from lensa.formats import FORMATS, category_shares, relative_error, representable_between
from lensa.gradients import gradient_sample
from lensa.ui import compare, figures, widgets
from lensa.ui.frame import setup

LESSON_FORMATS = ("fp32", "bf16", "fp16")

page = setup("bf16")
widgets.step_header(page)
grad = widgets.slider(page, "grad", page.t("grad"), page.sci, help=page.t("grad_help"))
fp8 = widgets.toggle(page, "fp8", page.t("common.fp8_toggle"), help=page.t("common.fp8_help"))
widgets.after_controls(page)

sample = gradient_sample(grad)
ranges = [
    figures.FormatRange(
        key, FORMATS[key].label, FORMATS[key].smallest_subnormal, FORMATS[key].smallest_normal, FORMATS[key].max
    )
    for key in (LESSON_FORMATS + compare.FP8_KEYS if fp8 else LESSON_FORMATS)
]
widgets.chart(
    figures.format_ranges(
        ranges,
        sample,
        {
            "gradients": page.t("range_gradients"),
            "subnormal": page.t("range_subnormal"),
            "normal": page.t("range_normal"),
            "hover": page.t("range_hover"),
        },
        page.lang,
    ),
    page.t("range_title"),
    page.t("common.illustration"),
    alt=page.t(
        "range_alt",
        ranges="; ".join(f"{r.label} {page.sci(r.smallest_subnormal)} … {page.sci(r.max)}" for r in ranges),
        grad=page.sci(grad),
        z16=page.pct(category_shares(sample, "fp16")["zero"]),
        zbf=page.pct(category_shares(sample, "bf16")["zero"]),
    ),
)
grids = {key: representable_between(1.0, 1.0625, key) for key in ("fp16", "bf16")}
widgets.chart(
    figures.precision_ticks([(key, FORMATS[key].label, grid) for key, grid in grids.items()], page.lang),
    page.t("precision_title"),
    page.t("precision_caption", fp16=page.sci(FORMATS["fp16"].eps, 3), bf16=page.sci(FORMATS["bf16"].eps, 3)),
    alt=page.t(
        "precision_alt",
        n16=page.num(len(grids["fp16"])),
        nbf=page.num(len(grids["bf16"])),
        fp16=page.sci(FORMATS["fp16"].eps, 3),
        bf16=page.sci(FORMATS["bf16"].eps, 3),
    ),
)

s16, sbf = category_shares(sample, "fp16"), category_shares(sample, "bf16")
e16, ebf = float(relative_error(sample, "fp16").mean()), float(relative_error(sample, "bf16").mean())
widgets.metric_row(
    [
        (page.t("metric_fp16_zero"), page.pct(s16["zero"])),
        (page.t("metric_bf16_zero"), page.pct(sbf["zero"])),
        (page.t("metric_fp16_err"), page.pct(e16)),
        (page.t("metric_bf16_err"), page.pct(ebf)),
    ]
)

values = {
    "grad": page.sci(grad),
    "z16": page.pct(s16["zero"]),
    "zbf": page.pct(sbf["zero"]),
    "e16": page.pct(e16),
    "ebf": page.pct(ebf),
}
if s16["overflow"] > 0:
    regime = "explain_fp16_overflows"
elif e16 > ebf:
    regime = "explain_fp16_loses"
else:
    regime = "explain_both_hold"
widgets.explain(page, page.t(regime, **values), page.t("try"))
if fp8:
    st.subheader(page.t("fp8_title"))
    st.dataframe(compare.format_rows(page, sample, ("fp16", "bf16", *compare.FP8_KEYS)), hide_index=True)
    st.markdown(page.t("fp8_explain"))
widgets.notes(page, page.t("notes"), [page.t("refs.kalamkar"), page.t("refs.ieee754")])
widgets.check_yourself(page, 2)
widgets.step_footer(page)
