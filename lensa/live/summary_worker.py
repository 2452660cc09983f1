"""The recorder's summary process, started by :class:`lensa.live.summaries.ProcessSummaries`: numpy (and numba for
the block recipes, where it is installed), no torch.

    python -m lensa.live.summary_worker FD SIZE [RECIPES]

``FD`` is a shared memory file of ``SIZE`` bytes that the parent passed down: 64 bytes of header (the first
eight, an int64, are written here: how far the parent may reuse its ring), then the ring of float32 values
the parent copied its tensors into. ``RECIPES`` "1": each summary also keeps what every block recipe loses.
On standard input come messages (a 4-byte big-endian length, then a :mod:`marshal` dump of a dict of lists,
tuples, strings and numbers: this pipe joins two processes of one program, one Python, and marshal encodes a
recorded step's few hundred items several times faster than JSON):

- ``{"op": "items", "items": [item, ...]}``, each item an :class:`Item` sent as a plain tuple (marshal takes
  no tuple subclass; :func:`read_message` hands them back as tuples, :meth:`Item.of` names their fields):
  summarise the item's ``n`` float32 values at byte ``offset`` of the ring, viewed as ``shape``, as its
  ``what`` says (and, where its ``amax`` asks, keep their largest magnitude as the step's amax: at a recorded
  step the recorder's hooks leave that to this process, which has the copy); then write its ``release`` mark to
  the header. An item whose ``what`` is "release" only does
  the latter.
- ``{"op": "drain"}``: answer with every summary made since the last drain, in order, then
  ``{"errors": [[kind, "..."], ...]}`` for the items that could not be summarised (each skipped, the others
  summarised all the same; an empty list when none failed), then ``{"done": True}``.
- ``{"op": "stop"}``, or the end of standard input: exit.

Before the first message it answers ``{"ready": True}``, once it can summarise: with ``RECIPES``, once the
compiled block-recipe pass is loaded (:mod:`lensa.numerics.blockscale_dispatch`, where numba is installed: its import
and cache take a few tenths of a second, and its first compile on a machine 10 to 15 seconds), so that this happens
while the parent waits at its start rather than while its ring fills during the first recorded steps.

Answers go to standard output in the same framing: ``{"seqs": [...], "size": N}`` followed by ``N`` bytes of
a :meth:`lensa.runstats.RunStats.to_bytes` file holding those summaries in the same order, at most
:data:`BATCH` of them a message. No torch here: the process starts in a fraction of a second, and the
training process's torch keeps its cores. It runs at the lowest priority (``nice`` 19): where training keeps
every core busy, its steps go first and the summaries wait in the ring.
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import struct
import sys
from dataclasses import replace
from typing import IO, Any, NamedTuple

import numpy as np

from lensa.runstats import RunStats, summarize, summarize_intended, summarize_update

HEADER = 64  # bytes before the ring; the first eight hold the release mark
BATCH = 500  # summaries per answer, well inside lensa.runstats.load's limits
SUMMARIES = ("tensor", "unscaled", "update", "intended", "release")  # what an item asks for


class Item(NamedTuple):
    """One item of work for the summary process, as the parent queues it (sent as a plain tuple)."""

    seq: int  # the parent's order of the summaries: answers are sorted by it (0 for "release")
    what: str  # one of SUMMARIES: "tensor" (the values), "unscaled" (the values / scale: a GradScaler's true
    # gradients), "update" (the values as the weight before the step, those at after_offset as after it),
    # "intended" (the values as the weight before the step, those at after_offset as the update the optimizer
    # meant to make), "release" (nothing: only lets the ring be freed up to ``release``)
    kind: str  # the record's label: kind, name, step
    name: str
    step: int
    offset: int  # byte offset of the values in the ring
    n: int  # number of float32 values
    shape: list[int]  # the tensor's shape (its product is n): blocks of the recipes need it
    release: int  # the ring's fill mark up to which the parent may reuse it once this item is done
    after_offset: int = -1  # "update": byte offset of the weight after the step
    scale: float | None = None  # "unscaled": the loss scale
    amax: bool = False  # "tensor", "unscaled": also keep the values' largest magnitude as the step's amax
    dtype: str = ""  # the tensor's type when it was read (torch's name), kept in its record; "" unknown

    @classmethod
    def of(cls, fields: tuple[Any, ...] | list[Any]) -> Item:
        """An item from the plain tuple (or list) it was sent as."""
        return cls._make(fields)


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next framed message (a :mod:`marshal` dump), or None at the end of the stream."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    body = stream.read(size)
    if len(body) < size:
        return None
    message: dict[str, Any] = marshal.loads(body)
    return message


def write_message(stream: IO[bytes], message: dict[str, Any], payload: bytes = b"") -> None:
    """Write one framed message and, after it, ``payload`` (its length given as ``size`` in the message)."""
    body = marshal.dumps(message)
    stream.write(struct.pack(">I", len(body)) + body + payload)
    stream.flush()


def _summary(ring: np.ndarray, item: Item, recipes: bool = False) -> tuple[Any, float | None]:
    """The record ``item`` asks for, of its values in ``ring`` (float32), and their amax where it asks for that."""
    start = item.offset // 4
    values = ring[start : start + item.n].reshape(item.shape)
    if item.what in ("update", "intended"):
        after = ring[item.after_offset // 4 : item.after_offset // 4 + item.n].reshape(item.shape)
        summary = summarize_update if item.what == "update" else summarize_intended
        return summary(values, after, recipes=recipes), None
    if item.what == "unscaled":
        # np.float32(scale) is exact for GradScaler's powers of two; each quotient is rounded once
        values = values / np.float32(item.scale)
    elif item.what != "tensor":
        raise ValueError(f"unknown summary {item.what!r}; an item asks for one of {SUMMARIES}")
    return summarize(values, recipes=recipes), _amax(values) if item.amax else None


def _amax(values: np.ndarray) -> float | None:
    """The largest magnitude (NaN where there is a NaN), as the recorder's hooks take it: max and -min, no copy."""
    if values.size == 0:
        return None
    return float(np.maximum(values.max(), -values.min()))


