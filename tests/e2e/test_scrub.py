"""The lesson's loop in a real browser (issue 30): a step's sliders, chart, cards and "Try this" on one screen, and a
picture that answers while the hand moves, stop by stop, with what the server computes for each stop.

The server's side of each comparison is the frame the page sends for that stop (read through AppTest, as
tests/test_scrub.py checks it against a page opened at the stop itself); the browser's side is what Plotly was
handed and what the cards say, after keyboard steps or a mouse drag, before any rerun could have helped.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

from lensa.ui import i18n
from lensa.ui.components import scrub
from lensa.ui.site import PAGES_BY_KEY, STEPS
from tests.e2e.harness import wait_for_app
from tests.e2e.test_browser import query, url_of, wait_until
from tests.pagetools import open_page, scrub_data, scrub_elements

pytestmark = pytest.mark.e2e

SCRUB_PAGES = (*(s.key for s in STEPS), "blocks")
WIDTHS = ((1280, 900), (390, 844))
# What the browser adds to a chart's layout on its own: the theme's colours and fonts (a template), and on a phone
# the height and the layout the server sent for phones. Everything else must be the server's, unchanged.
BROWSER_ONLY = {"template", "height", "font", "autosize"}
# While the hand moves, the browser keeps the margins of the last draw at rest and no axis fits them to its labels
# (scrub.js, fillChart): at rest, the server's layout is drawn whole again.
MOVING_ONLY = {"margin"}
AXIS = re.compile(r"^[xy]axis\d*$")

VIEW = """() => {
    const root = document.querySelector('.lensa-scrub');
    const plain = (x) => JSON.parse(JSON.stringify(x, (k, v) => (k === 'uid' ? undefined : v)));
    const plots = [...root.querySelectorAll('.lensa-plot')];
    return {
        at: root.dataset.at,
        values: [...root.querySelectorAll('.lensa-slider-input')]
            .map((i) => [i.value, i.getAttribute('aria-valuetext')]),
        data: plots.map((p) => plain(p.data || null)),
        layout: plots.map((p) => plain(p.layout || null)),
        alts: plots.map((p) => p.getAttribute('aria-label')),
        // the points Plotly drew, trace by trace (a trace with none draws no group)
        points: plots.map((p) => [...p.querySelectorAll('.trace')]
            .map((t) => t.querySelectorAll('.point').length).filter((n) => n > 0)),
        // bars Plotly drew without their trace's colour (Plotly.animate adds its new bars unstyled)
        unstyled: plots.map((p) => [...p.querySelectorAll('.trace.bars .point path')]
            .filter((e) => !e.style.fill).length),
        titles: [...root.querySelectorAll('.lensa-chart-title')].map((t) => t.textContent),
        cards: [...root.querySelectorAll('.lensa-cards')].map((row) =>
            [...row.querySelectorAll('.lensa-card')].map((c) => [c.firstChild.textContent, c.lastChild.textContent])),
    };
}"""


@cache
def payload(key: str, lang: str) -> dict[str, Any]:
    """What the server sends the page at its defaults: every stop of every slider (AppTest, the same code)."""
    at = open_page(key, lang=lang)
    return scrub_data(scrub_elements(at)[0])


def contained(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where ``actual`` (what Plotly holds) does not hold ``expected`` (the server's): Plotly may add keys, never
    change or drop one."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: {actual!r} is not an object"]
        return [p for k, v in expected.items() for p in contained(v, actual.get(k, KeyError), f"{where}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: {str(actual)[:80]} is not {str(expected)[:80]}"]
        return [
            p for i, (a, b) in enumerate(zip(expected, actual, strict=True)) for p in contained(a, b, f"{where}[{i}]")
        ]
    return [] if expected == actual else [f"{where}: {actual!r} instead of {expected!r}"]


def _moving(layout: dict[str, Any]) -> dict[str, Any]:
    """The server's layout less what the browser sets itself while the hand moves."""
    return {
        k: ({a: b for a, b in v.items() if a != "automargin"} if AXIS.match(k) and isinstance(v, dict) else v)
        for k, v in layout.items()
        if k not in MOVING_ONLY
    }


