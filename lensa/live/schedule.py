"""Which steps of a run the capture :class:`~lensa.live.capture.Recorder` summarises by default.

Without torch, so :class:`~lensa.live.RunConfig` can cost a recorded run before any run starts;
:mod:`lensa.live.capture` re-exports both names.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_RECORDED_STEPS = 12


def log_spaced_steps(total_steps: int, n: int = DEFAULT_RECORDED_STEPS) -> tuple[int, ...]:
    """About ``n`` steps spread evenly in log scale over 1 ... ``total_steps``, always with the first and the last.

    Fewer than ``n`` when ``total_steps`` is small (rounding makes neighbours equal); ``total_steps`` < 1
    raises ValueError.
    """
    if total_steps < 1:
        raise ValueError(f"a run has at least one step, not {total_steps}")
    if n < 2 or total_steps == 1:
        return (int(total_steps),)
    grid = np.rint(np.exp(np.linspace(0.0, math.log(total_steps), n - 1))).astype(int)
    return tuple(sorted({*grid.tolist(), 1, int(total_steps)}))
