"""What surrounds a step's lesson: its header, the lesson fragment, the navigation and notices drawn once the
controls are read, the explanation box, the notes and the footer with the previous and next links."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from lensa.ui import quiz
from lensa.ui.components import scrub
from lensa.ui.frame import (
    Page,
    draw_navigation,
    draw_own_link,
    fill_navigation,
    link_params,
    navigation_slots,
    page_label,
    step_of,
)
from lensa.ui.injected import page_extras
from lensa.ui.site import STEP_COUNT

LINK_NOTICE_ICON = ":material/link_off:"


def after_controls(page: Page) -> None:
    """Once a page has read its controls: draw the navigation and say what became of bad link values.

    Inside a step's lesson fragment (:func:`lesson`) only the page's own navigation entry is drawn here;
    the fragment's caller draws the rest.
    """
    if page.own_link is None:
        page_extras(page.lang)
        draw_navigation(page)
    else:
        draw_own_link(page)
    if not page.notices:
        return
    assert page.notice_area is not None, "setup() makes the notices' container"
    # Link values are read in full runs; should a fragment rerun find a bad one, it says so in its own part:
    # a fragment may write to a container outside it only where its full run wrote too.
    with st.container() if page.partial else page.notice_area:
        for text in page.notices:
            st.warning(text, icon=LINK_NOTICE_ICON)


def lesson(page: Page, body: Callable[[], None]) -> None:
    """Draw ``body``, the part of a step that its controls change, as a fragment: a move reruns only that part.

    The title, the notes, the questions, the footer and the navigation are drawn by the page's full runs;
    a move of a control inside ``body`` reruns ``body`` alone (``st.fragment``), so the server builds and
    the browser redraws a fraction of the page. Such a rerun is on the same page in the same language with
    every widget's state intact, so the controls read those states as the learner's latest moves. ``body``
    calls :func:`after_controls`, which fills the page's own navigation entry (its link carries the
    controls' values) in a slot kept for it; Streamlit redraws a fragment's writes to such an outside slot
    in place. A control whose value shows outside ``body`` is drawn with ``whole_page=True``.
    """
    page_extras(page.lang, preload=scrub.PLOTLY_PATH)  # a step's scrub imports Plotly.js: fetch it meanwhile
    slots = navigation_slots(page)
    page.own_link = slots[page.info.key]
    runs = 0

    def part() -> None:
        nonlocal runs
        if runs:  # Streamlit calls the fragment kept from the last full run: a rerun of the fragment alone
            page.switched = False
            page.partial = True
            page.notices.clear()
        runs += 1
        body()

    st.fragment(part)()
    fill_navigation(page, slots)


def step_header(page: Page) -> None:
    st.caption(page.t("nav.step_of", n=page.info.step, total=STEP_COUNT))
    st.title(page.t("title"))
    st.markdown(f"#### {page.t('headline')}")


def explain(page: Page, paragraph: str, try_this: str | None = None) -> None:
    st.markdown(paragraph)
    if try_this is not None:  # a step whose sliders are a scrub draws its "Try this" with them (display.try_this)
        st.info(f"**{page.t('common.try_this')}** {try_this}", icon=":material/touch_app:")


def notes(page: Page, body: str, sources: Sequence[str]) -> None:
    with st.expander(page.t("common.notes"), icon=":material/menu_book:"):
        st.markdown(body)
        st.markdown(f"**{page.t('common.sources')}**")
        st.markdown("\n".join(f"- {s}" for s in sources))


def step_end(page: Page, notes_body: str, sources: Sequence[str]) -> None:
    """How every step ends: notes and sources, the check-yourself questions answers.toml lists, the step links."""
    notes(page, notes_body, sources)
    quiz.check_yourself(page, quiz.question_count(page))
    step_footer(page)


def step_footer(page: Page) -> None:
    """Previous and next links, carrying the language and the target's last values."""
    before, after = step_of(page.info)
    left, right = st.columns(2)
    if before is not None:
        with left:
            st.page_link(
                before.file,
                label=f"← {page_label(page, before)}",
                query_params=link_params(before.key, page.lang),
            )
    if after is not None:
        with right, st.container(horizontal=True, horizontal_alignment="right"):
            st.page_link(
                after.file,
                label=f"{page_label(page, after)} →",
                query_params=link_params(after.key, page.lang),
            )
