"""The app in a real browser: pages, sliders, deep links, language, Back, on a local server."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from lensa.ui import i18n
from lensa.ui.site import PAGES, STEPS
from tests.e2e.harness import Server, wait_for_app

pytestmark = pytest.mark.e2e

# A lesson step's own slider is its scrub component's (lensa.ui.components.scrub); its cards come before
# Streamlit's own metric cards on the page.
SLIDER = ".lensa-slider-input"
SLIDER_VALUE = ".lensa-slider-value"
METRIC = '.lensa-card-value, [data-testid="stMetricValue"]'


def url_of(server, key: str, **params: str) -> str:
    path = "" if key == "overview" else key
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{server.url}/{path}" + (f"?{query}" if query else "")


def query(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def metric_values(page) -> list[str]:
    return page.locator(METRIC).all_inner_texts()


def nav_labels(page) -> list[str]:
    """The sidebar links' text (the current page's icon name left out)."""
    texts = page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]').all_inner_texts()
    return [t.strip().split("\n")[-1] for t in texts]


def wait_until(page, predicate, timeout_ms: int = 15_000) -> None:
    """Poll a Python predicate while the page works (slider commits are debounced)."""
    for _ in range(timeout_ms // 100):
        if predicate():
            return
        page.wait_for_timeout(100)
    raise AssertionError("condition not reached in time")


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("key", [p.key for p in PAGES])
def test_every_page_loads_without_error(server, page, key, lang):
    page.goto(url_of(server, key, lang=lang))
    wait_for_app(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0  # Streamlit's own navigation stays hidden
    labels = nav_labels(page)
    assert [label.split(" · ", 1)[-1] for label in labels] == [i18n.text(lang, f"nav.{p.key}") for p in PAGES]
    if key != "overview":
        assert page.locator("h1").first.inner_text() == i18n.text(lang, f"{key}.title")
    if key in {s.key for s in STEPS}:
        assert page.locator(".js-plotly-plot").count() >= 1


@pytest.mark.parametrize("step", [s.key for s in STEPS])
def test_keyboard_on_a_slider_changes_a_metric_and_the_url(server, page, step):
    page.goto(url_of(server, step, lang="en"))
    wait_for_app(page)
    before = metric_values(page)
    slider = page.locator(SLIDER).first
    start = slider.input_value()
    slider.focus()
    page.keyboard.press("End")  # the far end of every slider changes what the page shows
    wait_until(page, lambda: metric_values(page) != before and slider.input_value() != start)
    info = next(s for s in STEPS if s.key == step)
    slider_names = [c.name for c in info.controls if hasattr(c, "stops")]
    wait_until(page, lambda: slider_names[0] in query(page))
    assert query(page)[slider_names[0]] == info.control(slider_names[0]).to_url(info.control(slider_names[0]).hi)


def link_query(page, where: str, text) -> dict[str, str]:
    """The query of the first link in ``where`` (a test id) whose text matches ``text``."""
    href = page.locator(f'[data-testid="{where}"] a', has_text=text).first.get_attribute("href")
    return {k: v[-1] for k, v in parse_qs(urlparse(href).query).items()}


def choose(page, box: str, name: str) -> None:
    """Pick ``name`` in the drop-down labelled ``box``. A click while the page still redraws (the rerun after a
    slider's release, an expander opening) can leave the list closed, so it is opened again until it shows."""
    combobox = page.get_by_role("combobox", name=box)
    option = page.get_by_role("option", name=name)
    for _ in range(10):
        combobox.scroll_into_view_if_needed()
        combobox.click()
        page.wait_for_timeout(300)
        if option.is_visible():
            break
        page.keyboard.press("Escape")
    option.click()


def test_a_move_reruns_the_lesson_alone_and_every_link_stays_true(server, page):
    """A slider move redraws only the step's lesson fragment: the page's own link follows it, the rest stays.

    A choice whose value shows outside the fragment (the data, carried into the other steps' links; the GPU,
    named in the notes) redraws the whole page, so those links and notes follow it too.
    """
    page.goto(url_of(server, "fp16_range", lang="en"))
    wait_for_app(page)
    page.evaluate("document.querySelector('h1').dataset.lensaMark = 'kept'")  # gone if the title is redrawn
    slider = page.locator(SLIDER).first
    slider.focus()
    page.keyboard.press("ArrowRight")
    wait_until(page, lambda: query(page).get("grad") == "1.5e-6")
    wait_until(page, lambda: link_query(page, "stSidebar", "FP16's narrow range").get("grad") == "1.5e-6")
    assert page.locator("h1").first.get_attribute("data-lensa-mark") == "kept"
    assert "grad" not in link_query(page, "stMain", "Loss scaling →")
    # the data choice: a full run, after which the footer's link into step 3 carries it
    choose(page, i18n.text("en", "data.data"), "Reference run")
    wait_until(page, lambda: query(page).get("data") == "reference")
    wait_until(page, lambda: link_query(page, "stMain", "Loss scaling →").get("data") == "reference")
    assert link_query(page, "stSidebar", "BF16").get("data") == "reference"
    # step 6: the notes name the chosen GPU's datasheet
    page.goto(url_of(server, "speed", lang="en"))
    wait_for_app(page)
    page.locator('[data-testid="stExpander"] summary', has_text="Other GPUs").first.click()
    choose(page, "GPU", "NVIDIA V100 SXM2 32GB")
    wait_until(page, lambda: query(page).get("gpu") == "v100")
    page.locator('[data-testid="stExpander"] summary', has_text="Notes").first.click()
    wait_until(page, lambda: page.get_by_text(re.compile("^NVIDIA V100 SXM2 32GB: ")).count() == 1)


def test_deep_link_as_the_first_request_to_a_fresh_server(page):
    with Server() as fresh:
        page.goto(url_of(fresh, "master_weights", lang="en", update="1e-3", w="10"))
        wait_for_app(page)
        assert page.locator('[data-testid="stSidebarNav"]').count() == 0
        labels = nav_labels(page)
        assert labels[0] == "Overview" and labels[4].endswith("FP32 master weights")
        texts = page.locator(SLIDER_VALUE).all_inner_texts()
        assert texts == ["1.00e-3", "10"]
        assert page.locator(METRIC).nth(0).inner_text() == "7.81e-3"  # FP16 spacing at 10


def test_custom_size_is_typed_and_kept_exactly(server, page):
    # The ZeRO paper's worked example: 7.5B parameters, stage 1 over 64 GPUs, 31.4 GB of model states per GPU.
    page.goto(url_of(server, "memory", lang="en", model="custom", zero="1", gpus="64"))
    wait_for_app(page)
    box = page.get_by_label(i18n.text("en", "memory.params"))
    box.fill("7.5B")
    box.press("Enter")
    wait_until(page, lambda: query(page).get("params") == "7.5e9")
    wait_until(page, lambda: metric_values(page)[1] == "31.4 GB")
    assert page.get_by_text("7,500,000,000 parameters").count() == 1


def test_deep_link_in_indonesian_with_junk(server, page):
    page.goto(url_of(server, "memory", lang="id", precision="fp32", tokens="abc"))
    wait_for_app(page)
    assert "Memori per parameter" in page.locator("h1").first.inner_text()
    assert page.locator('[data-testid="stAlertContentWarning"]').count() == 1
    assert metric_values(page) == ["16", "107,8 GB", "18,3 GB", "126,1 GB"]
    assert nav_labels(page)[1] == "1 · Memori per parameter"


def test_language_switch_changes_the_text_and_keeps_the_page(server, page):
    page.goto(url_of(server, "bf16", lang="id", grad="1e-6"))
    wait_for_app(page)
    assert page.locator("h4").first.inner_text() == i18n.text("id", "bf16.headline")
    page.locator('[data-testid="stSidebar"] button', has_text="English").click()
    wait_until(page, lambda: query(page).get("lang") == "en")
    wait_for_app(page)
    assert page.locator("h4").first.inner_text() == i18n.text("en", "bf16.headline")
    assert urlparse(page.url).path == "/bf16" and query(page)["grad"] == "1e-6"
    assert page.locator(SLIDER_VALUE).first.inner_text() == "1.0e-6"
    # and the language stays when moving to another page
    page.locator('[data-testid="stSidebar"] a', has_text="Loss scaling").click()
    wait_until(page, lambda: urlparse(page.url).path == "/loss_scaling")
    wait_for_app(page)
    assert page.locator("h1").first.inner_text() == "Loss scaling"
    assert page.locator("h4").first.inner_text() == i18n.text("en", "loss_scaling.headline")


def test_back_returns_to_the_previous_page_and_its_state(server, page):
    page.goto(url_of(server, "memory", lang="en"))
    wait_for_app(page)
    slider = page.locator(SLIDER).first
    slider.focus()
    page.keyboard.press("ArrowRight")
    wait_until(page, lambda: query(page).get("tokens") == "3072")
    wait_until(page, lambda: metric_values(page)[2] == "13.7 GB")
    page.locator('[data-testid="stSidebar"] a', has_text="Why it is faster").click()
    wait_until(page, lambda: urlparse(page.url).path == "/speed")
    wait_for_app(page)
    page.go_back()
    wait_until(page, lambda: urlparse(page.url).path == "/memory")
    wait_for_app(page)
    wait_until(page, lambda: metric_values(page)[2] == "13.7 GB")
    assert page.locator(SLIDER_VALUE).first.inner_text() == "3,072"
    assert page.locator("h1").first.inner_text() == "Memory per parameter"


def test_next_link_carries_language_and_remembered_values(server, page):
    page.goto(url_of(server, "speed", lang="id", tokens="8192"))
    wait_for_app(page)
    page.locator('[data-testid="stSidebar"] a', has_text=re.compile("^5 · BF16")).click()
    wait_until(page, lambda: urlparse(page.url).path == "/bf16")
    wait_for_app(page)
    page.locator('[data-testid="stMain"] a', has_text=re.compile("Mengapa lebih cepat →")).click()
    wait_until(page, lambda: urlparse(page.url).path == "/speed")
    wait_for_app(page)
    assert query(page) == {"lang": "id", "tokens": "8192"}
    assert metric_values(page)[0] == "42 s"


def test_lab_runs_a_tiny_configuration_on_the_cpu(server, page):
    page.goto(url_of(server, "lab", lang="en", device="cpu", width="64", depth="1", batch="64", steps="10"))
    wait_for_app(page)
    page.get_by_role("button", name="Run the comparison").click()
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=90_000)
    wait_for_app(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    cards = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
    assert "BF16 speed-up" in cards
    assert page.get_by_text("Inside autocast the Linear layers produced").count() == 1
    assert page.locator(".js-plotly-plot").count() >= 2


def test_two_visitors_press_run_together(server, chromium):
    """One run at a time per server: the second visitor sees their place in the queue; both get correct results."""
    config = {"device": "cpu", "width": "256", "depth": "2", "batch": "512", "steps": "60", "lang": "en"}
    pages = []
    for _ in range(2):
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{server.url}/lab?" + "&".join(f"{k}={v}" for k, v in config.items()))
        wait_for_app(page)
        pages.append(page)
    for page in pages:
        page.get_by_role("button", name="Run the comparison").click()
    told_to_wait = False
    for _ in range(600):  # up to 60 s
        told_to_wait = told_to_wait or any(p.get_by_text("You are number 1 in the queue").count() for p in pages)
        if all(p.locator('[data-testid="stDataFrame"]').count() for p in pages):
            break
        pages[0].wait_for_timeout(100)
    assert told_to_wait
    gaps = []
    for page in pages:
        labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
        values = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
        gaps.append(dict(zip(labels, values, strict=True))["Final loss, BF16 − FP32"])
    assert gaps[0] == gaps[1]  # same seed, same data: the waiting visitor's run is the same run
    for page in pages:
        wait_for_app(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert page.locator('[data-testid="stDataFrame"]').count() == 2  # results, memory prediction
        assert page.get_by_text("Inside autocast the Linear layers produced").count() == 1
        page.context.close()


def test_inspector_bit_flip_changes_the_number(server, page):
    page.goto(url_of(server, "formats", lang="en", x="1"))
    wait_for_app(page)
    fp16 = page.locator('[data-testid="stVerticalBlock"]').filter(has_text="FP16 · 16 bit").last
    fp16.get_by_role("button", name="0\u2081\u2085", exact=True).click()  # the sign bit: its value, its number small
    wait_until(page, lambda: query(page).get("x") == "-1")
    wait_for_app(page)
    assert page.locator('[data-testid="stTextInput"] input').input_value() == "-1"


def test_inspector_table_fits_a_phone(server, page):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url_of(server, "formats", lang="id", x="1e-40"))  # FP32's and BF16's longest exact values
    wait_for_app(page)
    widths = page.evaluate(
        """() => [document.querySelector('[data-testid="stMain"]'), document.querySelector('[data-testid="stTable"]')]
            .map((e) => [e.scrollWidth, e.clientWidth])"""
    )
    assert all(scroll <= client for scroll, client in widths), widths
