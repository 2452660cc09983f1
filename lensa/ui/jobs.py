"""Live runs for the pages: submit to the server's worker process, then show the queue place or the progress.

A Streamlit script is interrupted whenever the learner touches a widget, and
a run inside the script would die with it; a run in the server's own
threads would also slow every other visitor down. So a page hands the run
to :mod:`lensa.live.worker` (a separate, lower-priority process, one run at a
time, a bounded queue), keeps the returned :class:`Job` in its session, and
each script run polls it while drawing its place in the queue or a progress
bar (:func:`follow`), then draws whatever it finished with, a stopped run's
finished arms included.

Polling is also how the queue knows someone is still there: when a visitor
closes the tab, Streamlit stops that session's script, the polling stops,
and a job still waiting is dropped after ``lensa.live.worker.ABANDON_S``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from lensa.live.worker import ABANDON_S, MAX_WAITING, WAIT_LIMIT_S, Job, default_worker
from lensa.ui import live_view
from lensa.ui.frame import Page

__all__ = [
    "ABANDON_S",
    "MAX_WAITING",
    "PAGE_WAIT_S",
    "WAIT_LIMIT_S",
    "Job",
    "clock",
    "device_info",
    "follow",
    "ready",
    "settle",
    "submit",
]


def submit(task: str, **kwargs: Any) -> Job:
    """Queue a live run (``"compare"``, ``"trace"`` or ``"matmul"``, with its :mod:`lensa.live` arguments)."""
    return default_worker().submit(task, **kwargs)


PAGE_WAIT_S = 60.0
"""Longest a page waits for a starting worker's hello (importing torch, timing the machine: a few seconds, more
on a loaded machine) before it says so with a way to try again (``LiveError`` kind ``"not_ready"``)."""


def device_info(device: str = "auto", timeout_s: float = PAGE_WAIT_S) -> Any:
    """The hardware a run on ``device`` uses, as the worker sees it; raises ``LiveError`` (see ``LabWorker``).

    Answers at once once any worker of this server has started; otherwise starts one and waits at most
    ``timeout_s`` seconds, showing a spinner in the page's language (``page`` given to :func:`ready`).
    """
    return default_worker().device_info(device, timeout_s)


def clock(device: str = "auto", timeout_s: float = PAGE_WAIT_S) -> Any:
    """This machine's calibrated :class:`lensa.live.CostModel` for ``device``, timed by the worker when it started."""
    return default_worker().clock(device, timeout_s)


def ready(page: Page, device: str = "auto") -> tuple[Any, Any]:
    """This machine as the worker sees it and its clock: ``(DeviceInfo, CostModel)``; raises ``LiveError``.

    The first visit to a server starts its worker and waits for it (at most :data:`PAGE_WAIT_S`) under a
    spinner that says why; later visits answer at once from what that worker found, and warm a worker in the
    background when the last one has retired, so that a run finds it ready.
    """
    worker = default_worker()
    if worker.known(device):
        worker.warm()
        return worker.device_info(device), worker.clock(device)
    with st.spinner(page.t("live.starting", seconds=page.seconds(PAGE_WAIT_S))):
        return worker.device_info(device, PAGE_WAIT_S), worker.clock(device, PAGE_WAIT_S)


def follow(page: Page, job: Job, running: Callable[[Job], str]) -> None:
    """Block this script run until ``job`` is done, showing its place in the queue, then ``running(job)``.

    A widget touched meanwhile interrupts the script as usual; the next run
    finds the job in the session and follows it again.
    """
    if job.done:
        return
    bar = st.progress(0.0, text=running(job))

    def draw(j: Job) -> None:
        place = j.position
        if place is not None:
            bar.progress(0.0, text=page.t("live.queued", position=page.num(place)))
        else:
            bar.progress(j.fraction, text=running(j))

    job.wait(draw)
    bar.empty()


def settle(page: Page, job: Job, state_key: str, cancel_key: str, running: str) -> tuple[bool, Any]:
    """A short run to its end: a Cancel button while it waits or runs, its progress, then its outcome.

    The job is dropped from ``st.session_state[state_key]`` once done. Returns ``(True, result)``, or
    ``(False, None)`` after showing the error in the page's language.
    """
    # In a placeholder, so that the button goes once the run ends: this script run drew it while the job ran.
    cancel = st.empty()
    if not job.done and cancel.button(page.t("live.cancel"), key=cancel_key, icon=":material/close:"):
        job.cancel()
    follow(page, job, lambda _j: running)
    cancel.empty()
    del st.session_state[state_key]
    if job.error is not None:
        st.error(live_view.error_text(page, job.error), icon=":material/error:")
        return False, None
    return True, job.result
