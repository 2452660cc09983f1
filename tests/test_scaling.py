"""lensa.models.scaling: the static shift, and the dynamic scaler against torch's GradScaler."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lensa.models.gradients import gradient_sample
from lensa.models.scaling import (
    DynamicLossScaler,
    SpikeModel,
    dynamic_run,
    loss_scaled,
    simulate,
    static_shift_shares,
)
from lensa.numerics import formats as F
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


def torch_trace(found_inf: list[bool], **kwargs) -> tuple[list[float], list[bool]]:
    """Drive a real torch.amp.GradScaler("cpu"): scale after each update, and skipped steps."""
    import torch

    p = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([p], lr=1.0)
    taken = []
    real_step = opt.step

    def counting_step(*a, **k):
        taken.append(True)
        return real_step(*a, **k)

    opt.step = counting_step
    scaler = torch.amp.GradScaler("cpu", **kwargs)
    scales, skipped = [], []
    for inf in found_inf:
        opt.zero_grad()
        loss = scaler.scale((p * 1.0).sum())
        loss.backward()
        if inf:
            p.grad[1] = float("inf") if len(scales) % 2 else float("nan")
        before = len(taken)
        scaler.step(opt)
        scaler.update()
        skipped.append(len(taken) == before)
        scales.append(float(scaler.get_scale()))
    return scales, skipped


PATTERNS = {
    "clean": [False] * 12,
    "alternating": [False, True] * 8,
    "bursts": [False] * 3 + [True] * 4 + [False] * 7 + [True] + [False] * 6,
    "random": list(np.random.default_rng(0).random(60) < 0.3),
}


@requires_torch
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_dynamic_scaler_matches_torch_gradscaler(pattern):
    found = PATTERNS[pattern]
    kwargs = {"growth_interval": 3}
    scales, skipped = torch_trace(found, **kwargs)
    ours = simulate(found, **kwargs)
    assert [s.scale_after for s in ours] == scales
    assert [s.skipped for s in ours] == skipped


@requires_torch
def test_dynamic_scaler_matches_torch_at_the_extremes():
    # 170 overflows in a row take the float32 scale through subnormals to 0;
    # growth from 2**126 stops short of inf.
    found = [True] * 170
    assert [s.scale_after for s in simulate(found)] == torch_trace(found)[0]
    kwargs = {"init_scale": 2.0**126, "growth_interval": 1}
    clean = [False] * 4
    ours = [s.scale_after for s in simulate(clean, **kwargs)]
    assert ours == torch_trace(clean, **kwargs)[0] == [2.0**127] * 4


def test_defaults_are_pytorchs():
    s = DynamicLossScaler()
    assert float(s.scale) == 65536.0 and s.growth_interval == 2000
    assert s.growth_factor == 2.0 and s.backoff_factor == 0.5
    for _ in range(1999):
        s.update(False)
    assert float(s.scale) == 65536.0
    s.update(False)
    assert float(s.scale) == 131072.0
    assert s.update(True) is True and float(s.scale) == 65536.0


def test_static_shift_moves_the_histogram_without_changing_its_shape():
    g = gradient_sample(1e-6)
    at0 = static_shift_shares(g, 0)
    assert at0 == F.category_shares(g, "fp16")
    zero_shares = [static_shift_shares(g, k)["zero"] for k in range(25)]
    assert all(a >= b for a, b in itertools.pairwise(zero_shares))
    assert zero_shares[-1] == 0.0
    # overflow appears exactly when the largest scaled value reaches the threshold
    for k in range(25):
        overflowing = g.max() * 2.0**k >= F.FORMATS["fp16"].overflow_threshold
        assert (static_shift_shares(g, k)["overflow"] > 0) == overflowing
    # unscaling a non-overflowed, normal value gives back the FP16-rounded value's exact scaled copy
    k = 10
    stored = F.quantize(loss_scaled(g, k), "fp16")  # the gradients of S x loss, as FP16 stores them
    back = loss_scaled(stored, -k)  # divided by S again (exact: a power of two)
    normal = F.classify(g * 2.0**k, "fp16") == "normal"
    assert np.all(np.abs(back[normal] - g[normal]) <= g[normal] * 2.0**-11)


def test_dynamic_run_follows_the_rule_on_its_own_overflow_pattern():
    model = SpikeModel()
    run = dynamic_run(model)
    assert len(run) == model.steps
    assert run[0].scale == 2.0**16
    replay = simulate([s.found_inf for s in run], growth_interval=model.growth_interval)
    assert [s.scale_after for s in replay] == [s.scale_after for s in run]
    # each overflow really is a spike that no longer fits in FP16 at that step's scale
    g = model.largest_gradients()
    for s, gi in zip(run, g, strict=True):
        assert s.found_inf == bool(gi * s.scale >= F.FORMATS["fp16"].overflow_threshold)
    assert any(s.skipped for s in run), "the illustration should show at least one skipped step"
    assert dynamic_run(model) == run  # seeded: the same every time


def test_bf16_needs_no_scaling_for_the_same_run():
    run = dynamic_run(SpikeModel(), fmt="bf16")
    assert not any(s.found_inf for s in run)


def test_per_tensor_scale_brings_amax_just_under_the_top():
    from lensa.models.scaling import per_tensor_scale_exp

    def per_tensor_scale(values, fmt, margin=0):
        return 2.0 ** per_tensor_scale_exp(values, fmt, margin)

    g = gradient_sample(1e-6)
    for fmt in ("fp8_e4m3", "fp8_e5m2", "fp16"):
        s = per_tensor_scale(g, fmt)
        top = F.FORMATS[fmt].max
        assert np.log2(s).is_integer()
        assert g.max() * s <= top < g.max() * s * 2  # one more doubling would pass the top
        assert F.category_shares(g * s, fmt)["overflow"] == 0
    assert per_tensor_scale(g, "fp8_e4m3") == 2.0**18 and per_tensor_scale(g, "fp8_e5m2") == 2.0**25
    assert per_tensor_scale(g, "fp8_e4m3", margin=2) == 2.0**16
    assert per_tensor_scale([0.0, -0.0], "fp8_e4m3") == 1.0
    with pytest.raises(ValueError):
        per_tensor_scale([1.0, np.inf], "fp8_e4m3")
    # scaled into range, E4M3 keeps what it would lose unscaled
    scaled = F.category_shares(g * per_tensor_scale(g, "fp8_e4m3"), "fp8_e4m3")["zero"]
    assert scaled < 0.02 < F.category_shares(g, "fp8_e4m3")["zero"]
