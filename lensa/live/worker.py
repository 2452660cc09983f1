"""Live runs in a separate, lower-priority process, one at a time, with a bounded queue in front.

Why a process: a run used to train in a thread of the Streamlit server, so it
held the GIL and every core, and one visitor's lab run made every other
learner's slider moves many times slower (issue 10: p95 27x). Now the server
never imports torch: every torch call (the lab's comparison and GradScaler
trace, step 3's real-GradScaler replay, step 6's matmul measurement) runs in
one worker process per server, which

- is started lazily, on the first run or device query, with the ``spawn``
  context (forking a threaded server can copy held locks into the child);
- lowers its own priority (``os.nice`` to :data:`WORKER_NICE`) before torch
  starts any thread, and bounds torch to :func:`worker_threads` threads and
  one inter-op thread, so the server keeps a core and wins every contest
  for the other;
- runs the same functions as before, from :mod:`lensa.live`, and sends back
  their results as plain picklable data (frozen dataclasses and dicts of
  floats; no tensors).

The server side is :class:`LabWorker` (one per server: :func:`default_worker`).
It keeps the queue: one :class:`Job` runs, at most :data:`MAX_WAITING` wait
with a place (``Job.position``, 1 = next), and a job beyond that is refused
at once with ``LiveError(kind="busy")``. A waiting job is dropped after
:data:`WAIT_LIMIT_S` in the queue (busy), or once nobody has polled it for
:data:`ABANDON_S` (its visitor closed the tab or left the page: Streamlit
stops a disconnected session's script, so the polling stops), so it never
blocks the queue for long. One thread per server moves messages: it starts
the next job, relays progress and results, and notices a worker that died
(killed, out of memory): the running job then ends with
``LiveError(kind="crashed")`` and the next job starts a fresh worker.

An idle worker gives its memory back: after the largest run it holds about
800 MB (torch, its allocator's caches), so once no job has run or waited
for :func:`worker_idle_s` seconds since it last worked (or became ready) the
message thread stops it, and the next run starts a fresh one (a few seconds
to import torch). What the first worker learnt of the machine (each device's
information, the clock) outlives it: a page asks for it without waiting for
any process, so no idle exit can leave a page waiting on a worker that is
not coming. A visitor opening the lab warms a worker (:meth:`LabWorker.warm`)
so that it is usually ready by the time Run is pressed; a run that finds none
starts one and waits for it at most :data:`START_TIMEOUT_S`.

Stop crosses the boundary as a shared integer holding the id of the job to
stop (an id, not a flag, so a late stop can never hit the next job); the
worker checks it after every step and before each layer's forward and
backward pass, and a stopped comparison comes back with its finished arms.
A run still going :data:`STOP_GRACE_S` after Stop (one layer of an emulated
FP16 product can be that long) has its worker process ended: the job ends
with the arms it finished (each is sent as it finishes), and the next run
starts a fresh worker, which keeps the first one's calibration.

When it starts, the worker times this machine (:mod:`lensa.live.clock`, at
most about 2 s) and sends the result with its device information:
:meth:`LabWorker.clock` gives it to the pages for their estimates, and the
worker checks every comparison against the same clock before it runs.

This module imports neither streamlit nor torch (torch is imported only in
the worker process); :mod:`lensa.ui.jobs` draws jobs on a page.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import itertools
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lensa.live import DEVICES, LiveError

MAX_WAITING = 4
"""Jobs that may wait behind the running one; the next is refused as busy."""
WAIT_LIMIT_S = 120.0
"""Longest a job may wait in the queue before it is refused as busy."""
ABANDON_S = 30.0
"""A waiting job nobody has polled for this long is dropped (its visitor has gone)."""
START_TIMEOUT_S = 120.0
"""Longest a fresh worker may take to import torch and report ready."""
POLL_S = 0.25
STOP_GRACE_S = 0.6
"""A running job still going this long after Stop has its worker process ended (and restarted on the next
run), so Stop always ends a run within about a second, however long one step is."""
WORKER_NICE = 19
"""The worker's niceness: the lowest priority, so any server thread that wants a core gets it."""

