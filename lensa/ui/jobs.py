"""Live runs in a background thread, so a page can show progress, offer Stop, and keep results.

A Streamlit script is interrupted whenever the learner touches a widget, and
a run inside the script would die with it. The run therefore lives in a
thread owned by a :class:`Job` kept in the session: the script starts it,
polls it while drawing a progress bar, and draws whatever it finished with,
a cancelled run's finished arms included. The thread never calls streamlit.

Only one run holds the machine at a time (``lensa.live.run_slot``); a job
that finds it taken waits, saying so, for up to :data:`WAIT_LIMIT_S`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WAIT_LIMIT_S = 120.0
POLL_S = 0.25


@dataclass
class Job:
    """One background run: its progress, and in the end a result or an error."""

    work: Callable[[Job], Any]
    stop: threading.Event = field(default_factory=threading.Event)
    state: str = "queued"  # queued -> waiting (slot busy) -> running -> done
    fraction: float = 0.0
    result: Any = None
    error: Exception | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    thread: threading.Thread | None = None

    @property
    def done(self) -> bool:
        return self.state == "done"

    def report(self, fraction: float, _message: str = "") -> None:
        """Progress callback for lensa.live (0..1)."""
        self.fraction = max(0.0, min(1.0, fraction))

    def should_stop(self) -> bool:
        return self.stop.is_set()

    def start(self) -> Job:
        self.thread = threading.Thread(target=self._run, name="lensa-live-run", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        from lensa import live

        deadline = time.monotonic() + WAIT_LIMIT_S
        try:
            while True:
                if self.stop.is_set():
                    self.error = live.LiveError("cancelled", "Stopped before it started.")
                    return
                try:
                    with live.run_slot(wait_s=0.5):
                        self.state = "running"
                        self.result = self.work(self)
                    return
                except live.LiveError as exc:
                    if exc.kind == "busy" and self.state != "running" and time.monotonic() < deadline:
                        self.state = "waiting"
                        continue
                    self.error = exc
                    return
        except Exception as exc:  # anything else still ends as a message, never a traceback
            self.error = exc
        finally:
            self.finished = time.monotonic()
            self.state = "done"

    def wait(self, on_tick: Callable[[Job], None], poll_s: float = POLL_S) -> None:
        """Block until done, calling ``on_tick`` between polls (to draw progress)."""
        while not self.done:
            on_tick(self)
            time.sleep(poll_s)
        on_tick(self)
