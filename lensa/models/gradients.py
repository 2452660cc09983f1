"""The illustrative gradient sample used by steps 2, 3 and 5.

400 magnitudes whose base-10 logarithms are normally distributed around
log10(typical size) with a standard deviation of one decade. The standard
normal draws come from one fixed seed, so every visitor sees the same sample
and moving the typical size slides the whole sample along the log axis
without reshuffling it. It is an illustration, not a measurement of any model.

The seed was chosen so that the sample at a typical size of 1e-6 shows the
same counts as the source lesson's (17 of 400 round to 0 in FP16, 364 are
subnormal, 19 are normal, the largest is 1.6e-3); nothing else was tuned.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

SAMPLE_SIZE = 400
SPREAD_DECADES = 1.0
SEED = 183608
# The typical size steps 2 to 5 start from (step 2's slider at its default): the size the seed was chosen at.
DEFAULT_TYPICAL = 1e-6


@lru_cache(maxsize=1)
def _standard_draws() -> NDArray[np.float64]:
    draws = np.random.default_rng(SEED).standard_normal(SAMPLE_SIZE)
    draws.setflags(write=False)
    return draws


def gradient_sample(typical: float) -> NDArray[np.float64]:
    """400 positive gradient magnitudes (float64) centred on ``typical``.

    ``typical`` must be a positive finite number; 0, negatives, inf and NaN
    raise ValueError. The result is a new array each call.
    """
    if not (np.isfinite(typical) and typical > 0):
        raise ValueError(f"typical gradient size must be positive and finite, got {typical!r}")
    return typical * np.power(10.0, SPREAD_DECADES * _standard_draws())


@lru_cache(maxsize=1)
def default_sample() -> NDArray[np.float64]:
    """:func:`gradient_sample` at :data:`DEFAULT_TYPICAL`, made once and shared: read-only (copy it to change it)."""
    sample = gradient_sample(DEFAULT_TYPICAL)
    sample.setflags(write=False)
    return sample
