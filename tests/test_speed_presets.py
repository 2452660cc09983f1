"""GPU presets: dense datasheet peaks with sources, the mixed-precision format, days to train."""

from __future__ import annotations

import itertools
import re

import pytest

from lensa.models.speed import (
    DEFAULT_GPU,
    GPUS,
    get_gpu,
    mixed_precision_mode,
    step_time_s,
    tokens_per_second,
)
from lensa.models.speed import days_to_train as days
from lensa.ui import i18n

TFLOPS = 1e12
MODES = ("fp32", "tf32", "bf16", "fp16", "fp8")
# The tensor modes each generation has (Volta and Turing: FP16 only; Ampere adds TF32 and BF16; Ada and
# Hopper add FP8), a fact of the architecture, not a figure copied from the table.
TENSOR_MODES = {
    "v100": {"fp16"},
    "t4": {"fp16"},
    "a100": {"tf32", "bf16", "fp16"},
    "l4": {"tf32", "bf16", "fp16", "fp8"},
    "h100": {"tf32", "bf16", "fp16", "fp8"},
    "h200": {"tf32", "bf16", "fp16", "fp8"},
    "b200": {"tf32", "bf16", "fp16", "fp8"},
}
# SPEC, step 6: "an illustrative A100 ... with datasheet peaks FP32 19.5, TF32 156, BF16 312 TFLOP/s", its
# figure 2's "80 GB line", and the reference figures at 4096 tokens: FP32 21 s, TF32 2.7 s, BF16 1.3 s, 16x.
SPEC_A100 = {"fp32": 19.5, "tf32": 156, "bf16": 312}
SPEC_A100_MEMORY_GB = 80
SPEC_STEP_TIMES = {"fp32": "21 s", "tf32": "2.7 s", "bf16": "1.3 s"}
SPEC_PRESETS = ("v100", "t4", "a100", "h100", "h200", "b200")  # "GPU presets (V100, T4, A100, H100, H200, B200)"
# Narayanan et al. 2021 (Megatron-LM on 3,072 A100s): 502 PFLOP/s in all, "52% of theoretical peak" per GPU.
MEGATRON_PFLOPS, MEGATRON_GPUS, MEGATRON_SHARE = 502, 3072, 0.52


def _quoted(source: str, pattern: str) -> float:
    """A number the source string quotes, in TFLOPS (PFLOPS converted)."""
    found = re.search(pattern, source)
    assert found, f"{pattern!r} not in {source!r}"
    return float(found.group(1).replace(",", ""))


def test_every_gpu_has_exactly_its_generations_modes():
    assert set(GPUS) == set(TENSOR_MODES) and DEFAULT_GPU == "a100"
    for key, g in GPUS.items():
        assert set(g.peaks) == {"fp32"} | TENSOR_MODES[key], key
        assert g.key == key and g.name


def test_tensor_core_rates_keep_the_hardware_ratios():
    # On Ampere, Ada, Hopper and Blackwell tensor cores FP16 and BF16 run at one rate, TF32 at half of it
    # and FP8 at twice it (dense). The published figures are rounded: the L4's to the TFLOPS (TF32 60 against
    # BF16 121) and the B200's TF32 to 0.1 PFLOPS (2.2 for 2.25 sparse), hence 2.5%.
    for key, g in GPUS.items():
        if "bf16" in g.peaks:
            assert g.peak("bf16") == g.peak("fp16"), key
            assert g.peak("bf16") == pytest.approx(2 * g.peak("tf32"), rel=0.025), key
        if "fp8" in g.peaks:
            assert g.peak("fp8") == pytest.approx(2 * g.peak("bf16"), rel=0.025), key
        # a tensor-core mode is always faster than the plain FP32 pipes
        assert all(g.peak(m) > g.peak("fp32") for m in TENSOR_MODES[key]), key


