"""What steps 2, 4 and 5 derive, moved out of their pages: checked against the SPEC's reference figures and
against definitions computed another way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lensa.models.gradients import gradient_sample
from lensa.models.master import accumulate, master_weight_example
from lensa.numerics.formats import (
    category_shares,
    fp16_against_bf16,
    largest_magnitude,
    mean_relative_error,
    most_common_category,
    quantize,
)
from lensa.ui import i18n

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def test_step2_reference_regime_and_largest():
    # SPEC step 2 at grad 1e-6: 91% subnormal (the paragraph's regime), largest 1.6e-3.
    sample = gradient_sample(1e-6)
    assert most_common_category(category_shares(sample, "fp16")) == "subnormal"
    assert i18n.sci(largest_magnitude(sample), "en") == "1.6e-3"
    assert largest_magnitude([-3.0, 2.0, np.nan]) == 3.0 and largest_magnitude([]) == 0.0
    assert most_common_category({"zero": 0.0, "subnormal": 0.0, "normal": 0.0}) == "zero"


def test_step5_reference_errors_and_verdict():
    # SPEC step 5 at grad 1e-8: mean relative error FP16 74%, BF16 0.14%.
    sample = gradient_sample(1e-8)
    e16, ebf = mean_relative_error(sample, "fp16"), mean_relative_error(sample, "bf16")
    assert (i18n.percent(e16, "en"), i18n.percent(ebf, "en")) == ("74%", "0.14%")
    # The same mean computed directly from its definition, |q(x) - x| / |x|:
    assert e16 == pytest.approx(np.mean(np.abs(quantize(sample, "fp16") - sample) / sample), rel=1e-12)
    assert fp16_against_bf16(category_shares(sample, "fp16")["overflow"], e16, ebf) == "fp16_loses"
    assert fp16_against_bf16(0.01, 0.0, 0.0) == "fp16_overflows"
    assert fp16_against_bf16(0.0, 0.001, 0.002) == "both_hold"
    assert math.isnan(mean_relative_error([], "fp16"))


def test_step4_reference_example():
    # SPEC step 4 at w 1, update 1e-6: spacing 9.77e-4, ratio 1.0e-3, FP16 change 0, FP32 master 9.54e-4.
    ex = master_weight_example(1.0, 1e-6, 1000)
    assert i18n.sci(ex.spacing, "en", 3) == "9.77e-4" and i18n.sci(ex.ratio, "en") == "1.0e-3"
    assert ex.low_change == 0 and ex.after_one == ex.w_stored == 1.0
    assert i18n.sci(ex.fp32_change, "en", 3) == "9.54e-4" and ex.exact_change == pytest.approx(1e-3)
    assert ex.fp32_change == accumulate(1.0, 1e-6, 1000, "fp32") - 1.0


@pytest.mark.parametrize(("w", "update"), [(1.0, 1e-6), (1.0, 6e-4), (100.0, 1e-2), (0.01, 1e-7)])
def test_step4_grid_surrounds_the_weight_and_the_update(w, update):
    ex = master_weight_example(w, update, 10)
    grid = ex.grid
    assert np.all(np.diff(grid) > 0) and np.all(quantize(grid, "fp16") == grid)  # ascending FP16 values
    assert grid[0] <= ex.w_stored - 4 * ex.spacing and grid[-1] >= ex.w_stored + 4 * ex.spacing * 0.99
    assert grid[-1] >= ex.w_stored + update  # the exact w + update lies on the line
    assert ex.after_one in grid
    assert (ex.after_one == ex.w_stored) == (update < ex.spacing / 2)  # none of these is an exact tie
