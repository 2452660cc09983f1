"""A step's sliders, charts and metric cards as one component that answers while the hand moves.

The server builds a view of the step at every stop of each slider (the other controls as they are), writes each
as a frame (charts as plotly JSON, with their titles, captions, text alternatives and data tables, and the cards'
labels and values) and sends them with the page, compactly: one frame whole, the others as differences from it
(:func:`delta`). In the browser (``assets/scrub.js``) a slider is a native ``<input type="range">``; every
``input`` event (a drag, an arrow key) shows that stop's frame with ``Plotly.react``, with no server round trip.
When the gesture ends (the pointer is released, or a key is let go and no other follows) the component sets its
state once, so the server reruns the lesson once per gesture: the URL, the paragraphs and the questions follow.

The frames of a slider depend only on the step, the language and the other controls, never on the visitor:
they are built once per such state and shared by every session (:data:`PAYLOADS`, a bounded cache).

The value the server reads goes through the URL layer (:func:`lensa.ui.url_state.value_from_url`) like every
control's: a link's value snaps to the nearest stop, a bad one falls back with a notice. What the component sends
is checked like anything a client sends: only a stop's index, in range, under a gesture id the server has not
seen, moves a control; anything else is ignored and the control keeps its value.

Plotly.js is the ``plotly.js-basic-dist-min`` bundle (bar, scatter and pie traces: all the figures use) of the
same version Streamlit's own charts use, a package asset beside its licence: the app works offline and in the
images, and the browser caches it (:mod:`lensa.ui.serve` tells it for how long).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import streamlit as st

from lensa.ui import display
from lensa.ui.controls import NumberControl
from lensa.ui.frame import Page
from lensa.ui.url_state import value_from_url, value_to_url
from lensa.ui.widgets import on_paper

PROJECT = "lensa"
COMPONENT = "scrub"
NAME = f"{PROJECT}.{COMPONENT}"  # how Streamlit knows it, and the URL path of its assets
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the lensa package
ASSET_DIR = "ui/components/assets"  # relative to PACKAGE_ROOT
ASSETS = PACKAGE_ROOT / ASSET_DIR
PLOTLY_VERSION = "4.1.1"
PLOTLY_FILE = f"plotly-basic-{PLOTLY_VERSION}.min.js"  # versioned: a new bundle is a new URL (served immutable)
ASSET_URL_PREFIX = f"/_stcore/bidi-components/{NAME}/"
PLOTLY_PATH = f"{ASSET_URL_PREFIX}{PLOTLY_FILE}"
MAX_GESTURE_ID_CHARS = 64
_SEEN_GESTURES = "lensa.scrub.gestures"  # per (page, control): the gesture id whose value the server has taken

Spec = dict[str, Any]


# --- what a frame holds ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """A chart of a frame: its figure (a :class:`lensa.ui.figures.SpecFigure`: plotly JSON, data table, text
    alternative), the heading above it, the caption under it, and on a phone its height (px, None: as built) and
    any layout it changes there (merged over the figure's)."""

    figure: Any
    title: str
    caption: str = ""
    alt: str | None = None
    compact_height: int | None = None
    compact_layout: Spec | None = None


@dataclass(frozen=True)
class Cards:
    """A row of metric cards: (label, value as written) pairs."""

    items: tuple[tuple[str, str], ...]


Block = Chart | Cards
Frame = tuple[Block, ...]  # what the component shows at one stop, top to bottom under its sliders


_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")


def words(text: str) -> str:
    """A text the browser writes as plain text (a label, a card, a stop, a text alternative): a catalogue link
    ``[words](glossary?...)`` reads as its words. Titles, captions and "Try this" keep theirs: ``scrub.js`` draws
    a glossary link as a link."""
    return _LINK.sub(r"\1", text)


def frame_json(frame: Frame) -> list[Spec]:
    """A frame as the browser reads it (its charts' data tables stay on the server: :func:`data_tables`)."""
    out: list[Spec] = []
    for block in frame:
        if isinstance(block, Cards):
            out.append({"k": "cards", "cards": [[words(label), words(value)] for label, value in block.items]})
            continue
        fig = block.figure
        spec = fig.to_dict()
        out.append(
            {
                "k": "chart",
                "title": block.title,
                "caption": block.caption,
                "alt": words(block.alt or getattr(fig, "alt", "") or block.title),
                "fig": {"data": spec.get("data", []), "layout": spec.get("layout", {})},
                "compact": None
                if block.compact_height is None and not block.compact_layout
                else {"height": block.compact_height, "layout": block.compact_layout or {}},
            }
        )
    return out


def data_tables(frame: Frame) -> None:
    """Under the component, the data tables of ``frame``'s charts (the current stop's) in one closed section, as
    :func:`lensa.ui.display.chart` writes one under a chart: they follow the slider once the gesture ends.

    One section, not one per chart: they would sit together under the component, each named "Data table", with
    nothing to say which chart each is of. Where there are several, each table is under its chart's title."""
    charts = [(block.title, block.figure) for block in frame if isinstance(block, Chart)]
    display.tables_of(charts if len(charts) > 1 else [("", figure) for _, figure in charts])


# --- frames as differences from one of them ------------------------------------------------------------------


def _plain(x: Any) -> Any:
    """``x`` as JSON gives it back: tuples as lists, and NaN and ±inf as null (as plotly's own encoder writes
    them, since JSON has no such numbers), so equal values compare equal."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, bool | int | float | str) or x is None:
        return x
    return _plain(json.loads(json.dumps(x, default=lambda o: o.item())))  # numpy scalars


def delta(base: Any, new: Any) -> Any:
    """What turns ``base`` into ``new`` (both plain JSON), or None when they are equal.

    ``{"=": v}`` replaces the value; ``{"$": {key: delta}, "-": [keys]}`` patches a dict key by key (``"-"``: the
    keys ``new`` no longer has); ``{"@": {"i": delta}}`` patches a list of the same length element by element.
    :func:`patch` and the browser's ``patch`` undo it.
    """
    if base == new:
        return None
    if isinstance(base, dict) and isinstance(new, dict):
        changed = {k: d for k, v in new.items() if (d := delta(base.get(k, _MISSING), v)) is not None}
        removed = [k for k in base if k not in new]
        out: dict[str, Any] = {"$": changed}
        if removed:
            out["-"] = removed
        return out
    if isinstance(base, list) and isinstance(new, list) and len(base) == len(new) and _nested(new):
        return {
            "@": {str(i): d for i, (a, b) in enumerate(zip(base, new, strict=True)) if (d := delta(a, b)) is not None}
        }
    return {"=": new}


def _nested(items: list[Any]) -> bool:
    return any(isinstance(x, dict | list) for x in items)


class _Missing:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Missing)

    def __hash__(self) -> int:
        return 0


_MISSING = _Missing()


def patch(base: Any, d: Any) -> Any:
    """``base`` with :func:`delta`'s ``d`` applied (None: ``base`` itself)."""
    if d is None:
        return base
    if "=" in d:
        return d["="]
    if "$" in d:
        out = dict(base)
        for k, sub in d["$"].items():
            out[k] = patch(base.get(k), sub)
        for k in d.get("-", ()):
            out.pop(k, None)
        return out
    items = list(base)
    for i, sub in d["@"].items():
        items[int(i)] = patch(items[int(i)], sub)
    return items


# --- the sliders and their frames ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Slider:
    """A URL-bound slider of the component: its control (stops, default), label, how a stop is written for people
    (also what a screen reader announces), and a help line under it."""

    control: NumberControl
    label: str
    show: Callable[[float], str]
    help: str | None = None

    @property
    def name(self) -> str:
        return self.control.name


State = Mapping[str, float]  # every slider's value
Build = Callable[[Sequence[State]], Sequence[Frame]]  # the frames of the states of one slider's stops, in order


class BoundedCache:
    """A thread-safe LRU cache shared by every session of the process: at most ``max_entries`` values and, when
    ``max_bytes`` is given, at most that many bytes of them (``size`` says a value's: ``len`` unless told)."""

    def __init__(self, max_entries: int, max_bytes: int | None = None, size: Callable[[Any], int] = len) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._size = size
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}  # a key being made: its builder holds the lock
        self.misses = 0

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value of ``key``, made by ``make()`` on a miss. Sessions that miss the same key together wait for
        one build (a class opening a step in the same second would otherwise build its frames once each); a
        slow build holds up no other key."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._items:  # built while this session waited
                    self._items.move_to_end(key)
                    return self._items[key][0]
            value = make()
            size = self._size(value) if self.max_bytes is not None else 0
            with self._lock:
                self.misses += 1
                self._items[key] = (value, size)
                self._bytes += size
                while len(self._items) > self.max_entries or (
                    self.max_bytes is not None and self._bytes > self.max_bytes and len(self._items) > 1
                ):
                    self._bytes -= self._items.popitem(last=False)[1][1]
                if self._building.get(key) is building:
                    del self._building[key]
        return value

    @property
    def bytes(self) -> int:
        """The sizes of the values held (0 without ``max_bytes``)."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)


# A step's payload for one slider is 10 to 500 kB of JSON. A class moves every slider of every step in both
# languages: the steps' defaults make 16 payloads (1.5 MB), step 4's two sliders 2 x (8 + 37), one for each stop
# of the other (1.9 MB), and /blocks one per block size and gradient (196, 94 MB). The budget is bytes, so the
# many small ones are not pushed out by a count, and the large ones only by the most recently used.
PAYLOADS = BoundedCache(4096, max_bytes=64 * 2**20)
# The current stop's frame, whose data tables a rerun draws: the same pure function of the same key, kept so a
# gesture's rerun does not build its charts again (every learner of a class at the same stops shares it).
FRAMES = BoundedCache(512)


def with_note(frame: list[Spec], note: Spec | None) -> list[Spec]:
    """``frame`` with ``note`` (the step's "Try this") after its first row of cards, where the eye already is."""
    if note is None:
        return frame
    at = next((i + 1 for i, block in enumerate(frame) if block["k"] == "cards"), len(frame))
    return [*frame[:at], note, *frame[at:]]


def slider_part(page: Page, slider: Slider, values: State, build: Build, note: Spec | None = None) -> str:
    """One slider's part of the payload as JSON: its stops written for people, and its frames (the default stop's
    whole, the others as :func:`delta` from it). Built from ``build`` once per (page, language, slider, the other
    sliders' values) and the page's ``depends``; see :func:`scrub`."""
    control = slider.control
    states = [{**values, slider.name: stop} for stop in control.stops]
    frames = [with_note(_plain(frame_json(f)), note) for f in build(states)]
    if len(frames) != len(states):
        raise ValueError(f"{page.info.key}: {len(frames)} frames for the {len(states)} stops of {slider.name}")
    base_at = control.stops.index(control.default)
    base = frames[base_at]
    part = {
        "name": slider.name,
        "label": words(slider.label),
        "help": words(slider.help or ""),
        "about": words(page.t("views.help_about", label=slider.label)),
        "stops": [words(slider.show(s)) for s in control.stops],
        "base": base,
        "frames": [delta(base, f) for f in frames],
    }
    return json.dumps(part, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def component_key(page: Page) -> str:
    """The session-state key of a page's scrub component (one per page)."""
    return f"w.{page.info.key}.scrub"


def moved_to(state: object, control: NumberControl, seen: object) -> float | None:
    """The stop a client's component state moves ``control`` to, or None: only a dict ``{"value": {"g": gesture id,
    "v": {name: index}}}`` with a short string id other than ``seen`` and a whole index in range counts."""
    value = state.get("value") if isinstance(state, Mapping) else None
    if not isinstance(value, Mapping):
        return None
    gesture, where = value.get("g"), value.get("v")
    if not isinstance(gesture, str) or len(gesture) > MAX_GESTURE_ID_CHARS or gesture == seen:
        return None
    if not isinstance(where, Mapping):
        return None
    index = where.get(control.name)
    if type(index) is not int or not 0 <= index < len(control.stops):
        return None
    return control.stops[index]


def _moved(state: object, control: NumberControl, seen: object) -> float | None:
    return moved_to(state, control, seen)


def _gesture_of(state: object) -> str | None:
    value = state.get("value") if isinstance(state, Mapping) else None
    gesture = value.get("g") if isinstance(value, Mapping) else None
    return gesture if isinstance(gesture, str) and len(gesture) <= MAX_GESTURE_ID_CHARS else None


def _seen() -> dict[tuple[str, str], str | None]:
    if _SEEN_GESTURES not in st.session_state:
        st.session_state[_SEEN_GESTURES] = {}
    seen: dict[tuple[str, str], str | None] = st.session_state[_SEEN_GESTURES]
    return seen


def read_values(page: Page, sliders: Sequence[Slider]) -> dict[str, float]:
    """Each slider's value for this run, through the URL layer: the client's gesture when it is a new and valid
    one, else the URL, our record or the default (:data:`lensa.ui.url_state.RULES`)."""
    key = component_key(page)
    state = st.session_state.get(key)
    seen = _seen()
    values: dict[str, float] = {}
    for slider in sliders:
        slot = (page.info.key, slider.name)
        control = slider.control
        value = value_from_url(
            page,
            control,
            slider.label,
            slider.show,
            from_widget=partial(_moved, control=control, seen=seen.get(slot)),
            key=key,
            fill_widget=False,
        )
        values[slider.name] = float(value)  # type: ignore[arg-type]  # a NumberControl's value is a stop, a float
    gesture = _gesture_of(state)
    for slider in sliders:
        seen[(page.info.key, slider.name)] = gesture
    return values


_renderer: Any = None
_renderer_lock = threading.Lock()


def _component() -> Any:
    """The component's mounting command, with its assets registered on the running Streamlit (once per runtime:
    the server has one, AppTest makes one per test).

    Streamlit finds a component's asset directory in an installed package's ``pyproject.toml``; Lensa runs from
    a checkout (``python -m lensa.ui.serve``, the images) as often as installed, so it declares the same manifest
    entry itself.
    """
    global _renderer
    from streamlit.components.v2.get_bidi_component_manager import get_bidi_component_manager
    from streamlit.components.v2.manifest_scanner import ComponentConfig, ComponentManifest

    manager = get_bidi_component_manager()
    with _renderer_lock:
        if manager.get_component_asset_root(NAME) is None:
            manifest = ComponentManifest(PROJECT, "0", [ComponentConfig(COMPONENT, ASSET_DIR)])
            manager.register_from_manifest(manifest, PACKAGE_ROOT)
        if _renderer is None or manager.get(NAME) is None or manager.get(NAME).js_url is None:  # type: ignore[union-attr]  # checked for None just before
            _renderer = st.components.v2.component(NAME, js="scrub.js", css="scrub.css", isolate_styles=False)
        return _renderer


def _ignore() -> None:
    """The component's state callback: the page reads the state itself, through the URL layer."""


def scrub(
    page: Page, sliders: Sequence[Slider], build: Build, depends: Hashable = (), try_this: str | None = None
) -> dict[str, float]:
    """Draw ``sliders`` with the frames ``build`` makes of their stops, and return each slider's value.

    ``build`` gets the states of one slider's stops, in order (every other slider at its current value), and
    returns a frame for each; it must be a pure function of those states, the page's language and ``depends``
    (every other control it reads), which key the shared cache of frames. ``try_this``: the step's "Try this",
    shown after the first row of cards. In the print view (``page.printing``) nothing moves: :func:`printed`.
    """
    values = read_values(page, sliders)
    if page.printing:
        printed(page, sliders, values, build([values])[0])
        return values
    note = None if try_this is None else {"k": "note", "label": words(page.t("common.try_this")), "text": try_this}
    parts = []
    for slider in sliders:
        others = tuple((s.name, values[s.name]) for s in sliders if s.name != slider.name)
        cache_key = (page.info.key, page.lang, slider.name, depends, others, try_this)
        parts.append(PAYLOADS.get(cache_key, partial(slider_part, page, slider, values, build, note)))
    at = [s.control.stops.index(values[s.name]) for s in sliders]
    data = {"parts": parts, "at": at, "lang": page.lang, "plotly": PLOTLY_FILE}
    _component()(key=component_key(page), data=data, default={"value": None}, on_value_change=_ignore)
    for slider in sliders:
        value_to_url(page, slider.control, values[slider.name])
    frame_key = (page.info.key, page.lang, depends, tuple(sorted(values.items())))
    data_tables(FRAMES.get(frame_key, lambda: build([values])[0]))
    return values


def frame_at(payload_part: str | Mapping[str, Any], index: int) -> list[Spec]:
    """The frame the browser shows at stop ``index`` of a slider's part (JSON text or parsed): for tests and the
    benches, which read the page as the browser does."""
    part = json.loads(payload_part) if isinstance(payload_part, str) else payload_part
    result: list[Spec] = patch(part["base"], part["frames"][index])
    return result


def printed(page: Page, sliders: Sequence[Slider], values: State, frame: Frame) -> None:
    """The print view of a scrub: each slider's value written out, and the current stop's frame as Streamlit's own
    charts (each with its caption and data table) and metric cards, with nothing to drag and no "Try this"."""
    for slider in sliders:
        on_paper(slider.label, slider.show(values[slider.name]))
    for block in frame:
        if isinstance(block, Cards):
            display.metric_row(block.items)
        else:
            display.chart(block.figure, block.title, block.caption or None, block.alt)
    for slider in sliders:
        value_to_url(page, slider.control, values[slider.name])