def test_the_a100_preset_reproduces_the_spec():
    a100 = GPUS["a100"]
    assert {m: a100.peak(m) / TFLOPS for m in SPEC_A100} == SPEC_A100
    assert a100.memory_gb == SPEC_A100_MEMORY_GB
    assert "A100" in a100.source and "datasheet" in a100.source
    # the reference figures follow from the preset through the definition, 6 N T / (peak x MFU)
    for mode, shown in SPEC_STEP_TIMES.items():
        seconds = 6 * 6.74e9 * 4096 / (a100.peak(mode) * 0.40)
        assert i18n.seconds(seconds, "en") == shown, mode
        assert step_time_s(6.74e9, 4096, a100.peak(mode)) == pytest.approx(seconds, rel=1e-12)
    assert i18n.ratio(a100.peak("bf16") / a100.peak("fp32"), "en") == "16×"


def test_the_a100_peak_agrees_with_a_measured_large_run():
    # Megatron-LM's per-GPU rate over its share of the peak gives the peak it measured against: 312 TFLOPS
    # (the paper rounds its share to 52%, so 1%).
    implied = MEGATRON_PFLOPS * 1e15 / MEGATRON_GPUS / MEGATRON_SHARE
    assert GPUS["a100"].peak("bf16") == pytest.approx(implied, rel=0.01)
    assert GPUS["a100"].peak("fp16") == pytest.approx(implied, rel=0.01)


def test_presets_are_in_flops_and_gigabytes():
    assert set(SPEC_PRESETS) <= set(GPUS)
    for key, g in GPUS.items():
        # FLOP/s, not TFLOPS: a GPU of this decade does between 1 TFLOP/s and 10 PFLOP/s in any mode
        assert all(1e12 < p < 1e16 for p in g.peaks.values()), key
        # decimal gigabytes, as the name writes them, between a T4's 16 and a B200's 180
        assert 16 <= g.memory_gb <= 192, key


def test_newer_generations_are_faster():
    # Volta (V100) < Ampere (A100) < Hopper (H100, H200: the same compute) < Blackwell (B200), data-centre parts
    order = ("v100", "a100", "h100", "b200")
    for mode in ("fp32", "fp16"):
        rates = [GPUS[k].peak(mode) for k in order]
        assert rates == sorted(rates) and len(set(rates)) == len(rates), mode
    assert GPUS["h200"].memory_gb > GPUS["h100"].memory_gb  # the H200 is the H100 with more memory


# Per GPU, the figures its source string quotes: (mode, pattern, how the quote relates to the dense rate).
# "sparse" quotes are the with-sparsity figures the source says it halves; the quote is rounded, so the dense
# rate must be half of it to within the quote's last digit.
QUOTES = {
    "v100": [
        ("fp32", r"single precision ([\d.]+) TFLOPS", "dense"),
        ("fp16", r"tensor performance \(FP16 in, FP32 accumulate\) ([\d.]+) TFLOPS", "dense"),
    ],
    "t4": [
        ("fp32", r"single precision ([\d.]+) TFLOPS", "dense"),
        ("fp16", r"mixed precision \(FP16/FP32\) ([\d.]+)", "dense"),
    ],
    "l4": [
        ("fp32", r"FP32 ([\d.]+) TFLOPS", "dense"),
        ("tf32", r"TF32 ([\d.]+)", "sparse"),
        ("bf16", r"BF16/FP16 ([\d.]+)", "sparse"),
        ("fp8", r"FP8 ([\d.]+) TFLOPS", "sparse"),
    ],
    "h100": [
        ("fp32", r"FP32 ([\d.]+) TFLOPS", "dense"),
        ("tf32", r"TF32 ([\d,.]+)", "sparse"),
        ("bf16", r"BF16/FP16 ([\d,.]+)", "sparse"),
        ("fp8", r"FP8 ([\d,.]+) TFLOPS", "sparse"),
        # the whitepaper's unrounded dense figures, quoted in the same string
        ("tf32", r"whitepaper \(([\d.]+),", "dense"),
        ("bf16", r"whitepaper \([\d.]+, ([\d.]+),", "dense"),
        ("fp8", r"whitepaper \([\d.]+, [\d.]+, ([\d.]+)\)", "dense"),
    ],
    "b200": [
        ("fp32", r"FP32 ([\d.]+) TFLOPS", "dense"),
        ("tf32", r"TF32 ([\d.]+)", "sparse-peta"),
        ("bf16", r"FP16/BF16 ([\d.]+)", "sparse-peta"),
        ("fp8", r"FP8 ([\d.]+) PFLOPS", "sparse-peta"),
    ],
}


