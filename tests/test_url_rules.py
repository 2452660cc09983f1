"""lensa.ui.url_state.RULES, row by row: where a URL-bound control's value comes from.

Each test gives the four sources (the widget's state, our record, the URL, the control's default) different
values, so the value that comes out names the source that won. Streamlit's session state and query
parameters are plain dicts here; tests/test_url_races.py drives the same rules through a real page.
"""

from __future__ import annotations

import itertools
from dataclasses import fields

import pytest
import streamlit

from lensa.ui import url_state
from lensa.ui.controls import NumberControl
from lensa.ui.frame import Page, seen_urls
from lensa.ui.site import PAGES_BY_KEY
from lensa.ui.url_state import RULES, Rule, Situation, rule_for

INFO = PAGES_BY_KEY["fp16_range"]
GRAD = INFO.control("grad")
assert isinstance(GRAD, NumberControl)
DEFAULT = GRAD.default
# Three stops besides the default, to tell the widget, our record and the URL apart.
WIDGET, RECORD, LINK = [s for s in GRAD.stops if s != DEFAULT][:3]
SLOT = ("fp16_range", "grad")
KEY = "w.fp16_range.grad"


@pytest.fixture
def st_state(monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    session: dict = {}
    params: dict = {}
    monkeypatch.setattr(streamlit, "session_state", session)
    monkeypatch.setattr(streamlit, "query_params", params)
    return session, params


def arrange(
    st_state: tuple[dict, dict],
    *,
    widget: float | None,
    record: float | None,
    last_url: float | None,
    url: str | None,
) -> None:
    """The widget holds ``widget``, our record ``record``, the URL we last wrote ``last_url``, the URL now ``url``."""
    session, params = st_state
    if widget is not None:
        session[KEY] = widget
    if record is not None:
        url_state.values()[SLOT] = record
    seen_urls()[SLOT] = None if last_url is None else GRAD.to_url(last_url)
    if url is not None:
        params["grad"] = url


def value(switched: bool) -> tuple[object, Page]:
    page = Page(INFO, "en", switched=switched)
    return url_state.value_from_url(page, GRAD, "grad", str), page


def test_the_sources_are_told_apart():
    assert len({DEFAULT, WIDGET, RECORD, LINK}) == 4


def test_row1_a_rerun_with_the_url_as_we_left_it_takes_the_widget(st_state):
    arrange(st_state, widget=WIDGET, record=RECORD, last_url=RECORD, url=GRAD.to_url(RECORD))
    got, _ = value(switched=False)
    assert got == WIDGET
    assert url_state.values()[SLOT] == WIDGET  # the record follows the move


def test_row2_a_move_sent_with_a_stale_url_takes_the_widget(st_state):
    # The learner moved the widget away from our record; the browser's URL is one from before our last write.
    arrange(st_state, widget=WIDGET, record=RECORD, last_url=RECORD, url=GRAD.to_url(LINK))
    got, _ = value(switched=False)
    assert got == WIDGET


def test_row3_after_a_page_switch_our_record_refills_the_widget(st_state):
    # Streamlit dropped the widget's state on the switch; whatever is left in it is not trusted.
    arrange(st_state, widget=WIDGET, record=RECORD, last_url=LINK, url=GRAD.to_url(LINK))
    got, _ = value(switched=True)
    assert got == RECORD
    assert st_state[0][KEY] == RECORD  # the widget is refilled with it


def test_row3_also_when_the_widget_holds_no_position(st_state):
    arrange(st_state, widget=None, record=RECORD, last_url=LINK, url=GRAD.to_url(LINK))
    st_state[0][KEY] = "not a stop"
    got, _ = value(switched=False)
    assert got == RECORD


def test_row4_a_url_without_the_control_gives_the_default(st_state):
    # Back to a URL that does not name the control: not the widget, not the record.
    arrange(st_state, widget=WIDGET, record=WIDGET, last_url=WIDGET, url=None)
    got, page = value(switched=False)
    assert got == DEFAULT
    assert st_state[0][KEY] == DEFAULT and not page.notices


def test_row4_a_first_visit_gives_the_default(st_state):
    got, _ = value(switched=True)
    assert got == DEFAULT


def test_row5_a_moved_url_wins_over_an_unmoved_widget(st_state):
    # Back or Forward: the widget still shows what the page last drew (no move of the learner's).
    arrange(st_state, widget=RECORD, record=RECORD, last_url=RECORD, url=GRAD.to_url(LINK))
    got, page = value(switched=False)
    assert got == LINK and not page.notices
    assert seen_urls()[SLOT] == GRAD.to_url(LINK)


def test_row5_a_shared_link_wins_after_a_page_switch(st_state):
    arrange(st_state, widget=None, record=RECORD, last_url=RECORD, url=GRAD.to_url(LINK))
    got, _ = value(switched=True)
    assert got == LINK


def test_row5_a_value_the_control_does_not_accept_gives_a_safe_value_and_a_notice(st_state):
    arrange(st_state, widget=None, record=RECORD, last_url=RECORD, url="banana")
    got, page = value(switched=True)
    assert got in GRAD.stops
    assert len(page.notices) == 1 and "banana" in page.notices[0]


def _situations():
    names = [f.name for f in fields(Situation)]
    for bits in itertools.product((False, True), repeat=len(names)):
        s = Situation(**dict(zip(names, bits, strict=True)))
        if s.learner_moved and not s.widget_ok:
            continue  # a learner's move is a position of the widget
        yield s


def test_every_situation_has_a_rule_and_every_rule_is_first_for_some_situation():
    first = {RULES.index(rule_for(s)) for s in _situations()}
    assert first == set(range(len(RULES)))


def test_a_rule_that_names_a_condition_does_not_match_its_opposite():
    rule = Rule(False, None, None, None, None, None, "widget")
    base = dict.fromkeys((f.name for f in fields(Situation)), False)
    assert rule.matches(Situation(**base))
    assert not rule.matches(Situation(**{**base, "switched": True}))
