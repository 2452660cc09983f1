"""Where a URL-bound control's value comes from in a run, and how the URL follows it.

Four sources can hold a control's value: the widget's own state (the learner's latest move), the URL (a
shared link, Back, Forward, a link from our navigation), our own record of the value the page last drew
(it outlives a page switch, when Streamlit drops the widget's state) and the control's default.
:data:`RULES` says which one wins in which situation; :func:`value_from_url` walks it. After the widget
is drawn, :func:`value_to_url` writes its value back to the URL (a default the URL never mentioned is
left out, so plain links stay short), which is what makes every state of a page a link a teacher can send.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, NamedTuple

import streamlit as st

from lensa.ui.controls import ChoiceControl, Control, CountControl, NumberControl, TextControl
from lensa.ui.frame import Page, remembered, safe_echo, seen_urls

MISSING = object()
MAX_NOTICE_OPTIONS = 12
_NOTICE_KEYS = {
    "not_a_number": "notice.not_a_number",
    "out_of_range": "notice.out_of_range",
    "not_an_option": "notice.not_an_option",
}

Source = Literal["widget", "record", "default", "url"]


@dataclass(frozen=True)
class Situation:
    """What a run knows about one control before drawing it: the facts :data:`RULES` is read against."""

    switched: bool  # first run on this page since another page or language: Streamlit dropped the widget's state
    url_moved: bool  # the URL's value is not the one we last read or wrote (a link, Back, Forward, or a stale echo)
    learner_moved: bool  # the widget holds a position other than our record: the learner moved it
    widget_ok: bool  # the widget's state is one of the control's positions
    record_ok: bool  # our record of the value the page last drew is one of the control's positions
    url_says: bool  # the URL names the control


class Rule(NamedTuple):
    """A row of :data:`RULES`: each condition is True, False, or ANY (None) for "either"."""

    switched: bool | None
    url_moved: bool | None
    learner_moved: bool | None
    widget_ok: bool | None
    record_ok: bool | None
    url_says: bool | None
    source: Source

    def matches(self, situation: Situation) -> bool:
        return all(getattr(self, f.name) in (None, getattr(situation, f.name)) for f in fields(Situation))


ANY = None
# Read top to bottom; the first row that matches says where the value comes from. A learner's move changes
# the widget, never the URL; Back, Forward or a link change the URL, never the widget.
# fmt: off
RULES: tuple[Rule, ...] = (
    #    switched url_moved learner_moved widget_ok record_ok url_says  source
    # 1. A rerun of the same page, the URL as we left it: the widget holds the learner's latest move (the URL
    #    catches up once the widget is drawn).
    Rule(False,   False,    ANY,          True,     ANY,      ANY,      "widget"),
    # 2. The learner moved the widget and the URL looks moved too: with quick moves the browser can send the
    #    URL from before the page's last write (a stale echo), which must not undo the move.
    Rule(False,   True,     True,         ANY,      ANY,      ANY,      "widget"),
    # 3. The URL as we left it and no widget state to trust (a page or language switch dropped it): our
    #    record refills the widget.
    Rule(ANY,     False,    ANY,          ANY,      True,     ANY,      "record"),
    # 4. The URL does not name the control (it never did, or Back went to a URL without it): the default.
    Rule(ANY,     ANY,      ANY,          ANY,      ANY,      False,    "default"),
    # 5. The URL moved (a shared link, Back, Forward) or nothing else holds a value: the URL's value, or a
    #    safe value and a notice when the control does not accept it.
    Rule(ANY,     ANY,      ANY,          ANY,      ANY,      True,     "url"),
)
# fmt: on


def rule_for(situation: Situation) -> Rule:
    """The first row of :data:`RULES` that ``situation`` matches (the last row matches whatever the URL says)."""
    return next(rule for rule in RULES if rule.matches(situation))


def widget_key(page: Page, name: str) -> str:
    """The session-state key of control ``name``'s widget on ``page``."""
    return f"w.{page.info.key}.{name}"


