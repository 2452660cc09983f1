"""Open a page of the app the way a visitor's first request would, through AppTest."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

from lensa.ui import i18n, site
from lensa.ui.components import scrub
from lensa.ui.frame import DONE_MARK
from lensa.ui.layout import LINK_NOTICE_ICON
from lensa.ui.site import PAGES_BY_KEY

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def open_page(key: str, timeout: float = 30, locale: str | None = None, **params: str) -> AppTest:
    """Run the entry script once, switch to ``key``'s page with ``params`` in the URL, run it."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    if locale is not None:
        at.context["locale"] = locale
    at.run()
    info = PAGES_BY_KEY[key]
    if info.file != "app.py":
        at.switch_page(info.file)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    return at


def page_keys(*, steps: bool = False, control: str | None = None) -> tuple[str, ...]:
    """The keys of ``lensa.ui.site.PAGES`` in navigation order (the tests' page lists): the lesson steps alone
    with ``steps``, and only the pages that own a control named ``control`` with it (``"data"``: the steps that
    can show a recorded run; ``"also"``: those that can show the narrower formats)."""
    pages = site.STEPS if steps else site.PAGES
    return tuple(p.key for p in (site.pages_with(control, pages) if control else pages))


def metrics(at: AppTest) -> dict[str, str]:
    """Every metric card the page shows: Streamlit's own, and those of its scrub components at their stops."""
    return {**{m.label: m.value for m in at.metric}, **scrub_cards(at)}


def sidebar_links(at: AppTest) -> list[str]:
    return [e.proto.label for e in at.sidebar.get("page_link")]


def notices(at: AppTest) -> list[str]:
    """The notices about link values the page could not use (other warnings left out)."""
    return [w.value for w in at.warning if w.icon == LINK_NOTICE_ICON]


# --- the scrub component (lensa.ui.components.scrub): read as the browser reads it, moved as a browser moves it --


def scrub_elements(at: AppTest) -> list[Any]:
    """The page's scrub components, in page order (AppTest shows them as unknown elements)."""
    found: list[Any] = []

    def walk(node: Any) -> None:
        if getattr(node, "type", None) == "bidi_component" and node.proto.component_name == scrub.NAME:
            found.append(node)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return found


def scrub_data(element: Any) -> dict[str, Any]:
    """What the server sent a scrub: its parts (parsed) and each slider's stop index."""
    data = json.loads(element.proto.json)
    return {"parts": [json.loads(p) for p in data["parts"]], "at": data["at"], "raw": data}


def scrub_frame(at: AppTest, which: int = 0) -> list[dict[str, Any]]:
    """The frame the browser shows for the page's scrub ``which`` at its sliders' current stops."""
    data = scrub_data(scrub_elements(at)[which])
    return scrub.frame_at(data["parts"][0], data["at"][0])


def scrub_cards(at: AppTest) -> dict[str, str]:
    """Every card the page's scrubs show at their current stops (label: value)."""
    cards: dict[str, str] = {}
    for i in range(len(scrub_elements(at))):
        for block in scrub_frame(at, i):
            if block["k"] == "cards":
                cards.update({label: value for label, value in block["cards"]})
    return cards


def scrub_value(at: AppTest, name: str) -> float:
    """The stop a scrub slider named ``name`` is at."""
    for element in scrub_elements(at):
        data = scrub_data(element)
        for part, index in zip(data["parts"], data["at"], strict=True):
            if part["name"] == name:
                stops = slider_stops(at, name)
                return stops[index]
    raise KeyError(name)


def slider_stops(at: AppTest, name: str) -> tuple[float, ...]:
    """The stops of the page's control ``name`` (from the site's list of pages, as the page declares them)."""
    key = at.session_state["lensa.page"]
    control = site.PAGES_BY_KEY[key].control(name)
    return control.stops  # type: ignore[union-attr]  # a scrub's control is a NumberControl


def move_scrub(at: AppTest, name: str, index: int | object, gesture: str | None = None, **others: object) -> AppTest:
    """Send what the component sends at the end of a gesture (slider ``name`` at stop ``index``, or any junk a
    client could send instead), with every other widget's state, and run: the websocket's rerun request."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    element = scrub_elements(at)[0]
    data = scrub_data(element)
    where = {part["name"]: i for part, i in zip(data["parts"], data["at"], strict=True)}
    where[name] = index  # type: ignore[assignment]  # a test may send junk on purpose
    where.update(others)  # type: ignore[arg-type]
    states = at._tree.get_widget_states()
    state = WidgetState(id=element.proto.id)
    state.json_value = json.dumps({"value": {"g": gesture or uuid.uuid4().hex[:12], "v": where}})
    states.widgets.append(state)
    at._run(states)
    return at


def send_scrub_state(at: AppTest, value: object) -> AppTest:
    """Send ``value`` as the component's whole state (junk a hand-written client could send), and run."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    element = scrub_elements(at)[0]
    states = at._tree.get_widget_states()
    state = WidgetState(id=element.proto.id)
    state.json_value = value if isinstance(value, str) else json.dumps(value)
    states.widgets.append(state)
    at._run(states)
    return at


def chart_specs(at: AppTest) -> list[dict[str, Any]]:
    """Every chart the page shows, as plotly JSON: Streamlit's own, and its scrubs' at their current stops."""
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    for i in range(len(scrub_elements(at))):
        specs += [block["fig"] for block in scrub_frame(at, i) if block["k"] == "chart"]
    return specs


def scrub_texts(at: AppTest, field: str) -> list[str]:
    """A text field (``"title"``, ``"caption"``, ``"alt"``) of every chart the page's scrubs show at their stops."""
    return [
        block[field] for i in range(len(scrub_elements(at))) for block in scrub_frame(at, i) if block["k"] == "chart"
    ]


_GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(glossary\?[^)]*\)")


def unlinked(text: str) -> str:
    """A text as a reader sees it: a glossary link ``[words](glossary?...)`` reads as its words."""
    return _GLOSSARY_LINK.sub(r"\1", text)


def assert_whole_navigation(at: AppTest, key: str, lang: str) -> None:
    """The sidebar has every page's entry, the page's own marked as the current one, and the line of progress.

    The own entry and the progress line are drawn by the step's lesson fragment in slots of their own
    (lensa.ui.frame.navigation_slots): a lesson body that never draws them leaves the slots empty.
    """
    links = sidebar_links(at)
    titles = [i18n.text(lang, f"nav.{p.key}") for p in site.NAVIGATION]
    assert len(links) == len(titles), (key, links)
    for label, title in zip(links, titles, strict=True):
        assert title in label, (key, label, title)
    own = site.NAVIGATION.index(PAGES_BY_KEY[key])
    assert [i for i, label in enumerate(links) if label.startswith("**")] == [own], (key, links)
    line = i18n.text(lang, "nav.progress", mark=DONE_MARK, done="", total="").split("(")[0]
    assert any(c.value.startswith(line) for c in at.sidebar.caption), (key, [c.value for c in at.sidebar.caption])