def differences(view: dict[str, Any], frame: list[dict[str, Any]], at_rest: bool = True) -> list[str]:
    """Everything the browser shows that differs from the server's frame (``at_rest=False``: during a gesture)."""
    charts = [b for b in frame if b["k"] == "chart"]
    problems = []
    if len(view["data"]) != len(charts):
        return [f"{len(view['data'])} charts drawn, the frame has {len(charts)}"]
    for n, (chart, data, layout, alt, title) in enumerate(
        zip(charts, view["data"], view["layout"], view["alts"], view["titles"], strict=True)
    ):
        if data != chart["fig"]["data"]:
            problems.append(f"chart {n}: the traces differ from the server's")
        points = [len(t.get("x") or []) for t in chart["fig"]["data"] if t.get("x")]
        if view["unstyled"][n]:
            problems.append(f"chart {n}: {view['unstyled'][n]} bars drawn without their colour")
        if view["points"][n] != points:
            problems.append(f"chart {n}: {view['points'][n]} points drawn, the traces have {points}")
        server_layout = {k: v for k, v in chart["fig"]["layout"].items() if k not in BROWSER_ONLY}
        if not at_rest:
            server_layout = _moving(server_layout)
        problems += contained(server_layout, layout, f"chart {n} layout")
        if alt != chart["alt"] or title != chart["title"]:
            problems.append(f"chart {n}: text alternative or title differ")
    cards = [b["cards"] for b in frame if b["k"] == "cards"]
    if view["cards"] != cards:
        problems.append(f"cards {view['cards']} instead of {cards}")
    return problems


def open_step(page, server, key: str, lang: str) -> None:
    page.goto(url_of(server, key, lang=lang))
    wait_for_app(page)
    page.locator(".lensa-plot .main-svg").first.wait_for()


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("key", SCRUB_PAGES)
def test_every_stop_in_the_browser_is_the_servers_frame(server, page, key, lang):
    """Home, then one arrow key at a time through every stop of every slider: after each key press the chart
    Plotly draws, its text and the cards are the server's frame for that stop, drawn in the browser."""
    open_step(page, server, key, lang)
    data = payload(key, lang)
    inputs = page.locator(".lensa-slider-input")
    assert inputs.count() == len(data["parts"])
    for s, part in enumerate(data["parts"]):
        slider = inputs.nth(s)
        slider.focus()
        page.keyboard.press("Home")
        for i in range(len(part["stops"])):
            if i:
                page.keyboard.press("ArrowRight")
            expected = scrub.frame_at(part, i)
            page.wait_for_function(
                "([s, i]) => document.querySelector('.lensa-scrub').dataset.at.split(',')[s] == String(i)", arg=[s, i]
            )
            view = page.evaluate(VIEW)
            assert view["values"][s] == [str(i), part["stops"][i]], "the value announced, in the page's language"
            assert differences(view, expected, at_rest=False) == [], f"{part['name']} at stop {i} ({part['stops'][i]})"
        page.wait_for_timeout(600)  # the keys let go: the gesture is over, its last stop drawn at rest
        view = page.evaluate(VIEW)
        assert differences(view, scrub.frame_at(part, len(part["stops"]) - 1)) == [], f"{part['name']} at rest"
        # back where the server has it, so the next slider's frames are the ones of this state
        page.keyboard.press("Home")
        for _ in range(data["at"][s]):
            page.keyboard.press("ArrowRight")
        page.wait_for_timeout(600)
        wait_for_app(page)


def _box(page, selector: str) -> dict[str, float] | None:
    return page.evaluate(
        """(s) => { const e = document.querySelector(s); if (!e) return null;
                    const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, height: b.height}; }""",
        selector,
    )


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_control_chart_numbers_and_try_this_on_one_screen(server, chromium, width, height, lang):
    """Every step and the block page, as a link opens it: its main slider, its chart, its first row of cards and
    its "Try this" (its heading and first line) are on the screen together, without scrolling."""
    context = chromium.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    problems = []
    try:
        for key in SCRUB_PAGES:
            open_step(page, server, key, lang)
            assert page.evaluate("document.querySelector('[data-testid=stMain]').scrollTop") == 0
            boxes = {
                "slider": _box(page, ".lensa-slider-input"),
                "chart": _box(page, ".lensa-plot"),
                "cards": _box(page, ".lensa-cards"),
                "try this": _box(page, ".lensa-note"),
            }
            for what, box in boxes.items():
                if box is None:
                    problems.append(f"{key}: no {what}")
                    continue
                bottom = box["top"] + 44 if what == "try this" else box["bottom"]  # its heading and first line
                if box["top"] < 0 or bottom > height:
                    problems.append(f"{key} ({lang}, {width}px): {what} at {box['top']:.0f}-{box['bottom']:.0f}")
        assert problems == []
    finally:
        context.close()


