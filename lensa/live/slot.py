"""One run at a time per process: the run slot that :func:`~lensa.live.compare`, the matmul benchmark and
the GradScaler trace hold."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

from lensa.live.errors import LiveError

_LOCK = threading.Lock()
"""The run slot itself: held by one thread at a time, across a whole run."""
_HELD = threading.local()
"""Per thread: how deeply it has nested :func:`run_slot` (``depth``), so a holder can re-enter without waiting.

A plain lock with a per-thread count, not an ``RLock``: Python 3.11's ``RLock`` cannot say whether anyone holds
it, which :func:`is_busy` must.
"""


@contextlib.contextmanager
def _hold(wait_s: float) -> Iterator[None]:
    depth = getattr(_HELD, "depth", 0)
    if depth == 0:
        got = _LOCK.acquire(timeout=wait_s) if wait_s > 0 else _LOCK.acquire(blocking=False)
        if not got:
            waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
            raise LiveError(
                "busy",
                f"Another live run is in progress{waited}. Runs go one at a time, because two at once would "
                "share the processor and distort each other's timings. Try again when it has finished.",
            )
    _HELD.depth = depth + 1
    try:
        yield
    finally:
        _HELD.depth = depth
        if depth == 0:
            _LOCK.release()


def is_busy() -> bool:
    """True while any thread of this process holds the run slot (never blocks)."""
    return _LOCK.locked()


def run_slot(wait_s: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """Context manager holding the process-wide run slot.

    ``wait_s`` = 0 (default): fail at once with ``LiveError(kind="busy")``
    when another thread holds it; > 0: wait up to that many seconds first.
    The holding thread may nest it (and call :func:`compare` inside it).
    """
    if not (isinstance(wait_s, int | float) and math.isfinite(wait_s) and wait_s >= 0):
        raise LiveError("invalid", f"wait_s must be a number of seconds >= 0 (got {wait_s!r}).")
    return _hold(float(wait_s))
