"""What step 6 derives from one chip's datasheet, checked against the SPEC's reference figures, against the
definition it rests on (6 FLOPs per parameter per token, over the peak times the utilisation) computed here by
hand, against invariants of that definition, and against what the page shows after a slider moves."""

from __future__ import annotations

import itertools

import pytest

from lensa.models.memory import SEVEN_B, training_memory
from lensa.models.speed import (
    GPUS,
    MEMORY_PRECISION,
    days_to_train,
    gpu_days_to_train,
    measured_speedup,
    mixed_precision_mode,
    peak_speedup,
    step_times,
)
from lensa.ui import figures, i18n
from tests.pagetools import metrics, move_scrub, open_page, scrub_frame, slider_stops

TFLOPS = 1e12
# SPEC, step 6, figure 1: the A100's datasheet peaks and the lesson's 40% utilisation.
SPEC_A100_PEAKS = {"fp32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS, "bf16": 312 * TFLOPS}
SPEC_MFU = 0.40
# Llama 2 7B (Touvron et al. 2023): 6.74e9 parameters, the lesson's "7B model".
LLAMA2_7B_PARAMS = 6.74e9


def by_hand(params: float, tokens: float, peak: float, mfu: float) -> float:
    """Seconds a step: 2 FLOPs per parameter per token forward, 4 backward (Kaplan et al. 2020)."""
    flops = (2 + 4) * params * tokens
    return flops / (peak * mfu)


def test_reference_step_times_at_4096_tokens():
    # SPEC, reference figures, step 6: FP32 21 s, TF32 2.7 s, BF16 1.3 s, 16x on the A100.
    assert SEVEN_B.params == LLAMA2_7B_PARAMS
    t = step_times(GPUS["a100"], SEVEN_B.params, 4096)
    assert t.modes == ("fp32", "tf32", "bf16")
    for mode, peak in SPEC_A100_PEAKS.items():
        assert t.of(mode) == pytest.approx(by_hand(LLAMA2_7B_PARAMS, 4096, peak, SPEC_MFU), rel=1e-12), mode
    assert [i18n.seconds(t.of(m), "en") for m in t.modes] == ["21 s", "2.7 s", "1.3 s"]
    assert i18n.ratio(t.speedup("bf16"), "en") == "16×" and t.speedup("fp32") == 1
    assert t.fastest == "bf16"


@pytest.mark.parametrize("key", sorted(GPUS))
def test_step_time_is_the_flops_over_the_rate_reached(key):
    gpu = GPUS[key]
    t = step_times(gpu, 1e9, 2048, 0.3)
    assert t.modes[0] == "fp32" and mixed_precision_mode(gpu) in t.modes
    assert ("fp8" in t.modes) == (gpu.peak("fp8") is not None)
    for mode in t.modes:
        assert t.of(mode) == pytest.approx(by_hand(1e9, 2048, gpu.peak(mode), 0.3), rel=1e-12), mode
    # Same FLOPs and MFU in every mode: the time ratio of any two modes is the inverse ratio of their peaks,
    # so the speed-up over FP32 is the datasheet's peak ratio, and the fastest mode has the highest peak.
    for a, b in itertools.combinations(t.modes, 2):
        assert t.of(a) / t.of(b) == pytest.approx(gpu.peak(b) / gpu.peak(a), rel=1e-12), (a, b)
    for mode in t.modes:
        assert t.speedup(mode) == pytest.approx(gpu.peak(mode) / gpu.peak("fp32"), rel=1e-12)
        assert t.speedup(mode) == pytest.approx(peak_speedup(gpu, mode), rel=1e-12)
    assert t.fastest == max(t.modes, key=gpu.peak)
    assert list(t.modes[1:]) == sorted(t.modes[1:], key=gpu.peak), "slowest first after FP32"
    with pytest.raises(KeyError):
        step_times(GPUS["v100"], 1e9, 2048).of("bf16")


def test_step_time_grows_with_the_work_and_shrinks_with_the_utilisation():
    gpu = GPUS["a100"]
    tokens = [512, 1024, 4096, 16384]
    times = [step_times(gpu, SEVEN_B.params, n).of("bf16") for n in tokens]
    assert times == sorted(times) and len(set(times)) == len(times)
    # linear in the tokens: twice the tokens, twice the time, in every mode
    for small, big in itertools.pairwise(tokens):
        a, b = step_times(gpu, SEVEN_B.params, small), step_times(gpu, SEVEN_B.params, big)
        for mode in a.modes:
            assert b.of(mode) / a.of(mode) == pytest.approx(big / small, rel=1e-12)
    mfus = [0.1, 0.2, 0.4, 0.8]
    by_mfu = [step_times(gpu, SEVEN_B.params, 4096, m).of("fp32") for m in mfus]
    assert by_mfu == sorted(by_mfu, reverse=True)
    assert by_mfu[0] * mfus[0] == pytest.approx(by_mfu[-1] * mfus[-1], rel=1e-12)  # time x MFU is constant


def test_gpu_days_are_shared_by_the_cluster():
    peak = GPUS["h100"].peak("fp8")
    gpu_days = gpu_days_to_train(7e9, 1e12, peak, 0.4)
    assert gpu_days == pytest.approx(by_hand(7e9, 1e12, peak, 0.4) / 86_400, rel=1e-12)
    for n in (1, 8, 1024):
        assert days_to_train(7e9, 1e12, peak, n, 0.4) * n == pytest.approx(gpu_days)


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


def _memory_bars(total_bytes: float) -> dict:
    return figures.memory_total_bars(
        ["a"], [total_bytes], ["#000"], ["x"], "GB", [""], ["a"], (80, "80 GB"), "en"
    ).to_dict()


def _memory_column(total_bytes: float) -> dict:
    part = figures.BarPart("a", total_bytes, "#000")
    return figures.stacked_memory([part], 80, "80 GB", "GB", "en").to_dict()


def test_memory_bars_are_drawn_in_decimal_gb_and_fit_on_their_axis():
    for total in (50e9, 126.1e9, 500e9, 2e12):
        spec = _memory_bars(total)
        (bar,) = spec["data"]
        assert bar["x"] == [pytest.approx(total / 1e9)]  # 1 GB = 10^9 bytes
        low, high = spec["layout"]["xaxis"]["range"]
        assert low == 0 and high > max(total / 1e9, 80), "the bar and the GPU line fit"
    # a small model keeps one scale, so moving the slider does not rescale the axis under the reader...
    small = {_memory_bars(t)["layout"]["xaxis"]["range"][1] for t in (10e9, 50e9, 126.1e9)}
    assert len(small) == 1
    # ...and it is step 1's scale for the same memory, so the two pages read alike
    assert small == {_memory_column(t)["layout"]["yaxis"]["range"][1] for t in (10e9, 50e9, 126.1e9)}


def test_the_page_shows_the_definition_after_the_sliders_move():
    at = open_page("speed", lang="en")
    tokens = slider_stops(at, "tokens")
    move_scrub(at, "tokens", tokens.index(8192))
    at.selectbox(key="w.speed.gpu").set_value("h100").run()
    assert not at.exception, [e.value for e in at.exception]
    h100 = GPUS["h100"]
    fp32 = by_hand(LLAMA2_7B_PARAMS, 8192, 67 * TFLOPS, SPEC_MFU)  # the H100 SXM's FP32 datasheet rate
    bf16 = by_hand(LLAMA2_7B_PARAMS, 8192, 989.4 * TFLOPS, SPEC_MFU)  # its dense BF16 rate (whitepaper)
    shown = metrics(at)
    assert shown["FP32 step"] == i18n.seconds(fp32, "en") == "12 s"
    assert shown["BF16 step"] == i18n.seconds(bf16, "en") == "0.84 s"
    assert shown["Speed-up over FP32"] == i18n.ratio(989.4 / 67, "en") == "15×"
    # the time chart draws the same seconds, one bar per mode the H100 has, FP8 twice as fast as BF16
    times = scrub_frame(at)[0]["fig"]["data"]
    drawn = [bar["x"][0] for bar in times]
    assert len(drawn) == len(step_times(h100, 1, 1).modes) == 4
    assert drawn[0] == pytest.approx(fp32, rel=1e-12) and drawn[2] == pytest.approx(bf16, rel=1e-12)
    assert drawn[2] / drawn[3] == pytest.approx(1978.9 / 989.4, rel=1e-12)
    # halving the tokens halves every bar
    move_scrub(at, "tokens", tokens.index(4096))
    halved = [bar["x"][0] for bar in scrub_frame(at)[0]["fig"]["data"]]
    assert halved == pytest.approx([d / 2 for d in drawn], rel=1e-12)
