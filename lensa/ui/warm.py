"""A fresh server opens the lesson once in each language, before it says it is healthy.

A lesson page's first run builds what every later visitor of that page and language shares: the frames of
its sliders' stops (:data:`lensa.ui.components.scrub.PAYLOADS`, 10 to 500 kB of JSON each) and the first
draws of its figures. Built on demand, a class opening one link in the same few seconds waits for them all at
once: 100 learners arriving over 5 s on a fresh server saw their first page after 3.8 s at the 95th
percentile, against 0.35 s on a server that had shown every page once (``bench.loadgen``, this machine).

So the server visits its own lesson pages over its own websocket, as a browser would (one session per page
and language, closed after the page's first run; ``../shared/STREAMLIT-PROTOCOL.md``), in a thread of its
own, and ``/_stcore/health`` answers 503 "warming up" until that is done or :data:`WARM_TIMEOUT_S` has passed.
A failure here never stops the server: a page that cannot be opened is logged and skipped, and the server is
healthy once the visits end. ``LENSA_WARM=0`` turns it off.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lensa.ui.i18n import LANGUAGES
from lensa.ui.site import PAGES_BY_KEY, STEPS

WARM_TIMEOUT_S = 30.0  # after this the server says healthy whatever the visits have reached (the probes allow 60 s)
PAGE_TIMEOUT_S = 20.0  # one page's first run
SUBPROTOCOLS = ["streamlit", "PLACEHOLDER_AUTH_TOKEN"]  # what Streamlit's own frontend offers
# The pages with scrub components (the lesson's steps and the block page): the lab is left out (its visit would
# start the torch worker), and so are the pages whose first run builds nothing to share.
PAGES: tuple[str, ...] = (*(step.key for step in STEPS), "blocks")


@dataclass
class Warmth:
    """Where the warm-up is: under way or not, what it visited, and what went wrong. A process that never
    started one (a test, a script) has nothing to wait for."""

    started: float | None = None  # when :func:`start` began it (monotonic)
    visited: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: float | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def begin(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    @property
    def done(self) -> bool:
        """True unless a warm-up is under way and younger than :data:`WARM_TIMEOUT_S`."""
        return self.started is None or self._done.is_set() or self.elapsed > WARM_TIMEOUT_S

    def finish(self) -> None:
        self.seconds = self.elapsed
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)


WARMTH = Warmth()


def enabled() -> bool:
    """``LENSA_WARM`` is not 0 (nor false, no, off)."""
    return os.environ.get("LENSA_WARM", "1").strip().lower() not in ("0", "false", "no", "off")


def _page_name(key: str) -> str:
    """The name a first ``rerun_script`` gives a page by: its script's stem (``fp16_range``)."""
    return Path(PAGES_BY_KEY[key].file).stem


def visit(ws_url: str, key: str, lang: str, timeout_s: float = PAGE_TIMEOUT_S) -> None:
    """Open ``key``'s page in ``lang`` over the websocket at ``ws_url`` and wait for its first run to end.

    Raises on anything but a run that finished: no answer, a closed socket, a run that ended with an error.
    """
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect
    from websockets.typing import Subprotocol

    deadline = time.monotonic() + timeout_s
    subprotocols = [Subprotocol(p) for p in SUBPROTOCOLS]
    with connect(ws_url, subprotocols=subprotocols, max_size=None, open_timeout=timeout_s, close_timeout=1) as ws:
        back = BackMsg()
        back.rerun_script.query_string = f"lang={lang}"
        back.rerun_script.page_name = _page_name(key)
        ws.send(back.SerializeToString())
        while True:
            raw = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            msg = ForwardMsg()
            msg.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            kind = msg.WhichOneof("type")
            if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                if msg.delta.new_element.WhichOneof("type") == "exception":
                    raise RuntimeError(f"{key} ({lang}): {msg.delta.new_element.exception.message[:200]}")
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
                if status != "FINISHED_SUCCESSFULLY":
                    raise RuntimeError(f"{key} ({lang}): the run ended with {status}")
                return


def _wait_listening(health_url: str, warmth: Warmth) -> bool:
    """Wait until the server answers HTTP at all (503 "warming up" included); False past the time-out."""
    while warmth.elapsed < WARM_TIMEOUT_S:
        try:
            with urllib.request.urlopen(health_url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answers: our own middleware's 503
        except OSError:
            time.sleep(0.1)
    return False


def run(
    base_url: str,
    warmth: Warmth = WARMTH,
    pages: Sequence[str] = PAGES,
    languages: Sequence[str] = LANGUAGES,
) -> Warmth:
    """Visit every page of ``pages`` in every language on the server at ``base_url`` (``http://host:port/path``);
    mark ``warmth`` done at the end, whatever happened."""
    if warmth.started is None:
        warmth.begin()
    try:
        base = base_url.rstrip("/")
        if not _wait_listening(f"{base}/_stcore/health", warmth):
            warmth.failed.append("the server did not answer")
            return warmth
        ws_url = base.replace("http://", "ws://", 1) + "/_stcore/stream"
        for key in pages:
            for lang in languages:
                if warmth.elapsed > WARM_TIMEOUT_S:
                    warmth.failed.append(f"{key} ({lang}): out of time")
                    continue
                try:
                    visit(ws_url, key, lang)
                    warmth.visited.append(f"{key}.{lang}")
                except Exception as exc:  # a warm-up never stops the server: the page builds on its first visit
                    warmth.failed.append(f"{key} ({lang}): {type(exc).__name__}: {str(exc)[:200]}")
    finally:
        warmth.finish()
        line = f"Lensa warm-up: {len(warmth.visited)} pages opened in {warmth.seconds or 0.0:.1f} s"
        if warmth.failed:
            line += f"; {len(warmth.failed)} not: " + "; ".join(warmth.failed)
        print(line, file=sys.stderr, flush=True)  # beside the server's own lines: what an operator reads
    return warmth


def local_url(address: str | None, port: int, base_path: str | None) -> str:
    """Where this process can reach its own server: loopback unless it listens on one address only."""
    host = address if address and address not in ("0.0.0.0", "::", "") else "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    path = "/" + base_path.strip("/") if base_path and base_path.strip("/") else ""
    return f"http://{host}:{port}{path}"


def start(address: str | None, port: int, base_path: str | None, warmth: Warmth = WARMTH) -> threading.Thread | None:
    """Start the warm-up in a daemon thread (None when ``LENSA_WARM=0``): from now until it ends ``warmth`` is
    not done, and ``/_stcore/health`` says so."""
    if not enabled():
        return None
    warmth.begin()
    thread = threading.Thread(
        target=run, args=(local_url(address, port, base_path), warmth), name="lensa-warm", daemon=True
    )
    thread.start()
    return thread
