"""GPU presets: dense datasheet peaks with sources, the mixed-precision format, days to train."""

from __future__ import annotations

import pytest

from lensa.speed import (
    DEFAULT_GPU,
    GPUS,
    get_gpu,
    mixed_precision_mode,
    step_time_s,
    tokens_per_second,
)
from lensa.speed import days_to_train as days

# Dense TFLOP/s and memory (GB) as listed in the research notes; None where the chip lacks the mode.
DENSE = {
    # key: (fp32, tf32, bf16, fp16, fp8, memory)
    "a100": (19.5, 156, 312, 312, None, 80),
    "v100": (15.7, None, None, 125, None, 32),
    "t4": (8.1, None, None, 65, None, 16),
    "l4": (30.3, 60, 121, 121, 242.5, 24),
    "h100": (67, 494.7, 989.4, 989.4, 1978.9, 80),
    "h200": (67, 494.7, 989.4, 989.4, 1978.9, 141),
    "b200": (75, 1100, 2250, 2250, 4500, 180),
}


def test_gpu_table_holds_the_dense_datasheet_figures():
    assert set(GPUS) == set(DENSE) and DEFAULT_GPU == "a100"
    for key, (*peaks, memory) in DENSE.items():
        g = GPUS[key]
        got = [None if g.peak(m) is None else g.peak(m) / 1e12 for m in ("fp32", "tf32", "bf16", "fp16", "fp8")]
        assert got == pytest.approx(peaks), key
        assert g.memory_gb == memory and g.key == key and g.name
        assert len(g.source) > 30, key
    for key in ("l4", "h100", "h200", "b200"):  # datasheets that list tensor rates with sparsity
        assert "halved" in GPUS[key].source
    assert "preliminary" in GPUS["b200"].source


def test_a100_is_unchanged():
    a100 = GPUS["a100"]
    assert a100.peaks == {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}


def test_mixed_precision_mode_is_bf16_where_the_chip_has_it():
    assert {k: mixed_precision_mode(k) for k in GPUS} == {
        "a100": "bf16",
        "v100": "fp16",
        "t4": "fp16",
        "l4": "bf16",
        "h100": "bf16",
        "h200": "bf16",
        "b200": "bf16",
    }
    assert mixed_precision_mode(GPUS["t4"]) == "fp16"
    with pytest.raises(ValueError):
        get_gpu("tpu")


def test_days_to_train_by_hand():
    # 6 x 6.74e9 x 2e12 FLOP / (312e12 x 0.4 x 1024) s = 632,888 s = 7.325 days
    assert days(6.74e9, 2e12, 312e12, 1024, 0.4) == pytest.approx(7.325088, rel=1e-6)
    # 6 x 1e9 x 1e9 / (1e15 x 0.5 x 2) = 6000 s
    assert days(1e9, 1e9, 1e15, 2, 0.5) == pytest.approx(6000 / 86400)
    # consistent with the step time and the throughput: one GPU, one step's tokens
    t = step_time_s(7e9, 4096, 989.4e12, 0.4)
    assert days(7e9, 4096, 989.4e12, 1, 0.4) * 86400 == pytest.approx(t)
    assert tokens_per_second(989.4e12, 7e9, 0.4) * t == pytest.approx(4096)
    assert days(7e9, 0, 1e12) == 0


@pytest.mark.parametrize(
    "args",
    [
        (7e9, 1e12, 312e12, 0),  # no GPUs
        (7e9, 1e12, 312e12, 2.5),  # half a GPU
        (7e9, 1e12, 0.0, 8),  # no peak
        (7e9, 1e12, 312e12, 8, 0.0),  # no utilisation
        (7e9, 1e12, 312e12, 8, 1.5),  # more than the peak
        (7e9, -1, 312e12, 8),  # negative tokens
        (float("nan"), 1e12, 312e12, 8),
    ],
)
def test_days_to_train_refuses_nonsense(args):
    with pytest.raises(ValueError):
        days(*args)


def test_faster_chips_take_proportionally_less_time():
    a100, h100 = (step_time_s(6.74e9, 4096, GPUS[k].peak("bf16")) for k in ("a100", "h100"))
    assert a100 / h100 == pytest.approx(989.4 / 312)