def serve(fd: int, size: int, inp: IO[bytes], out: IO[bytes], recipes: bool = False) -> None:
    """Answer the parent's messages until it says stop or goes away."""
    shared = mmap.mmap(fd, size)
    release = np.frombuffer(shared, np.int64, count=1)
    ring = np.frombuffer(shared, np.float32, offset=HEADER)
    done: list[tuple[int, str, str, int, Any, float | None]] = []
    errors: list[list[str]] = []
    try:
        while (message := read_message(inp)) is not None:
            op = message.get("op")
            if op == "items":
                for item in map(Item.of, message["items"]):
                    if item.what != "release":
                        try:
                            stats, amax = _summary(ring, item, recipes)
                            if item.dtype:
                                stats = replace(stats, dtype=item.dtype)
                            done.append((item.seq, item.kind, item.name, item.step, stats, amax))
                        except Exception as e:  # this item is skipped; reported at the next drain
                            what = f"{item.kind} {item.name!r} at step {item.step}: {type(e).__name__}: {e}"
                            errors.append([item.kind, what])
                    release[0] = item.release
            elif op == "drain":
                _answer_drain(out, done, errors)
                done, errors = [], []
            else:
                return
    finally:
        del release, ring
        shared.close()


def _answer_drain(
    out: IO[bytes], done: list[tuple[int, str, str, int, Any, float | None]], errors: list[list[str]]
) -> None:
    """Send the summaries ``done`` since the last drain, :data:`BATCH` a message, then the errors, then "done". A
    summary's amax, where its item asked for it, goes in the same file as that tensor's amax at that step."""
    for start in range(0, len(done), BATCH):
        part = done[start : start + BATCH]
        run = RunStats()
        seqs = []
        for seq, kind, name, step, stats, amax in part:
            try:
                run.add(kind, name, step, stats)
                if amax is not None:
                    run.record_amax(kind, name, step, amax)
            except ValueError as e:  # a label recorded twice: that one is left out
                errors.append([kind, f"{kind} {name!r} at step {step}: {e}"])
                continue
            seqs.append(seq)
        data = run.to_bytes()
        write_message(out, {"seqs": seqs, "size": len(data)}, data)
    write_message(out, {"errors": errors})
    write_message(out, {"done": True})


def warm_up(recipes: bool) -> None:
    """Make the first summaries as fast as the rest: with ``recipes``, the block-recipe pass loaded (compiled, the
    first time on a machine) on a tensor of the kind it will see."""
    if recipes:
        summarize(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), recipes=True)


def main() -> None:
    recipes = len(sys.argv) > 3 and sys.argv[3] == "1"  # what every block recipe loses, too (Recorder(recipes=True))
    # Training comes first: where the cores are busy, the summaries wait (the ring keeps their copies), not the
    # steps. The summaries run at full speed whenever a core is free (between steps, and once training ends); the
    # parent raises this process again while it waits for a drain, where the system lets it. Linux's SCHED_IDLE
    # besides: a core running only this counts as free, so the recorder's copying thread wakes there, not on the
    # training thread's core (lensa.live.summaries).
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    warm_up(recipes)
    write_message(sys.stdout.buffer, {"ready": True})
    serve(int(sys.argv[1]), int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer, recipes)


if __name__ == "__main__":
    main()
