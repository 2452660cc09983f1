"""Glossary: the lesson's terms in a few sentences each; ``?term=<key>`` opens it at one of them."""

import streamlit as st

from lensa.ui import glossary, layout, widgets
from lensa.ui.frame import link_params, page_label, page_link, setup
from lensa.ui.site import PAGES_BY_KEY

page = setup("glossary")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")


def name(term: str) -> str:
    return page.t("term_all") if term == "all" else page.t(f"term_{term}")


term = widgets.dropdown(page, "term", page.t("term"), name)
layout.after_controls(page)


def entry(key: str) -> None:
    """A term: its name, its definition, and a link to the page that first uses it."""
    first = PAGES_BY_KEY[glossary.first_page(key)]
    st.markdown(f"**{name(key)}**  \n{page.t(f'def_{key}')}")
    page_link(
        first.file,
        label=page.t("first_used", page=page_label(page, first)),
        icon=":material/subdirectory_arrow_left:",
        query_params=link_params(first.key, page.lang),
    )


if term != "all":
    with st.container(border=True, key="lensa-glossary-entry"):
        entry(term)

st.subheader(page.t("all_title"))
for key in sorted(glossary.TERM_KEYS, key=lambda k: name(k).casefold()):
    entry(key)