TASKS = ("compare", "trace", "matmul")
"""What a job may run: :func:`lensa.live.compare`, :func:`~lensa.live.gradscaler_trace`,
:func:`~lensa.live.matmul_benchmark`."""

_CHECK_PARENT_S = 2.0
WORKER_IDLE_S = 300.0
"""Seconds an idle worker is kept before it is stopped to give its memory back (``LENSA_WORKER_IDLE_S``)."""


def worker_idle_s() -> float:
    """How long an idle worker is kept: ``LENSA_WORKER_IDLE_S`` (seconds > 0), else :data:`WORKER_IDLE_S`."""
    raw = os.environ.get("LENSA_WORKER_IDLE_S", "").strip()
    try:
        value = float(raw)
    except ValueError:
        return WORKER_IDLE_S
    return value if value > 0 and value == value and value != float("inf") else WORKER_IDLE_S


def worker_threads() -> int:
    """Threads torch may use in the worker: all cores but one, at least one.

    ``LENSA_WORKER_THREADS`` overrides it (a whole number >= 1; anything else
    is ignored).
    """
    raw = os.environ.get("LENSA_WORKER_THREADS", "")
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return max(1, (os.cpu_count() or 1) - 1)


# --- the worker process ------------------------------------------------------------------------


def _exit_with_parent(parent: int) -> None:
    """End the worker soon after its server dies without closing it (SIGKILL), even in the middle of a run."""
    while os.getppid() == parent:
        time.sleep(_CHECK_PARENT_S)
    os._exit(0)


def _settle(nice: int, threads: int) -> None:
    """Lower the process's priority, watch for the parent's end, and load torch with ``threads`` threads."""
    # Before torch exists: Linux applies nice per thread and new threads inherit it.
    with contextlib.suppress(OSError):
        os.nice(max(0, nice - os.nice(0)))
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="lensa-parent-watch", daemon=True).start()
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # only possible before any parallel work
        torch.set_num_interop_threads(1)
    gc.freeze()  # see _serve


def _hello(clocks: dict[str, Any] | None) -> tuple[str, int, dict[str, tuple[Any, ...]], dict[str, Any]]:
    """The first message to the server: this process, each device's info (or why not), and this machine's clock."""
    from lensa import live
    from lensa.live.clock import machine_clock, remember_clock

    infos: dict[str, tuple[Any, ...]] = {}
    for device in DEVICES:
        try:
            infos[device] = ("ok", live.device_info(device))
        except LiveError as exc:
            infos[device] = ("error", exc.kind, exc.message)
    # This machine's clock, per device kind present: kept for the process's life, sent to the server once.
    for clock in (clocks or {}).values():
        remember_clock(clock)
    measured = {}
    for kind in sorted({info[1].device for info in infos.values() if info[0] == "ok"}):
        measured[kind] = machine_clock(kind)
    return ("hello", os.getpid(), infos, measured)


def _run_task(job_id: int, task: str, kwargs: dict[str, Any], events: Any, stop_id: Any) -> None:
    """Run one request, sending its progress, finished arms and the result (or the error) as events."""
    from lensa import live

    def progress(fraction: float, _message: str = "") -> None:
        events.put(("progress", job_id, fraction))

    def should_stop() -> bool:
        current: int = stop_id.value
        return current == job_id

    def on_arm(arm: str, arm_result: Any, device: str, device_name: str) -> None:
        events.put(("arm", job_id, arm, arm_result, device, device_name))

    if should_stop():  # stopped while this process was starting: the server has already ended the job
        events.put(("error", job_id, "cancelled", "The run was stopped before it started.", ()))
        return
    result: object
    try:
        if task == "compare":
            result = live.compare(progress=progress, should_stop=should_stop, on_arm=on_arm, **kwargs)
        elif task == "trace":
            result = live.gradscaler_trace(**kwargs)
        elif task == "matmul":
            result = live.matmul_benchmark(should_stop=should_stop, **kwargs)
        else:
            raise LiveError("invalid", f"Unknown task {task!r}.")
        events.put(("done", job_id, result))
    except LiveError as exc:
        # LiveError's own constructor does not survive pickling: send its fields.
        events.put(("error", job_id, exc.kind, exc.message, exc.numbers))
    except Exception as exc:  # anything else still ends as a message for the page
        events.put(("failed", job_id, type(exc).__name__, str(exc)[:300]))


