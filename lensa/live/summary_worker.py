"""The recorder's summary process: numpy only, started by :class:`lensa.live.summaries.ProcessSummaries`.

    python -m lensa.live.summary_worker FD SIZE

``FD`` is a shared memory file of ``SIZE`` bytes that the parent passed down: 64 bytes of header (the first
eight, an int64, are written here: how far the parent may reuse its ring), then the ring of float32 values
the parent copied its tensors into. On standard input come messages (a 4-byte big-endian length, then a
:mod:`marshal` dump of a dict of lists, strings and numbers: this pipe joins two processes of one program,
one Python, and marshal encodes a recorded step's few hundred items several times faster than JSON):

- ``{"op": "items", "items": [[seq, fn, kind, name, step, offset, n, offset2, scale, shape, release], ...]}``:
  summarise ``n`` float32 values at byte ``offset`` of the ring, viewed as ``shape`` (a list of ints whose
  product is ``n``), with :func:`lensa.runstats.summarize` and what every block recipe loses
  (``fn`` "tensor"), of those values divided by ``scale`` (``fn`` "unscaled": a GradScaler's true
  gradients) or, with the ``n`` values at ``offset2`` as the weight after the step, with
  :func:`lensa.runstats.summarize_update` (``fn`` "update"); then write ``release`` to the header. An item
  whose ``fn`` is "release" only does the latter.
- ``{"op": "drain"}``: answer with every summary made since the last drain, in order, then ``{"done": True}``;
  or ``{"error": "..."}`` for the first item that failed (the rest of them are dropped).
- ``{"op": "stop"}``, or the end of standard input: exit.

Answers go to standard output in the same framing: ``{"seqs": [...], "size": N}`` followed by ``N`` bytes of
a :meth:`lensa.runstats.RunStats.to_bytes` file holding those summaries in the same order, at most
:data:`BATCH` of them a message. No torch here: the process starts in a fraction of a second, and the
training process's torch keeps its cores.
"""

from __future__ import annotations

import marshal
import mmap
import struct
import sys
from typing import IO, Any

import numpy as np

from lensa.runstats import RunStats, summarize, summarize_update

HEADER = 64  # bytes before the ring; the first eight hold the release mark
BATCH = 500  # summaries per answer, well inside lensa.runstats.load's limits


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next framed JSON message, or None at the end of the stream."""
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


def _summary(
    ring: np.ndarray,
    fn: str,
    offset: int,
    n: int,
    offset2: int,
    scale: float | None,
    shape: list[int],
    recipes: bool = False,
) -> Any:
    values = ring[offset // 4 : offset // 4 + n].reshape(shape)
    if fn == "tensor":
        return summarize(values, recipes=recipes)
    if fn == "unscaled":
        # np.float32(scale) is exact for GradScaler's powers of two; each quotient is rounded once
        return summarize(values / np.float32(scale), recipes=recipes)
    if fn == "update":
        return summarize_update(values, ring[offset2 // 4 : offset2 // 4 + n].reshape(shape), recipes=recipes)
    raise ValueError(f"unknown summary {fn!r}")


def serve(fd: int, size: int, inp: IO[bytes], out: IO[bytes], recipes: bool = False) -> None:
    """Answer the parent's messages until it says stop or goes away."""
    shared = mmap.mmap(fd, size)
    release = np.frombuffer(shared, np.int64, count=1)
    ring = np.frombuffer(shared, np.float32, offset=HEADER)
    done: list[tuple[int, str, str, int, Any]] = []
    error: str | None = None
    try:
        while (message := read_message(inp)) is not None:
            op = message.get("op")
            if op == "items":
                for seq, fn, kind, name, step, offset, n, offset2, scale, shape, mark in message["items"]:
                    if error is None and fn != "release":
                        try:
                            summary = _summary(ring, fn, offset, n, offset2, scale, shape, recipes)
                            done.append((seq, kind, name, step, summary))
                        except Exception as e:  # reported at the next drain
                            error = f"{kind} {name!r} at step {step}: {type(e).__name__}: {e}"
                    release[0] = mark
            elif op == "drain":
                answers = []
                try:
                    for start in range(0, len(done), BATCH) if error is None else ():
                        part = done[start : start + BATCH]
                        run = RunStats()
                        for _, kind, name, step, stats in part:
                            run.add(kind, name, step, stats)
                        answers.append(([p[0] for p in part], run.to_bytes()))
                except ValueError as e:  # a label recorded twice
                    error = str(e)
                if error is not None:
                    write_message(out, {"error": error})
                else:
                    for seqs, data in answers:
                        write_message(out, {"seqs": seqs, "size": len(data)}, data)
                    write_message(out, {"done": True})
                done, error = [], None
            else:
                return
    finally:
        del release, ring
        shared.close()


def main() -> None:
    recipes = len(sys.argv) > 3 and sys.argv[3] == "1"  # what every block recipe loses, too (Recorder(recipes=True))
    serve(int(sys.argv[1]), int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer, recipes)


if __name__ == "__main__":
    main()
