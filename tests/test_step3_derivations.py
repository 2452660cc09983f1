"""What step 3 derives, moved out of its page: the exact shift, the regime its paragraph names, the FP8 scale's
exponent, and a run's history; checked against the SPEC's figures and GradScaler's rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lensa.models.gradients import gradient_sample
from lensa.models.scaling import (
    TORCH_INIT_SCALE,
    SpikeModel,
    dynamic_run,
    loss_scaled,
    per_tensor_scale_exp,
    scale_from_exp,
    static_shift_regime,
    static_shift_shares,
)
from lensa.numerics.formats import FORMATS
from lensa.runstats.measured import history_of

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

SAMPLE = gradient_sample(1e-6)


def test_the_shift_is_exact_both_ways():
    for k in (0, 1, 16, 24, -3):
        shifted = loss_scaled(SAMPLE, k)
        assert np.array_equal(shifted / 2.0**k, SAMPLE)  # a power of two moves only the exponent


def test_regimes_along_the_slider():
    # SPEC step 3: at S = 2^0 the sample loses values to zero and nothing overflows.
    regimes = {k: static_shift_regime(static_shift_shares(SAMPLE, k), k) for k in range(25)}
    assert regimes[0] == "none"
    # Moving S up first rescues values, then all fit: never back again. The sample's largest value times
    # the slider's top, 2^24, stays below FP16's 65504, so this sample never overflows.
    order = ["none", "some", "subnormal", "fits", "over"]
    seen = [order.index(regimes[k]) for k in range(25)]
    assert seen == sorted(seen) and regimes[24] == "fits"
    assert float(SAMPLE.max()) * 2.0**24 < FORMATS["fp16"].max
    for k in (k for k, r in regimes.items() if r == "fits"):
        shares = static_shift_shares(SAMPLE, k)
        assert shares["zero"] == shares["subnormal"] == shares["overflow"] == 0
    # A larger gradient does overflow there: 1e-2 x 2^24 = 167772 > 65504.
    assert static_shift_regime(static_shift_shares([1e-2, 1e-9], 24), 24) == "over"


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp16"])
def test_per_tensor_scale_exponent_puts_amax_in_the_top_binade(fmt):
    k = per_tensor_scale_exp(SAMPLE, fmt)
    top, amax = FORMATS[fmt].max, float(SAMPLE.max())
    assert amax * 2.0**k <= top < amax * 2.0 ** (k + 1)
    assert float(SAMPLE.max()) * scale_from_exp(k) <= top  # the scale a recipe multiplies by
    assert per_tensor_scale_exp(SAMPLE, fmt, margin=2) == k - 2 and per_tensor_scale_exp([0.0], fmt) == 0


def test_a_runs_history_skips_exactly_the_overflowing_steps():
    run = dynamic_run(SpikeModel())
    history = history_of(run)
    assert history.steps == tuple(range(1, len(run) + 1))
    assert history.skipped_steps == tuple(s.step for s in run if s.found_inf)  # GradScaler skips those only
    assert 2.0**history.first_k == TORCH_INIT_SCALE == run[0].scale
    assert 2.0**history.last_k == run[-1].scale
    assert all(math.isclose(2.0**y, s.scale) for y, s in zip(history.log2_scales, run, strict=True))
