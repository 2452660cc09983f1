"""What surrounds a step's lesson: its header, the lesson fragment, the navigation and notices drawn once the
controls are read, the explanation box, the notes and the footer with the previous and next links."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import urlencode

import streamlit as st

from lensa.numerics import inspector
from lensa.numerics.formats import FORMATS
from lensa.ui import glossary, quiz
from lensa.ui.components import scrub
from lensa.ui.frame import (
    PRINT_PARAM,
    Page,
    draw_navigation,
    draw_own_link,
    fill_navigation,
    link_params,
    navigation_slots,
    page_label,
    page_link,
    step_of,
)
from lensa.ui.injected import page_extras
from lensa.ui.site import PAGES_BY_KEY, STEP_COUNT

LINK_NOTICE_ICON = ":material/link_off:"


def after_controls(page: Page) -> None:
    """Once a page has read its controls: draw the navigation and say what became of bad link values.

    Inside a step's lesson fragment (:func:`lesson`) only the page's own navigation entry is drawn here;
    the fragment's caller draws the rest.
    """
    if page.own_link is None:
        extras(page)
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


def lesson(page: Page, body: Callable[[], None], *, scrubs: bool = True) -> None:
    """Draw ``body``, the part of a step that its controls change, as a fragment: a move reruns only that part.

    The title, the notes, the questions, the footer and the navigation are drawn by the page's full runs;
    a move of a control inside ``body`` reruns ``body`` alone (``st.fragment``), so the server builds and
    the browser redraws a fraction of the page. Such a rerun is on the same page in the same language with
    every widget's state intact, so the controls read those states as the learner's latest moves. ``body``
    calls :func:`after_controls`, which fills the page's own navigation entry (its link carries the
    controls' values) in a slot kept for it; Streamlit redraws a fragment's writes to such an outside slot
    in place. A control whose value shows outside ``body`` is drawn with ``whole_page=True``. ``scrubs``: ``body``
    draws a scrub component (:mod:`lensa.ui.components.scrub`). A ``body`` that has not called
    :func:`after_controls` when it returns gets it called then, so the own entry is never missing.
    """
    extras(page, scrubs=scrubs)
    slots = navigation_slots(page)
    page.own_link = slots[page.info.key]
    runs = 0
    outside = set(page.controls_shown)  # the controls the full run drew before the fragment

    def part() -> None:
        nonlocal runs
        if runs:  # Streamlit calls the fragment kept from the last full run: a rerun of the fragment alone
            page.switched = False
            page.partial = True
            page.notices.clear()
            page.controls_shown = set(outside)  # the fragment draws its own again (a data choice may drop some)
        runs += 1
        page.questions_drawn = False  # the questions sit in the fragment: each of its runs draws them again
        page.own_link_drawn = False
        body()
        if not page.own_link_drawn:
            # A body that reads no control of its own after the shared ones (step 2 with a recorded run) need not
            # call after_controls: left empty, the slots would drop the page's own entry and the progress line.
            after_controls(page)

    st.fragment(part)()
    fill_navigation(page, slots)


def step_header(page: Page) -> None:
    st.caption(page.t("nav.step_of", n=page.info.step, total=STEP_COUNT))
    st.title(page.t("title"))
    st.markdown(f"#### {page.t('headline')}")


def extras(page: Page, *, scrubs: bool = False) -> None:
    """The page's script and styles (:func:`lensa.ui.injected.page_extras`); the print view opens the charts'
    data tables and the account of how a float is stored. A page that ``scrubs`` (draws a scrub component, which
    imports Plotly.js) has the browser fetch Plotly.js while the page's script runs; the print view draws none."""
    if page.printing:
        page_extras(page.lang, (page.t("figure.table"), page.t("glossary.primer_title")))
    else:
        page_extras(page.lang, preload=scrub.PLOTLY_PATH if scrubs else None)


def explain(page: Page, paragraph: str, try_this: str | None, *, links: bool = True) -> None:
    """The step's words under its picture: "Try this", the questions, then the explanation that answers them.

    The questions (:func:`lensa.ui.quiz.predict`) come before the paragraph, so the learner predicts before
    reading why. ``try_this`` is None where the picture's own component shows it. The page where floating
    point is first used gets the account of how a float is stored after its paragraph; every step ends its
    words with the links to the glossary, the format inspector and its print view (a step that explains
    several pictures passes ``links=False`` to all but its last).
    """
    if try_this is not None and not page.printing:
        st.info(f"**{page.t('common.try_this')}** {try_this}", icon=":material/touch_app:")
    quiz.predict(page)
    st.markdown(paragraph)
    if page.info.key == glossary.first_page(glossary.PRIMER_TERM):
        how_a_float_is_stored(page)
    if links:
        step_links(page)


