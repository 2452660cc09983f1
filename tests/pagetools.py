"""Open a page of the app the way a visitor's first request would, through AppTest."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from lensa.ui import site
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
    return {m.label: m.value for m in at.metric}


def sidebar_links(at: AppTest) -> list[str]:
    return [e.proto.label for e in at.sidebar.get("page_link")]


def notices(at: AppTest) -> list[str]:
    """The notices about link values the page could not use (other warnings left out)."""
    return [w.value for w in at.warning if w.icon == LINK_NOTICE_ICON]


_GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(glossary\?[^)]*\)")


def unlinked(text: str) -> str:
    """A text as a reader sees it: a glossary link ``[words](glossary?...)`` reads as its words."""
    return _GLOSSARY_LINK.sub(r"\1", text)
