"""Step 4 · FP32 master weights: small updates vanish in FP16."""

from lensa.formats import quantize, representable_between, spacing
from lensa.master import is_update_lost, total_change
from lensa.ui import figures, widgets
from lensa.ui.frame import setup

STEPS = 1000
TICKS_EACH_SIDE = 4

page = setup("master_weights")
widgets.step_header(page)
update = widgets.slider(page, "update", page.t("update"), lambda v: page.sci(v, 3), help=page.t("update_help"))
w = widgets.slider(page, "w", page.t("w"), page.plain)
widgets.after_controls(page)

gap = float(spacing(w, "fp16"))
w16 = float(quantize(w, "fp16"))
stored = float(quantize(w16 + float(quantize(update, "fp16")), "fp16"))
reach = max(TICKS_EACH_SIDE * gap, update * 1.05)
grid = representable_between(w16 - reach, w16 + reach, "fp16")
change16 = total_change(w, update, STEPS, "fp16")
change32 = total_change(w, update, STEPS, "fp32")
exact = STEPS * update

widgets.chart(
    figures.number_line(
        w16,
        update,
        stored,
        grid,
        gap,
        {
            "w": page.t("mark_w"),
            "exact": page.t("mark_exact"),
            "stored": page.t("mark_stored"),
            "half": page.t("mark_half"),
        },
        page.t("axis_offset"),
        page.lang,
    ),
    page.t("figure_title", spacing=page.sci(gap, 3)),
    alt=page.t(
        "alt",
        w=page.plain(w),
        spacing=page.sci(gap, 3),
        ratio=page.sci(update / gap),
        stored=figures.exact(stored, page.lang),
    ),
)
widgets.chart(
    figures.labelled_bars(
        [page.t("bar_exact"), page.t("bar_master"), page.t("bar_fp16")],
        [exact, change32, change16],
        [figures.NEUTRAL, figures.FORMAT_COLOURS["fp32"], figures.FORMAT_COLOURS["fp16"]],
        [page.sci(exact, 3), page.sci(change32, 3), page.sci(change16, 3)],
        lang=page.lang,
        hovers=[
            f"{page.t('bar_exact')}: {figures.exact(exact, page.lang)}",
            f"{page.t('bar_master')}: {figures.exact(change32, page.lang)}",
            f"{page.t('bar_fp16')}: {figures.exact(change16, page.lang)}",
        ],
        x_max=max(exact, change32, change16) * 1.3,
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

ratio = update / gap
widgets.metric_row(
    [
        (page.t("metric_spacing"), page.sci(gap, 3)),
        (page.t("metric_ratio"), page.sci(ratio)),
        (page.t("metric_fp16"), page.sci(change16, 3)),
        (page.t("metric_master"), page.sci(change32, 3)),
    ]
)

values = {
    "ratio": page.sci(ratio),
    "w": page.plain(w),
    "steps": page.num(STEPS),
    "master": page.sci(change32, 3),
    "exact": page.sci(exact, 3),
    "fp16": page.sci(change16, 3),
    "fp32_spacing": page.sci(float(spacing(w, "fp32")), 3),
}
paragraph = page.t("explain_lost" if is_update_lost(w, update, "fp16") else "explain_kept", **values)
if is_update_lost(w, update, "fp32"):
    paragraph += page.t("explain_both_lost", **values)
widgets.explain(page, paragraph, page.t("try"))
widgets.notes(page, page.t("notes"), [page.t("refs.micikevicius2017"), page.t("refs.ieee754")])
widgets.check_yourself(page, 2)
widgets.step_footer(page)
