"""GPU presets: dense datasheet peaks with sources, the mixed-precision format, days to train."""

from __future__ import annotations

import re

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
# The A100's source string names the datasheet but quotes no number, so the datasheet's own figures are
# written here: NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column: FP32 19.5, TF32 156 (312 with
# sparsity), BF16 312 (624), FP16 312 (624) TFLOPS.
A100_DATASHEET = {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}


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


def test_a100_matches_its_datasheet():
    assert {m: v / TFLOPS for m, v in GPUS["a100"].peaks.items()} == A100_DATASHEET
    assert "A100" in GPUS["a100"].source and "datasheet" in GPUS["a100"].source


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
    a100, h100 = (step_time_s(6.74e9, 4096, GPUS[k].peak("bf16")) for k in ("a100", "h100"))
    assert a100 / h100 == pytest.approx(989.4 / 312)
