"""A class: the summary at the end of the lesson lists the steps' ideas with the learner's answers, right or not in
words; it follows step 6 in the footer and sits after the steps in the navigation."""

from __future__ import annotations

import pytest

from lensa.ui import i18n, progress
from lensa.ui.site import LESSON, NAVIGATION, PAGES_BY_KEY, STEPS
from tests.pagetools import open_page, sidebar_links


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_summary_lists_every_idea_and_question_unanswered_at_first(lang):
    at = open_page("summary", lang=lang)
    assert not at.exception
    text = _markdown(at)
    for step in STEPS:
        assert i18n.text(lang, f"overview.idea_{step.key}") in text
        for question in progress.questions(step.key):
            assert i18n.text(lang, f"quiz.{question}") in text
    asked = sum(len(progress.questions(s.key)) for s in STEPS)
    assert text.count(i18n.text(lang, "summary.not_answered")) == asked
    assert [i.value for i in at.info] == [i18n.text(lang, "summary.nothing_yet")]
    links = {e.proto.page for e in at.main.get("page_link")}
    assert {s.key for s in STEPS} <= links


def test_the_summary_shows_what_was_answered_right_and_wrong_and_can_start_again():
    at = open_page("fp16_range", lang="en")
    q1, q2 = progress.questions("fp16_range")
    right1 = i18n.answers()[q1]
    wrong2 = next(letter for letter in "abc" if letter != i18n.answers()[q2])
    at.radio(key="quiz.fp16_range.1").set_value(right1).run()
    at.radio(key="quiz.fp16_range.2").set_value(wrong2).run()
    at.switch_page(PAGES_BY_KEY["summary"].file)
    at.run()
    assert not at.exception
    asked = sum(len(progress.questions(s.key)) for s in STEPS)
    assert at.info[0].value == i18n.text("en", "summary.score", answered=2, total=asked, right=1)
    text = _markdown(at)
    assert i18n.text("en", "summary.your_answer", answer=i18n.text("en", f"quiz.{q1}_{right1}")) in text
    assert i18n.text("en", "summary.your_answer", answer=i18n.text("en", f"quiz.{q2}_{wrong2}")) in text
    # right or wrong is said in words beside its icon, and a wrong answer gets the right one under it
    assert "Right." in text and "Not quite." in text
    truth = i18n.text("en", f"quiz.{q2}_{i18n.answers()[q2]}")
    assert i18n.text("en", "summary.right_answer", answer=truth) in text
    assert text.count(i18n.text("en", "summary.not_answered")) == asked - 2
    at.button[0].click().run()  # Clear my answers
    assert at.info[0].value == i18n.text("en", "summary.nothing_yet")
    assert progress.questions("fp16_range") and not _markdown(at).count("Your answer")


def test_the_summary_comes_after_the_last_step():
    assert LESSON[-1].key == "summary" and LESSON[-2] == STEPS[-1]
    assert [p.key for p in NAVIGATION].index("summary") == [p.key for p in NAVIGATION].index(STEPS[-1].key) + 1
    last = open_page(STEPS[-1].key, lang="id")
    footer = [e.proto for e in last.main.get("page_link") if e.proto.label.endswith("→")]
    assert [p.page for p in footer] == ["summary"]
    summary = open_page("summary", lang="id")
    back = [e.proto for e in summary.main.get("page_link") if e.proto.label.startswith("←")]
    assert [p.page for p in back] == [STEPS[-1].key]
    nav = [label.strip("*") for label in sidebar_links(summary)]
    assert nav.index(i18n.text("id", "nav.summary")) == nav.index(f"6 · {i18n.text('id', 'nav.speed')}") + 1
