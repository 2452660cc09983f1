"""URL-bound controls, the step header and footer, and metric rows.

A control's value comes from the URL when the URL brought something new (a
shared link, the Back button, a link from our navigation), else from the
widget itself. After the widget is drawn its value is written back to the URL
(a default the URL never mentioned is left out, so plain links stay short),
which is what makes every state of a page a link a teacher can send.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from lensa.ui import i18n
from lensa.ui.controls import (
    MAX_URL_VALUE_CHARS,
    ChoiceControl,
    Control,
    CountControl,
    NumberControl,
    TextControl,
)
from lensa.ui.frame import (
    Page,
    draw_navigation,
    draw_own_link,
    fill_navigation,
    link_params,
    navigation_slots,
    page_label,
    remembered,
    safe_echo,
    seen_urls,
    step_of,
)
from lensa.ui.site import STEP_COUNT

_MISSING = object()
T = TypeVar("T")
MAX_NOTICE_OPTIONS = 12
LINK_NOTICE_ICON = ":material/link_off:"
TYPED_NOTICE_ICON = ":material/edit_off:"
_NOTICE_KEYS = {
    "not_a_number": "notice.not_a_number",
    "out_of_range": "notice.out_of_range",
    "not_an_option": "notice.not_an_option",
}
_TYPED_KEYS = {"not_a_number": "common.typed_not_a_number", "out_of_range": "common.typed_out_of_range"}


def widget_key(page: Page, name: str) -> str:
    return f"w.{page.info.key}.{name}"


def _values() -> dict[Any, Any]:
    """Each control's current value, kept by us: a widget's own state is lost on a page switch."""
    if "lensa.values" not in st.session_state:
        st.session_state["lensa.values"] = {}
    values: dict[Any, Any] = st.session_state["lensa.values"]
    return values


def _is_position(control: Control, value: object) -> bool:
    if isinstance(control, NumberControl):
        return value in control.stops
    if isinstance(control, TextControl):
        return isinstance(value, str)
    if isinstance(control, CountControl):
        return isinstance(value, float) and control.lo <= value <= control.hi
    return value in control.options


def _value_from_url(
    page: Page,
    control: Control,
    label: str,
    show: Callable[[Any], str],
    to_widget: Callable[[object], object] = lambda v: v,
    from_widget: Callable[[object], object] = lambda v: v,
) -> object:
    """The control's value for this run.

    On a rerun of the same page with the URL as we left it, the widget's own
    state is the truth (it holds the learner's latest move, which the URL
    catches up with below). When the URL moved (a shared link, Back, Forward)
    its value wins; after a page switch, when Streamlit has dropped the
    widget's state, our own record refills it.
    """
    raw = st.query_params.get(control.name)
    seen = seen_urls()
    slot = (page.info.key, control.name)
    key = widget_key(page, control.name)
    values = _values()
    url_moved = seen.get(slot, _MISSING) != raw
    state = from_widget(st.session_state.get(key))
    # A learner's move changes the widget, never the URL; Back, Forward or a link change the URL, never the
    # widget. So when the widget differs from what this page last drew, the learner moved it, and that wins
    # even if the URL looks moved too: with quick moves the browser can send the URL from before the page's
    # last write (a stale echo), which must not reset the control to it.
    moved_here = _is_position(control, state) and state != values.get(slot, _MISSING)
    if not page.switched and (not url_moved or moved_here) and _is_position(control, state):
        values[slot] = state
        return state
    if not url_moved and _is_position(control, values.get(slot)):
        value = values[slot]
    elif raw is None:
        value = control.default
    else:
        reading = control.read(raw)
        value = reading.value
        if reading.problem:
            extra = {}
            if isinstance(control, NumberControl | CountControl):
                extra = {"lo": show(control.lo), "hi": show(control.hi)}
            elif isinstance(control, ChoiceControl):
                extra = {"options": _option_list(control, show)}
            page.notices.append(
                page.t(_NOTICE_KEYS[reading.problem], name=label, raw=safe_echo(raw), value=show(value), **extra)
            )
    values[slot] = value
    seen[slot] = raw
    st.session_state[key] = to_widget(value)
    return value


def _option_list(control: ChoiceControl, show: Callable[[Any], str]) -> str:
    """The options a notice names: all of a short list, the first few of a long one (a model's layers)."""
    shown = [show(o) for o in control.options[:MAX_NOTICE_OPTIONS]]
    return ", ".join(shown) + (", …" if len(control.options) > MAX_NOTICE_OPTIONS else "")


def _value_to_url(page: Page, control: Control, value: object) -> None:
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


def _help(help: str | None) -> None:
    """A control's help as a caption under it: Streamlit's help tooltip opens only on hover."""
    if help:
        st.caption(help)


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
    before = _values().get((page.info.key, control.name), _MISSING)
    _value_from_url(page, control, label, show)
    value = draw(widget_key(page, name))
    _help(help)
    _value_to_url(page, control, value)
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


def select(
    page: Page,
    name: str,
    label: str,
    show: Callable[[str], str],
    help: str | None = None,
    control: ChoiceControl | None = None,
    whole_page: bool = False,
) -> str:
    """A URL-bound choice drawn as a drop-down, for controls with many options."""
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
    return _values()[(page.info.key, name)]


def url_moved(page: Page, name: str) -> bool:
    """Whether the URL's value for ``name`` is not the one we last read or wrote (a new link, Back, Forward)."""
    seen: object = seen_urls().get((page.info.key, name), _MISSING)
    return seen != st.query_params.get(name)


def forget(page: Page, name: str) -> None:
    """Drop a control's value everywhere (URL, widget, our records), so it starts again from its default.

    For a control whose options come from the data: when the data changes, the old value means nothing.
    """
    slot = (page.info.key, name)
    st.query_params.pop(name, None)
    seen_urls().pop(slot, None)
    _values().pop(slot, None)
    st.session_state.pop(widget_key(page, name), None)
    remembered(page.info.key).pop(name, None)


def text(page: Page, name: str, label: str, help: str | None = None, placeholder: str | None = None) -> str:
    """A URL-bound text box; the URL follows it only while it holds text the control accepts."""
    control = page.info.control(name)
    assert isinstance(control, TextControl)
    _value_from_url(page, control, label, str)
    value = st.text_input(label, key=widget_key(page, name), placeholder=placeholder, max_chars=100)
    _help(help)
    if control.read(value).problem is None:
        _value_to_url(page, control, value.strip())
    return value


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

    value = _value_from_url(page, control, label, show, to_widget=show, from_widget=from_widget)
    st.text_input(label, key=key, max_chars=MAX_URL_VALUE_CHARS)
    _help(help)
    if reading is not None and reading.problem is not None:
        extra = {"lo": show(control.lo), "hi": show(control.hi)}
        message = page.t(_TYPED_KEYS[reading.problem], raw=safe_echo(typed or ""), value=show(value), **extra)
        st.warning(message, icon=TYPED_NOTICE_ICON)
    _value_to_url(page, control, value)
    return float(cast(float, value))  # from_widget and the control's reading give floats


def toggle(page: Page, name: str, label: str, help: str | None = None) -> bool:
    """A URL-bound on/off switch for a control with the options ("off", "on")."""
    control = page.info.control(name)
    assert isinstance(control, ChoiceControl) and control.options == ("off", "on")
    _value_from_url(
        page,
        control,
        label,
        lambda v: page.t(f"common.{v}"),
        to_widget=lambda v: v == "on",
        from_widget=lambda b: ("on" if b else "off") if isinstance(b, bool) else None,
    )
    on = st.toggle(label, key=widget_key(page, name))
    _help(help)
    _value_to_url(page, control, "on" if on else "off")
    return on


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
        letters = ("a", "b", "c")

        def answer(letter: str, base: str = base) -> str:
            return page.t(f"{base}_{letter}")

        picked = st.radio(
            page.t(base),
            letters,
            index=None,
            format_func=answer,
            key=f"quiz.{page.info.key}.{n}",
        )
        if picked is None:
            continue
        right = i18n.answers()[base.removeprefix("quiz.")]
        verdict = page.t("common.check_right" if picked == right else "common.check_wrong")
        (st.success if picked == right else st.warning)(f"**{verdict}** {page.t(base + '_why')}")


# Runs in the page itself (st.html is not an iframe). It sets the document's language, which
# Streamlit has no API for, on every run, so a switch of language updates it without a reload.
# It also makes plotly's animation buttons (step 3's Play and Pause, drawn as SVG) reachable with
# Tab and pressable with Enter or Space, and names them for screen readers.
_PAGE_SCRIPT = """<script>
(() => {
  document.documentElement.lang = "%(lang)s";
  if (window.lensaKeyboardButtons) return;
  window.lensaKeyboardButtons = true;
  const press = (button) => button.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  const enable = () => {
    for (const button of document.querySelectorAll(".js-plotly-plot .updatemenu-button:not([tabindex])")) {
      button.setAttribute("tabindex", "0");
      button.setAttribute("role", "button");
      button.setAttribute("aria-label", button.textContent.replace(/[^\\p{L}\\p{N} ]/gu, "").trim());
      button.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); press(button); }
      });
    }
  };
  new MutationObserver(enable).observe(document.body, {childList: true, subtree: true});
  enable();
})();
</script>"""
# A visible focus ring on everything the keyboard reaches (3:1 or more on both themes' backgrounds);
# a primary button keeps white on the light theme's accent in both themes (the dark theme's light accent
# under white text is 2:1); with reduced motion, the loss-scale run shows its final state, no animation.
_PAGE_STYLE = """<style>
:is(a, button, input, select, textarea, summary, [role="slider"], [role="button"], [tabindex]):focus-visible,
label:has(input:focus-visible), div:has(> input[type="range"]:focus-visible) {
    outline: 3px solid #3b82f6 !important; outline-offset: 2px !important;
}
[data-testid="stBaseButton-primary"], [data-testid="stBaseButton-primary"]:hover {
    background-color: #a3212f !important; border-color: #a3212f !important; color: #ffffff !important;
}
@media (prefers-reduced-motion: reduce) {
    .js-plotly-plot .updatemenu-container { display: none !important; }
}
</style>"""


def _page_script(page: Page) -> None:
    st.html(_PAGE_STYLE + _PAGE_SCRIPT % {"lang": page.lang}, unsafe_allow_javascript=True)


def after_controls(page: Page) -> None:
    """Once a page has read its controls: draw the navigation and say what became of bad link values.

    Inside a step's lesson fragment (:func:`lesson`) only the page's own navigation entry is drawn here;
    the fragment's caller draws the rest.
    """
    if page.own_link is None:
        _page_script(page)
        draw_navigation(page)
    else:
        draw_own_link(page)
    if not page.notices:
        return
    assert page.notice_area is not None, "setup() makes the notices' container"
    # Link values are read in full runs; should a fragment rerun find a bad one, it says so in its own part:
    # a fragment may write to a container outside it only where its full run wrote too.
    with st.container() if page.partial else page.notice_area:
        for text in page.notices:
            st.warning(text, icon=LINK_NOTICE_ICON)


def lesson(page: Page, body: Callable[[], None]) -> None:
    """Draw ``body``, the part of a step that its controls change, as a fragment: a move reruns only that part.

    The title, the notes, the questions, the footer and the navigation are drawn by the page's full runs;
    a move of a control inside ``body`` reruns ``body`` alone (``st.fragment``), so the server builds and
    the browser redraws a fraction of the page. Such a rerun is on the same page in the same language with
    every widget's state intact, so the controls read those states as the learner's latest moves. ``body``
    calls :func:`after_controls`, which fills the page's own navigation entry (its link carries the
    controls' values) in a slot kept for it; Streamlit redraws a fragment's writes to such an outside slot
    in place. A control whose value shows outside ``body`` is drawn with ``whole_page=True``.
    """
    _page_script(page)
    slots = navigation_slots(page)
    page.own_link = slots[page.info.key]
    runs = 0

    def part() -> None:
        nonlocal runs
        if runs:  # Streamlit calls the fragment kept from the last full run: a rerun of the fragment alone
            page.switched = False
            page.partial = True
            page.notices.clear()
        runs += 1
        body()

    st.fragment(part)()
    fill_navigation(page, slots)


def step_header(page: Page) -> None:
    st.caption(page.t("nav.step_of", n=page.info.step, total=STEP_COUNT))
    st.title(page.t("title"))
    st.markdown(f"#### {page.t('headline')}")


def chart(fig: object, title: str, caption: str | None = None, alt: str | None = None) -> None:
    """A figure with its heading above it, a caption that decodes it below, and its data as a table.

    ``alt`` is the text alternative a screen reader announces for the chart: a
    sentence built from the same numbers as the page's metrics. Without it the
    figure's own summary (``fig.alt``) is used. The values it plots
    (``fig.table``) follow in a closed section, as a real table.
    """
    st.markdown(f"**{title}**")
    st.plotly_chart(fig, config={"displayModeBar": False}, alt=alt or getattr(fig, "alt", None) or title)
    if caption:
        st.caption(caption)
    table = getattr(fig, "table", None)
    if table is not None and table.rows:
        with st.expander(i18n.text(table.lang, "figure.table"), icon=":material/table:"):
            st.markdown(markdown_table(table.headers, table.rows))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; cells are our own text, with any | escaped."""

    def clean(cell: object) -> str:
        return str(cell).replace("|", "\\|")

    lines = ["| " + " | ".join(clean(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def figure_area() -> DeltaGenerator:
    """An empty place for a step's figures, above the metric cards the page draws next; fill it after them.

    The page then sends a move's new numbers before its figures, so the browser shows them without waiting
    for a changed figure to be drawn again (step 2, same run: p95 from 96 to 64 ms after a key press).
    """
    return st.container()


def metric_row(items: Sequence[tuple[str, str]]) -> None:
    """A row of metric cards: (label, formatted value) pairs."""
    columns = st.columns(len(items), border=True)
    for column, (label, value) in zip(columns, items, strict=True):
        column.metric(label, value)


def explain(page: Page, paragraph: str, try_this: str) -> None:
    st.markdown(paragraph)
    st.info(f"**{page.t('common.try_this')}** {try_this}", icon=":material/touch_app:")


def notes(page: Page, body: str, sources: Sequence[str]) -> None:
    with st.expander(page.t("common.notes"), icon=":material/menu_book:"):
        st.markdown(body)
        st.markdown(f"**{page.t('common.sources')}**")
        st.markdown("\n".join(f"- {s}" for s in sources))


def step_end(page: Page, notes_body: str, sources: Sequence[str]) -> None:
    """How every step ends: notes and sources, the check-yourself questions answers.toml lists, the step links."""
    notes(page, notes_body, sources)
    check_yourself(page, sum(1 for q in i18n.answers() if re.fullmatch(rf"{page.info.key}_q\d+", q)))
    step_footer(page)


def step_footer(page: Page) -> None:
    """Previous and next links, carrying the language and the target's last values."""
    before, after = step_of(page.info)
    left, right = st.columns(2)
    if before is not None:
        with left:
            st.page_link(
                before.file,
                label=f"← {page_label(page, before)}",
                query_params=link_params(before.key, page.lang),
            )
    if after is not None:
        with right, st.container(horizontal=True, horizontal_alignment="right"):
            st.page_link(
                after.file,
                label=f"{page_label(page, after)} →",
                query_params=link_params(after.key, page.lang),
            )
