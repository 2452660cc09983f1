"""What the learner has answered this session: the store the questions write and the navigation and summary read.

The questions themselves are :mod:`lensa.ui.quiz`; a question id is ``<page>_q<n>`` as ``answers.toml`` lists it,
and an answer is the letter the learner committed (``"a"``, ``"b"``, ``"c"``), the same in every language.
"""

from __future__ import annotations

import re

import streamlit as st

from lensa.ui import i18n

_ANSWERS = "lensa.answers"  # question id -> letter, for the session (outlives page and language switches)


def questions(page_key: str) -> list[str]:
    """The ids of the page's questions in order (``fp16_range_q1``, ``fp16_range_q2``), from ``answers.toml``."""
    found = [q for q in i18n.answers() if re.fullmatch(rf"{re.escape(page_key)}_q\d+", q)]
    return sorted(found, key=lambda q: int(q.rsplit("_q", 1)[1]))


def answered() -> dict[str, str]:
    """The answers the learner committed this session, by question id."""
    if _ANSWERS not in st.session_state:
        st.session_state[_ANSWERS] = {}
    record: dict[str, str] = st.session_state[_ANSWERS]
    return record


def is_right(question: str, letter: str) -> bool:
    return i18n.answers()[question] == letter


def right_count(record: dict[str, str], asked: list[str]) -> int:
    """How many of the questions ``asked`` that ``record`` answers it answers right."""
    return sum(is_right(q, record[q]) for q in asked if q in record)


def done(page_key: str) -> bool:
    """Whether every question of the page has an answer this session (False for a page without questions)."""
    ids = questions(page_key)
    record = answered()
    return bool(ids) and all(q in record for q in ids)


def forget_all() -> None:
    """Start the lesson's questions again (the summary's button)."""
    st.session_state[_ANSWERS] = {}
