"""The one call every page starts with: page config, language, our navigation.

Any page can be the first one a visitor opens (a shared link), so each page
calls :func:`setup` before anything else. Streamlit's own pages-directory
navigation is hidden (``client.showSidebarNavigation = false``); ours is drawn
with ``st.page_link`` (through :func:`page_link`) so its titles follow the
language and every link carries the language and the target page's last
control values in its URL.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lensa.ui import i18n, progress
from lensa.ui.injected import METRIC_STYLE
from lensa.ui.site import LEGACY_PARAMS, LESSON, NAVIGATION, PAGES_BY_KEY, STEPS, PageInfo

LANG_WIDGET = "w.lang"
_LANG_CHOICE = "lensa.lang_choice"  # the learner's choice this session (outlives page switches)
_PAGE = "lensa.page"  # the page the previous run of this session drew
_LAST_LANG = "lensa.last_lang"  # the language the previous run drew in
_MISSING = object()
_SEEN = "lensa.seen"  # URL values as we last read or wrote them: a difference means the URL moved
_REMEMBER = "lensa.remember"  # each page's control values as URL text, for links into it
_LANG_NAMES = {"id": "Bahasa Indonesia", "en": "English"}
PRINT_PARAM = "print"  # ?print=1: the page as it goes on paper (its bar: _print_bar; its styles: lensa.ui.injected)
DONE_MARK = "✓"  # after a step whose questions are all answered; the navigation's legend says what it means


@dataclass
class Page:
    """What a page needs after setup: its identity, the language, and a place for notices."""

    info: PageInfo
    lang: str
    notices: list[str] = field(default_factory=list)
    notice_area: DeltaGenerator | None = None  # a container at the top of the page, filled once controls are read
    nav_area: DeltaGenerator | None = None  # a sidebar container, filled once the page's own values are known
    switched: bool = True  # first run on this page since another page or language: widget states are gone
    partial: bool = False  # this run redraws only the step's lesson part (a fragment rerun after a move)
    # While the lesson fragment draws: its own navigation entry's slot (the rest of the navigation is drawn by
    # the page's full run, around the fragment); None outside a fragment.
    own_link: DeltaGenerator | None = None
    progress_slot: DeltaGenerator | None = None  # the navigation's line of progress, redrawn with the own link
    own_link_drawn: bool = False  # this run of the lesson fragment has filled the own entry's slot
    printing: bool = False  # ?print=1: the page as it goes on paper, without questions, links and notes
    questions_drawn: bool = False  # this run has drawn the page's questions (lensa.ui.quiz.predict)
    # The controls this run has read and drawn so far (lensa.ui.url_state.value_from_url): a question that asks
    # the learner to move a control the page does not show in this run (a recorded run has no size slider) waits.
    controls_shown: set[str] = field(default_factory=set)

    def t(self, key: str, **values: object) -> str:
        """Text from this page's catalogue section (``"title"``) or any other (``"nav.memory"``)."""
        full = key if "." in key else f"{self.info.key}.{key}"
        return i18n.text(self.lang, full, **values)

    # numbers in this page's language
    def gb(self, n_bytes: float) -> str:
        return i18n.gigabytes(n_bytes, self.lang)

    def pct(self, share: float) -> str:
        return i18n.percent(share, self.lang)

    def signed_pct(self, share: float) -> str:
        return i18n.signed_percent(share, self.lang)

    def sci(self, x: float, digits: int = 2) -> str:
        return i18n.sci(x, self.lang, digits)

    def num(self, x: float, places: int = 0) -> str:
        return i18n.number(x, self.lang, places)

    def seconds(self, s: float) -> str:
        return i18n.seconds(s, self.lang)

    def ratio(self, r: float) -> str:
        return i18n.ratio(r, self.lang)

    def significant(self, x: float, digits: int = 2) -> str:
        return i18n.significant(x, self.lang, digits)

    def decimal(self, x: float) -> str:
        """``x`` as a plain decimal, without e-notation or rounding to a few digits: ``0.5``, ``1,000``."""
        return i18n.decimal(x, self.lang)


def _state(name: str) -> dict[Any, Any]:
    if name not in st.session_state:
        st.session_state[name] = {}
    state: dict[Any, Any] = st.session_state[name]
    return state


def seen_urls() -> dict[Any, Any]:
    return _state(_SEEN)


def remembered(page_key: str) -> dict[str, str]:
    values: dict[str, str] = _state(_REMEMBER).setdefault(page_key, {})
    return values


