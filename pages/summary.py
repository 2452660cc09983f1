"""Summary: the lesson's ideas, one per step (``lensa.ui.site.STEPS``), with what the learner answered this session."""

import streamlit as st

from lensa.ui import i18n, layout, progress
from lensa.ui.frame import link_params, page_link, setup
from lensa.ui.site import STEP_COUNT, STEPS

page = setup("summary")
layout.after_controls(page)
st.title(page.t("title"))
st.markdown(
    "#### "
    + page.t(
        "headline",
        Steps=i18n.count_in_words(STEP_COUNT, page.lang, capital=True),
        steps=i18n.count_in_words(STEP_COUNT, page.lang),
    )
)
st.markdown(page.t("intro"))

record = progress.answered()
asked = [q for step in STEPS for q in progress.questions(step.key)]
given = [q for q in asked if q in record]
if given:
    right = progress.right_count(record, given)
    st.info(
        page.t("score", answered=page.num(len(given)), total=page.num(len(asked)), right=page.num(right)),
        icon=":material/checklist:",
    )
else:
    st.info(page.t("nothing_yet"), icon=":material/help:")


def answer_lines(question: str) -> str:
    """A question, what the learner answered, right or not in words (not by colour), and the right answer."""
    text = f"quiz.{question}"
    lines = [f"**{page.t(text)}**"]
    letter = record.get(question)
    truth = i18n.answers()[question]
    if letter is None:
        lines.append(f":material/radio_button_unchecked: {page.t('not_answered')}")
    else:
        right = letter == truth
        mark = ":material/check_circle:" if right else ":material/cancel:"
        verdict = page.t("common.check_right" if right else "common.check_wrong")
        lines.append(f"{mark} {verdict} {page.t('your_answer', answer=page.t(f'{text}_{letter}'))}")
        if not right:
            lines.append(page.t("right_answer", answer=page.t(f"{text}_{truth}")))
    return "  \n".join(lines)


for step in STEPS:
    with st.container(border=True):
        st.markdown(page.t(f"overview.idea_{step.key}"))
        for question in progress.questions(step.key):
            st.markdown(answer_lines(question))
        page_link(
            step.file,
            label=page.t("open_step", n=step.step) + f" · {page.t(f'nav.{step.key}')}",
            icon=":material/arrow_forward:",
            query_params=link_params(step.key, page.lang),
        )

if given and not page.printing:
    st.button(page.t("clear"), icon=":material/restart_alt:", on_click=progress.forget_all)
layout.step_links(page)
layout.step_footer(page)
