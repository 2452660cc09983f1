"""Where a :class:`lensa.live.capture.Recorder` summarises tensors: inside the step, or in a process of its own.

The summaries themselves are :mod:`lensa.live.torch_binning`'s (:func:`summarize_tensor` and
:func:`summarize_update_tensors`, re-exported here: :func:`lensa.runstats.summarize` and
:func:`lensa.runstats.summarize_update` with the per-value work done by torch, equal bit for bit). The recorder's
records also keep what every block recipe loses (:meth:`lensa.runstats.TensorStats.with_recipes`, numpy, from
the tensor as it is shaped): the summary process is told each copy's shape.

:class:`InlineSummaries` summarises each tensor at once, in the hook, with the torch path of
:func:`summarize_tensor`: simple, and the recorded step pays for it (about 5 times a bare
step on the reference model).

:class:`ProcessSummaries` (the default) only copies each tensor, as float32, into a ring of shared memory,
and a small process without torch (:mod:`lensa.live.summary_worker`) summarises the copies while training goes
on; the summaries come back, in order, when the run is read (:meth:`ProcessSummaries.drain`). A thread
would not do: the summaries' Python and small numpy calls hold the GIL, which the training loop's own
Python needs (measured: a recorded step cost 2 to 3.5 times a bare one that way). The ring is bounded
(128 MiB by default, its pages made when it is created so that no copy waits for one), so memory stays flat
however long the run: when the ring is full, the hook waits for the process to free room
(``waited``). A tensor larger than the whole ring is summarised in the hook, as :class:`InlineSummaries`
does. Both give the same records bit for bit (tests/test_capture.py).

Copied later. A module's output and its gradient (the bulk of a recorded step's bytes: 23 MB of the reference
model's 24) can be copied by a thread of the training process instead of the hook (``later=True``): the hook
takes the tensor's room in the ring and keeps the tensor with its version counter (``_version``, which every
in-place write to it or a view of it raises), and hands the thread 4 MB of such copies at a time. The copies
(numpy's, which holds the GIL the least, or torch's for other types) run beside the training thread; their items
follow them to the summary process, in order. The summary process runs under Linux's SCHED_IDLE besides its
niceness, so that a core busy only with it counts as free and the copying thread wakes there. A copy is right when the
tensor did not change before it was done: the training thread checks that at the recorder's next hook or at
the step's end (:meth:`ProcessSummaries.check`), once the copy is done, when every write it made before then has
raised the version. A tensor whose version moved is reported (``changes``), and its record is left out when it was
copied later; the recorder then copies that tensor in the hook (and watches each tensor, copied in the hook, the
first time it records it, to learn which ones a step changes in place: a ``ReLU(inplace=True)`` after a layer).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lensa.live.summary_worker import HEADER, Item, read_message, write_message
from lensa.live.torch_binning import summarize_intended_tensors as summarize_intended_tensors
from lensa.live.torch_binning import summarize_tensor as summarize_tensor
from lensa.live.torch_binning import summarize_update_tensors as summarize_update_tensors
from lensa.runstats import RunStats, TensorStats, load

# --- summarising in the hook ---------------------------------------------------------------------------------


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(t: torch.Tensor) -> str:
    """The tensor's type as a record keeps it: torch's name without ``torch.`` (``"bfloat16"``)."""
    dtype = t.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _summarize_here(t: torch.Tensor, scale: float | None, recipes: bool = False) -> TensorStats:
    """:func:`summarize_tensor` of ``t``, or with a loss ``scale``, of the true gradient ``t / scale``; with
    ``recipes``, also what every block recipe loses on it (shaped as ``t``). The record keeps ``t``'s dtype."""
    values = t.detach().float().cpu()
    if scale is not None:
        values = _unscaled(values, scale)
    stats = replace(summarize_tensor(values), dtype=dtype_name(t))
    return stats.with_recipes(values.contiguous().numpy()) if recipes else stats


@dataclass(frozen=True)
class Update:
    """One weight's update to summarise: the weight before the step (held), and either the weight after it
    (``intended`` False: the update is after − before) or the update the optimizer meant to make (True)."""

    name: str
    before: Held
    value: torch.Tensor
    intended: bool
    dtype: str  # the weight's