def _serve(
    requests: Any, events: Any, stop_id: Any, nice: int, threads: int, clocks: dict[str, Any] | None = None
) -> None:
    """The worker process: lower its priority, load torch, time this machine, answer requests until told to stop.

    ``clocks``: calibrations a previous worker of this server made (a worker restarted after a stop or a
    crash keeps them instead of calibrating again).
    """
    _settle(nice, threads)
    events.put(_hello(clocks))
    # Everything made so far lives as long as the process (torch, numba's compiled kernel and its types, the clock):
    # out of the collector's sight, so that a full collection (at each arm's end, and whenever Python's own
    # thresholds call one in the middle of a timed step) reads only what the runs made: 0.1 ms instead of 80 ms with
    # torch loaded, 130 ms with numba too, measured in this process's state.
    gc.freeze()
    while True:
        request = requests.get()
        if request is None:
            return
        job_id, task, kwargs = request
        _run_task(job_id, task, kwargs, events, stop_id)


# --- the server side ---------------------------------------------------------------------------

_MAIN_SWAP = threading.Lock()


@contextlib.contextmanager
def _main_module_of_this_module() -> Iterator[None]:
    """While a worker is spawned, let ``__main__`` be this module, which the child then imports as its main.

    ``spawn`` re-imports the parent's ``__main__`` in the child. Under Streamlit that is the page script of the
    latest run (the server makes each run's script ``__main__``): every worker started by running the whole page
    in bare mode, slower and with a warning per Streamlit call in the server's log. This module imports neither
    streamlit nor torch. The swap lasts as long as the spawn's bookkeeping (the child is a fresh interpreter);
    a script run that makes its own ``__main__`` meanwhile keeps it.
    """
    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = importlib.util.find_spec(__name__)
    with _MAIN_SWAP:
        before = sys.modules.get("__main__")
        sys.modules["__main__"] = stand_in
        try:
            yield
        finally:
            if sys.modules.get("__main__") is stand_in and before is not None:
                sys.modules["__main__"] = before


class RemoteError(Exception):
    """An unexpected exception inside the worker; ``type_name`` is its class name there."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


@dataclass(eq=False)
class Job:
    """One run asked of the worker: its place in the queue, its progress, and in the end a result or an error.

    ``state``: ``"queued"`` (waiting; see :attr:`position`), ``"running"``
    (sent to the worker, which may still be starting), ``"done"``.
    ``fraction``: progress 0..1 (comparisons report it; other tasks jump to
    1 when done). ``result``: the task's return value; ``error``: a
    ``LiveError`` (or :class:`RemoteError`) when it failed. A cancelled
    comparison is a result (``Comparison.cancelled``), not an error.
    ``arms``: a comparison's finished arms as they arrive (kept if the
    worker has to be stopped the hard way); ``stop_asked``: when Stop was
    pressed. Times are ``time.monotonic()`` seconds.
    """

    task: str
    kwargs: dict[str, Any]
    owner: LabWorker | None = None
    id: int = 0
    state: str = "queued"
    fraction: float = 0.0
    result: Any = None
    error: BaseException | None = None
    submitted: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    stop_asked: float | None = None
    arms: dict[str, Any] = field(default_factory=dict)
    place: tuple[str, str] = ("", "")

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def position(self) -> int | None:
        """Place in the queue (1 = next to run) while waiting; None once running or done."""
        return None if self.owner is None else self.owner.position(self)

    def touch(self) -> None:
        """Say someone is still waiting for this job (see :data:`ABANDON_S`)."""
        self.last_seen = time.monotonic()

    def cancel(self) -> None:
        """Leave the queue, or stop the running task within :data:`STOP_GRACE_S` plus a poll (finished arms kept)."""
        if self.owner is not None:
            self.owner.cancel(self)

    def wait(self, on_tick: Callable[[Job], None], poll_s: float = POLL_S, timeout_s: float | None = None) -> bool:
        """Block until done (True) or ``timeout_s`` passes (False), calling ``on_tick`` between polls.

        Each poll also counts as someone waiting (:meth:`touch`).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.done:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.touch()
            on_tick(self)
            time.sleep(poll_s)
        on_tick(self)
        return True


