"""Step 2's view: the illustrative gradients of one typical size, and what FP16 (and any narrower format shown
beside it) does to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from lensa.lessons.common import FormatOnSample, LogHistogram, format_histogram, formats_on
from lensa.models.gradients import gradient_sample
from lensa.numerics.formats import FORMATS, category_shares, largest_magnitude, most_common_category

FP16 = FORMATS["fp16"]


@dataclass(frozen=True)
class Fp16RangeView:
    """Step 2 at one typical gradient size: the 400 gradients, FP16's shares of them (0..1), the largest, the
    regime the paragraph names (the most common of zero, subnormal and normal), the histogram the chart draws,
    and each extra format's range and shares (the "also show" choice)."""

    grad: float
    sample: NDArray[np.float64]
    shares: Mapping[str, float]
    largest: float
    regime: str
    histogram: LogHistogram
    also: tuple[FormatOnSample, ...]

    @property
    def overflows(self) -> bool:
        return self.shares["overflow"] > 0


def fp16_range_view(grad: float, also: Sequence[str] = ()) -> Fp16RangeView:
    """Step 2's view at typical size ``grad`` (positive, finite), with the formats ``also`` beside FP16."""
    sample = gradient_sample(grad)
    sample.setflags(write=False)
    shares = category_shares(sample, FP16)
    return Fp16RangeView(
        grad,
        sample,
        shares,
        largest_magnitude(sample),
        most_common_category(shares),
        format_histogram(sample, "fp16"),
        formats_on(sample, also),
    )
