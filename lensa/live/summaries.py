"""How a :class:`lensa.live.capture.Recorder` summarises tensors, and where: inside the step, or in a process.

:func:`summarize_tensor` and :func:`summarize_update_tensors` are :func:`lensa.runstats.summarize` and
:func:`lensa.runstats.summarize_update` with the per-value work done by torch, equal bit for bit. The recorder's
records also keep what every block recipe loses (:meth:`lensa.runstats.TensorStats.with_recipes`, numpy, from
the tensor as it is shaped): the summary process is told each copy's shape.

:class:`InlineSummaries` summarises each tensor at once, in the hook, with the torch path of
:func:`summarize_tensor`: simple, and the recorded step pays for it (about 5 times a bare
step on the reference model).

:class:`ProcessSummaries` (the default) only copies each tensor, as float32, into a ring of shared memory,
and a small numpy-only process (:mod:`lensa.live.summary_worker`) summarises the copies while training goes
on; the summaries come back, in order, when the run is read (:meth:`ProcessSummaries.drain`). A thread
would not do: the summaries' Python and small numpy calls hold the GIL, which the training loop's own
Python needs (measured: a recorded step cost 2 to 3.5 times a bare one that way). The ring is bounded
(128 MiB by default, its pages made when it is created so that no copy waits for one), so memory stays flat
however long the run: when the ring is full, the hook waits for the process to free room
(``waited``). A tensor larger than the whole ring is summarised in the hook, as :class:`InlineSummaries`
does. Both give the same records bit for bit (tests/test_capture.py).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from lensa.formats import FORMATS
from lensa.live.summary_worker import HEADER, read_message, write_message
from lensa.runstats import (
    BINADE_MIN,
    N_BINADES,
    SUMMARY_FORMATS,
    RunStats,
    TensorStats,
    exact_fractions,
    from_histograms,
    load,
)

# --- the summaries, binned with torch ------------------------------------------------------------------------

_FINE = 1 << (23 - 12)  # fine bins per binade: the top 11 fraction bits
_EXP_SPECIAL = 255  # exponent field of inf and NaN
_PACK = 2.0**32  # a value's weight is 2**32 + its low 12 bits: a bin's sum is count * 2**32 + sum of low bits
_CHUNK = 1 << 20  # values per bincount: keeps each packed sum below 2**53


def _frac_mask(fractions: tuple[int, ...]) -> int:
    """Fraction bits that are 0 in every one of ``fractions``: a value with any of them set is none of those F."""
    either = 0
    for f in fractions:
        either |= f
    return ((1 << 23) - 1) & ~either


_EXACT = exact_fractions()
_CANDIDATE_MASK = _frac_mask(_EXACT)


_SUB_ROWS = -126 - BINADE_MIN  # binades of float32 subnormals: -149 ... -127, the grid's first 23 rows
_NORMAL_OFFSET = (_SUB_ROWS - 1) * _FINE  # grid bin of a normal value = its key (exponent field, top 11 bits) + this


def _exact_counts(frac: np.ndarray, row: np.ndarray) -> np.ndarray:
    """(len(_EXACT), 277): per grid row, how many of the values (fraction bits ``frac``, row ``row``) have each F."""
    return np.stack([np.bincount(row[frac == f], minlength=N_BINADES) for f in _EXACT]).astype(np.int64)


def _summarize_bits(bits: torch.Tensor, lost_counts: tuple[int, ...] | None = None) -> TensorStats:
    """:func:`lensa.runstats.summarize` of float32 values given as their int32 bit patterns (1-D, CPU), in torch.

    The per-value work is integer work in torch (the key, exponent field and top 11 fraction bits; one
    ``bincount`` per 2**20 values whose weight packs the count and the low 12 bits; a masked test for the
    few values :func:`lensa.runstats.exact_fractions` names). What is left is per non-empty bin and is done by
    :func:`lensa.runstats.from_histograms`, which :func:`~lensa.runstats.summarize` ends with too, so the
    record equals ``summarize`` of those values bit for bit (tests/test_capture.py checks it).
    """
    n = bits.numel()
    keys, counts, lows = [], [], []
    for start in range(0, n, _CHUNK):
        b = bits[start : start + _CHUNK]
        chunk_key = torch.bitwise_right_shift(b, 12).bitwise_and_(0x7FFFF)
        lo = int(chunk_key.min())
        weight = torch.bitwise_and(b, 0xFFF).to(torch.float64).add_(_PACK)
        packed = torch.bincount(chunk_key.sub_(lo), weights=weight).numpy()
        nz = np.flatnonzero(packed)
        p = packed[nz]
        # count * 2**32 + low sum, the low sum below 2**32 (at most 2**20 values of at most 4095): floor is the count
        c = np.floor(p * (1 / _PACK))
        keys.append(nz + lo)
        counts.append(c)
        lows.append(p - c * _PACK)
    key: NDArray[Any]
    count: NDArray[Any]
    low: NDArray[Any]
    if len(keys) > 1:
        key, where = np.unique(np.concatenate(keys), return_inverse=True)
        count = np.bincount(where, weights=np.concatenate(counts))  # exact: integers below 2**53
        low = np.bincount(where, weights=np.concatenate(lows))
    elif keys:
        key, count, low = keys[0], counts[0], lows[0]
    else:
        key, count, low = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    count = count.astype(np.int64)
    i_normal, i_special = np.searchsorted(key, [_FINE, _EXP_SPECIAL * _FINE])

    mag: torch.Tensor | None = None

    def magnitudes() -> torch.Tensor:
        nonlocal mag
        if mag is None:
            mag = torch.bitwise_and(bits, 0x7FFFFFFF)
        return mag

    # Key 0 holds |bits| < 2**12 and key 255 * 2**11 holds [inf, inf + 2**12): when their low bits add up to 0
    # they hold only zeros, only infinities; otherwise count those exactly (tiny subnormals, NaNs).
    zeros = 0
    if key.size and key[0] == 0:
        zeros = int(count[0]) if low[0] == 0 else int(torch.count_nonzero(magnitudes() == 0))
    infs = 0
    if i_special < key.size and key[i_special] == _EXP_SPECIAL * _FINE:
        infs = int(count[i_special]) if low[i_special] == 0 else int(torch.count_nonzero(magnitudes() == 0x7F800000))
    nan = int(count[i_special:].sum()) - infs
    subnormals = int(count[:i_normal].sum()) - zeros

    bins = key[i_normal:i_special] + _NORMAL_OFFSET
    count, low = count[i_normal:i_special], low[i_normal:i_special]
    exact = np.zeros((len(_EXACT), N_BINADES), np.int64)
    # The values whose F is one of _EXACT: a cheap test lets through those (and zeros, and a few more).
    if int(torch.count_nonzero(torch.bitwise_and(bits, _CANDIDATE_MASK) == 0)) > zeros:
        m = magnitudes()[torch.bitwise_and(bits, _CANDIDATE_MASK) == 0].numpy()
        m = m[(m >= 0x00800000) & (m < 0x7F800000)]  # normal values; subnormals are counted below
        exact += _exact_counts(m & 0x7FFFFF, (m >> 23).astype(np.int64) + _SUB_ROWS - 1)
    if subnormals:
        mags = magnitudes()
        sub = mags[(mags < 0x00800000) & (mags != 0)].numpy()
        # Times 2**64 is exact for a float32 subnormal and makes it normal: its exponent is then its binade + 64.
        norm = (sub.view(np.float32) * np.float32(2.0**64)).view(np.int32)
        row = (norm >> 23).astype(np.int64) - 127 - 64 - BINADE_MIN
        frac = norm & 0x7FFFFF
        sub_bins, where = np.unique(row * _FINE + (frac >> 12), return_inverse=True)
        bins = np.concatenate([sub_bins, bins])  # subnormal rows come first on the grid
        count = np.concatenate([np.bincount(where).astype(np.int64), count])
        low = np.concatenate([np.bincount(where, weights=frac & 0xFFF), low])
        exact += _exact_counts(frac, row)
    return from_histograms(
        size=n,
        exact_zero=zeros,
        inf=infs,
        nan=nan,
        bins=bins,
        fine_count=count,
        fine_low_sum=low,
        exact_at=exact,
        lost_counts=lost_counts,
    )


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as float32 on the CPU, their bit patterns as a 1-D int32 tensor (no copy if possible)."""
    return t.detach().float().cpu().contiguous().view(-1).view(torch.int32)


