"""For a class, in a real browser: answers kept across pages with the steps marked done, the print view and the page
on paper, the glossary one click from a term, and a phone's sidebar that closes after a tap on one of its links."""

from __future__ import annotations

import re

import pytest

from lensa.ui import i18n, progress
from lensa.ui.frame import DONE_MARK
from tests.e2e.harness import wait_for_app
from tests.e2e.test_browser import SLIDER, nav_labels, url_of, wait_until

pytestmark = pytest.mark.e2e

SIDEBAR = '[data-testid="stSidebar"]'


def _choose(page, question: str, letter: str, lang: str = "en") -> None:
    group = page.get_by_role("radiogroup", name=i18n.text(lang, f"quiz.{question}"))
    group.get_by_text(i18n.text(lang, f"quiz.{question}_{letter}"), exact=True).click()
    wait_for_app(page)


def test_answers_stay_across_pages_and_the_step_is_marked_done(server, page):
    page.goto(url_of(server, "fp16_range", lang="en"))
    wait_for_app(page)
    first, second = progress.questions("fp16_range")
    _choose(page, first, i18n.answers()[first])
    page.get_by_role("radiogroup", name=i18n.text("en", f"quiz.{second}")).wait_for()  # the next question
    _choose(page, second, i18n.answers()[second])
    wait_until(page, lambda: any(label.endswith(DONE_MARK) for label in nav_labels(page)))
    assert [label for label in nav_labels(page) if label.endswith(DONE_MARK)] == [
        f"2 · {i18n.text('en', 'nav.fp16_range')} {DONE_MARK}"
    ]
    page.locator(SIDEBAR).get_by_role("link", name=re.compile("^3 · ")).click()
    wait_for_app(page)
    page.locator(SIDEBAR).get_by_role("link", name=re.compile("^2 · ")).click()
    wait_for_app(page)
    group = page.get_by_role("radiogroup", name=i18n.text("en", f"quiz.{first}"))
    picked = group.get_by_role("radio", name=i18n.text("en", f"quiz.{first}_{i18n.answers()[first]}"))
    assert picked.is_checked()
    legend = i18n.text("en", "nav.progress", mark=DONE_MARK, done=1, total=6)
    assert page.locator(SIDEBAR).get_by_text(legend).is_visible()


def test_the_print_view_shows_the_figures_with_their_data_and_nothing_to_click(server, page):
    page.goto(url_of(server, "fp16_range", lang="id"))
    wait_for_app(page)
    link = page.get_by_role("link", name=i18n.text("id", "common.link_print"))
    href = link.get_attribute("href")
    assert "print=1" in href and "lang=id" in href and link.get_attribute("target") == "_blank"
    page.goto(url_of(server, "fp16_range", lang="id", grad="1e-8", print="1"))
    wait_for_app(page)
    assert not page.locator(SIDEBAR).is_visible()
    assert page.locator('input[type="radio"]').count() == 0  # no questions on paper
    table = i18n.text("id", "figure.table")
    wait_until(page, lambda: page.locator("details[open]", has_text=table).count() >= 1)
    assert page.locator("details[open] table").first.is_visible()
    bar = page.locator(".st-key-lensa-print-bar")
    assert bar.is_visible()
    page.evaluate("window.print = () => { window.lensaPrinted = true; }")
    page.get_by_role("button", name=i18n.text("id", "common.print_button"), exact=True).click()
    assert page.evaluate("window.lensaPrinted === true")  # the button opens the browser's print dialog
    back = bar.get_by_role("link", name=re.compile(i18n.text("id", "common.print_back")))
    assert "print" not in (back.get_attribute("href") or "") and "grad=1e-8" in back.get_attribute("href")
    # the link's state, written out: the step's slider is not drawn on paper (nothing to drag), its value is
    grad = i18n.text("id", "fp16_range.grad")
    assert page.locator('[data-testid="stMarkdownContainer"]', has_text=f"{grad}: 1,0e-8").count() == 1
    assert page.locator('input[type="range"], [data-testid="stSlider"]').count() == 0
    # nor the secondary choices: each is its label and its value, written out
    main = page.locator('[data-testid="stMain"]')
    assert main.locator('[data-testid="stSelectbox"], [data-testid="stButtonGroup"]').count() == 0
    for control, value in (("data.data", "data.source_illustration"), ("also.label", "also.option_none")):
        line = f"{i18n.text('id', control)}: {i18n.text('id', value)}"
        assert page.locator('[data-testid="stMarkdownContainer"]', has_text=line).count() == 1, line
    page.set_viewport_size({"width": 794, "height": 1123})  # an A4 sheet at 96 dpi
    page.emulate_media(media="print")
    page.wait_for_timeout(500)
    assert not bar.is_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height > 1500  # the whole page, not the one screen its scrolling area shows
    chart = page.locator('[data-testid="stPlotlyChart"]').first.bounding_box()
    assert chart is not None and chart["x"] >= 0 and chart["x"] + chart["width"] <= 794
    pdf = page.pdf(format="A4")
    assert pdf.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= 2


