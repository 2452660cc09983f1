"""Accessibility in a real browser: axe-core on every page, the document's language, the keyboard, text alternatives.

The axe scan covers every page at 1280 and 390 px, in the light and the dark theme, each of those four scans in
one language a page, chosen so that every page is scanned in both languages at each width and in each theme (a
pairwise design, ``_views``: every two of page, language, width and theme meet; the whole grid took twice the time,
about 6 of CI's minutes, for the three-way meetings). No serious or critical violation may remain. Minor and
moderate ones are printed (run with ``-rP`` to see them) and each needs a reason in ``LEFT_WITH_REASON``; an
unexplained one fails the test.
"""

from __future__ import annotations

from collections import Counter

import pytest

from lensa.ui import i18n
from lensa.ui.site import PAGES
from tests.e2e.harness import wait_for_app
from tests.e2e.test_browser import SLIDER, metric_values, query, url_of, wait_until
from tests.pagetools import page_keys

pytestmark = pytest.mark.e2e

WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"]
BLOCKING = {"serious", "critical"}
# Minor and moderate findings we leave, with the reason. None are found today; a new one fails
# the test until it is fixed or explained here.
LEFT_WITH_REASON: dict[str, str] = {}
CHART = '[data-testid="stPlotlyChart"]'
SCRUB_CHART = ".lensa-plot"  # a chart of a step's scrub component (lensa.ui.components.scrub)


def _axe():
    from axe_playwright_python.sync_playwright import Axe

    return Axe()


def _scan(chromium, server, width: int, scheme: str, views) -> None:
    """axe-core over ``views`` ((page key, language, URL parameters)) at one width and theme."""
    axe = _axe()
    context = chromium.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(30_000)
    blocking, others, impacts = [], [], Counter()
    try:
        for key, lang, params in views:
            page.goto(url_of(server, key, lang=lang, **params))
            wait_for_app(page)
            where = "&".join([f"{key}?lang={lang}", *(f"{k}={v}" for k, v in params.items())])
            unnamed = page.locator(f"{CHART}:not([aria-label]), {SCRUB_CHART}:not([aria-label])").count()
            if unnamed:
                blocking.append(f"{where}: {unnamed} chart(s) without a text alternative")
            results = axe.run(page, options={"runOnly": {"type": "tag", "values": WCAG_TAGS}})
            for violation in results.response["violations"]:
                impacts[violation["impact"]] += len(violation["nodes"])
                line = f"{where}: {violation['impact']} {violation['id']} × {len(violation['nodes'])}"
                if violation["impact"] in BLOCKING:
                    targets = [node["target"] for node in violation["nodes"][:3]]
                    blocking.append(f"{line} {targets} {violation['nodes'][0].get('failureSummary', '')}")
                else:
                    others.append((violation["id"], line))
    finally:
        context.close()
    print(f"axe-core, {width} px, {scheme}: {dict(impacts) or 'no violations'}")
    for rule, line in others:
        print(f"  left: {line}: {LEFT_WITH_REASON.get(rule, 'NO REASON GIVEN')}")
    assert blocking == []
    assert [line for rule, line in others if rule not in LEFT_WITH_REASON] == []


WIDTHS = (1280, 390)
SCHEMES = ("light", "dark")


def _views(keys: list[str], width: int, scheme: str, **params: str) -> list[tuple[str, str, dict[str, str]]]:
    """Each page once, in the language that makes the scans pairwise: page i in LANGUAGES[(i + w + s) % 2] where w
    and s are the width's and the theme's places. Per page, the two widths take both languages in each theme and
    the two themes both languages at each width."""
    shift = WIDTHS.index(width) + SCHEMES.index(scheme)
    return [(key, i18n.LANGUAGES[(i + shift) % 2], params) for i, key in enumerate(keys)]


def test_the_scans_meet_every_pair_on_every_page():
    """On every page, every two of (language, width, theme) meet in a scanned view (so every two of the four
    factors meet too); each (page, width, theme) is scanned once."""
    keys = [info.key for info in PAGES]
    grid = [(key, lang, w, s) for w in WIDTHS for s in SCHEMES for key, lang, _ in _views(keys, w, s)]
    assert len(grid) == len({(key, w, s) for key, _, w, s in grid}) == len(keys) * len(WIDTHS) * len(SCHEMES)
    values = [i18n.LANGUAGES, WIDTHS, SCHEMES]
    for key in keys:
        views = [view[1:] for view in grid if view[0] == key]
        for a, b in [(0, 1), (0, 2), (1, 2)]:
            assert {(v[a], v[b]) for v in views} == {(x, y) for x in values[a] for y in values[b]}, (key, a, b)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_no_serious_or_critical_axe_violations(server, chromium, width, scheme):
    _scan(chromium, server, width, scheme, _views([info.key for info in PAGES], width, scheme))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_no_serious_or_critical_axe_violations_with_a_recorded_run(server, chromium, scheme):
    """The steps that can show a recorded run (2-5), showing the shipped reference run: selectors, tables, charts
    (at 1280 px; each step in both languages over the two themes)."""
    steps = page_keys(steps=True, control="data")
    _scan(chromium, server, 1280, scheme, _views(steps, 1280, scheme, data="reference"))