def summarize_tensor(t: torch.Tensor) -> TensorStats:
    """:func:`lensa.runstats.summarize` of a torch tensor's values read as float32, computed with torch.

    Equal to ``summarize(t.detach().float().cpu().numpy())`` bit for bit, counts and relative error sums
    alike (FP16 and BF16 tensors are read exactly; float64 ones are rounded to float32 first). About 1 to 2
    ns of CPU per value on one core, against about 13 for the numpy binning.
    """
    return _summarize_bits(_as_bits(t))


# SUMMARY_FORMATS: torch's type, and the saturation bound of a format without inf (E4M3 saturates, as
# lensa.formats: clamp first; torch would give NaN past 464).
_CASTS: tuple[tuple[torch.dtype, float | None], ...] = tuple(
    (getattr(torch, FORMATS[k].dtype_name or ""), None if FORMATS[k].has_inf else FORMATS[k].max)
    for k in SUMMARY_FORMATS
)


def _stored(x: torch.Tensor, dtype: torch.dtype, bound: float | None) -> torch.Tensor:
    """``x`` (float32) stored in the format and read back as float32, as :func:`lensa.formats.cast` stores it."""
    if bound is not None:
        x = x.clamp(-bound, bound)  # NaN stays NaN
    return x.to(dtype).to(torch.float32)


