"""The SPEC's reference figures (the seed lesson's defaults), reproduced by the core.

Steps 1, 4, 5 and 6 are deterministic and must match to the digits the lesson
shows. Steps 2 and 3 depend on the illustrative sample; they must lie within
the sampling error of the stated model (three standard errors of a share of
400), and our seeded sample happens to reproduce step 2's counts exactly.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lensa.models.gradients import SAMPLE_SIZE, SPREAD_DECADES, gradient_sample
from lensa.models.master import is_update_lost, total_change
from lensa.models.memory import SEVEN_B, activation_bytes, training_memory
from lensa.models.scaling import dynamic_run, static_shift_shares
from lensa.models.speed import GPUS, step_time_s
from lensa.numerics import formats as F

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def expected_share_below(threshold: float, typical: float) -> float:
    """The sample's model, independently: the probability (0..1) that one magnitude lies below ``threshold``
    when log10 of it is normal around log10(typical) with a spread of one decade. The sample's shares estimate
    it; with 400 values their standard error is sqrt(p(1-p)/400), about 1.2 points at p = 6%."""
    z = (math.log10(threshold) - math.log10(typical)) / SPREAD_DECADES
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def gb(x: float) -> float:
    return round(x / 1e9, 1)


def within_sampling_error(share: float, expected: float, n: int = SAMPLE_SIZE) -> bool:
    se = math.sqrt(expected * (1 - expected) / n)
    return abs(share - expected) <= 3 * se + 1 / n


# --- step 1 -----------------------------------------------------------------


def test_step1_mixed_2048():
    m = training_memory(SEVEN_B, 2048, "mixed")
    assert m.bytes_per_param == 16
    assert gb(m.model_states) == 107.8
    assert gb(m.activations) == 9.1
    assert gb(m.total) == 117.0
    assert [gb(b) for _, b in m.states] == [13.5, 13.5, 27.0, 27.0, 27.0]
    assert [c.key for c, _ in m.states] == ["weights", "gradients", "master", "adam_m", "adam_v"]


def test_step1_fp32_2048():
    m = training_memory(SEVEN_B, 2048, "fp32")
    assert m.bytes_per_param == 16
    assert [c.key for c, _ in m.states] == ["weights", "gradients", "adam_m", "adam_v"]
    assert gb(m.activations) == 18.3


def test_step1_activations_scale_as_they_should():
    # linear in tokens (and nothing for none), twice as large in FP32 as in 16 bits, proportional to depth
    one = activation_bytes(SEVEN_B, 1024, "mixed")
    assert activation_bytes(SEVEN_B, 0) == 0
    assert activation_bytes(SEVEN_B, 4096, "mixed") == pytest.approx(4 * one)
    assert activation_bytes(SEVEN_B, 1024, "fp32") == pytest.approx(2 * one)
    half_depth = replace(SEVEN_B, layers=SEVEN_B.layers // 2)
    assert activation_bytes(half_depth, 1024, "mixed") == pytest.approx(one / 2)
    # the seed's figures at 2048 and 4096 tokens (SPEC, reference figures, steps 1 and 6)
    assert gb(activation_bytes(SEVEN_B, 2048, "mixed")) == 9.1 and gb(activation_bytes(SEVEN_B, 4096, "fp32")) == 36.5


# --- step 2 -----------------------------------------------------------------


def test_step2_sample_within_sampling_error_and_equal_to_the_seed():
    g = gradient_sample(1e-6)
    s = F.category_shares(g, "fp16")
    p_zero = expected_share_below(F.FORMATS["fp16"].smallest_subnormal / 2, 1e-6)
    p_normal = 1 - expected_share_below(F.FORMATS["fp16"].smallest_normal, 1e-6)
    assert within_sampling_error(s["zero"], p_zero)
    assert within_sampling_error(s["normal"], p_normal)
    assert within_sampling_error(s["subnormal"], 1 - p_zero - p_normal)
    # the seed's figures: 4.3% / 91% / 4.8%, largest 1.6e-3
    assert (round(s["zero"] * 400), round(s["subnormal"] * 400), round(s["normal"] * 400)) == (17, 364, 19)
    assert f"{g.max():.1e}" == "1.6e-03"
    assert p_zero == pytest.approx(0.06, abs=0.005) and p_normal == pytest.approx(0.04, abs=0.005)


# --- step 3 -----------------------------------------------------------------


def test_step3_unscaled_and_the_run():
    g = gradient_sample(1e-6)
    s = static_shift_shares(g, 0)
    p_zero = expected_share_below(F.FORMATS["fp16"].smallest_subnormal / 2, 1e-6)
    assert within_sampling_error(s["zero"], p_zero)
    assert within_sampling_error(0.072, p_zero)  # the seed's own 7.2% is inside the same band
    assert s["overflow"] == 0
    assert dynamic_run()[0].scale == 2.0**16


# --- step 4 -----------------------------------------------------------------


def test_step4_reference():
    w, u = 1.0, 1e-6
    gap = float(F.spacing(w, "fp16"))
    assert f"{gap:.2e}" == "9.77e-04"
    assert f"{u / gap:.1e}" == "1.0e-03"
    assert total_change(w, u, 1000, "fp16") == 0
    assert f"{total_change(w, u, 1000, 'fp32'):.2e}" == "9.54e-04"
    assert f"{1000 * u:.2e}" == "1.00e-03"
    assert is_update_lost(w, u, "fp16") and not is_update_lost(w, u, "fp32")


def test_step4_update_under_half_a_spacing_is_lost():
    gap = 2.0**-10
    assert is_update_lost(1.0, 0.49 * gap, "fp16")
    assert not is_update_lost(1.0, 0.51 * gap, "fp16")
    assert is_update_lost(1.0, 0.5 * gap, "fp16")  # the tie goes to the even neighbour, 1.0
    assert total_change(1.0, 0.51 * gap, 900, "fp16") == 900 * gap  # one spacing per step
    # w = 100: spacing 2**-4; the largest slider update 1e-2 is lost there
    assert total_change(100, 1e-2, 1000, "fp16") == 0
    assert total_change(100, 1e-2, 1000, "fp32") == pytest.approx(10.0, rel=1e-3)


# --- step 5 -----------------------------------------------------------------


def test_step5_reference():
    g = gradient_sample(1e-8)
    assert f"{F.category_shares(g, 'fp16')['zero']:.0%}" == "68%"
    assert F.category_shares(g, "bf16")["zero"] == 0
    assert f"{F.relative_error(g, 'fp16').mean():.0%}" == "74%"
    assert f"{F.relative_error(g, 'bf16').mean() * 100:.2f}%" == "0.14%"
    # 2**-10 and 2**-7: the spacings the precision figure shows
    assert f"{F.FORMATS['fp16'].eps:.2e}" == "9.77e-04" and f"{F.FORMATS['bf16'].eps:.2e}" == "7.81e-03"


def test_relative_error_counts_lost_values_as_100_percent():
    assert F.relative_error([1e-9], "fp16").tolist() == [1.0]
    assert F.relative_error([0.0, np.inf], "fp16").tolist() == [0.0, 0.0]


# --- step 6 -----------------------------------------------------------------


def test_step6_reference():
    a100 = GPUS["a100"]
    times = {m: step_time_s(SEVEN_B.params, 4096, a100.peak(m), 0.40) for m in ("fp32", "tf32", "bf16")}
    assert f"{times['fp32']:.0f}" == "21" and f"{times['tf32']:.1f}" == "2.7" and f"{times['bf16']:.1f}" == "1.3"
    assert round(times["fp32"] / times["bf16"]) == 16
    fp32_mem = training_memory(SEVEN_B, 4096, "fp32")
    bf16_mem = training_memory(SEVEN_B, 4096, "mixed")
    assert f"{fp32_mem.total / 1e9:.0f}" == "144" and gb(bf16_mem.total) == 126.1
    assert gb(fp32_mem.activations) == 36.5 and gb(bf16_mem.activations) == 18.3
