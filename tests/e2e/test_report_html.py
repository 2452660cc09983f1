"""``lensa report --html``'s page in a browser that may fetch nothing: every chart draws from the file alone."""

from __future__ import annotations

import io
import re

import pytest

from lensa.__main__ import main
from tests.runfixtures import upload_bytes

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("lang", "width"), [("en", 1280), ("id", 390)])
def test_the_html_report_draws_every_chart_offline(chromium, tmp_path, lang, width):
    run, page_path = tmp_path / "run.npz", tmp_path / "report.html"
    run.write_bytes(upload_bytes())
    assert main(["report", str(run), "--html", str(page_path), "--lang", lang], out=io.StringIO()) == 0
    page = chromium.new_page(viewport={"width": width, "height": 900})
    fetched: list[str] = []
    page.route(re.compile(r"^(https?|wss?)://"), lambda route: (fetched.append(route.request.url), route.abort()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri())
    page.wait_for_function("document.querySelectorAll('.plotly-graph-div .main-svg').length > 0")
    plots = page.locator(".plotly-graph-div")
    drawn = page.evaluate("document.querySelectorAll('.plotly-graph-div .main-svg').length")
    assert plots.count() >= 8 and drawn >= plots.count()  # every figure drew its SVG
    assert fetched == [] and errors == []
    assert page.locator("html").get_attribute("lang") == lang
    page.close()