def summarize_update_tensors(w_before: torch.Tensor, w_after: torch.Tensor, recipes: bool = False) -> TensorStats:
    """:func:`lensa.runstats.summarize_update` of two torch tensors, computed with torch; equal bit for bit
    (``recipes`` as there).

    Both are read as float32 and must have the same shape (ValueError otherwise). The update is
    ``w_after - w_before`` in float32; the lost counts use torch's casts (round to nearest, ties to even,
    FP8 E4M3 saturating at ±448 like :func:`lensa.formats.cast`).
    """
    if w_before.shape != w_after.shape:
        raise ValueError(f"w_before has shape {tuple(w_before.shape)} but w_after has {tuple(w_after.shape)}")
    before = w_before.detach().float().cpu().reshape(-1)
    update = w_after.detach().float().cpu().reshape(-1) - before
    moved = update != 0
    lost = []
    for dtype, bound in _CASTS:
        stored = _stored(before, dtype, bound)
        again = _stored(stored + update, dtype, bound)
        lost.append(int(torch.count_nonzero(moved & (again == stored))))
    stats = _summarize_bits(update.view(torch.int32), lost_counts=tuple(lost))
    return stats.with_recipes(update.view(w_before.shape).numpy()) if recipes else stats


def _summarize_here(t: torch.Tensor, scale: float | None, recipes: bool = False) -> TensorStats:
    """:func:`summarize_tensor` of ``t``, or with a loss ``scale``, of the true gradient ``t / scale``; with
    ``recipes``, also what every block recipe loses on it (shaped as ``t``)."""
    values = t.detach().float().cpu()
    if scale is not None:
        values = _unscaled(values, scale)
    stats = summarize_tensor(values)
    return stats.with_recipes(values.contiguous().numpy()) if recipes else stats


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
    mark: int = -1  # the ring's fill mark where it starts


