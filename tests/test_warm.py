"""A fresh server opens its own lesson pages before it says it is healthy (lensa/ui/warm.py)."""

from __future__ import annotations

import time

import pytest

from lensa.ui import warm
from lensa.ui.i18n import LANGUAGES
from tests.e2e.harness import Server, free_port


def test_a_fresh_server_says_warming_up_until_every_step_was_opened_in_both_languages():
    server = Server()
    try:
        answers = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                answers.append(server.health())
            except OSError:  # not listening yet
                time.sleep(0.05)
                continue
            if answers[-1] == (200, "ok"):
                break
            time.sleep(0.05)
        assert answers[0] == (503, "unhealthy: warming up"), answers[:3]
        assert answers[-1] == (200, "ok")
        line = next(x for x in server.output().splitlines() if x.startswith("Lensa warm-up:"))
        assert line.startswith(f"Lensa warm-up: {len(warm.PAGES) * len(LANGUAGES)} pages opened in ")
        assert "not:" not in line
    finally:
        server.stop()


def test_lensa_warm_0_turns_it_off():
    with Server(extra_env={"LENSA_WARM": "0"}) as server:
        assert server.health() == (200, "ok")
        assert "Lensa warm-up" not in server.output()


def test_a_server_that_never_answers_is_given_up_on_and_the_warm_up_ends():
    warmth = warm.Warmth()
    warmth.begin()
    warmth.started = time.monotonic() - warm.WARM_TIMEOUT_S + 1  # a second left
    assert not warmth.done
    warm.run(f"http://127.0.0.1:{free_port()}", warmth)
    assert warmth.done and warmth.wait(0) and warmth.failed == ["the server did not answer"]


def test_a_page_that_cannot_be_opened_is_skipped_and_the_others_are_visited(monkeypatch):
    with Server(extra_env={"LENSA_WARM": "0"}) as server:
        real = warm.visit

        def visit(ws_url: str, key: str, lang: str, timeout_s: float = warm.PAGE_TIMEOUT_S) -> None:
            if key == "bf16":
                raise ConnectionError("refused")
            real(ws_url, key, lang, timeout_s)

        monkeypatch.setattr(warm, "visit", visit)
        warmth = warm.run(server.url, warm.Warmth(), pages=("memory", "bf16"), languages=("en",))
    assert warmth.visited == ["memory.en"] and warmth.failed == ["bf16 (en): ConnectionError: refused"]
    assert warmth.done


def test_a_process_that_started_no_warm_up_has_none_to_wait_for():
    assert warm.Warmth().done


@pytest.mark.parametrize(
    ("address", "port", "base", "expected"),
    [
        ("", 8501, "", "http://127.0.0.1:8501"),
        ("0.0.0.0", 8501, "/", "http://127.0.0.1:8501"),
        ("127.0.0.1", 9000, "lensa", "http://127.0.0.1:9000/lensa"),
        ("::1", 9000, "/a/b/", "http://[::1]:9000/a/b"),
        ("10.1.2.3", 80, None, "http://10.1.2.3:80"),
    ],
)
def test_the_server_reaches_itself_where_it_listens(address, port, base, expected):
    assert warm.local_url(address, port, base) == expected