# The numbers the account of a float writes out bit by bit: a normal value, the smallest normal, the step's
# default gradient (a subnormal) and one that rounds to 0 (step 2's slider reaches each as a typical size).
PRIMER_FORMAT = "fp16"
PRIMER_EXAMPLES = ("0.1", "6.103515625e-5", "1e-6", "2e-8")
PLAIN_FROM = 0.01  # values from here up are written as plain decimals (0.1), smaller ones in e-notation (1.0e-6)


def how_a_float_is_stored(page: Page) -> None:
    """A closed section: a float's three fields, FP16's numbers, and a few values bit by bit (from the inspector)."""
    fmt = FORMATS[PRIMER_FORMAT]
    with st.expander(page.t("glossary.primer_title"), icon=":material/memory:"):
        st.markdown(
            page.t(
                "glossary.primer_body",
                fmt=fmt.label,
                bits=page.num(fmt.bits),
                exponent_bits=page.num(fmt.exponent_bits),
                significand_bits=page.num(fmt.significand_bits),
                significant=page.num(fmt.significand_bits + 1),
                bias=page.num(fmt.bias),
                emin=f"−{page.num(-fmt.emin)}",  # written with the typographic minus, as 2^−14
            )
        )
        st.markdown(_primer_table(page))
        page_link(
            PAGES_BY_KEY["formats"].file,
            label=page.t("glossary.primer_inspector"),
            icon=":material/search:",
            query_params={**link_params("formats", page.lang), "x": PRIMER_EXAMPLES[2]},
        )


_PRIMER_TABLES: dict[str, str] = {}  # by language: the same for every visitor, made once


def _primer_table(page: Page) -> str:
    """The few values of :data:`PRIMER_EXAMPLES` bit by bit, as a markdown table in the page's language."""
    if page.lang not in _PRIMER_TABLES:
        fmt = FORMATS[PRIMER_FORMAT]
        rows = []
        for text in PRIMER_EXAMPLES:
            r = inspector.inspect(text, fmt)
            rows.append(
                (
                    page.decimal(float(text)) if float(text) >= PLAIN_FROM else page.sci(float(text)),
                    f":violet[`{r.sign_str}`]",
                    f":blue[`{r.exponent_str}`]",
                    f":orange[`{r.significand_str}`]",
                    page.t(f"category.{r.category}"),
                    r.stored_exact.replace(".", ",") if page.lang == "id" else r.stored_exact,
                )
            )
        headers = [page.t(f"glossary.primer_col_{c}") for c in ("value", "sign", "exponent", "significand", "what")]
        headers.append(page.t("glossary.primer_col_stored"))
        _PRIMER_TABLES[page.lang] = _table(headers, rows)
    return _PRIMER_TABLES[page.lang]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def step_links(page: Page) -> None:
    """One row of links under a step's words: the glossary, the format inspector, and the step's print view.

    Drawn inside the step's lesson fragment, so the print view's link carries the controls' values of now.
    """
    if page.printing:
        return
    with st.container(horizontal=True, key="lensa-tools", gap="medium", vertical_alignment="center"):
        page_link(
            PAGES_BY_KEY["glossary"].file,
            label=page.t("common.link_glossary"),
            icon=":material/dictionary:",
            query_params=link_params("glossary", page.lang),
        )
        page_link(
            PAGES_BY_KEY["formats"].file,
            label=page.t("nav.formats"),
            icon=":material/search:",
            query_params=link_params("formats", page.lang),
        )
        # A link, not a page link: the print view opens beside the page (a page link to the page itself
        # would be drawn as the current one), to be printed and closed.
        query = urlencode({**link_params(page.info.key, page.lang), PRINT_PARAM: "1"})
        st.link_button(page.t("common.link_print"), f"?{query}", icon=":material/print:", type="tertiary")


def notes(page: Page, body: str, sources: Sequence[str]) -> None:
    if page.printing:
        return  # on paper a closed section is a line that says nothing
    with st.expander(page.t("common.notes"), icon=":material/menu_book:"):
        st.markdown(body)
        st.markdown(f"**{page.t('common.sources')}**")
        st.markdown("\n".join(f"- {s}" for s in sources))


def step_end(page: Page, notes_body: str, sources: Sequence[str]) -> None:
    """How every step ends: notes and sources, the questions (where the explanation did not ask them), the links."""
    notes(page, notes_body, sources)
    quiz.check_yourself(page)
    step_footer(page)


def step_footer(page: Page) -> None:
    """Previous and next links, carrying the language and the target's last values (none on paper)."""
    if page.printing:
        return
    before, after = step_of(page.info)
    with st.container(key="lensa-footer"):
        left, right = st.columns(2)
        if before is not None:
            with left:
                page_link(
                    before.file,
                    label=f"← {page_label(page, before)}",
                    query_params=link_params(before.key, page.lang),
                )
        if after is not None:
            with right, st.container(horizontal=True, horizontal_alignment="right"):
                page_link(
                    after.file,
                    label=f"{page_label(page, after)} →",
                    query_params=link_params(after.key, page.lang),
                )