class InlineSummaries:
    """Summaries computed at once, in the caller's thread, with torch."""

    def __init__(self, run: RunStats, recipes: bool = False) -> None:
        self._run = run
        self._recipes = recipes
        self.waited = 0.0

    def tensor(self, kind: str, name: str, step: int, t: torch.Tensor, scale: float | None = None) -> None:
        self._run.add(kind, name, step, _summarize_here(t, scale, self._recipes))

    def tensors(self, kind: str, names: Sequence[str], step: int, ts: Sequence[torch.Tensor]) -> None:
        for name, t in zip(names, ts, strict=True):
            self.tensor(kind, name, step, t)

    def hold(self, ts: Sequence[torch.Tensor]) -> list[Held]:
        return [Held(_copy(t)) for t in ts]

    def updates(
        self, kind: str, names: Sequence[str], step: int, befores: Sequence[Held], afters: Sequence[torch.Tensor]
    ) -> None:
        for name, before, after in zip(names, befores, afters, strict=True):
            assert before.tensor is not None
            self._run.add(kind, name, step, summarize_update_tensors(before.tensor, after, recipes=self._recipes))

    def release_held(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class ProcessSummaries:
    """Summaries computed by a numpy-only child process from copies in shared memory (see the module's text)."""

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
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "lensa.live.summary_worker", str(fd), str(size), str(int(recipes))],
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
        self._open: dict[int, int] = {}  # id(Held) -> its mark: copies whose summary is not queued yet
        self._queued: list[list[Any]] = []
        self._local: dict[int, tuple[str, str, int, TensorStats]] = {}  # seq -> too large for the ring
        self._seq = 0
        self._closed = False
        self.waited = 0.0  # seconds the caller spent waiting for room in the ring
        self._broken: str | None = None  # why the summaries can no longer be had

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
        return min(self._open.values(), default=self._filled)

    def _queue_release(self) -> None:
        """An item with nothing to summarise that lets the child free the ring up to the current mark."""
        self._queue([0, "release", "", "", 0, -1, 0, -1, None, []])

    def _queue(self, item: list[Any], mark: int | None = None) -> None:
        """Queue ``item`` for the child; once it is summarised, the child frees the ring up to ``mark``.

        By default, :meth:`_mark`: everything taken so far but the weights still held for their updates.
        """
        self._queued.append([*item, self._mark() if mark is None else mark])
        if len(self._queued) >= _FLUSH_EVERY:
            self.flush()

    # --- what the recorder calls --------------------------------------------------------------------------

    def tensor(self, kind: str, name: str, step: int, t: torch.Tensor, scale: float | None = None) -> None:
        self._seq += 1
        offset = self._put(t)
        if offset is None:
            self._local[self._seq] = (kind, name, step, _summarize_here(t, scale))
            return
        fn = "tensor" if scale is None else "unscaled"
        self._queue([self._seq, fn, kind, name, step, offset, t.numel(), -1, scale, list(t.shape)])

    def tensors(self, kind: str, names: Sequence[str], step: int, ts: Sequence[torch.Tensor]) -> None:
        """:meth:`tensor` of each of ``ts`` (named ``names``), their copies made together (:meth:`_put_all`)."""
        offset = self._put_all(ts) if ts else None
        if offset is None:  # together larger than the ring could ever hold: one at a time
            for name, t in zip(names, ts, strict=True):
                self.tensor(kind, name, step, t)
            return
        # Each item but the last lets the child free the ring only up to its own copy's end: the next ones are
        # still to be summarised. The block starts at this fill mark (the ring's mark before it, plus any skip).
        end = self._filled - _aligned(4 * sum(t.numel() for t in ts))
        last = len(ts) - 1
        for i, (name, t) in enumerate(zip(names, ts, strict=True)):
            self._seq += 1
            n = t.numel()
            end += 4 * n
            item = [self._seq, "tensor", kind, name, step, offset, n, -1, None, list(t.shape)]
            self._queue(item, None if i == last else min(end, self._mark()))
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
            h = Held(None, offset, mark)
            self._open[id(h)] = mark
            held.append(h)
            offset += 4 * t.numel()
        return held

    def _hold_one(self, t: torch.Tensor) -> Held:
        mark = self._filled
        offset = self._put(t)
        if offset is None:
            return Held(_copy(t))
        held = Held(None, offset, mark)
        self._open[id(held)] = mark
        return held

    def updates(
        self, kind: str, names: Sequence[str], step: int, befores: Sequence[Held], afters: Sequence[torch.Tensor]
    ) -> None:
        """The update of each weight from ``befores`` (:meth:`hold`) to ``afters``, the afters copied together."""
        if afters and all(b.tensor is None for b in befores):
            offset = self._put_all(afters)
            if offset is not None:
                for name, before, after in zip(names, befores, afters, strict=True):
                    self._seq += 1
                    n = after.numel()
                    self._open.pop(id(before))
                    shape = list(after.shape)
                    self._queue([self._seq, "update", kind, name, step, before.offset, n, offset, None, shape])
                    offset += 4 * n
                return
        for name, before, after in zip(names, befores, afters, strict=True):
            self._update_one(kind, name, step, before, after)

    def _update_one(self, kind: str, name: str, step: int, before: Held, after: torch.Tensor) -> None:
        self._seq += 1
        if before.tensor is None:  # the weight before the step is in the ring
            offset = self._put(after)
            if offset is not None:
                self._open.pop(id(before))
                shape = list(after.shape)
                self._queue([self._seq, "update", kind, name, step, before.offset, after.numel(), offset, None, shape])
                return
            previous = self._ring_values(before, after)
            self._open.pop(id(before))
            self._queue_release()  # its room is free now
        else:
            previous = before.tensor
        self._local[self._seq] = (kind, name, step, summarize_update_tensors(previous, after, recipes=self._recipes))

    def _ring_values(self, held: Held, like: torch.Tensor) -> torch.Tensor:
        start = held.offset // 4
        return self._ring[start : start + like.numel()].clone().view(like.shape)

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

    def drain(self) -> None:
        """Wait for every summary queued so far and add them all to the run, in the order they were taken."""
        if self._closed:
            return
        if self._broken is not None:
            raise RuntimeError(self._broken)
        try:
            self._drain()
        except Exception as e:
            self._broken = str(e)
            raise

    def _drain(self) -> None:
        self.flush()
        self._send({"op": "drain"})
        done: dict[int, tuple[str, str, int, TensorStats]] = dict(self._local)
        self._local.clear()
        error = None
        while True:
            message = self._receive()
            if "error" in message:
                error = message["error"]
            elif "seqs" in message:
                assert self._proc.stdout is not None
                data = self._proc.stdout.read(message["size"])
                for seq, (label, stats) in zip(message["seqs"], load(data).items(), strict=True):
                    done[seq] = (*label, stats)
            if "done" in message or "error" in message:
                break
        if error is not None:
            raise RuntimeError(f"the recorder could not summarise {error}")
        for seq in sorted(done):
            kind, name, step, stats = done[seq]
            self._run.add(kind, name, step, stats)

    def close(self) -> None:
        """Drain, then stop the child and free the shared memory."""
        if self._closed:
            return
        try:
            if self._broken is None:  # a failure is raised once, by the drain that met it
                self.drain()
        finally:
            self._closed = True
            with contextlib.suppress(OSError, RuntimeError):  # a child already gone needs no stop
                self._send({"op": "stop"})
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

    # --- talking to the child -----------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._proc.poll() is not None:
            raise RuntimeError(
                f"the recorder's summary process stopped (exit status {self._proc.returncode}); "
                "the run's statistics are incomplete"
            )

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        try:
            write_message(self._proc.stdin, message)
        except (BrokenPipeError, OSError):
            self._check_alive()
            raise

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
