"""A learner's quick moves against the URL the browser sends back: a stale URL must not undo a move.

The gradient slider is a scrub component (lensa.ui.components.scrub): a move is the component's state at the end
of a gesture, sent as the browser sends it (``move_scrub``)."""

from __future__ import annotations

from lensa.ui.site import PAGES_BY_KEY
from tests.pagetools import metrics, move_scrub, open_page, scrub_value

STOPS = PAGES_BY_KEY["fp16_range"].control("grad").stops


def test_a_move_sent_with_the_url_from_before_the_last_move_keeps_the_move():
    at = open_page("fp16_range", lang="en")
    first, second = sorted((s for s in STOPS if s < 1e-6), reverse=True)[:2]  # two stops left of the default
    move_scrub(at, "grad", STOPS.index(first))
    assert at.query_params["grad"] in ("7e-7", ["7e-7"])
    # The browser sends the next move before it has applied the page's write of the first: no grad in its URL.
    del at.query_params["grad"]
    move_scrub(at, "grad", STOPS.index(second))
    assert scrub_value(at, "grad") == second
    assert metrics(at)["Largest gradient"] == "8.0e-4"  # 5e-7's sample, not the default's 1.6e-3
    assert at.query_params["grad"] in ("5e-7", ["5e-7"])


def test_back_to_an_earlier_url_still_restores_its_value():
    """Back changes the URL and not the component: there the URL wins, as before, and the component is told."""
    at = open_page("fp16_range", lang="en")
    first = max(s for s in STOPS if s < 1e-6)
    move_scrub(at, "grad", STOPS.index(first), gesture="g-1")
    del at.query_params["grad"]  # Back to the page as it was first opened
    at.run()
    assert scrub_value(at, "grad") == 1e-6
    assert metrics(at)["Largest gradient"] == "1.6e-3"


def test_the_components_last_gesture_sent_again_does_not_undo_back():
    """The browser keeps sending the component's last state with every rerun: a gesture already taken is old news,
    so after Back the URL's value holds while the same state comes again."""
    at = open_page("fp16_range", lang="en")
    first = max(s for s in STOPS if s < 1e-6)
    move_scrub(at, "grad", STOPS.index(first), gesture="g-1")
    at.query_params["grad"] = "1e-6"  # Back
    move_scrub(at, "grad", STOPS.index(first), gesture="g-1")  # the same state, sent again with the rerun
    assert scrub_value(at, "grad") == 1e-6
    assert at.query_params["grad"] in ("1e-6", ["1e-6"])