def values() -> dict[Any, Any]:
    """Each control's current value, kept by us: a widget's own state is lost on a page switch."""
    if "lensa.values" not in st.session_state:
        st.session_state["lensa.values"] = {}
    kept: dict[Any, Any] = st.session_state["lensa.values"]
    return kept


def is_position(control: Control, value: object) -> bool:
    """Whether ``value`` is one the control can hold (a stop, an option, text, a count in range)."""
    if isinstance(control, NumberControl):
        return value in control.stops
    if isinstance(control, TextControl):
        return isinstance(value, str)
    if isinstance(control, CountControl):
        return isinstance(value, float) and control.lo <= value <= control.hi
    return value in control.options


def value_from_url(
    page: Page,
    control: Control,
    label: str,
    show: Callable[[Any], str],
    to_widget: Callable[[object], object] = lambda v: v,
    from_widget: Callable[[object], object] = lambda v: v,
    key: str | None = None,
    fill_widget: bool = True,
) -> object:
    """The control's value for this run, from the source :data:`RULES` picks; it also fills the widget's state.

    ``show`` writes a value for people (in a notice about a bad URL value); ``to_widget`` and ``from_widget``
    convert between the control's values and what its widget holds (a toggle's bool, a count's text).
    ``key`` is the session-state key of the widget that holds the control (its own :func:`widget_key` unless
    given); ``fill_widget=False`` leaves that state alone, for a widget that is told its value another way (a
    component, through its data).
    """
    raw = st.query_params.get(control.name)
    slot = (page.info.key, control.name)
    key = key or widget_key(page, control.name)
    page.controls_shown.add(control.name)
    kept = values()
    record = kept.get(slot, MISSING)
    state = from_widget(st.session_state.get(key))
    widget_ok = is_position(control, state)
    situation = Situation(
        switched=page.switched,
        url_moved=seen_urls().get(slot, MISSING) != raw,
        learner_moved=widget_ok and state != record,
        widget_ok=widget_ok,
        record_ok=is_position(control, record),
        url_says=raw is not None,
    )
    source = rule_for(situation).source
    if source == "widget":
        kept[slot] = state
        return state
    if source == "record":
        value = record
    elif source == "default":
        value = control.default
    else:
        assert raw is not None, "the URL rule matches only when the URL names the control"
        value = _read_url(page, control, label, show, raw)
    kept[slot] = value
    seen_urls()[slot] = raw
    if fill_widget:
        st.session_state[key] = to_widget(value)
    return value


def _read_url(page: Page, control: Control, label: str, show: Callable[[Any], str], raw: str) -> object:
    """The URL's value for the control; one it does not accept becomes a safe value and a notice on the page."""
    reading = control.read(raw)
    if reading.problem:
        extra = {}
        if isinstance(control, NumberControl | CountControl):
            extra = {"lo": show(control.lo), "hi": show(control.hi)}
        elif isinstance(control, ChoiceControl):
            extra = {"options": _option_list(control, show)}
        page.notices.append(
            page.t(_NOTICE_KEYS[reading.problem], name=label, raw=safe_echo(raw), value=show(reading.value), **extra)
        )
    return reading.value


def _option_list(control: ChoiceControl, show: Callable[[Any], str]) -> str:
    """The options a notice names: all of a short list, the first few of a long one (a model's layers)."""
    shown = [show(o) for o in control.options[:MAX_NOTICE_OPTIONS]]
    return ", ".join(shown) + (", …" if len(control.options) > MAX_NOTICE_OPTIONS else "")


def value_to_url(page: Page, control: Control, value: object) -> None:
    """Make the URL say ``value``; a default that the URL never mentioned stays unmentioned."""
    raw = st.query_params.get(control.name)
    canonical = None
    if not (raw is None and value == control.default):
        canonical = control.to_url(value)  # type: ignore[arg-type]  # the widget's value has its control's type
    if canonical is not None and raw != canonical:
        st.query_params[control.name] = canonical
    seen_urls()[(page.info.key, control.name)] = canonical
    memory = remembered(page.info.key)
    if canonical is None:
        memory.pop(control.name, None)
    else:
        memory[control.name] = canonical
