"""What step 6 derives from one chip's datasheet, moved out of its page: checked against the SPEC's reference
figures and against the definitions they rest on."""

from __future__ import annotations

import pytest

from lensa.memory import SEVEN_B, training_memory
from lensa.speed import (
    GPUS,
    MEMORY_PRECISION,
    days_to_train,
    gpu_days_to_train,
    measured_speedup,
    mixed_precision_mode,
    peak_speedup,
    step_time_s,
    step_times,
)
from lensa.ui import figures, i18n


def test_reference_step_times_at_4096_tokens():
    # SPEC, reference figures, step 6: FP32 21 s, TF32 2.7 s, BF16 1.3 s, 16x on the A100.
    t = step_times(GPUS["a100"], SEVEN_B.params, 4096)
    assert t.modes == ("fp32", "tf32", "bf16")
    assert [i18n.seconds(t.of(m), "en") for m in t.modes] == ["21 s", "2.7 s", "1.3 s"]
    assert i18n.ratio(t.speedup("bf16"), "en") == "16×" and t.speedup("fp32") == 1
    assert t.fastest == "bf16"


@pytest.mark.parametrize("key", sorted(GPUS))
def test_speedup_is_the_ratio_of_peaks(key):
    # Same FLOPs and MFU in every mode, so the step-time ratio is the datasheet's peak ratio.
    gpu = GPUS[key]
    t = step_times(gpu, 1e9, 2048, 0.3)
    assert t.modes[0] == "fp32" and mixed_precision_mode(gpu) in t.modes
    for mode in t.modes:
        assert t.speedup(mode) == pytest.approx(peak_speedup(gpu, mode), rel=1e-12)
        assert t.of(mode) == step_time_s(1e9, 2048, gpu.peak(mode), 0.3)
    assert t.fastest == max(t.modes, key=gpu.peak)
    assert ("fp8" in t.modes) == (gpu.peak("fp8") is not None)
    with pytest.raises(KeyError):
        step_times(GPUS["v100"], 1e9, 2048).of("bf16")


def test_gpu_days_are_shared_by_the_cluster():
    peak = GPUS["h100"].peak("fp8")
    for n in (1, 8, 1024):
        assert days_to_train(7e9, 1e12, peak, n, 0.4) * n == pytest.approx(gpu_days_to_train(7e9, 1e12, peak, 0.4))


def test_tf32_trains_in_fp32_memory():
    # The reference's memory: FP32 144 GB, BF16 126.1 GB at 4096 tokens (TF32 only changes the multiply).
    totals = {m: training_memory(SEVEN_B, 4096, MEMORY_PRECISION[m]).total for m in ("fp32", "tf32", "bf16")}
    assert i18n.gigabytes(totals["fp32"], "en") == "144.3 GB" and totals["tf32"] == totals["fp32"]
    assert i18n.gigabytes(totals["bf16"], "en") == "126.1 GB"


def test_measured_speedup_needs_both_modes():
    rows = [{"mode": "fp32", "tflops": 10.0}, {"mode": "bf16", "tflops": 150.0}, {"mode": "fp8", "tflops": None}]
    assert measured_speedup(rows, "bf16") == 15
    assert measured_speedup(rows, "fp8") is None and measured_speedup(rows[1:], "bf16") is None
    assert peak_speedup(GPUS["v100"], "bf16") is None


def test_memory_bars_reach_past_the_longest_bar_and_at_least_200_gb():
    small = figures.memory_total_bars(["a"], [50e9], ["#000"], ["50 GB"], "GB", [""], ["a"], (80, "80 GB"), "en")
    big = figures.memory_total_bars(["a"], [500e9], ["#000"], ["500 GB"], "GB", [""], ["a"], (80, "80 GB"), "en")
    small, big = small.to_dict(), big.to_dict()
    assert small["layout"]["xaxis"]["range"][1] == 200 and small["data"][0]["x"] == [50]  # drawn in GB
    assert big["layout"]["xaxis"]["range"][1] > 500
