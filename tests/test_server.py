"""The server a class meets: a cold start under a crowd, a health check that tells the truth, no forced GC."""

from __future__ import annotations

import asyncio
import gc
import random
import subprocess
import sys
import textwrap
import tomllib
import urllib.request
from pathlib import Path

import pytest

from bench.loadgen import LESSON_PAGES, Learner, RunResult
from lensa.ui import serve
from tests.e2e.harness import Server

ROOT = Path(__file__).resolve().parents[1]
COLD_STARTS = 20
# every step, a page beside the lesson and the entry page: one session each
CROWD_PAGES = (*LESSON_PAGES, "formats", "app")


async def _arrive_together(url: str) -> list[str]:
    """A learner per crowd page, all opening in the same instant; the errors they saw."""
    crowd = [
        Learner(n, url, page, ("id", "en")[n % 2], random.Random(n), expects_slider=page in LESSON_PAGES)
        for n, page in enumerate(CROWD_PAGES)
    ]
    sockets = await asyncio.gather(*(learner.open(timeout_s=60) for learner in crowd))
    for ws in sockets:
        if ws is not None:
            await ws.close()
    return [f"{learner.page}: {e}" for learner in crowd for e in learner.errors]


def test_a_fresh_server_survives_a_crowd_arriving_at_once():
    """Twenty fresh servers, each met by eight sessions on eight pages at once: no page fails, health stays ok.

    Before the start-up imports moved into lensa/ui/serve.py, about one such start in eight broke numpy for
    the whole process ("partially initialized module numpy._core._multiarray_umath"). The server's own warm-up
    is off (``LENSA_WARM=0``): the crowd is the first to open a page.
    """
    failures = []
    for attempt in range(COLD_STARTS):
        with Server(extra_env={"LENSA_WARM": "0"}) as server:
            errors = asyncio.run(_arrive_together(server.url))
            with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=10) as response:
                health = response.read().decode()
            if errors or health != "ok":
                failures.append((attempt, health, errors[:3], server.output()[-2000:]))
    assert not failures, failures


async def _one_move(url: str, page: str) -> RunResult:
    """A learner opens ``page`` and moves its first slider once; what the move's run sent back."""
    learner = Learner(0, url, page, "en", random.Random(0))
    ws = await learner.open(timeout_s=60)
    assert ws is not None, learner.errors
    moved = await learner.move(ws, timeout_s=60)
    await ws.close()
    assert moved and not learner.errors, learner.errors
    assert learner.last_run is not None
    return learner.last_run


@pytest.mark.parametrize("page", LESSON_PAGES)
def test_a_move_reruns_the_lesson_fragment_once_with_its_scrub(page):
    """What a browser gets back for the end of a slider gesture: only the step's lesson part, with the scrub
    component once (its sliders, charts and cards: the browser already shows the stop the hand left it at).

    The fragment keeps the title, notes and footer out of the move; the questions are in it, because they sit
    above the explanation whose numbers follow the move (lensa.ui.layout.explain), and come after the scrub
    (docs/performance.md).
    """
    with Server() as server:
        after = asyncio.run(_one_move(server.url, page))
    assert after.fragment_run
    assert "heading" not in after.kinds  # no title
    assert after.scrub_names and after.metrics  # the cards, read from the frames at the stop the server says
    assert after.kinds.count("bidi_component") == 1
    questions = [i for i, kind in enumerate(after.kinds) if kind == "radio"]
    assert questions and after.kinds.index("bidi_component") < min(questions)


