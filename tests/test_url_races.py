"""A learner's quick moves against the URL the browser sends back: a stale URL must not undo a move."""

from __future__ import annotations

from lensa.ui.site import PAGES_BY_KEY
from tests.pagetools import metrics, open_page

STOPS = PAGES_BY_KEY["fp16_range"].control("grad").stops


def test_a_move_sent_with_the_url_from_before_the_last_move_keeps_the_move():
    at = open_page("fp16_range", lang="en")
    first, second = sorted((s for s in STOPS if s < 1e-6), reverse=True)[:2]  # two stops left of the default
    slider = at.select_slider(key="w.fp16_range.grad")
    slider.set_value(first).run()
    assert at.query_params["grad"] in ("7e-7", ["7e-7"])
    # The browser sends the next move before it has applied the page's write of the first: no grad in its URL.
    del at.query_params["grad"]
    at.select_slider(key="w.fp16_range.grad").set_value(second).run()
    assert at.select_slider(key="w.fp16_range.grad").value == second
    assert metrics(at)["Largest gradient"] == "8.0e-4"  # 5e-7's sample, not the default's 1.6e-3
    assert at.query_params["grad"] in ("5e-7", ["5e-7"])


def test_back_to_an_earlier_url_still_restores_its_value():
    """Back changes the URL and not the widget: there the URL wins, as before."""
    at = open_page("fp16_range", lang="en")
    first = max(s for s in STOPS if s < 1e-6)
    at.select_slider(key="w.fp16_range.grad").set_value(first).run()
    del at.query_params["grad"]  # Back to the page as it was first opened
    at.run()
    assert at.select_slider(key="w.fp16_range.grad").value == 1e-6
    assert metrics(at)["Largest gradient"] == "1.6e-3"