def _resolve_language(notices_sink: list[str], switched: bool) -> str:
    """Settle the language, then draw the switch.

    On a rerun of the same page with ``?lang=`` as we left it, the switch's
    own state is the truth (a click included). When the URL brought a new
    value it wins; after a page switch, when Streamlit has dropped the
    widget's state, our record of this session's choice refills it.
    """
    raw = st.query_params.get("lang")
    seen = seen_urls()
    url_moved = seen.get("lang", _MISSING) != raw
    state = st.session_state.get(LANG_WIDGET)
    if not switched and not url_moved and state in i18n.LANGUAGES:
        st.session_state[_LANG_CHOICE] = state
    else:
        if url_moved:
            url_lang = i18n.parse_language(raw)
            if raw is not None and url_lang is None:
                notices_sink.append(raw)
            seen["lang"] = raw
        else:
            url_lang = None
        st.session_state[_LANG_CHOICE] = i18n.choose_language(
            url_lang, st.session_state.get(_LANG_CHOICE), st.context.locale
        )
        st.session_state[LANG_WIDGET] = st.session_state[_LANG_CHOICE]
    lang: str = st.session_state[_LANG_CHOICE]
    with st.sidebar:
        st.segmented_control(
            "Bahasa · Language",
            i18n.LANGUAGES,
            format_func=_LANG_NAMES.__getitem__,
            key=LANG_WIDGET,
            required=True,
            label_visibility="collapsed",
        )
    implicit = i18n.choose_language(None, None, st.context.locale)
    if (raw is not None and raw != lang) or (raw is None and lang != implicit):
        st.query_params["lang"] = lang
        seen["lang"] = lang
    return lang


def link_params(page_key: str, lang: str) -> dict[str, str]:
    """The query string a link into ``page_key`` carries: language, then that page's values."""
    return {"lang": lang, **remembered(page_key)}


_PAGE_OBJECTS: dict[tuple[str, str], Any] = {}  # (the entry script, a page's file): its st.Page, made once
_PAGE_OBJECTS_LOCK = threading.Lock()


def page_link(file: str, **kwargs: Any) -> None:
    """``st.page_link`` to one of the app's pages (``file`` as in :data:`lensa.ui.site.PAGES`), through an
    ``st.Page`` made once per process and entry script.

    Given a path, Streamlit resolves it on disk at every call (``os.path.realpath``: a system call per part of
    it), and a page draws a dozen links at every rerun; a ``Page`` carries its resolved path and the hash the
    navigation registered for it (the pages directory's pages, the entry script the default one).
    """
    ctx = get_script_run_ctx()
    key = (ctx.main_script_path if ctx else "", file)
    target = _PAGE_OBJECTS.get(key)
    if target is None:
        with _PAGE_OBJECTS_LOCK:
            target = _PAGE_OBJECTS.get(key)
            if target is None:
                target = st.Page(file, default=file == PAGES_BY_KEY["overview"].file)
                _PAGE_OBJECTS[key] = target
    st.page_link(target, **kwargs)


def page_label(page: Page, target: PageInfo) -> str:
    title = page.t(f"nav.{target.key}")
    return f"{target.step} · {title}" if target.step else title


def _nav_link(page: Page, target: PageInfo) -> None:
    current = target.key == page.info.key
    label = page_label(page, target)
    if progress.done(target.key):
        label = f"{label} {DONE_MARK}"
    page_link(
        target.file,
        label=f"**{label}**" if current else label,
        icon=":material/arrow_right:" if current else None,
        query_params=link_params(target.key, page.lang),
        disabled=False,
    )


def draw_navigation(page: Page) -> None:
    """Our navigation, drawn after the page's controls so links carry the current values."""
    assert page.nav_area is not None, "setup() makes the navigation's container"
    with page.nav_area:
        st.markdown(f"### {page.t('app.name')}")
        for target in NAVIGATION:
            _nav_link(page, target)
        _progress_line(page)
        st.caption(page.t("app.sidebar_note"))


def _progress_line(page: Page) -> None:
    """What the mark after a step means, and how many steps have it: the marks are not a colour, and say so."""
    done = sum(progress.done(s.key) for s in STEPS)
    st.caption(page.t("nav.progress", mark=DONE_MARK, done=page.num(done), total=page.num(len(STEPS))))


def navigation_slots(page: Page) -> dict[str, DeltaGenerator]:
    """The navigation's frame for a page whose controls live in a fragment: a slot for the page's own entry
    between a container for the entries before it and one for those after it.

    The fragment fills its own page's slot (:func:`draw_own_link`) and the line of progress on every run of
    it, so that link follows the learner's moves and answers; :func:`fill_navigation` fills the containers
    once the fragment has run (a choice shared by the steps, such as the data, goes into their links). Three
    slots and not one per page: each is a message to the browser at every full run, and a class's first
    loads are mostly messages.
    """
    assert page.nav_area is not None, "setup() makes the navigation's container"
    keys = [target.key for target in NAVIGATION]
    assert page.info.key in keys, f"{page.info.key} is not in the navigation"
    with page.nav_area:
        st.markdown(f"### {page.t('app.name')}")
        slots = {"before": st.container(), page.info.key: st.empty(), "after": st.container()}
        page.progress_slot = st.empty()
        st.caption(page.t("app.sidebar_note"))
    return slots


