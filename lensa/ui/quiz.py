"""Predict, then reveal: a step's questions, asked before the explanation that answers them.

A step's questions (``answers.toml`` lists them, ``<page>_q<n>``) come one at a time, in a box of their own
right after the step's controls, chart and cards and before its explanation: the learner commits to an
answer first and only then sees whether it holds and why. Each answer is kept for the session (it outlives
page and language switches), so a step remembers what was answered on it, the navigation marks the steps
whose questions are all answered, and the summary page lists every answer.
"""

from __future__ import annotations

from functools import partial

import streamlit as st

from lensa.ui.frame import Page
from lensa.ui.progress import answered, is_right, questions

LETTERS = ("a", "b", "c")
# The controls a question asks the learner to move ("Slide the size down to 1e-8"), by question id. Such a
# question is asked only where its page shows those controls: a recorded run replaces steps 2, 4 and 5's sliders
# (tests/test_quiz.py holds this list to the questions' texts and to what each data source draws).
MOVES: dict[str, tuple[str, ...]] = {
    "memory_q1": ("precision",),
    "memory_q2": ("zero", "gpus"),
    "fp16_range_q1": ("grad",),
    "loss_scaling_q1": ("scale",),
    "master_weights_q1": ("w", "update"),
    "master_weights_q3": ("w", "update"),
    "bf16_q1": ("grad",),
    "bf16_q2": ("grad",),
    "blocks_q1": ("outlier",),
}
BOX_KEY = "lensa-quiz"  # the questions' container; its class (st-key-…) keeps it off paper (lensa.ui.injected)


def question_count(page: Page) -> int:
    """How many questions ``answers.toml`` lists for the page (keys ``<page>_q<n>``)."""
    return len(questions(page.info.key))


def asked(page: Page) -> list[str]:
    """The page's questions that this run can ask: those whose controls (:data:`MOVES`) the page shows."""
    return [q for q in questions(page.info.key) if set(MOVES.get(q, ())) <= page.controls_shown]


def _commit(question: str, widget: str) -> None:
    """A radio's change: keep the learner's answer for the session (Streamlit forgets the widget on a page switch)."""
    letter = st.session_state.get(widget)
    if letter in LETTERS:
        answered()[question] = letter


def widget_key(page_key: str, n: int) -> str:
    return f"quiz.{page_key}.{n}"


def predict(page: Page) -> None:
    """The page's questions before its explanation, one at a time: the next appears once this one is answered.

    Catalogue keys per question n: ``quiz.<page>_q<n>`` (the question), ``..._a``, ``..._b``, ``..._c``
    (the answers) and ``..._why`` (the explanation, shown once the learner has answered). The right letter
    is the same in every language, so it is kept once, in ``lensa/text/answers.toml``. Nothing is drawn in
    the print view (a page on paper has no one to answer), nor for a page without questions. A question that
    asks the learner to move a control the page does not show in this run (:func:`asked`) is left out.
    """
    ids = asked(page)
    if page.questions_drawn or page.printing or not ids:
        return
    page.questions_drawn = True
    record = answered()
    with st.container(border=True, key=BOX_KEY):
        for n, question in enumerate(ids, start=1):
            base = f"quiz.{question}"
            key = widget_key(page.info.key, int(question.rsplit("_q", 1)[1]))  # its own number, whichever are asked
            st.markdown(f"**{page.t('common.predict')}** · {page.t('common.question_of', n=n, total=len(ids))}")
            kept = record.get(question)
            picked = st.radio(
                page.t(base),
                LETTERS,
                index=LETTERS.index(kept) if kept in LETTERS else None,
                format_func=lambda letter, base=base: page.t(f"{base}_{letter}"),
                key=key,
                on_change=partial(_commit, question, key),
            )
            if picked is None:
                return  # the later questions wait for this one
            record[question] = picked  # a value the widget kept from before the record existed counts too
            right = is_right(question, picked)
            verdict = page.t("common.check_right" if right else "common.check_wrong")
            (st.success if right else st.warning)(f"**{verdict}** {page.t(base + '_why')}")


def check_yourself(page: Page, count: int | None = None) -> None:
    """The page's questions where it has not drawn them yet (a page whose explanation did not ask them).

    ``count`` is accepted for pages written before the questions moved above the explanation; the questions
    drawn are always those ``answers.toml`` lists.
    """
    del count
    predict(page)