def test_each_source_quotes_the_numbers_the_table_holds():
    for key, quotes in QUOTES.items():
        g = GPUS[key]
        assert "NVIDIA" in g.source and key.upper() in g.source, key
        for mode, pattern, kind in quotes:
            quote = _quoted(g.source, pattern)
            got = g.peak(mode) / TFLOPS
            if kind == "dense":
                assert got == quote, (key, mode)
            elif kind == "sparse":
                assert abs(2 * got - quote) <= 0.5, (key, mode)  # quoted to the nearest TFLOPS
            else:
                assert abs(2 * got - quote * 1000) <= 50, (key, mode)  # quoted to 0.1 PFLOPS
        if any(kind != "dense" for _, _, kind in quotes):
            assert "halved" in g.source, key  # the source says the sparse figures were halved
    # The H200's source says it has the H100 SXM's compute: the table must agree.
    assert GPUS["h200"].peaks == GPUS["h100"].peaks and "H100" in GPUS["h200"].source
    assert "preliminary" in GPUS["b200"].source


def test_memory_matches_the_name_and_the_source():
    for key, g in GPUS.items():
        assert _quoted(g.name, r"(\d+)GB") == g.memory_gb, key
    for key in ("h200", "b200"):  # the sources that quote the memory
        assert f"{GPUS[key].memory_gb:g} GB" in GPUS[key].source, key


def test_mixed_precision_mode_is_bf16_where_the_chip_has_it():
    # BF16 arrived with Ampere: the generations before it (TENSOR_MODES) run mixed precision in FP16
    for key, g in GPUS.items():
        expected = "bf16" if "bf16" in TENSOR_MODES[key] else "fp16"
        assert mixed_precision_mode(key) == mixed_precision_mode(g) == expected, key
        assert g.peak(expected) == max(g.peak(m) for m in ("fp16", "bf16") if g.peak(m)), key
    assert {k for k in GPUS if mixed_precision_mode(k) == "fp16"} == {"v100", "t4"}
    with pytest.raises(ValueError, match="a100"):
        get_gpu("tpu")


def test_days_to_train_invariants():
    base = days(6.74e9, 2e12, 312e12, 1024, 0.4)
    # twice the tokens or the parameters, twice the days; twice the GPUs, the peak or the MFU, half the days
    assert days(6.74e9, 4e12, 312e12, 1024, 0.4) == pytest.approx(2 * base)
    assert days(13.48e9, 2e12, 312e12, 1024, 0.4) == pytest.approx(2 * base)
    assert days(6.74e9, 2e12, 312e12, 2048, 0.4) == pytest.approx(base / 2)
    assert days(6.74e9, 2e12, 624e12, 1024, 0.4) == pytest.approx(base / 2)
    assert days(6.74e9, 2e12, 312e12, 1024, 0.8) == pytest.approx(base / 2)
    # consistent with the step time and the throughput: one GPU, one step's tokens, in seconds
    t = step_time_s(7e9, 4096, 989.4e12, 0.4)
    assert days(7e9, 4096, 989.4e12, 1, 0.4) * 86400 == pytest.approx(t)
    assert tokens_per_second(989.4e12, 7e9, 0.4) * t == pytest.approx(4096)
    # Llama 2's paper (Touvron et al. 2023, Table 2): 7B took 184,320 A100-80GB GPU hours on 2T tokens;
    # at the A100's 312 TFLOPS that is an MFU of about 0.41, near the lesson's default 0.40
    gpu_days = days(6.74e9, 2e12, 312e12, 1, 0.4)
    assert gpu_days * 24 == pytest.approx(184_320, rel=0.05)
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
    # the same step on two chips: the time ratio is the inverse ratio of their peaks, in every mode both have
    for a, b in itertools.combinations(GPUS.values(), 2):
        for mode in set(a.peaks) & set(b.peaks):
            ta, tb = (step_time_s(6.74e9, 4096, g.peak(mode)) for g in (a, b))
            assert ta / tb == pytest.approx(b.peak(mode) / a.peak(mode), rel=1e-12), (a.key, b.key, mode)