def test_a_phone_shows_two_cards_a_row_or_three_when_there_are_three(server, chromium):
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        for key in ("fp16_range", "speed"):
            open_step(page, server, key, "en")
            tops = page.evaluate(
                "[...document.querySelector('.lensa-cards').children]"
                ".map((c) => Math.round(c.getBoundingClientRect().top))"
            )
            assert len(tops) == 4 and tops[0] == tops[1] < tops[2] == tops[3]
        open_step(page, server, "blocks", "en")  # three cards: one row, not two and one
        tops = page.evaluate(
            "[...document.querySelector('.lensa-cards').children].map((c) => Math.round(c.getBoundingClientRect().top))"
        )
        assert len(tops) == 3 and tops[0] == tops[1] == tops[2]
        note = _box(page, ".lensa-note")
        assert note is not None and note["bottom"] <= 844, f"the block page's Try this ends at {note}"
        # Streamlit's own rows of cards too (step 3's run, under its chart)
        open_step(page, server, "loss_scaling", "en")
        tops = page.evaluate(
            "[...document.querySelectorAll('[data-testid=stMetric]')]"
            ".map((c) => Math.round(c.getBoundingClientRect().top))"
        )
        assert len(tops) == 2 and tops[0] == tops[1]
    finally:
        context.close()


def _drag(page, slider, fraction_from: float, fraction_to: float, moves: int) -> None:
    box = slider.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * fraction_from, y)
    page.mouse.down()
    for n in range(1, moves + 1):
        x = box["x"] + box["width"] * (fraction_from + (fraction_to - fraction_from) * n / moves)
        page.mouse.move(x, y)


@pytest.mark.parametrize("key", ["fp16_range", "loss_scaling", "blocks"])
def test_a_mouse_drag_answers_at_every_stop_and_the_server_hears_it_once(server, page, key):
    """The issue's own trial: a drag across most of the slider in 30 moves. The chart and the cards change with
    the hand (a new picture for every stop crossed: what Plotly draws, with the cards), nothing reaches the
    server until the button is let go, and then the lesson reruns once: the URL follows."""
    open_step(page, server, key, "en")
    sent: list[str] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda frame: sent.append("frame")))
    page.reload()
    wait_for_app(page)
    page.locator(".lensa-plot .main-svg").first.wait_for()
    page.evaluate(
        """() => {
            window.__states = new Set(); window.__stops = new Set();
            const root = document.querySelector('.lensa-scrub');
            new MutationObserver(() => {
                window.__stops.add(root.dataset.at);
                const plot = root.querySelector('.lensa-plot');
                window.__states.add([...root.querySelectorAll('.lensa-card-value')].map((e) => e.textContent).join('|')
                    + '#' + JSON.stringify(plot.data || null));
            }).observe(root, {subtree: true, attributes: true, childList: true, characterData: true});
        }"""
    )
    slider = page.locator(".lensa-slider-input").first
    before = len(sent)
    _drag(page, slider, 0.05, 0.95, 30)
    page.wait_for_timeout(300)
    during = len(sent) - before
    stops = page.evaluate("window.__stops.size")
    states = page.evaluate("window.__states.size")
    page.mouse.up()
    name = PAGES_BY_KEY[key].controls[0].name if key != "blocks" else "outlier"
    wait_until(page, lambda: name in query(page))
    wait_for_app(page)
    after = len(sent) - before - during
    assert during == 0, "no message to the server while the hand moves"
    assert stops >= 15 and states >= stops, f"{stops} stops crossed, {states} states shown"
    assert after == 1, f"{after} messages after the release: one rerun per gesture"
    part = payload(key, "en")["parts"][0]
    i = int(page.evaluate("document.querySelector('.lensa-scrub').dataset.at").split(",")[0])
    control = PAGES_BY_KEY[key].control(name)
    assert query(page)[name] == control.to_url(control.stops[i])  # the URL says where the hand let go
    assert differences(page.evaluate(VIEW), scrub.frame_at(part, i)) == []


def test_the_values_are_announced_in_the_pages_language_and_the_keyboard_reaches_them(server, page):
    open_step(page, server, "fp16_range", "id")
    slider = page.locator(".lensa-slider-input").first
    assert slider.get_attribute("aria-valuetext") == i18n.sci(1e-6, "id") == "1,0e-6"
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert slider.get_attribute("aria-valuetext") == i18n.sci(1.5e-6, "id") == "1,5e-6"
    label = page.evaluate("document.activeElement.labels[0].textContent")
    assert i18n.text("id", "fp16_range.grad") in label
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"  # its focus ring
    described = slider.get_attribute("aria-describedby")
    assert page.locator(f"#{described}").inner_text() == i18n.text("id", "fp16_range.grad_help")
    # after a pause the cards are read out once (a polite live region), not at every stop
    page.wait_for_timeout(1200)
    live = page.locator(".lensa-live").inner_text()
    assert i18n.text("id", "fp16_range.metric_zero") in live