def test_document_language_follows_the_page_and_the_switch(server, page):
    page.goto(url_of(server, "fp16_range", lang="id"))
    wait_for_app(page)
    assert page.evaluate("document.documentElement.lang") == "id"
    page.evaluate("window.lensaNoReload = true")
    page.locator('[data-testid="stSidebar"] button', has_text="English").click()
    wait_until(page, lambda: page.evaluate("document.documentElement.lang") == "en")
    assert page.evaluate("window.lensaNoReload") is True  # switched in place, not by loading the page again
    assert page.locator("h1").first.inner_text() == i18n.text("en", "fp16_range.title")


def test_chart_text_alternative_follows_the_slider(server, page):
    page.goto(url_of(server, "fp16_range", lang="en"))
    wait_for_app(page)
    chart = page.locator(SCRUB_CHART).first
    assert chart.get_attribute("role") == "img"  # its SVG is one picture, said by its text alternative
    before = chart.get_attribute("aria-label")
    assert metric_values(page)[0] in before  # "Rounded to 0", the same number as the first card
    page.locator(SLIDER).first.focus()
    page.keyboard.press("End")
    wait_until(page, lambda: chart.get_attribute("aria-label") != before)  # at once, in the browser
    wait_until(page, lambda: query(page).get("grad") == "0.1")  # and the table under it once the key is let go
    wait_for_app(page)
    after = chart.get_attribute("aria-label")
    assert metric_values(page)[0] in after and metric_values(page)[3] in after
    # and the plotted values follow under it, as a table in a closed section
    table = page.locator('[data-testid="stExpander"]', has_text=i18n.text("en", "figure.table")).first
    assert table.locator("details").get_attribute("open") is None
    table.locator("summary").click()
    assert table.locator("table th").first.inner_text() == i18n.text("en", "fp16_range.axis")


def _tab_until(page, selector: str, limit: int = 60) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement?.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_a_step_by_keyboard_alone(server, page):
    """From the top of step 2: Tab to the slider, move it, Tab on to a check-yourself answer, choose it."""
    page.goto(url_of(server, "fp16_range", lang="en"))
    wait_for_app(page)
    before = metric_values(page)
    page.locator("h1").first.click()  # start reading at the title, as a keyboard user arriving on the page
    _tab_until(page, 'input[type="range"]')  # the scrub's slider: a native range input
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert ring != "none"  # a visible focus ring
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    wait_until(page, lambda: metric_values(page) != before)
    wait_until(page, lambda: query(page).get("grad") == "5e-7")  # the server hears it once the keys are let go
    wait_for_app(page)
    _tab_until(page, 'input[type="radio"]')
    assert page.evaluate("getComputedStyle(document.activeElement.closest('label')).outlineStyle") != "none"
    question = page.evaluate("document.activeElement.closest('[role=radiogroup]').getAttribute('aria-label')")
    assert question == i18n.text("en", "quiz.fp16_range_q1")
    page.keyboard.press("Space")  # the first answer
    right = i18n.answers()["fp16_range_q1"] == "a"
    verdict = i18n.text("en", "common.check_right" if right else "common.check_wrong")
    alert = page.locator('[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentWarning"]')
    alert.filter(has_text=verdict).first.wait_for()
    page.keyboard.press("ArrowDown")  # the next answer, still by keyboard, changes the verdict
    after = i18n.answers()["fp16_range_q1"] == "b"
    alert.filter(has_text=i18n.text("en", "common.check_right" if after else "common.check_wrong")).first.wait_for()


def test_play_and_pause_work_from_the_keyboard(server, page):
    page.goto(url_of(server, "loss_scaling", lang="id"))
    wait_for_app(page)
    play = page.get_by_role("button", name=i18n.text("id", "loss_scaling.play").strip("▶ "))
    pause = page.get_by_role("button", name=i18n.text("id", "loss_scaling.pause").strip("❚ "))
    points = """() => document.querySelectorAll('.js-plotly-plot')[1]
        .querySelectorAll('.scatterlayer .trace:first-child .point').length"""
    full = page.evaluate(points)
    play.focus()
    page.keyboard.press("Enter")
    wait_until(page, lambda: page.evaluate(points) < full, timeout_ms=3000)  # the replay starts from step 1
    pause.focus()
    page.keyboard.press(" ")
    page.wait_for_timeout(300)
    held = page.evaluate(points)
    page.wait_for_timeout(600)
    assert page.evaluate(points) == held < full


def test_reduced_motion_shows_the_final_state_without_play(server, chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
    page = context.new_page()
    try:
        page.goto(url_of(server, "loss_scaling", lang="en"))
        wait_for_app(page)
        assert page.locator(".updatemenu-container").first.is_hidden()
        steps = len(page.evaluate("() => document.querySelectorAll('.js-plotly-plot')[1].data[0].x"))
        assert steps == 40
    finally:
        context.close()