def _summarize_update_here(before: torch.Tensor, u: Update, recipes: bool) -> TensorStats:
    summary = summarize_intended_tensors if u.intended else summarize_update_tensors
    return replace(summary(before, u.value, recipes=recipes), dtype=u.dtype)


def _amax_here(t: torch.Tensor, scale: float | None) -> float:
    """The largest magnitude of ``t`` (of ``t / scale``), as the recorder's hooks take it: max and -min, no copy;
    NaN where ``t`` has one."""
    d = t.detach()
    top = float(torch.maximum(d.amax(), d.amin().neg()).float())
    return top if scale is None else top / scale


def _unscaled(values: torch.Tensor, scale: float) -> torch.Tensor:
    """float32 ``values / scale``, each quotient correctly rounded (numpy's float32 division).

    A power-of-two scale (GradScaler's, with its default factors) divides in torch as a multiplication by
    its exact reciprocal; any other goes through numpy, whose division rounds each quotient once.
    """
    mantissa, _ = math.frexp(scale)
    if mantissa == 0.5 and 2.0**-126 <= 1 / scale <= 2.0**127:
        return values * (1 / scale)
    return torch.from_numpy(values.numpy() / np.float32(scale))


# --- where they are computed -------------------------------------------------------------------------------

DEFAULT_CAPACITY = 128 * 2**20
_ALIGN = 64  # bytes: each copy, or block of copies made together, starts on a cache line
_FLUSH_EVERY = 256  # items queued before they are sent without waiting for the step's end
_BATCH_BYTES = 4 * 2**20  # copies gathered before the copying thread is woken for them
_NICE = 19  # the summary process's priority while training runs: the lowest, so the steps go first


def _aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a whole number of :data:`_ALIGN` blocks."""
    return -(-nbytes // _ALIGN) * _ALIGN


# dtypes that torch.cat(out=float32) converts exactly, as copy_ does
_CAT_EXACT = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A float32 copy of ``t`` on the CPU, owned by the caller (training may change ``t`` in place afterwards)."""
    return t.detach().to("cpu", torch.float32, copy=True)


@dataclass
class Held:
    """A weight as it was before the optimizer step, kept until its update is summarised."""

    tensor: torch.Tensor | None  # the copy (inline), or None
    offset: int = -1  # byte offset in the ring (process)
    held_from: int = -1  # the ring's fill mark where its copy starts: the ring is not freed past it while held


@dataclass(slots=True)
class _Watched:
    """A tensor whose version is checked once its copy is done (:meth:`ProcessSummaries.check`)."""

    seq: int
    kind: str
    name: str
    step: int
    tensor: torch.Tensor  # held until it is checked
    version: int  # its ``_version`` when it was handed over
    job: int  # the copying thread's job it waits for (0: copied in the hook)
    later: bool  # copied by the copying thread: a change leaves its record out


