"""Step 3's view: the illustrative gradients times a loss scale S = 2**k, stored in FP16, and the illustrative
dynamic run (which does not depend on k)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from lensa.lessons.common import FormatOnSample, LogHistogram, format_histogram, formats_on
from lensa.models.gradients import default_sample
from lensa.models.scaling import (
    SpikeModel,
    StaticRegime,
    dynamic_run,
    loss_scaled,
    per_tensor_scale_exp,
    scale_from_exp,
    static_shift_regime,
    static_shift_shares,
)
from lensa.numerics.formats import largest_magnitude
from lensa.runstats.measured import ScalerHistory, history_of

SPIKES = SpikeModel()
FP4 = "fp4_e2m1"


@lru_cache(maxsize=1)
def illustrative_run() -> ScalerHistory:
    """The illustrative dynamic run (GradScaler's rule on :data:`SPIKES`), made once."""
    return history_of(dynamic_run(SPIKES))


@dataclass(frozen=True)
class ExtraFormat:
    """A narrower format beside FP16: its range and shares of the unscaled sample, and the power of two
    (its own per-tensor scale) that brings the sample's largest value up to its top."""

    on_sample: FormatOnSample
    scale_exp: int

    @property
    def key(self) -> str:
        return self.on_sample.key


@dataclass(frozen=True)
class LossScalingView:
    """Step 3 at S = 2**k: the scaled sample, FP16's shares of it (0..1), the regime the paragraph names, the
    histogram the chart draws, the run, and each extra format (with FP4's shares at its own scale)."""

    k: int
    scale: float
    sample: NDArray[np.float64]
    scaled: NDArray[np.float64]
    shares: Mapping[str, float]
    regime: StaticRegime
    histogram: LogHistogram
    largest_scaled: float
    run: ScalerHistory
    amax: float
    extra: tuple[ExtraFormat, ...]
    fp4_at_scale: Mapping[str, float] | None

    def scale_exp(self, key: str) -> int:
        return next(e.scale_exp for e in self.extra if e.key == key)


def loss_scaling_view(k: int, also: Sequence[str] = ()) -> LossScalingView:
    """Step 3's view at S = 2**k, with the formats ``also`` beside FP16."""
    sample = default_sample()
    scaled = loss_scaled(sample, k)
    scaled.setflags(write=False)
    shares = static_shift_shares(sample, k)
    extra = tuple(ExtraFormat(f, per_tensor_scale_exp(sample, f.key)) for f in formats_on(sample, also))
    fp4 = next((e for e in extra if e.key == FP4), None)
    return LossScalingView(
        k,
        scale_from_exp(k),
        sample,
        scaled,
        shares,
        static_shift_regime(shares, k),
        format_histogram(scaled, "fp16"),
        largest_magnitude(scaled),
        illustrative_run(),
        largest_magnitude(sample),
        extra,
        None if fp4 is None else static_shift_shares(sample, fp4.scale_exp, FP4),
    )
