"""Step 5's view: the illustrative gradients of one typical size in FP16 and BF16: what each rounds to 0, the mean
relative error each leaves, and each format's range under the gradients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from lensa.lessons.common import FormatLimits, LogCounts, limits_of, log_counts
from lensa.models.gradients import gradient_sample
from lensa.numerics.formats import (
    Fp16AgainstBf16,
    category_shares,
    fp16_against_bf16,
    mean_relative_error,
    representable_between,
)

LESSON_FORMATS = ("fp32", "bf16", "fp16")
PRECISION_FORMATS = ("fp16", "bf16")
# The range chart's log10 axis: FP32's smallest subnormal (1.4e-45) to past its largest (3.4e38).
RANGE_LO, RANGE_HI = -46, 40
# The precision chart: every value each 16-bit format stores in [1, 1.0625].
PRECISION_FROM, PRECISION_TO = 1.0, 1.0625
FP4 = "fp4_e2m1"


@lru_cache(maxsize=1)
def precision_grids() -> tuple[tuple[str, NDArray[np.float64]], ...]:
    """(format, every value it stores between 1 and 1.0625) for FP16 and BF16: the same at every stop."""
    grids = []
    for key in PRECISION_FORMATS:
        grid = representable_between(PRECISION_FROM, PRECISION_TO, key)
        grid.setflags(write=False)
        grids.append((key, grid))
    return tuple(grids)


@dataclass(frozen=True)
class Bf16View:
    """Step 5 at one typical gradient size: the sample, FP16's and BF16's shares of it (0..1) and mean relative
    errors (a value rounded to 0 counts 100%), the verdict the paragraph names, the formats' ranges (FP32, BF16,
    FP16, then those "also show" adds), the sample counted per quarter decade, and FP4's shares."""

    grad: float
    sample: NDArray[np.float64]
    shares: Mapping[str, Mapping[str, float]]
    errors: Mapping[str, float]
    verdict: Fp16AgainstBf16
    ranges: tuple[FormatLimits, ...]
    counts: LogCounts
    fp4_shares: Mapping[str, float] | None

    @property
    def fp16_zero(self) -> float:
        return self.shares["fp16"]["zero"]

    @property
    def bf16_zero(self) -> float:
        return self.shares["bf16"]["zero"]


def bf16_view(grad: float, also: Sequence[str] = ()) -> Bf16View:
    """Step 5's view at typical size ``grad`` (positive, finite), with the formats ``also`` in the range chart."""
    sample = gradient_sample(grad)
    sample.setflags(write=False)
    shares = {f: category_shares(sample, f) for f in PRECISION_FORMATS}
    errors = {f: mean_relative_error(sample, f) for f in PRECISION_FORMATS}
    return Bf16View(
        grad,
        sample,
        shares,
        errors,
        fp16_against_bf16(shares["fp16"]["overflow"], errors["fp16"], errors["bf16"]),
        tuple(limits_of(k) for k in (*LESSON_FORMATS, *also)),
        log_counts(sample, RANGE_LO, RANGE_HI),
        category_shares(sample, FP4) if FP4 in also else None,
    )
