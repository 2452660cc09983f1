"""One run at a time per process: the run slot that :func:`~lensa.live.compare`, the matmul benchmark and
the GradScaler trace hold."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

from lensa.live.errors import LiveError


class _RunSlot:
    """A process-wide lock that its holder may re-enter (the page may hold it around several calls)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def locked(self) -> bool:
        return self._lock.locked()

    @contextlib.contextmanager
    def hold(self, wait_s: float) -> Iterator[None]:
        me = threading.get_ident()
        # Only this thread ever sets _owner to its own id, so reading it unlocked is safe.
        if self._owner == me:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        got = self._lock.acquire(timeout=wait_s) if wait_s > 0 else self._lock.acquire(blocking=False)
        if not got:
            waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
            raise LiveError(
                "busy",
                f"Another live run is in progress{waited}. Runs go one at a time, because two at once would "
                "share the processor and distort each other's timings. Try again when it has finished.",
            )
        self._owner, self._depth = me, 1
        try:
            yield
        finally:
            self._owner, self._depth = None, 0
            self._lock.release()


_SLOT = _RunSlot()


def is_busy() -> bool:
    """True while any thread of this process holds the run slot (never blocks)."""
    return _SLOT.locked()


def run_slot(wait_s: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """Context manager holding the process-wide run slot.

    ``wait_s`` = 0 (default): fail at once with ``LiveError(kind="busy")``
    when another thread holds it; > 0: wait up to that many seconds first.
    The holding thread may nest it (and call :func:`compare` inside it).
    """
    if not (isinstance(wait_s, int | float) and math.isfinite(wait_s) and wait_s >= 0):
        raise LiveError("invalid", f"wait_s must be a number of seconds >= 0 (got {wait_s!r}).")
    return _SLOT.hold(float(wait_s))
