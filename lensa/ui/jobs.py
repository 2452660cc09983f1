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

__all__ = ["ABANDON_S", "MAX_WAITING", "WAIT_LIMIT_S", "Job", "clock", "device_info", "follow", "settle", "submit"]


def submit(task: str, **kwargs: Any) -> Job:
    """Queue a live run (``"compare"``, ``"trace"`` or ``"matmul"``, with its :mod:`lensa.live` arguments)."""
    return default_worker().submit(task, **kwargs)


def device_info(device: str = "auto") -> Any:
    """The hardware a run on ``device`` uses, as the worker sees it; raises ``LiveError`` (see ``LabWorker``)."""
    return default_worker().device_info(device)


def clock(device: str = "auto") -> Any:
    """This machine's calibrated :class:`lensa.live.CostModel` for ``device``, timed by the worker when it started."""
    return default_worker().clock(device)


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
    if not job.done and st.button(page.t("live.cancel"), key=cancel_key, icon=":material/close:"):
        job.cancel()
    follow(page, job, lambda _j: running)
    del st.session_state[state_key]
    if job.error is not None:
        st.error(live_view.error_text(page, job.error), icon=":material/error:")
        return False, None
    return True, job.result
