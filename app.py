"""Lensa · Mixed Precision: the home page, an overview of the steps (``lensa.ui.site.STEPS``), one idea each."""

import streamlit as st

from lensa.ui import i18n, layout
from lensa.ui.frame import link_params, page_label, page_link, setup
from lensa.ui.site import STEP_COUNT, STEPS

page = setup("overview")
layout.after_controls(page)
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")
st.markdown(page.t("intro_1"))
st.markdown(page.t("intro_2"))
page_link(
    STEPS[0].file,
    label=f"{page.t('start')} →",
    icon=":material/school:",
    query_params=link_params(STEPS[0].key, page.lang),
)

st.subheader(
    page.t(
        "ideas_title",
        Steps=i18n.count_in_words(STEP_COUNT, page.lang, capital=True),
        steps=i18n.count_in_words(STEP_COUNT, page.lang),
    )
)
for step in STEPS:
    text_column, link_column = st.columns([5, 2], vertical_alignment="center")
    text_column.markdown(page.t(f"idea_{step.key}"))
    with link_column:
        page_link(step.file, label=page_label(page, step), query_params=link_params(step.key, page.lang))

st.subheader(page.t("faq_title"))
for i in range(1, 7):
    with st.expander(page.t(f"faq_q{i}")):
        st.markdown(page.t(f"faq_a{i}"))

st.subheader(page.t("refs_title"))
st.markdown(
    "\n".join(
        f"{n}. {page.t('refs.' + key)}"
        for n, key in enumerate(("micikevicius2017", "zero", "kalamkar", "korthikanti", "fp8"), start=1)
    )
)
