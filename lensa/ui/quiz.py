"""The check-yourself questions at the end of a step: predict, then see whether the prediction holds and why."""

from __future__ import annotations

import re

import streamlit as st

from lensa.ui import i18n
from lensa.ui.frame import Page

LETTERS = ("a", "b", "c")


def question_count(page: Page) -> int:
    """How many questions ``answers.toml`` lists for the page (keys ``<page>_q<n>``)."""
    return sum(1 for q in i18n.answers() if re.fullmatch(rf"{page.info.key}_q\d+", q))


def check_yourself(page: Page, count: int) -> None:
    """Predict-then-reveal questions: pick an answer, then see whether it holds and why.

    Catalogue keys per question n: ``quiz.<page>_q<n>`` (the question),
    ``..._a``, ``..._b``, ``..._c`` (answers) and ``..._why`` (the
    explanation). The letter of the right answer is the same in every
    language, so it is kept once, in ``lensa/text/answers.toml``.
    """
    st.subheader(page.t("common.check_title"))
    for n in range(1, count + 1):
        base = f"quiz.{page.info.key}_q{n}"

        def answer(letter: str, base: str = base) -> str:
            return page.t(f"{base}_{letter}")

        picked = st.radio(
            page.t(base),
            LETTERS,
            index=None,
            format_func=answer,
            key=f"quiz.{page.info.key}.{n}",
        )
        if picked is None:
            continue
        right = i18n.answers()[base.removeprefix("quiz.")]
        verdict = page.t("common.check_right" if picked == right else "common.check_wrong")
        (st.success if picked == right else st.warning)(f"**{verdict}** {page.t(base + '_why')}")