class InlineSummaries:
    """Summaries computed at once, in the caller's thread, with torch."""

    def __init__(self, run: RunStats, recipes: bool = False) -> None:
        self._run = run
        self._recipes = recipes
        self.waited = 0.0
        self.changes: list[tuple[str, str, int, bool]] = []  # nothing is copied later or watched here

    def tensor(
        self,
        kind: str,
        name: str,
        step: int,
        t: torch.Tensor,
        scale: float | None = None,
        amax: bool = False,
        *,
        later: bool = False,
        watch: bool = False,
    ) -> None:
        self._run.add(kind, name, step, _summarize_here(t, scale, self._recipes))
        if amax and t.numel():
            self._run.record_amax(kind, name, step, _amax_here(t, scale))

    def tensors(
        self, kind: str, names: Sequence[str], step: int, ts: Sequence[torch.Tensor], amax: bool = False
    ) -> None:
        for name, t in zip(names, ts, strict=True):
            self.tensor(kind, name, step, t, amax=amax)

    def hold(self, ts: Sequence[torch.Tensor]) -> list[Held]:
        return [Held(_copy(t)) for t in ts]

    def updates(self, kind: str, step: int, updates: Sequence[Update]) -> None:
        for u in updates:
            assert u.before.tensor is not None
            self._run.add(kind, u.name, step, _summarize_update_here(u.before.tensor, u, self._recipes))

    def check(self, wait: bool = False) -> None:
        pass

    def hand(self) -> None:
        pass

    def release_held(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def drain(self) -> list[tuple[str, str]]:
        return []

    def close(self) -> list[tuple[str, str]]:
        return []


class ProcessSummaries:
    """Summaries computed by a child process without torch from copies in shared memory (see the module's text)."""

    def __init__(self, run: RunStats, capacity: int | None = None, recipes: bool = False) -> None:
        self._run = run
        self._recipes = recipes
        capacity = DEFAULT_CAPACITY if capacity is None else capacity
        self._capacity = capacity - capacity % _ALIGN
        size = HEADER + self._capacity
        fd = _shared_file(size)
        try:
            # MAP_POPULATE: the pages are made now, not one fault at a time inside the training steps
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._shared = mmap.mmap(fd, size, flags=flags)
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            # Run by its path (runpy, without lensa.live's package imports, which the worker has no use for):
            # it starts in about a tenth of a second.
            worker = str(Path(__file__).with_name("summary_worker.py"))
            code = f"import runpy, sys; sys.argv[1:] = sys.argv[2:]; runpy.run_path({worker!r}, run_name='__main__')"
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, "-", str(fd), str(size), str(int(recipes))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(fd,),
                env=env,
                close_fds=True,
            )
        finally:
            os.close(fd)  # the mapping and the child's copy of the descriptor keep the memory
        self._released = np.frombuffer(self._shared, np.int64, count=1)
        self._ring = torch.frombuffer(self._shared, dtype=torch.float32, offset=HEADER, count=self._capacity // 4)
        self._ring_np = self._ring.numpy()  # the same memory: numpy slices and copies with less overhead per call
        self._filled = 0  # bytes ever taken from the ring (a mark; the ring position is this modulo capacity)
        # id(Held) -> its held_from, for the copies in the ring whose update is not queued yet
        self._open: dict[int, int] = {}
        self._queued: list[tuple[Any, ...]] = []  # Items, as the plain tuples they are sent as
        self._local: dict[int, tuple[str, str, int, TensorStats]] = {}  # seq -> too large for the ring
        self._local_amax: dict[int, float] = {}  # seq -> the amax of such a tensor, where it was asked for
        self._seq = 0
        self._closed = False
        self.waited = 0.0  # seconds the caller spent waiting for room in the ring
        self._broken: str | None = None  # why the summaries can no longer be had
        self._outbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._send_error: BaseException | None = None
        self._sender = threading.Thread(target=self._send_loop, name="lensa-recorder-send", daemon=True)
        # The copying thread: copies made later (tensor(later=True)) and the messages after them, in order.
        self._jobs: queue.SimpleQueue[list[tuple[int, int, torch.Tensor]] | dict[str, Any] | None] = queue.SimpleQueue()
        self._jobs_given = 0  # copies handed to the copying thread
        self._jobs_done = 0  # copies it has made (written by that thread alone)
        self._copy_errors: dict[int, str] = {}  # seq -> why its copy failed
        self._watched: deque[_Watched] = deque()  # tensors whose version is checked once their copy is done
        self._dropped: set[int] = set()  # seqs copied later whose tensor changed first: left out
        self.changes: list[tuple[str, str, int, bool]] = []  # (kind, name, step, left out) of tensors that changed
        self._batch: list[tuple[int, int, torch.Tensor]] = []  # copies not handed over yet: (seq, start, tensor)
        self._batch_bytes = 0
        self._copier = threading.Thread(target=self._copy_loop, name="lensa-recorder-copy", daemon=True)
        # The child says when it can summarise (with recipes, once numba's compiled pass is loaded): waiting here,
        # at the recorder's start, keeps that out of the first recorded steps, whose copies would fill the ring.
        try:
            if self._receive().get("ready") is not True:
                raise RuntimeError("the recorder's summary process did not start as expected")
            self._sender.start()
            self._copier.start()
        except BaseException:
            self._proc.kill()
            self._proc.wait()
            del self._ring, self._ring_np, self._released  # no view may outlive the mapping
            self._shared.close()
            raise

    # --- the ring -----------------------------------------------------------------------------------------

    def _fits(self, end: int, released: int) -> bool:
        """Whether a block ending at mark ``end`` is free once the child has released the ring up to ``released``."""
        return released == self._filled or end - released <= self._capacity

    def _take(self, nbytes: int) -> int | None:
        """Byte offset of ``nbytes`` of free ring, waiting for the child to free room; None if it can never fit."""
        nbytes = _aligned(nbytes)
        if nbytes > self._capacity:
            return None
        pos = self._filled % self._capacity
        skip = self._capacity - pos if pos + nbytes > self._capacity else 0
        end = self._filled + skip + nbytes
        if not self._fits(end, int(self._released[0])):
            if not self._fits(end, self._mark()):
                return None  # weights held for their updates fill the ring: waiting would never end
            self.flush()
            t0 = time.perf_counter()
            while not self._fits(end, int(self._released[0])):
                self._check_alive()
                time.sleep(0.0005)
            self.waited += time.perf_counter() - t0
        self._filled = end
        return 0 if skip else pos

    def _put(self, t: torch.Tensor) -> int | None:
        """Copy ``t`` as float32 into the ring: its byte offset there, or None when it can never fit."""
        n = t.numel()
        offset = self._take(n * 4)
        if offset is not None:
            start = offset // 4
            if t.dtype is torch.float32 and t.is_cpu and t.layout is torch.strided and t.is_contiguous():
                # a plain memory copy (the usual case), with less Python around it than torch's slice and view
                np.copyto(self._ring_np[start : start + n], t.detach().numpy().reshape(-1))
            else:
                self._ring[start : start + n].view(t.shape).copy_(t.detach())
        return offset

    def _put_all(self, ts: Sequence[torch.Tensor]) -> int | None:
        """Copy ``ts`` as float32 into one block of the ring, one after another: its byte offset, or None.

        One ``torch.cat`` into the block when every tensor is on the CPU in a type that float32 holds
        exactly (the parameters and their gradients at a recorded step: a few dozen tensors, most of them
        small, where a copy each costs more in Python than in bytes); else one copy each, as :meth:`_put`.
        """
        sizes = [t.numel() for t in ts]
        total = sum(sizes)
        offset = self._take(total * 4)
        if offset is not None:
            start = offset // 4
            block = self._ring[start : start + total]
            if all(t.is_cpu and t.dtype in _CAT_EXACT for t in ts):
                with torch.no_grad():  # cat(out=) refuses inputs that require grad otherwise
                    torch.cat([t.reshape(-1) for t in ts], out=block)
            else:
                for part, t in zip(block.split(sizes), ts, strict=True):
                    part.view(t.shape).copy_(t.detach())
        return offset

    def _mark(self) -> int:
        """How far the child may free the ring once the items queued so far are summarised."""
        # The held copies' marks grow in the order they were taken, which the dict keeps: the first is the least.
        for mark in self._open.values():
            return mark
        return self._filled

    def _queue_release(self) -> None:
        """An item with nothing to summarise that lets the child free the ring up to the current mark."""
        self._queue(Item(0, "release", "", "", 0, -1, 0, [], self._mark()))

    def _queue(self, item: Item) -> None:
        """Queue ``item`` for the child; once it is summarised, the child frees the ring up to ``item.release``.

        That is :meth:`_mark` but for a block of copies made together: everything taken so far but the weights
        still held for their updates.
        """
        self._queued.append(tuple(item))  # marshal takes no tuple subclass
        if len(self._queued) >= _FLUSH_EVERY:
            self.flush()

    # --- what the recorder calls --------------------------------------------------------------------------

    def tensor(
        self,
        kind: str,
        name: str,
        step: int,
        t: torch.Tensor,
        scale: float | None = None,
        amax: bool = False,
        *,
        later: bool = False,
        watch: bool = False,
    ) -> None:
        """Summarise ``t`` (or the true gradient ``t / scale``); with ``amax``, keep its largest magnitude as the
        step's amax too, taken by the child from the copy it summarises (so the hook need not read ``t`` again).

        ``later``: a tensor on the CPU is copied by the copying thread, and checked (see the module's text);
        ``watch``: copied now, and checked all the same (a change is reported, the record kept)."""
        self._seq += 1
        n = t.numel()
        if later and t.is_cpu:
            offset = self._take(n * 4)
            if offset is not None:
                self._jobs_given += 1
                self._batch.append((self._seq, offset // 4, t))
                self._batch_bytes += 4 * n
                self._watched.append(_Watched(self._seq, kind, name, step, t, t._version, self._jobs_given, True))
                if self._batch_bytes >= _BATCH_BYTES:
                    self.hand()
        else:
            offset = self._put(t)
            if watch and offset is not None:
                self._watched.append(_Watched(self._seq, kind, name, step, t, t._version, 0, False))
        if offset is None:
            self._local[self._seq] = (kind, name, step, _summarize_here(t, scale, self._recipes))
            if amax and n:
                self._local_amax[self._seq] = _amax_here(t, scale)
            return
        what = "tensor" if scale is None else "unscaled"
        shape, dtype = list(t.shape), dtype_name(t)
        self._queue(Item(self._seq, what, kind, name, step, offset, n, shape, self._mark(), -1, scale, amax, dtype))

    def tensors(
        self, kind: str, names: Sequence[str], step: int, ts: Sequence[torch.Tensor], amax: bool = False
    ) -> None:
        """:meth:`tensor` of each of ``ts`` (named ``names``), their copies made together (:meth:`_put_all`)."""
        offset = self._put_all(ts) if ts else None
        if offset is None:  # together larger than the ring could ever hold: one at a time
            for name, t in zip(names, ts, strict=True):
                self.tensor(kind, name, step, t, amax=amax)
            return
        # Each item but the last lets the child free the ring only up to its own copy's end: the next ones are
        # still to be summarised. The block starts at this fill mark (the ring's mark before it, plus any skip).
        end = self._filled - _aligned(4 * sum(t.numel() for t in ts))
        last = len(ts) - 1
        for i, (name, t) in enumerate(zip(names, ts, strict=True)):
            self._seq += 1
            n = t.numel()
            end += 4 * n
            release = self._mark() if i == last else min(end, self._mark())
            shape, dtype = list(t.shape), dtype_name(t)
            self._queue(Item(self._seq, "tensor", kind, name, step, offset, n, shape, release, amax=amax, dtype=dtype))
            offset += 4 * n

    def hold(self, ts: Sequence[torch.Tensor]) -> list[Held]:
        """Copies of ``ts`` (the weights before the optimizer step), kept until :meth:`updates` or :meth:`release_held`.

        One block of the ring (:meth:`_put_all`) when they fit in it together; else one copy each.
        """
        mark = self._filled
        offset = self._put_all(ts) if ts else None
        if offset is None:
            return [self._hold_one(t) for t in ts]
        held = []
        for t in ts:
            h = Held(None, offset, held_from=mark)
            self._open[id(h)] = h.held_from
            held.append(h)
            offset += 4 * t.numel()
        return held

    def _hold_one(self, t: torch.Tensor) -> Held:
        mark = self._filled
        offset = self._put(t)
        if offset is None:
            return Held(_copy(t))
        held = Held(None, offset, held_from=mark)
        self._open[id(held)] = held.held_from
        return held

    def updates(self, kind: str, step: int, updates: Sequence[Update]) -> None:
        """Each weight's update from its copy before the step (:meth:`hold`) and its value after it (or the update
        the optimizer meant to make), the values copied together."""
        if updates and all(u.before.tensor is None for u in updates):
            offset = self._put_all([u.value for u in updates])
            if offset is not None:
                for u in updates:
                    self._seq += 1
                    self._open.pop(id(u.before))
                    self._queue(self._update_item(kind, step, u, offset))
                    offset += 4 * u.value.numel()
                return
        for u in updates:
            self._update_one(kind, step, u)

    def _update_item(self, kind: str, step: int, u: Update, offset: int) -> Item:
        what = "intended" if u.intended else "update"
        n, shape = u.value.numel(), list(u.value.shape)
        return Item(self._seq, what, kind, u.name, step, u.before.offset, n, shape, self._mark(), offset, dtype=u.dtype)

    def _update_one(self, kind: str, step: int, u: Update) -> None:
        self._seq += 1
        before = u.before
        if before.tensor is None:  # the weight before the step is in the ring
            offset = self._put(u.value)
            if offset is not None:
                self._open.pop(id(before))
                self._queue(self._update_item(kind, step, u, offset))
                return
            previous = self._ring_values(before, u.value)
            self._open.pop(id(before))
            self._queue_release()  # its room is free now
        else:
            previous = before.tensor
        self._local[self._seq] = (kind, u.name, step, _summarize_update_here(previous, u, self._recipes))

    def _ring_values(self, held: Held, like: torch.Tensor) -> torch.Tensor:
        start = held.offset // 4
        return self._ring[start : start + like.numel()].clone().view(like.shape)

    def check(self, wait: bool = False) -> None:
        """Check the watched tensors whose copy is done (all of them, waiting for the copying thread, with ``wait``):
        each one whose version moved is added to :attr:`changes` (and left out, if it was copied later). Called
        by the training thread, between its own writes (see the module's text)."""
        watched = self._watched
        if not watched or (not wait and watched[0].job > self._jobs_done):  # nothing to check yet (the usual case)
            return
        if wait:
            self.hand()
        if wait and watched[-1].job > self._jobs_done:
            t0 = time.perf_counter()
            while watched[-1].job > self._jobs_done:
                if not self._copier.is_alive():
                    raise RuntimeError("the recorder's copying thread stopped")
                time.sleep(0.0002)
            self.waited += time.perf_counter() - t0
        done = self._jobs_done
        while watched and watched[0].job <= done:
            w = watched.popleft()
            if w.tensor._version != w.version:
                if w.later:
                    self._dropped.add(w.seq)
                self.changes.append((w.kind, w.name, w.step, w.later))

    def hand(self) -> None:
        """Hand the copies gathered so far to the copying thread, as one job (one wake-up of that thread)."""
        if self._batch:
            self._jobs.put(self._batch)
            self._batch, self._batch_bytes = [], 0

    def _copy_loop(self) -> None:
        """The copying thread: make each batch of copies handed over, and pass each message on to the sending thread,
        in order, until None. A float32 tensor is copied by numpy, which takes the GIL for less than torch's
        ``copy_`` does (a Python thread beside a loop of 1 MB copies ran at 0.99 of its speed with numpy's, 0.74 with
        torch's): the training thread needs the GIL back after each of its own operations."""
        torch.set_grad_enabled(False)  # this thread's own mode: copying a tensor that requires grad records nothing
        while (job := self._jobs.get()) is not None:
            if isinstance(job, dict):
                self._outbox.put(job)
                continue
            self._copy_batch(job)
            job = None  # the tensors are the training loop's: hold none of them past their copy
        self._outbox.put(None)

    def _copy_batch(self, batch: list[tuple[int, int, torch.Tensor]]) -> None:
        for seq, start, t in batch:
            try:
                n = t.numel()
                if t.dtype is torch.float32 and t.layout is torch.strided and t.is_contiguous():
                    np.copyto(self._ring_np[start : start + n], t.detach().numpy().reshape(-1))
                else:
                    self._ring[start : start + n].view(t.shape).copy_(t)
            except Exception as e:  # told at the drain; the copy's record is left out
                self._copy_errors[seq] = f"{type(e).__name__}: {e}"
            finally:
                self._jobs_done += 1

    def release_held(self) -> None:
        """Forget the weights held for updates that will not come (a parameter without a gradient)."""
        if self._open:
            self._open.clear()
            self._queue_release()

    def flush(self) -> None:
        """Send the queued items to the child."""
        if self._queued:
            items, self._queued = self._queued, []
            self._send({"op": "items", "items": items})

    def drain(self) -> list[tuple[str, str]]:
        """Wait for every summary queued so far and add them all to the run, in the order they were taken.

        Returns (kind, what went wrong) for each tensor that could not be summarised (each left out, the others
        kept). Raises RuntimeError when the summary process itself has failed (then and at every later call).
        """
        if self._closed:
            return []
        if self._broken is not None:
            raise RuntimeError(self._broken)
        self._priority(0)  # the caller waits for these summaries now: they go first (where the system lets them)
        try:
            return self._drain()
        except Exception as e:
            self._broken = str(e)
            raise
        finally:
            self._priority(_NICE)

    def _priority(self, nice: int) -> None:
        """Set the child's niceness: :data:`_NICE` while training runs (and Linux's SCHED_IDLE, which it set itself),
        0 and the ordinary policy while the caller waits for a drain. Raising it needs the right to (root, or a
        raised RLIMIT_NICE); without it the child stays where it is."""
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, nice)
        policy = os.SCHED_IDLE if nice == _NICE else os.SCHED_OTHER
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(self._proc.pid, policy, os.sched_param(0))

    def _drain(self) -> list[tuple[str, str]]:
        self.check(wait=True)
        self.flush()
        self._send({"op": "drain"})
        done: dict[int, tuple[str, str, int, TensorStats]] = dict(self._local)
        amaxes: dict[int, float] = dict(self._local_amax)
        self._local.clear()
        self._local_amax.clear()
        errors: list[tuple[str, str]] = []
        while True:
            message = self._receive()
            if "errors" in message:
                errors.extend((str(k), str(text)) for k, text in message["errors"])
            elif "seqs" in message:
                assert self._proc.stdout is not None
                part = load(self._proc.stdout.read(message["size"]))
                for seq, (label, stats) in zip(message["seqs"], part.items(), strict=True):
                    done[seq] = (*label, stats)
                    steps, values = part.amax(label[0], label[1])
                    if steps.size and label[2] in steps:  # the child took this copy's amax too
                        amaxes[seq] = float(values[int(np.searchsorted(steps, label[2]))])
            if "done" in message:
                break
        for seq in sorted(done):
            kind, name, step, stats = done[seq]
            if seq in self._dropped:  # it changed before its copy was made (the recorder has said so)
                continue
            if seq in self._copy_errors:
                errors.append((kind, f"{kind} {name!r} at step {step}: its copy failed ({self._copy_errors[seq]})"))
                continue
            try:
                self._run.add(kind, name, step, stats)
                if seq in amaxes:
                    self._run.record_amax(kind, name, step, amaxes[seq])
            except ValueError as e:  # the run is full, or the label is there already: this one is left out
                errors.append((kind, f"{kind} {name!r} at step {step}: {e}"))
        self._dropped.clear()
        self._copy_errors.clear()
        return errors

    def close(self) -> list[tuple[str, str]]:
        """Drain, then stop the child and free the shared memory; the drain's errors (see :meth:`drain`)."""
        if self._closed:
            return []
        errors: list[tuple[str, str]] = []
        try:
            if self._broken is None:  # a failure is raised once, by the drain that met it
                errors = self.drain()
        finally:
            self._closed = True
            with contextlib.suppress(Exception):  # a child already gone needs no stop
                self._send({"op": "stop"})
            self._stop_sending()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            del self._ring, self._ring_np, self._released
            self._shared.close()
        return errors

    # --- talking to the child -----------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._proc.poll() is not None:
            raise RuntimeError(
                f"the recorder's summary process stopped (exit status {self._proc.returncode}); "
                "the run's statistics are incomplete"
            )

    def _send(self, message: dict[str, Any]) -> None:
        """Hand ``message`` to the sending thread, which writes it into the child's pipe: the pipe holds 64 KiB, and
        a child busy with earlier summaries (or kept waiting by training, at its low priority) reads it late, so a
        write in the training thread could block it for as long (measured: 320 ms a recorded step of a tiny GPT-2
        on a loaded 2-core machine). Raises what the thread met, and RuntimeError once the child is gone."""
        if self._send_error is not None:
            self._check_alive()
            raise self._send_error
        self.hand()
        self._jobs.put(message)  # after the copies handed over before it

    def _send_loop(self) -> None:
        """The sending thread: write each message handed over, in order, until None (or a write fails)."""
        assert self._proc.stdin is not None
        while (message := self._outbox.get()) is not None:
            try:
                write_message(self._proc.stdin, message)
            except (BrokenPipeError, OSError, ValueError) as e:  # the child is gone, or the pipe was closed
                self._send_error = e
                return

    def _stop_sending(self) -> None:
        self._jobs.put(None)  # the copying thread hands the sending thread its None
        self._copier.join(timeout=5)
        if self._copier.is_alive():
            self._outbox.put(None)
        self._sender.join(timeout=5)

    def _receive(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        message = read_message(self._proc.stdout)
        if message is None:
            self._proc.wait()
            self._check_alive()
            raise RuntimeError("the recorder's summary process closed its output")
        return message


def _shared_file(size: int) -> int:
    """A file descriptor of ``size`` bytes of memory to share with a child: memfd on Linux, else a temp file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("lensa-recorder", 0)  # not inheritable; Popen's pass_fds hands it down
    else:
        with tempfile.TemporaryFile() as fh:
            fd = os.dup(fh.fileno())
    os.ftruncate(fd, size)
    return fd
