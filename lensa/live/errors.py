"""The one error a live run raises on purpose, and its kinds."""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal["busy", "no_cuda", "oom", "cancelled", "invalid", "too_long", "crashed", "not_ready"]


class LiveError(Exception):
    """The one error a live run raises on purpose.

    ``kind`` is one of ``"busy"`` (another run holds the slot), ``"no_cuda"``
    (CUDA asked for but absent), ``"oom"`` (the device ran out of memory;
    memory was freed before raising), ``"cancelled"`` (``should_stop`` asked a
    benchmark or trace to stop; :func:`compare` returns a cancelled
    :class:`Comparison` instead), ``"invalid"`` (a setting out of range),
    ``"too_long"`` (this machine's calibrated estimate of the run passes the
    time limit; ``numbers`` = (estimated seconds, limit in seconds)) and
    ``"crashed"`` (raised by :mod:`lensa.live.worker` when the process running
    the call died) and ``"not_ready"`` (the worker did not say hello within a
    page's bound; ``numbers`` = (the bound in seconds,)). The app's pages also get ``"busy"`` from the worker's
    queue when it is full or a job waited too long.
    ``message`` is plain English, fit to show a learner as it is; ``numbers``
    are the values a page needs to say it in its own language.
    """

    def __init__(self, kind: ErrorKind, message: str, numbers: tuple[float, ...] = ()) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.numbers = tuple(numbers)

    def __repr__(self) -> str:
        return f"LiveError(kind={self.kind!r}, message={self.message!r})"
