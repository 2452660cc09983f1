"""Open a page of the app the way a visitor's first request would, through AppTest."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

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


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def sidebar_links(at: AppTest) -> list[str]:
    return [e.proto.label for e in at.sidebar.get("page_link")]


def notices(at: AppTest) -> list[str]:
    """The notices about link values the page could not use (other warnings left out)."""
    return [w.value for w in at.warning if w.icon == LINK_NOTICE_ICON]
