"""The URL-bound controls a page draws: slider, choice, dropdown, text, count and toggle.

Each reads its value from the source :mod:`lensa.ui.url_state` picks (the widget, the URL, our record or
the default), draws its widget, and writes the value back to the URL. In the print view (``page.printing``)
nothing can be set: a control is its label and its value, written out (:func:`on_paper`). After the lesson,
:func:`current` gives a control's value; :func:`url_moved` and :func:`forget` serve controls whose options come
from data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import streamlit as st

from lensa.ui.controls import (
    MAX_URL_VALUE_CHARS,
    ChoiceControl,
    Control,
    CountControl,
    NumberControl,
    TextControl,
)
from lensa.ui.frame import Page, remembered, safe_echo, seen_urls
from lensa.ui.url_state import MISSING, value_from_url, value_to_url, values, widget_key

T = TypeVar("T")
TYPED_NOTICE_ICON = ":material/edit_off:"
_TYPED_KEYS = {"not_a_number": "common.typed_not_a_number", "out_of_range": "common.typed_out_of_range"}


def _help(help: str | None) -> None:
    """A control's help as a caption under it: Streamlit's help tooltip opens only on hover."""
    if help:
        st.caption(help)


def on_paper(label: str, text: str) -> None:
    """A control in the print view: what it is set to, as a line of text (paper has nothing to click)."""
    st.markdown(f"**{label}:** {text}")


def _bound(
    page: Page,
    name: str,
    label: str,
    show: Callable[[Any], str],
    draw: Callable[[str], T],
    *,
    control: Control | None = None,
    help: str | None = None,
    whole_page: bool = False,
) -> T:
    """Read a control from the URL, draw its widget with ``draw(key)`` and its help, write the value back.

    ``control`` replaces the page's declared one for this run: a control whose positions are only known
    once the data is loaded (a run's layers and steps). ``whole_page``: the control's value shows outside
    the step's lesson fragment (in the notes, or in the links into other steps), so when it moves in a rerun
    of the fragment alone the whole page is drawn again.
    """
    control = control or page.info.control(name)
    before = values().get((page.info.key, control.name), MISSING)
    read = value_from_url(page, control, label, show)
    if page.printing:
        on_paper(label, show(read))
        value_to_url(page, control, read)
        return cast(T, read)
    value = draw(widget_key(page, name))
    _help(help)
    value_to_url(page, control, value)
    if whole_page and page.partial and value != before:
        st.rerun()  # scope "app": a full run, with the URL and our records already saying the new value
    return value


C = TypeVar("C", NumberControl, ChoiceControl, TextControl)


def declared(page: Page, name: str, kind: type[C]) -> C:
    """The page's declared control ``name``, which the widget drawing it needs to be a ``kind``."""
    control = page.info.control(name)
    if not isinstance(control, kind):
        raise TypeError(f"{page.info.key}: control {name!r} is a {type(control).__name__}, not a {kind.__name__}")
    return control


def slider(
    page: Page,
    name: str,
    label: str,
    show: Callable[[float], str],
    help: str | None = None,
    control: NumberControl | None = None,
) -> float:
    """A URL-bound slider over the control's stops; ``show`` writes a stop for people."""
    control = control or declared(page, name, NumberControl)
    stops = control.stops
    return _bound(
        page,
        name,
        label,
        show,
        lambda key: st.select_slider(label, options=stops, format_func=show, key=key),
        control=control,
        help=help,
    )


def choice(
    page: Page, name: str, label: str, show: Callable[[str], str], help: str | None = None, whole_page: bool = False
) -> str:
    """A URL-bound choice between a control's options, drawn as a segmented control."""
    options = declared(page, name, ChoiceControl).options
    return _bound(  # type: ignore[return-value]  # required=True and the key's state holds an option: never None
        page,
        name,
        label,
        show,
        lambda key: st.segmented_control(label, options, format_func=show, key=key, required=True),
        help=help,
        whole_page=whole_page,
    )


def dropdown(
    page: Page,
    name: str,
    label: str,
    show: Callable[[str], str],
    help: str | None = None,
    control: ChoiceControl | None = None,
    whole_page: bool = False,
) -> str:
    """A URL-bound choice drawn as a drop-down, for controls with many options (or a compact row of choices)."""
    control = control or declared(page, name, ChoiceControl)
    options = control.options
    return _bound(
        page,
        name,
        label,
        show,
        lambda key: st.selectbox(label, options, format_func=show, key=key),
        control=control,
        help=help,
        whole_page=whole_page,
    )


def current(page: Page, name: str) -> object:
    """The value control ``name`` has in this run, once the page has drawn it (for what is drawn after the lesson)."""
    return values()[(page.info.key, name)]


def url_moved(page: Page, name: str) -> bool:
    """Whether the URL's value for ``name`` is not the one we last read or wrote (a new link, Back, Forward)."""
    seen: object = seen_urls().get((page.info.key, name), MISSING)
    return seen != st.query_params.get(name)


def forget(page: Page, name: str) -> None:
    """Drop a control's value everywhere (URL, widget, our records), so it starts again from its default.

    For a control whose options come from the data: when the data changes, the old value means nothing.
    """
    slot = (page.info.key, name)
    st.query_params.pop(name, None)
    seen_urls().pop(slot, None)
    values().pop(slot, None)
    st.session_state.pop(widget_key(page, name), None)
    remembered(page.info.key).pop(name, None)


def text(
    page: Page,
    name: str,
    label: str,
    help: str | None = None,
    placeholder: str | None = None,
    read: Callable[[str], str | None] = lambda t: t.strip(),
    write: Callable[[str], str] = lambda v: v,
) -> str:
    """A URL-bound text box; the URL follows it only while it holds text the control accepts.

    ``read`` turns what the box holds into the control's value (None: not one, the box keeps the text) and
    ``write`` a value into what the box shows: with them the box can hold a number the way the page's language
    writes it while the URL keeps one spelling for every language.
    """
    control = page.info.control(name)
    assert isinstance(control, TextControl)

    def from_widget(typed: object) -> object:
        if not isinstance(typed, str):
            return typed
        value = read(typed)
        return typed if value is None else value  # text that is no value stays the learner's, for the page to say so

    value_from_url(page, control, label, str, to_widget=lambda v: write(str(v)), from_widget=from_widget)
    typed = st.text_input(label, key=widget_key(page, name), placeholder=placeholder, max_chars=100)
    _help(help)
    value = read(typed)
    if value is not None and control.read(value).problem is None:
        value_to_url(page, control, value)
    return typed


def count(page: Page, name: str, label: str, show: Callable[[object], str], help: str | None = None) -> float:
    """A URL-bound text box for a count typed as a person writes it (``7.5B``, ``175e9``); returns the count.

    The box keeps what was typed; the URL gets the count's exact engineering
    spelling (``7.5e9``). Typed text outside the control's range is clamped and
    text that is no count at all keeps the last good value, each with a short
    warning under the box (a link's bad value gets the page's usual notice).
    ``show`` writes a count for people, exactly (it also fills the box).
    """
    control = page.info.control(name)
    assert isinstance(control, CountControl)
    key = widget_key(page, name)
    state = st.session_state.get(key)
    typed = state if isinstance(state, str) else None
    reading = control.read(typed) if typed is not None and not page.switched and not url_moved(page, name) else None

    def from_widget(text: object) -> float | None:
        if not isinstance(text, str):
            return None
        got = control.read(text)
        return float(cast(float, got.value)) if got.problem != "not_a_number" else None  # a count: always a float

    value = value_from_url(page, control, label, show, to_widget=show, from_widget=from_widget)
    if page.printing:
        on_paper(label, show(value))
        value_to_url(page, control, value)
        return float(cast(float, value))
    st.text_input(label, key=key, max_chars=MAX_URL_VALUE_CHARS)
    _help(help)
    if reading is not None and reading.problem is not None:
        extra = {"lo": show(control.lo), "hi": show(control.hi)}
        message = page.t(_TYPED_KEYS[reading.problem], raw=safe_echo(typed or ""), value=show(value), **extra)
        st.warning(message, icon=TYPED_NOTICE_ICON)
    value_to_url(page, control, value)
    return float(cast(float, value))  # from_widget and the control's reading give floats


def toggle(page: Page, name: str, label: str, help: str | None = None) -> bool:
    """A URL-bound on/off switch for a control with the options ("off", "on")."""
    control = page.info.control(name)
    assert isinstance(control, ChoiceControl) and control.options == ("off", "on")
    read = value_from_url(
        page,
        control,
        label,
        lambda v: page.t(f"common.{v}"),
        to_widget=lambda v: v == "on",
        from_widget=lambda b: ("on" if b else "off") if isinstance(b, bool) else None,
    )
    if page.printing:
        on_paper(label, page.t(f"common.{read}"))
        value_to_url(page, control, read)
        return read == "on"
    on = st.toggle(label, key=widget_key(page, name))
    _help(help)
    value_to_url(page, control, "on" if on else "off")
    return on