def draw_own_link(page: Page) -> None:
    """The current page's navigation entry, in its slot: it carries the values the controls have now."""
    assert page.own_link is not None, "only inside the lesson fragment"
    with page.own_link:
        _nav_link(page, page.info)
    page.own_link_drawn = True
    if page.progress_slot is not None:
        with page.progress_slot:
            _progress_line(page)


def fill_navigation(page: Page, slots: dict[str, DeltaGenerator]) -> None:
    """Every other page's navigation entry, before and after the page's own: they change only in a full run
    (see ``whole_page`` controls)."""
    at = [target.key for target in NAVIGATION].index(page.info.key)
    with slots["before"]:
        for target in NAVIGATION[:at]:
            _nav_link(page, target)
    with slots["after"]:
        for target in NAVIGATION[at + 1 :]:
            _nav_link(page, target)


def setup(page_key: str) -> Page:
    """Configure the page, settle the language, draw the navigation; call it first on every page."""
    info = PAGES_BY_KEY[page_key]
    pending: list[str] = []
    switched = st.session_state.get(_PAGE) != page_key
    st.session_state[_PAGE] = page_key
    # The title must be set before the language is known; it is set again below.
    st.set_page_config(page_title="Lensa", page_icon="🔎", layout="centered", initial_sidebar_state="auto")
    lang = _resolve_language(pending, switched)
    # Widgets are identified by their labels too: in another language they are new widgets.
    switched = switched or st.session_state.get(_LAST_LANG) != lang
    st.session_state[_LAST_LANG] = lang
    page = Page(info, lang, switched=switched, printing=st.query_params.get(PRINT_PARAM) == "1")
    _translate_legacy_params(info)
    title = page.t(f"nav.{info.key}")
    st.set_page_config(page_title=f"{title} · Lensa")
    for raw in pending:
        page.notices.append(page.t("notice.bad_lang", raw=safe_echo(raw), language=_LANG_NAMES[lang]))
    page.nav_area = st.sidebar.container()
    st.html(METRIC_STYLE)
    page.notice_area = st.container()
    if page.printing:
        _print_bar(page)
    return page


_PRINT_BUTTON = (
    '<button type="button" class="lensa-print-button" onclick="window.print()">{label}</button>'
    "<style>.lensa-print-button {{ font: inherit; padding: 0.25rem 0.75rem; border-radius: 0.5rem; "
    "border: 1px solid rgba(128, 128, 128, 0.6); background: transparent; color: inherit; cursor: pointer; }}</style>"
)


def _print_bar(page: Page) -> None:
    """The print view's bar (on screen only): what this is, a button that prints, the way back to the page."""
    with st.container(key="lensa-print-bar", border=True):
        st.markdown(f"**{page.t('common.print_view')}** {page.t('common.print_hint')}")
        with st.container(horizontal=True, gap="medium", vertical_alignment="center"):
            st.html(_PRINT_BUTTON.format(label=page.t("common.print_button")), unsafe_allow_javascript=True)
            back = {k: v for k, v in st.query_params.items() if k != PRINT_PARAM}
            page_link(page.info.file, label=f"← {page.t('common.print_back')}", query_params=back)


def _translate_legacy_params(info: PageInfo) -> None:
    """Rewrite a parameter of an older link into the control that replaced it (``fp8=on`` into ``also=fp8``).

    A value the old control did not know is passed on as it is, so the new control's notice names it; a
    link that already says the new parameter keeps it.
    """
    names = {c.name for c in info.controls}
    for old, (new, mapping) in LEGACY_PARAMS.items():
        if new not in names or old not in st.query_params:
            continue
        raw = st.query_params.get(old) or ""
        del st.query_params[old]
        if new not in st.query_params:
            st.query_params[new] = mapping.get(raw.strip().lower(), raw)


def safe_echo(raw: str, limit: int = 24) -> str:
    """A URL value fit to quote back in a notice: short, one line, no markdown."""
    text = " ".join(str(raw).split())
    text = text[:limit] + ("…" if len(text) > limit else "")
    return "".join(ch for ch in text if ch.isprintable() and ch not in "`*_[]<>\\$~|#")


def step_of(info: PageInfo) -> tuple[PageInfo | None, PageInfo | None]:
    """The lesson pages before and after ``info`` (the overview counts as step 0, the summary comes last)."""
    order = list(LESSON)
    if info not in order:
        return None, None
    i = order.index(info)
    return (order[i - 1] if i > 0 else None), (order[i + 1] if i + 1 < len(order) else None)