def test_the_print_link_follows_a_move_and_an_answer_keeps_the_explanation_below(server, page):
    """The print view's link is redrawn with the lesson fragment, so it carries the slider's value of now."""
    page.goto(url_of(server, "fp16_range", lang="en"))
    wait_for_app(page)
    page.locator(SLIDER).first.focus()
    page.keyboard.press("ArrowRight")
    link = page.get_by_role("link", name=i18n.text("en", "common.link_print"))
    wait_until(page, lambda: "grad=1.5e-6" in (link.get_attribute("href") or ""))
    first = progress.questions("fp16_range")[0]
    _choose(page, first, "c")  # a wrong one: the verdict and why come under the question, above the paragraph
    box = page.locator(".st-key-lensa-quiz")
    assert i18n.text("en", f"quiz.{first}_why") in box.inner_text()
    paragraph = page.locator('[data-testid="stMarkdownContainer"]', has_text="vanish").first
    assert box.bounding_box()["y"] < paragraph.bounding_box()["y"]


def test_on_paper_any_page_leaves_out_the_sidebar_and_the_questions(server, page):
    page.goto(url_of(server, "bf16", lang="en"))
    wait_for_app(page)
    page.emulate_media(media="print")
    page.wait_for_timeout(300)
    assert not page.locator(SIDEBAR).is_visible()
    assert not page.locator(".st-key-lensa-quiz").is_visible()
    assert page.locator('[data-testid="stPlotlyChart"]').first.is_visible()


def test_a_term_opens_its_glossary_entry_in_the_same_language(server, page):
    page.goto(url_of(server, "fp16_range", lang="id"))
    wait_for_app(page)
    link = page.locator('[data-testid="stMarkdownContainer"] a[href*="term=subnormal"]').first
    assert link.get_attribute("href") == "glossary?lang=id&term=subnormal"
    with page.context.expect_page() as opened:
        link.click()
    glossary = opened.value
    wait_for_app(glossary)
    assert glossary.url.endswith("/glossary?lang=id&term=subnormal")
    box = glossary.locator(".st-key-lensa-glossary-entry")
    assert i18n.text("id", "glossary.term_subnormal") in box.inner_text()
    assert glossary.evaluate("document.documentElement.lang") == "id"


@pytest.mark.parametrize("width", [390, 1280])
def test_a_tap_on_a_sidebar_link_closes_the_sidebar_on_a_phone_only(chromium, server, width):
    context = chromium.new_context(viewport={"width": width, "height": 844 if width < 500 else 900})
    page = context.new_page()
    try:
        page.goto(url_of(server, "fp16_range", lang="en"))
        wait_for_app(page)
        sidebar = page.locator(SIDEBAR)
        if width < 500:
            page.locator('[data-testid="stExpandSidebarButton"]').click()
            wait_until(page, lambda: (sidebar.bounding_box() or {}).get("width", 0) > width / 2)
        page.locator(SIDEBAR).get_by_role("link", name=re.compile("^3 · ")).click()
        wait_for_app(page)
        assert page.url.split("?")[0].endswith("/loss_scaling")
        box = sidebar.bounding_box()
        if width < 500:
            wait_until(page, lambda: (sidebar.bounding_box() or {"width": 0})["width"] < 10)
            # the next tap reaches the page: the title under where the sidebar lay
            title = page.locator("h1").first
            assert page.evaluate(
                "([x, y]) => document.elementFromPoint(x, y)?.closest('h1') !== null",
                [20, title.bounding_box()["y"] + 10],
            )
        else:
            assert box is not None and box["width"] > 200  # on a wide screen it stays where it is
    finally:
        context.close()
