"""Browser tests: one app server and one chromium per test session (per xdist worker)."""

from __future__ import annotations

import os

import pytest

from bench.compose import engine_missing_reason, podman_missing_reason
from bench.replicas import nginx_missing_reason
from tests.e2e.harness import Server, browser, chromium_missing_reason

# On a developer's machine a test whose browser, balancer or container engine is missing is skipped, with the
# reason. In CI (CI=true, as .ci/run runs) it fails instead: .ci/run installs them all, so a missing one is a broken
# CI.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_requirement(item: pytest.Item) -> str | None:
    """Why this test cannot run here (chromium for the browser tests, nginx for the replica tests, Docker Engine for
    the compose test), or None."""
    if "chromium" in getattr(item, "fixturenames", ()):
        return chromium_missing_reason()
    if item.get_closest_marker("nginx"):
        return nginx_missing_reason()
    if item.get_closest_marker("engine"):
        return engine_missing_reason() or (podman_missing_reason() if item.get_closest_marker("podman") else None)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = missing_requirement(item)
    if reason and IN_CI:
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)


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
