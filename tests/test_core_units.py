"""The rest of the core: memory bookkeeping, accumulation, speed model, the sample, imports."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from lensa.models.gradients import SAMPLE_SIZE, gradient_sample
from lensa.models.master import accumulate, total_change
from lensa.models.memory import (
    SEVEN_B,
    ModelShape,
    bytes_per_param,
    model_state_bytes,
    state_bytes_by_component,
    state_components,
)
from lensa.models.speed import GPUS, step_time_s, tokens_per_second, training_flops
from lensa.numerics import formats as F
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


def test_sample_is_seeded_lognormal_with_one_decade():
    a, b = gradient_sample(1e-6), gradient_sample(1e-6)
    assert len(a) == SAMPLE_SIZE and np.array_equal(a, b) and np.all(a > 0)
    logs = np.log10(a)
    assert abs(logs.mean() + 6) < 0.15 and abs(logs.std() - 1) < 0.1
    # moving the typical size slides the sample without reshuffling it
    assert np.allclose(gradient_sample(1e-3) / a, 1e3)
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError):
            gradient_sample(bad)


def test_bytes_per_param_by_precision_and_optimizer():
    assert bytes_per_param("mixed") == bytes_per_param("fp32") == 16
    assert [c.bytes_per_param for c in state_components("mixed")] == [2, 2, 4, 4, 4]
    assert [c.bytes_per_param for c in state_components("fp32")] == [4, 4, 4, 4]
    assert bytes_per_param("mixed", "sgd_momentum") == 12
    # Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization": 8-bit Adam keeps its two states in
    # one byte each, 2 B a parameter instead of 8 (bitsandbytes is not a dependency, so not built here)
    assert bytes_per_param("mixed", "adam_8bit") == 10
    with pytest.raises(ValueError):
        bytes_per_param("fp8")  # type: ignore[arg-type]


def _states_torch_keeps(precision: str, optimizer: str) -> tuple[int, dict[str, tuple[str, int]]]:
    """Train a small model one step in torch and weigh every state it keeps: (parameters, key -> (dtype, bytes)).

    Mixed precision as Micikevicius et al. 2018 and the ZeRO paper describe it: an FP16 copy of the model runs
    forward and backward (FP16 gradients), an FP32 master copy takes the optimizer step. The optimizer is
    torch.optim's own; its states are whatever tensors it chose to keep (exp_avg, exp_avg_sq, momentum_buffer).
    """
    import copy

    import torch

    torch.manual_seed(0)
    master = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 3))
    n = sum(t.numel() for t in master.parameters())
    model = copy.deepcopy(master).half() if precision == "mixed" else master
    opt = (
        torch.optim.Adam(master.parameters(), lr=1e-3)
        if optimizer == "adam"
        else torch.optim.SGD(master.parameters(), lr=1e-3, momentum=0.9)
    )
    x = torch.randn(16, 24, dtype=next(model.parameters()).dtype)
    model(x).square().mean().backward()
    if precision == "mixed":
        for p16, p32 in zip(model.parameters(), master.parameters(), strict=True):
            p32.grad = p16.grad.float()  # unscaled into FP32 for the step, then dropped
    opt.step()

    def weigh(tensors) -> tuple[str, int]:
        tensors = list(tensors)
        (dtype,) = {str(t.dtype) for t in tensors}
        return {"torch.float16": "fp16", "torch.float32": "fp32"}[dtype], sum(
            t.numel() * t.element_size() for t in tensors
        )

    kept = {"weights": weigh(model.parameters()), "gradients": weigh(p.grad for p in model.parameters())}
    if precision == "mixed":
        kept["master"] = weigh(master.parameters())
    names = {"exp_avg": "adam_m", "exp_avg_sq": "adam_v", "momentum_buffer": "momentum"}
    for name in {k for state in opt.state.values() for k in state if k != "step"}:  # Adam's step is a scalar
        kept[names[name]] = weigh(state[name] for state in opt.state.values())
    return n, kept


@requires_torch
@pytest.mark.parametrize("precision", ["mixed", "fp32"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum"])
def test_model_states_are_the_tensors_torch_keeps(precision, optimizer):
    # The states the lesson counts, component by component, are the tensors a real step leaves alive: same
    # names, same dtypes, and their bytes summed equal the lesson's bytes for that many parameters.
    n, kept = _states_torch_keeps(precision, optimizer)
    lesson = {c.key: (c.dtype, b) for c, b in state_bytes_by_component(n, precision, optimizer)}
    assert lesson == kept
    assert model_state_bytes(n, precision, optimizer) == sum(b for _, b in kept.values())


def test_invalid_model_shapes_are_refused():
    with pytest.raises(ValueError):
        ModelShape(params=0, d_model=1, layers=1, heads=1, context=1)


def test_accumulate_rounds_every_sum():
    assert accumulate(1.0, 1e-6, 1000, "fp16") == 1.0
    assert accumulate(1.0, 2.0**-10, 3, "fp16") == 1 + 3 * 2.0**-10
    # the stored start: 0.1 is not an FP16 value, changes count from what is stored
    assert total_change(0.1, 0.0, 10, "fp16") == 0.0
    assert accumulate(0.1, 0.0, 0, "fp16") == float(F.quantize(0.1, "fp16"))
    # odd starting weight and an exact half-spacing update: one step, then stuck on the even value
    w = 1 + 2.0**-10
    assert accumulate(w, 2.0**-11, 1000, "fp16") == 1 + 2.0**-9
    assert np.isinf(accumulate(65504, 16, 1, "fp16"))
    with pytest.raises(ValueError):
        accumulate(1.0, 1.0, -1, "fp16")


def test_accumulate_equals_a_numpy_float32_loop():
    rng = np.random.default_rng(0)
    for _ in range(20):
        w, u = float(rng.uniform(0.1, 100)), float(10 ** rng.uniform(-8, -2))
        ref = np.float32(w)
        for _ in range(1000):
            ref = np.float32(ref + np.float32(u))
        assert accumulate(w, u, 1000, "fp32") == float(ref)


def test_training_flops_match_a_published_compute_figure():
    # GPT-3 paper (Brown et al. 2020), Table D.1: GPT-3 175B, 174,600M parameters on 300B tokens,
    # 3.14E+23 training FLOPs (their 6 N D rule, the one the lesson uses).
    assert f"{training_flops(174.6e9, 300e9):.2e}" == "3.14e+23"
    # and invariants: linear in parameters and in tokens, zero for no tokens
    assert training_flops(2 * 6.74e9, 4096) == pytest.approx(2 * training_flops(6.74e9, 4096))
    assert training_flops(6.74e9, 3 * 4096) == pytest.approx(3 * training_flops(6.74e9, 4096))
    assert training_flops(6.74e9, 0) == 0


def test_step_time_invariants():
    a100 = GPUS["a100"]
    bf16, fp32 = a100.peak("bf16"), a100.peak("fp32")
    assert a100.peak("fp8") is None  # Ampere has no FP8 tensor cores
    t = step_time_s(SEVEN_B.params, 4096, bf16)
    # more tokens, more time, in proportion; a faster mode or a higher MFU, less time, in proportion
    assert step_time_s(SEVEN_B.params, 8192, bf16) == pytest.approx(2 * t)
    assert step_time_s(SEVEN_B.params, 4096, fp32) / t == pytest.approx(bf16 / fp32)
    assert step_time_s(SEVEN_B.params, 4096, bf16, mfu=0.8) == pytest.approx(t / 2)
    assert step_time_s(SEVEN_B.params, 0, bf16) == 0
    # throughput and step time describe the same step
    assert tokens_per_second(bf16, SEVEN_B.params) * t == pytest.approx(4096)
    # the lesson's figure (SPEC, reference figures, step 6): 1.3 s a step in BF16 on the A100 at 40% MFU
    assert f"{t:.1f}" == "1.3"
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError):
            step_time_s(1, 1, bad)
    with pytest.raises(ValueError):
        step_time_s(1, 1, 1e12, mfu=1.5)


def test_core_imports_no_view_or_torch():
    code = (
        "import sys, lensa, lensa.numerics.formats, lensa.numerics.blockscale, lensa.models.gradients,"
        " lensa.models.memory, lensa.models.estimators, lensa.models.lab_memory, lensa.models.scaling,"
        " lensa.models.master, lensa.models.speed, lensa.facts, lensa.runstats.measured, lensa.runstats;"
        "bad = [m for m in ('streamlit', 'plotly', 'torch', 'numba') if m in sys.modules];"
        "print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_step6_memory_is_drawn_for_every_mode_but_fp8_wherever_it_stands():
    from lensa.models.speed import step_memories, step_times

    tokens = 2048
    # Korthikanti et al. eq. (1) with FlashAttention: 34 h bytes a token a layer at 16 bits, twice that in FP32;
    # the model states are 16 bytes a parameter with Adam in either precision (ZeRO paper, Fig. 1).
    act16 = 34 * SEVEN_B.d_model * SEVEN_B.layers * tokens
    expected = {"fp32": 2 * act16, "tf32": 2 * act16, "bf16": act16, "fp16": act16}
    for gpu in GPUS.values():
        modes = step_times(gpu, SEVEN_B.params, tokens).modes
        for order in (modes, modes[::-1]):  # FP8 first or last: left out either way, the rest keep their order
            memories = step_memories(order, SEVEN_B, tokens)
            assert list(memories) == [m for m in order if m != "fp8"]
            for mode, memory in memories.items():
                assert memory.activations == expected[mode]
                assert memory.model_states == 16 * SEVEN_B.params
    assert "fp8" in step_times(GPUS["h100"], SEVEN_B.params, tokens).modes  # so the case above was exercised


def test_the_default_sample_is_step_2s_default_made_once_and_read_only():
    from lensa.models.gradients import DEFAULT_TYPICAL, default_sample
    from lensa.ui.site import PAGES_BY_KEY

    assert PAGES_BY_KEY["fp16_range"].control("grad").default == DEFAULT_TYPICAL  # type: ignore[attr-defined]
    shared = default_sample()
    assert shared is default_sample() and not shared.flags.writeable
    assert np.array_equal(shared, gradient_sample(DEFAULT_TYPICAL))
    # The seed's counts in FP16 (lensa/models/gradients.py): 17 of 400 round to 0, 364 subnormal, 19 normal.
    cats = F.classify(shared, "fp16")
    assert [int(np.count_nonzero(cats == c)) for c in ("zero", "subnormal", "normal")] == [17, 364, 19]
    with pytest.raises(ValueError):
        shared[0] = 1.0


def _float32_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Weights before and after of every kind: ordinary steps, neighbours, factor-of-two edges, opposite signs,
    zeros, subnormals, the top of the range (an update that overflows) and raw bit patterns (inf and NaN too)."""
    rng = np.random.default_rng(11)
    n = 200_000
    w = (rng.normal(0, 0.05, n)).astype(np.float32)
    before = [w, w, w, w, -w, np.zeros(n, np.float32)]
    after = [
        (w + rng.normal(0, 1e-4, n)).astype(np.float32),  # an optimizer's step
        np.nextafter(w, np.float32(np.inf)),  # one spacing up
        (w * np.float32(2)).astype(np.float32),  # Sterbenz's edge
        (w * rng.uniform(1.9, 2.1, n)).astype(np.float32),  # either side of it
        w,  # opposite signs
        (rng.normal(0, 1e-40, n)).astype(np.float32),  # from 0 to subnormals
    ]
    sub = (rng.integers(1, 2**23, n).astype(np.uint32)).view(np.float32)  # every subnormal magnitude
    big = np.float32(3.4e38)
    before += [sub, np.full(n, big), rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    after += [
        sub[::-1].copy(),
        np.full(n, -big),
        rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ]
    return np.concatenate(before), np.concatenate(after)


def test_an_fp32_master_copy_loses_no_recorded_update():
    from lensa.models.master import lost_updates, master_lost_count
    from lensa.runstats import measured, summarize_update

    before, after = _float32_pairs()
    with np.errstate(invalid="ignore", over="ignore"):
        update = after - before
    nonzero = int(np.count_nonzero(update != 0))
    # The definition, in numpy's float32 arithmetic: the master holds w_before; the update is lost when adding it
    # gives w_before again.
    with np.errstate(invalid="ignore", over="ignore"):
        assert not np.any((update != 0) & (before + update == before))
    assert lost_updates(before, after, "fp32") == 0 == master_lost_count(nonzero)
    # The same definition loses updates in 16 bits, and counts what the run's record counts.
    ordinary = slice(0, 200_000)
    record = summarize_update(before[ordinary], after[ordinary])
    for fmt in ("fp16", "bf16"):
        lost = lost_updates(before[ordinary], after[ordinary], fmt)
        assert lost == record.lost(fmt) > 0
    assert measured.lost_share(record, "fp32") == 0.0
    assert measured.lost_share(record, "fp16") == record.lost("fp16") / record.nonzero
    with pytest.raises(ValueError):
        master_lost_count(-1)


@pytest.mark.parametrize("dtype", ["float8_e5m2", "float8_e4m3fn", "float16"])
def test_no_format_loses_the_difference_of_two_of_its_own_values(dtype):
    # master_lost_count's argument holds for any binary format with subnormals and round-to-nearest: every pair
    # of a small format (and every half-precision b against a sample of a), each operation rounded once from
    # its exact float64 value by ml_dtypes or numpy.
    import ml_dtypes

    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    codes = np.arange(2 ** (8 * dt.itemsize), dtype=np.uint16 if dt.itemsize == 2 else np.uint8)
    values = codes.view(dt).astype(np.float64)
    values = values[np.isfinite(values)]
    if dt.itemsize == 1:
        b, a = np.meshgrid(values, values)
    else:
        b = np.repeat(values, 24)
        a = np.random.default_rng(2).choice(values, b.size)
        with np.errstate(over="ignore"):  # the largest value's neighbour is inf
            a[::2] = np.nextafter(b[::2].astype(dt), dt.type(np.inf)).astype(np.float64)  # one spacing up
    b, a = b.ravel(), a.ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        u = (a - b).astype(dt).astype(np.float64)
        again = (b + u).astype(dt).astype(np.float64)
    assert not np.any((u != 0) & (again == b))
