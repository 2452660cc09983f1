"""Start the app on a free local port and drive it with Debian's chromium through Playwright.

Used by the browser tests, the screenshot target and the load benchmark.
Playwright's own browser download does not work on our machines, so the
system chromium is launched with flags that keep it off the network.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LENSA_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_missing_reason() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        return f"chromium not found at {CHROMIUM} (apt-get install -y chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements-dev.txt)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The app (``python -m lensa.ui.serve``, or another script with ``streamlit run``) on 127.0.0.1:port."""

    def __init__(
        self,
        port: int | None = None,
        extra_env: dict[str, str] | None = None,
        app: str | None = None,
        root: Path | None = None,
    ) -> None:
        """``root``: the checkout to serve (this one unless given: a bench compares with an older one)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(extra_env or {})}
        # The server's output goes to a file: a pipe nobody reads would stall a busy server once it fills.
        self.log = tempfile.NamedTemporaryFile(prefix="lensa-server-", suffix=".log", delete=False)  # noqa: SIM115
        # Our app starts the way `make run` and the image start it; another script (the bare app of the
        # benchmarks) the way Streamlit starts any script.
        launcher = ["-m", "lensa.ui.serve"] if app is None else ["-m", "streamlit", "run", app]
        self.proc = subprocess.Popen(
            [
                sys.executable, *launcher,
                "--server.port", str(self.port), "--server.address", "127.0.0.1",
                "--server.headless", "true", "--browser.gatherUsageStats", "false",
            ],
            cwd=root or ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.started = time.perf_counter()

    def output(self) -> str:
        """What the server has printed so far."""
        return Path(self.log.name).read_text(errors="replace")

    def health(self, timeout: float = 10.0) -> tuple[int, str]:
        """What ``/_stcore/health`` answers now: its status and body (503 with the reason included); raises
        ``OSError`` while nothing listens."""
        try:
            with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_healthy(self, timeout: float = 60.0) -> float:
        """Seconds from process start until /_stcore/health answers ok."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{self.output()}")
            with contextlib.suppress(OSError):
                if self.health(timeout=2) == (200, "ok"):
                    return time.perf_counter() - self.started
            time.sleep(0.1)
        raise TimeoutError("the app did not become healthy in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)

    def __enter__(self) -> Server:
        self.wait_healthy()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def browser() -> Iterator[object]:
    """A headless chromium (Playwright Browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


READY_SCRIPT = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return -1;
    if (document.querySelector('[data-testid*="keleton"]')) return -1;
    return document.querySelectorAll('[data-testid="stMain"] [data-testid="stElementContainer"]').length;
}"""


def wait_for_app(page, timeout_ms: int = 30_000) -> None:
    """Wait until the script run is over and the page has stopped changing.

    Streamlit draws grey skeletons while it loads each element's code, and a
    run can be followed by another (a URL update), so the page counts as ready
    when the run state is "notRunning", nothing is a skeleton, and the number
    of elements in the main area has held for three polls in a row.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    last, stable = None, 0
    while time.monotonic() < deadline:
        count = page.evaluate(READY_SCRIPT)
        if count > 0 and count == last:
            stable += 1
            if stable >= 3:
                page.wait_for_timeout(200)  # plotly lays out after the element appears
                return
        else:
            stable = 0
        last = count
        page.wait_for_timeout(150)
    raise TimeoutError(f"the page did not settle in {timeout_ms} ms")


def full_page_screenshot(page, path: str | Path) -> None:
    """Streamlit scrolls inside its main area, so grow the viewport to the content first."""
    width = page.viewport_size["width"]
    height = page.evaluate(
        """() => Math.max(
            document.querySelector('[data-testid="stMain"]').scrollHeight,
            document.querySelector('[data-testid="stSidebarContent"]')?.scrollHeight || 0)"""
    )
    page.set_viewport_size({"width": width, "height": int(height) + 40})
    page.wait_for_timeout(400)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": width, "height": 900})