def test_serving_every_page_imports_nothing_after_start_up():
    """Whatever a page imports on its first run races with other sessions' first runs: preload() must cover it."""
    script = textwrap.dedent(
        """
        import sys
        from lensa.ui import serve
        serve.preload()
        from streamlit.testing.v1 import AppTest
        before = set(sys.modules)
        at = AppTest.from_file(str(serve.ENTRY), default_timeout=120)
        at.run()
        from lensa.ui.site import PAGES
        # every page but the entry page (run above) and the lab's (its first run starts a worker with torch)
        for info in PAGES:
            if info.file == "app.py" or info.key == "lab":
                continue
            at.switch_page(info.file)
            at.run()
            at.query_params["fp8"] = "on"
            at.query_params["lang"] = "id" if at.query_params.get("lang") != "id" else "en"
            at.run()
            assert not at.exception, [e.value for e in at.exception]
        print(sorted(set(sys.modules) - before))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_preload_brings_every_lensa_module_but_not_torch_or_numba():
    names = serve.lensa_modules()
    assert {
        "lensa.numerics.formats",
        "lensa.ui.frame",
        "lensa.ui.widgets",
        "lensa.live",
        "lensa.numerics.blockscale_dispatch",
    } <= set(names)
    assert {"lensa.numerics.blockscale_numba", "lensa.lowp_kernels"}.isdisjoint(names)  # numba's: never a page's
    script = (
        "import sys; from lensa.ui import serve; serve.preload(); print('torch' in sys.modules, 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def _health_status(broken: str | None) -> tuple[int, bytes]:
    """Call the middleware as uvicorn would, for /_stcore/health, with HEALTH in the given state."""
    sent: list[dict] = []

    async def downstream(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    saved, saved_rss = serve.HEALTH.broken, serve.limits.rss_bytes
    serve.HEALTH.broken = broken
    # The test process is no server: its own memory (a pytest worker that has run torch and transformers can be
    # past the server's budget) must not decide. tests/test_limits.py tests the memory budget on a real server.
    serve.limits.rss_bytes = lambda: 0
    try:
        scope = {"type": "http", "path": "/_stcore/health", "method": "GET", "headers": [], "query_string": b""}
        asyncio.run(serve.HealthMiddleware(downstream)(scope, receive, send))
    finally:
        serve.HEALTH.broken, serve.limits.rss_bytes = saved, saved_rss
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def test_health_says_ok_until_a_page_fails_to_import():
    assert _health_status(None) == (200, b"ok")
    health = serve.Health()
    health.on_script_error(ValueError("a learner's bad value"))  # a page's own error: the process is fine
    assert health.broken is None
    health.on_script_error(
        ImportError("cannot import name '__cpu_features__' from partially initialized module 'numpy._core'")
    )
    health.on_script_error(ImportError("a second failure does not replace the first"))
    assert health.broken is not None and "partially initialized" in health.broken
    status, body = _health_status(health.broken)
    assert status == 503
    assert body.startswith(b"unhealthy: ImportError") and b"partially initialized" in body


def test_streamlit_forces_no_garbage_collection_after_each_run_and_ours_runs_on_a_timer():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
    collected = []
    gc.callbacks.append(lambda phase, info: collected.append(info["generation"]) if phase == "stop" else None)
    try:
        stop = serve.start_collector(every_s=0.05)
        deadline = 100
        while 2 not in collected and deadline:
            deadline -= 1
            stop.wait(0.05)
        stop.set()
    finally:
        gc.callbacks.pop()
    assert 2 in collected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--server.port", "8502"], {"server.port": "8502"}),
        (["--server.port=9000", "--server.address", "0.0.0.0"], {"server.port": "9000", "server.address": "0.0.0.0"}),
        ([], {}),
    ],
)
def test_command_line_options(argv, expected):
    assert serve.parse_config(argv) == expected


@pytest.mark.parametrize("argv", [["app.py"], ["--server.port"], ["--verbose", "1"]])
def test_command_line_mistakes_are_explained(argv):
    with pytest.raises(SystemExit, match=r"options look like|needs a value"):
        serve.parse_config(argv)


def test_streamlit_environment_variables_configure_the_server_as_with_streamlit_run(monkeypatch):
    """The image sets STREAMLIT_SERVER_ADDRESS and STREAMLIT_SERVER_PORT; App.run alone would ignore them."""
    monkeypatch.setenv("STREAMLIT_SERVER_PORT", "9000")
    monkeypatch.setenv("STREAMLIT_SERVER_ADDRESS", "0.0.0.0")
    monkeypatch.setenv("STREAMLIT_SERVER_COOKIE_SECRET", "left to Streamlit's own config")
    options = serve.environment_options()
    assert options["server.port"] == "9000" and options["server.address"] == "0.0.0.0"
    assert "server.cookieSecret" not in options  # sensitive: App.run refuses it, Streamlit reads it itself
    typed = serve._typed({**options, **serve.parse_config(["--server.port", "8502"])})
    assert typed["server.port"] == 8502  # the command line wins, and a port is a number
