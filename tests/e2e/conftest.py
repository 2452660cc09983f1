"""Browser tests: one app server and one chromium per test session (per xdist worker)."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Server, browser, chromium_missing_reason

_REASON = chromium_missing_reason()


def pytest_collection_modifyitems(config, items):
    if _REASON:
        for item in items:
            # Only the tests that open a browser need chromium (the replica test speaks the websocket itself).
            if item.get_closest_marker("e2e") and "chromium" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.skip(reason=_REASON))


@pytest.fixture(scope="session")
def server():
    with Server() as srv:
        yield srv


@pytest.fixture(scope="session")
def chromium():
    with browser() as b:
        yield b


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()