def test_the_plotly_bundle_is_a_package_asset_cached_by_the_browser(server, page):
    seen: dict[str, dict[str, str]] = {}
    page.on("response", lambda r: seen.setdefault(r.url, dict(r.headers)) if "bidi-components" in r.url else None)
    open_step(page, server, "fp16_range", "en")
    bundle = next(h for url, h in seen.items() if url.endswith(scrub.PLOTLY_FILE))
    assert "immutable" in bundle["cache-control"] and "max-age=31536000" in bundle["cache-control"]
    assert bundle.get("content-encoding") == "gzip"
    assert not any("cdn" in url for url in seen)
    # a second page of the lesson takes it from the browser's cache: nothing comes over the network for it
    page.goto(url_of(server, "bf16", lang="en"))
    wait_for_app(page)
    page.locator(".lensa-plot .main-svg").first.wait_for()
    transfers = page.evaluate(
        "(f) => performance.getEntriesByType('resource').filter((e) => e.name.endsWith(f)).map((e) => e.transferSize)",
        scrub.PLOTLY_FILE,
    )
    assert transfers and all(size == 0 for size in transfers), transfers


def test_reduced_motion_draws_each_stop_at_once(server, chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
    page = context.new_page()
    try:
        open_step(page, server, "bf16", "en")
        transitions = page.evaluate(
            "[...document.querySelectorAll('.lensa-scrub *')].map((e) => getComputedStyle(e).transitionDuration)"
        )
        assert set(transitions) <= {"0s"}
        slider = page.locator(".lensa-slider-input").first
        slider.focus()
        page.keyboard.press("End")
        part = payload("bf16", "en")["parts"][0]
        # the key's stop is drawn in the next animation frame: read the page once it is there
        page.wait_for_function(
            "(i) => document.querySelector('.lensa-scrub').dataset.at.split(',')[0] == String(i)",
            arg=len(part["stops"]) - 1,
        )
        view = page.evaluate(VIEW)
        last = scrub.frame_at(part, len(part["stops"]) - 1)
        assert differences(view, last, at_rest=False) == []  # drawn at the key press, with no transition
    finally:
        context.close()


def test_json_of_a_frame_has_no_nan(server):
    """Plotly's JSON never holds NaN or inf (JSON has no such numbers): the scrub writes them as null."""
    for key in SCRUB_PAGES:
        for part in payload(key, "en")["parts"]:
            json.dumps(part, allow_nan=False)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_a_glossary_term_in_a_caption_the_scrub_draws_is_a_link(server, page, lang):
    """Step 1's caption links "model states" to the glossary: the component draws it as a link in the page's
    language, and no markdown of it shows."""
    page.goto(url_of(server, "memory", lang=lang))
    wait_for_app(page)
    caption = page.locator(".lensa-chart-caption").first
    caption.wait_for()
    link = caption.locator("a.lensa-term")
    assert link.count() == 1
    assert link.get_attribute("href") == f"glossary?lang={lang}&term=model_states"
    assert link.get_attribute("target") == "_blank"
    assert "](" not in page.locator(".lensa-scrub").first.inner_text()


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_phones_limit_labels_are_apart_and_beside_their_lines(server, chromium, lang):
    """Issue 41: at 390 px step 2's three limit labels piled up and one sat far from its line. As Plotly draws
    them there: no two labels overlap, each is inside the chart, and each begins or ends at its own line."""
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        for key in ("fp16_range", "loss_scaling"):
            open_step(page, server, key, lang)
            page.wait_for_timeout(500)
            labels = page.evaluate(
                """() => {
                    const gd = document.querySelector('.lensa-plot');
                    const svg = gd.getBoundingClientRect(), size = gd._fullLayout._size, x = gd._fullLayout.xaxis;
                    const texts = [...gd.querySelectorAll('.annotation-text')].map((t) => t.getBoundingClientRect());
                    return gd._fullLayout.annotations.map((a, i) => ({
                        line: svg.left + size.l + x.l2p(a.x), left: texts[i].left, right: texts[i].right,
                        top: texts[i].top, bottom: texts[i].bottom, plotLeft: svg.left, plotRight: svg.right,
                        text: a.text,
                    }));
                }"""
            )
            assert len(labels) == 3, labels
            for n, a in enumerate(labels):
                assert a["plotLeft"] <= a["left"] and a["right"] <= a["plotRight"], f"{key}: {a['text']} cut off"
                gap = min(abs(a["left"] - a["line"]), abs(a["right"] - a["line"]))
                assert gap <= 6, f"{key}: {a['text']} is {gap:.0f} px from its line"
                for b in labels[n + 1 :]:
                    apart = a["bottom"] <= b["top"] or b["bottom"] <= a["top"]
                    apart = apart or a["right"] <= b["left"] or b["right"] <= a["left"]
                    assert apart, f"{key}: {a['text']!r} and {b['text']!r} overlap"
    finally:
        context.close()