class LabWorker:
    """The server's side of the worker process: a bounded queue, one job at a time, a fresh process after a death.

    Thread-safe; every Streamlit session of a server shares one instance
    (:func:`default_worker`). Tests may make their own, with other limits.
    """

    def __init__(
        self,
        *,
        max_waiting: int = MAX_WAITING,
        wait_limit_s: float = WAIT_LIMIT_S,
        abandon_s: float = ABANDON_S,
        nice: int = WORKER_NICE,
        threads: int | None = None,
        idle_s: float | None = None,
    ) -> None:
        self.max_waiting = max_waiting
        self.idle_s = worker_idle_s() if idle_s is None else idle_s
        self.wait_limit_s = wait_limit_s
        self.abandon_s = abandon_s
        self.nice = nice
        self.threads = threads or worker_threads()
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._pending: list[Job] = []
        self._running: Job | None = None
        self._proc: Any = None
        self._requests: Any = None
        self._events: Any = None
        self._stop_id: Any = None
        self._started_at = 0.0
        self._last_busy = 0.0  # when a job last ran or waited, or the worker started
        self.retired = 0  # idle workers stopped to give their memory back
        self._ready = threading.Event()
        self._infos: dict[str, tuple[Any, ...]] = {}
        self._clocks: dict[str, Any] = {}
        self._start_error: LiveError | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # --- asking for work -------------------------------------------------------------------

    def submit(self, task: str, **kwargs: Any) -> Job:
        """Queue ``task`` with ``kwargs``; a job refused as busy comes back already done with the error."""
        if task not in TASKS:
            raise LiveError("invalid", f"Unknown task {task!r}; choose from {', '.join(TASKS)}.")
        job = Job(task=task, kwargs=kwargs, owner=self)
        with self._lock:
            job.id = next(self._ids)
            if len(self._pending) >= self.max_waiting:
                self._finish(
                    job,
                    error=LiveError("busy", f"The lab is busy: {len(self._pending)} runs are already waiting."),
                )
                return job
            self._pending.append(job)
            if self._running is None:
                self._start_next()
            self._ensure_thread()
            self._wake.notify_all()
        return job

    def position(self, job: Job) -> int | None:
        with self._lock:
            try:
                return self._pending.index(job) + 1
            except ValueError:
                return None

    def busy(self) -> bool:
        """True while a job runs or waits."""
        with self._lock:
            return self._running is not None or bool(self._pending)

    def cancel(self, job: Job) -> None:
        with self._lock:
            if job in self._pending:
                self._pending.remove(job)
                self._finish(job, error=LiveError("cancelled", "Cancelled while waiting in the queue."))
            elif job is self._running and self._stop_id is not None:
                self._stop_id.value = job.id
                if job.stop_asked is None:
                    job.stop_asked = time.monotonic()
                self._wake.notify_all()

    def device_info(self, device: str = "auto", timeout_s: float = START_TIMEOUT_S) -> Any:
        """The worker's :class:`lensa.live.DeviceInfo` for ``device``, asked once when it starts.

        Starts the worker if needed and waits for it (not for the queue).
        Raises ``LiveError``: ``"invalid"`` for an unknown device,
        ``"no_cuda"`` as :func:`lensa.live.device_info` does, ``"crashed"``
        when the worker could not start.
        """
        if device not in DEVICES:
            raise LiveError("invalid", f"device must be one of {', '.join(DEVICES)} (got {device!r}).")
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                # Known once any worker of this server said hello: the machine does not change when a worker
                # retires, so the answer needs no process (an idle exit clears ``_ready``, not ``_infos``).
                info = self._infos.get(device)
                if info is None:
                    if self._closed:
                        raise LiveError("crashed", "The lab was shut down.")
                    if self._start_error is not None and self._proc is None:
                        error, self._start_error = self._start_error, None
                        raise error
                    self._ensure_worker()
                    self._ensure_thread()
            if info is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise LiveError("not_ready", "The lab's worker process did not start in time.", (timeout_s,))
            # Wake at the hello, or at the worker's death (which sets ``_start_error``), or to look again:
            # a worker that retired meanwhile is replaced on the next pass.
            self._ready.wait(min(left, POLL_S))
        if info[0] == "ok":
            return info[1]
        raise LiveError(info[1], info[2])

    def known(self, device: str = "auto") -> bool:
        """Whether :meth:`device_info` for ``device`` answers at once (a worker of this server has said hello)."""
        with self._lock:
            return device in self._infos

    def warm(self) -> None:
        """Start a worker in the background if none is running, so that the next run finds it ready.

        Returns at once. The worker then lives :attr:`idle_s` after its hello, like any idle worker.
        """
        with self._lock:
            if self._closed or self._proc is not None:
                return
            try:
                self._ensure_worker()
            except Exception:  # no memory for a process now: the next run says so in its own words
                return
            self._ensure_thread()

    def clock(self, device: str = "auto", timeout_s: float = START_TIMEOUT_S) -> Any:
        """This machine's calibrated :class:`lensa.live.CostModel` for ``device``, measured by the worker.

        The worker times each arm once when it starts (at most about 2 s) and
        keeps it for its life; a restarted worker keeps the first one. Raises
        as :meth:`device_info` does.
        """
        info = self.device_info(device, timeout_s)
        with self._lock:
            clock = self._clocks.get(info.device)
        if clock is None:
            raise LiveError("crashed", "The lab's worker process did not time this machine.")
        return clock

    @property
    def pid(self) -> int | None:
        """The worker process's id while one is running."""
        with self._lock:
            return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """Stop the worker and the message thread; waiting jobs are cancelled."""
        with self._lock:
            self._closed = True
            for job in self._pending:
                self._finish(job, error=LiveError("cancelled", "The lab was shut down."))
            self._pending.clear()
            if self._running is not None:
                self._finish(self._running, error=LiveError("cancelled", "The lab was shut down."))
            proc = self._proc
            self._proc = None
            self._wake.notify_all()
        if proc is not None:
            proc.terminate()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()

    # --- inside, under the lock ---------------------------------------------------------------

    def _finish(self, job: Job, result: Any = None, error: BaseException | None = None) -> None:
        job.result, job.error = result, error
        if error is None:
            job.fraction = 1.0
        job.finished = time.monotonic()
        job.state = "done"
        if job is self._running:
            self._running = None
        self._last_busy = time.monotonic()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="lensa-lab-worker-io", daemon=True)
            self._thread.start()

    def _ensure_worker(self) -> None:
        if self._proc is not None:
            return
        ctx = mp.get_context("spawn")
        # Fresh queues for every process: one killed mid-message may leave a queue broken.
        self._requests, self._events = ctx.Queue(), ctx.Queue()
        self._stop_id = ctx.RawValue("q", 0)
        self._ready.clear()
        self._start_error = None
        self._proc = ctx.Process(
            target=_serve,
            args=(self._requests, self._events, self._stop_id, self.nice, self.threads, dict(self._clocks)),
            name="lensa-lab-worker",
            daemon=True,
        )
        with _main_module_of_this_module():
            self._proc.start()
        self._started_at = self._last_busy = time.monotonic()

    def _start_next(self) -> None:
        if not self._pending or self._closed:
            return
        job = self._pending.pop(0)
        try:
            self._ensure_worker()
        except Exception as exc:  # e.g. no memory left to start a process
            self._finish(job, error=LiveError("crashed", f"The lab's worker process could not start ({exc})."))
            return
        self._running = job
        job.state, job.started = "running", time.monotonic()
        self._requests.put((job.id, job.task, job.kwargs))

    def _expire(self, now: float) -> None:
        for job in list(self._pending):
            if now - job.submitted > self.wait_limit_s:
                self._pending.remove(job)
                waited = f"{self.wait_limit_s:g} s"
                self._finish(job, error=LiveError("busy", f"The lab is busy: the run waited {waited} and was dropped."))
            elif now - job.last_seen > self.abandon_s:
                self._pending.remove(job)
                self._finish(job, error=LiveError("cancelled", "Nobody was waiting for this run any more."))

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind, *rest = message
        if kind == "hello":
            _pid, infos, clocks = rest
            self._infos.update(infos)
            self._clocks.update(clocks)
            self._ready.set()
            # Idle from now, not from its start: a worker that took long to import torch still gets its time.
            self._last_busy = time.monotonic()
            return
        job_id = rest[0]
        job = self._running
        if job is None or job.id != job_id:
            return  # a job already ended here (e.g. shut down); its late messages mean nothing
        if kind == "progress":
            job.fraction = max(job.fraction, min(1.0, float(rest[1])))
        elif kind == "arm":
            _id, arm, result, device, device_name = rest
            job.arms[arm] = result
            job.place = (device, device_name)
        elif kind == "done":
            self._finish(job, result=rest[1])
        elif kind == "error":
            self._finish(job, error=LiveError(rest[1], rest[2], rest[3]))
        elif kind == "failed":
            self._finish(job, error=RemoteError(rest[1], rest[2]))

    def _check_worker(self, now: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.is_alive():
            if not self._ready.is_set() and now - self._started_at > START_TIMEOUT_S:
                proc.kill()  # noticed as a death on the next pass
            return
        # Dead: read what it managed to send first (a result may be there), then forget it.
        events, self._events, self._proc = self._events, None, None
        with contextlib.suppress(Exception):
            while True:
                self._handle(events.get_nowait())
        code = proc.exitcode
        error = LiveError(
            "crashed",
            f"The lab's worker process stopped unexpectedly (exit code {code}); it may have run out of memory.",
        )
        if not self._ready.is_set():
            self._start_error = error
            self._ready.set()  # wake anyone waiting for device information
        job = self._running
        if job is not None and job.stop_asked is not None:
            self._finish(job, **_stopped_hard(job))
        elif job is not None:
            self._finish(job, error=error)

    def _enforce_stop(self, now: float) -> None:
        """End a run that did not stop within :data:`STOP_GRACE_S` of Stop.

        A worker still starting (no hello yet) has not begun the run: the job ends as cancelled at once, and the
        worker, finding the stop already asked when it reads the request, skips it; killing it would only make
        the next run wait for another start. A worker that is running it is ended (noticed as its death).
        """
        job, proc = self._running, self._proc
        if job is None or proc is None or job.stop_asked is None or now - job.stop_asked < STOP_GRACE_S:
            return
        if not self._ready.is_set():
            self._finish(job, error=LiveError("cancelled", "The run was stopped before it started."))
            return
        proc.kill()
        proc.join(timeout=2)

    def _retire_if_idle(self, now: float) -> None:
        """Stop a ready worker nobody has used for ``idle_s``: its memory goes back to the machine."""
        proc = self._proc
        if proc is None or self._running is not None or self._pending or not self._ready.is_set():
            return
        if now - self._last_busy < self.idle_s:
            return
        self._proc, self._events, self._requests = None, None, None
        self._ready.clear()
        self.retired += 1
        proc.terminate()  # it is idle: nothing of a run is lost
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                self._expire(now)
                self._enforce_stop(now)
                self._check_worker(now)
                if self._running is None:
                    self._start_next()
                self._retire_if_idle(now)
                events = self._events
                if events is None:
                    self._wake.wait(POLL_S)
                    continue
            try:
                message = events.get(timeout=0.05)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):
                message = None  # the worker's end broke; the next pass notices its death
            if message is not None:
                with self._lock:
                    self._handle(message)


def _stopped_hard(job: Job) -> dict[str, Any]:
    """What a job stopped by ending its worker finishes with: a comparison's arms so far, else a cancellation."""
    if job.task == "compare" and job.arms:
        from lensa.live.arms import Comparison
        from lensa.live.config import RunConfig

        config = job.kwargs.get("config") or RunConfig()
        device, device_name = job.place
        note = (
            f"Stopped at once: the step in progress was longer than {STOP_GRACE_S:g} s, so the lab's worker process "
            "was ended and a fresh one takes the next run; the arms that finished are kept."
        )
        result = Comparison(config, device, device_name, dict(job.arms), cancelled=True, notes=(note,))
        return {"result": result}
    return {"error": LiveError("cancelled", "The run was stopped before it finished.")}


_DEFAULT: LabWorker | None = None
_DEFAULT_LOCK = threading.Lock()


def default_worker() -> LabWorker:
    """The one :class:`LabWorker` of this server process (created on first use; no process until a run)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = LabWorker()
        return _DEFAULT
