"""Why mixed precision is faster: FLOPs, datasheet peaks, and step time.

A training step of a dense transformer costs about 6 FLOPs per parameter per
token (2 in the forward pass, 4 in the backward pass; Kaplan et al. 2020).
Dividing by the hardware's peak rate times the fraction of it a real run
reaches (model FLOPs utilisation, MFU) gives the step time.

Peaks are the dense (no structured sparsity) tensor-core or vector rates from
each vendor's datasheet, in FLOP/s, with the source next to them.

Helpers: :func:`step_time_s` (seconds a step), :func:`tokens_per_second`,
:func:`days_to_train` (days for a token budget on N GPUs), and
:func:`mixed_precision_mode` (BF16 where the chip has it, else FP16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lensa.models.memory import MemoryBreakdown, ModelShape, Precision, training_memory

FLOPS_PER_PARAM_PER_TOKEN = 6
DEFAULT_MFU = 0.40


@dataclass(frozen=True)
class Gpu:
    """One accelerator's datasheet: dense peak FLOP/s by math mode, and memory."""

    key: str
    name: str
    memory_gb: float
    peaks: dict[str, float] = field(hash=False)  # "fp32", "tf32", "bf16", "fp16", "fp8" -> FLOP/s
    source: str = ""

    def peak(self, mode: str) -> float | None:
        """Dense peak in FLOP/s for ``mode``, or None where the chip lacks it."""
        return self.peaks.get(mode)


TERA = 1e12

# Every rate is dense: where a datasheet gives tensor-core figures "with sparsity" (2:4 structured
# sparsity doubles them) we halve them, as each source string says. Volta and Turing have no sparsity.
GPUS: dict[str, Gpu] = {
    g.key: g
    for g in (
        Gpu(
            "a100",
            "NVIDIA A100 SXM 80GB",
            80,
            {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "bf16": 312 * TERA, "fp16": 312 * TERA},
            "NVIDIA A100 Tensor Core GPU datasheet (2021), dense rates",
        ),
        Gpu(
            "v100",
            "NVIDIA V100 SXM2 32GB",
            32,
            {"fp32": 15.7 * TERA, "fp16": 125 * TERA},
            "NVIDIA Tesla V100 GPU datasheet, V100 SXM2 column: single precision 15.7 TFLOPS, tensor performance "
            "(FP16 in, FP32 accumulate) 125 TFLOPS; no TF32, BF16 or FP8 (Volta); no sparsity to halve",
        ),
        Gpu(
            "t4",
            "NVIDIA T4 16GB",
            16,
            {"fp32": 8.1 * TERA, "fp16": 65 * TERA},
            "NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1 TFLOPS, mixed precision (FP16/FP32) 65 "
            "TFLOPS; no TF32, BF16 or FP8 (Turing); no sparsity to halve",
        ),
        Gpu(
            "l4",
            "NVIDIA L4 24GB",
            24,
            {"fp32": 30.3 * TERA, "tf32": 60 * TERA, "bf16": 121 * TERA, "fp16": 121 * TERA, "fp8": 242.5 * TERA},
            "NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS; tensor rates listed with sparsity (TF32 120, "
            "BF16/FP16 242, FP8 485 TFLOPS), halved here",
        ),
        Gpu(
            "h100",
            "NVIDIA H100 SXM 80GB",
            80,
            {
                "fp32": 67 * TERA,
                "tf32": 494.7 * TERA,
                "bf16": 989.4 * TERA,
                "fp16": 989.4 * TERA,
                "fp8": 1978.9 * TERA,
            },
            "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67 TFLOPS; tensor rates listed with "
            "sparsity (TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS), halved here, to the unrounded dense "
            "figures of NVIDIA's H100 architecture whitepaper (494.7, 989.4, 1978.9)",
        ),
        Gpu(
            "h200",
            "NVIDIA H200 SXM 141GB",
            141,
            {
                "fp32": 67 * TERA,
                "tf32": 494.7 * TERA,
                "bf16": 989.4 * TERA,
                "fp16": 989.4 * TERA,
                "fp8": 1978.9 * TERA,
            },
            "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: the H100 SXM's compute (tensor rates listed "
            "with sparsity, halved here as for the H100) with 141 GB of HBM3e",
        ),
        Gpu(
            "b200",
            "NVIDIA B200 (HGX B200, per GPU) 180GB",
            180,
            {"fp32": 75 * TERA, "tf32": 1100 * TERA, "bf16": 2250 * TERA, "fp16": 2250 * TERA, "fp8": 4500 * TERA},
            "NVIDIA HGX B200 specifications, per-GPU column: FP32 75 TFLOPS; tensor rates listed with sparsity "
            "(TF32 2.2, FP16/BF16 4.5, FP8 9 PFLOPS), halved here; 180 GB HBM3e usable per GPU (1.44 TB per 8). "
            "Caveats: NVIDIA marks these figures preliminary, and they hold at the HGX board's configurable "
            "1,000 W; the B200 in a GB200 system is rated higher",
        ),
    )
}

DEFAULT_GPU = "a100"
SECONDS_PER_DAY = 86_400


def training_flops(params: float, tokens: float) -> float:
    """FLOPs of one training step: 6 x parameters x tokens. 0 tokens give 0."""
    if params < 0 or tokens < 0:
        raise ValueError("params and tokens must be >= 0")
    return FLOPS_PER_PARAM_PER_TOKEN * params * tokens


def step_time_s(params: float, tokens: float, peak_flops: float, mfu: float = DEFAULT_MFU) -> float:
    """Seconds for one step: 6 N T / (peak x MFU).

    ``peak_flops`` in FLOP/s, ``mfu`` in (0, 1]; a zero or negative peak or
    MFU raises ValueError (there is no finite time).
    """
    if not (peak_flops > 0 and 0 < mfu <= 1):
        raise ValueError("need peak_flops > 0 and 0 < mfu <= 1")
    return training_flops(params, tokens) / (peak_flops * mfu)


def tokens_per_second(peak_flops: float, params: float, mfu: float = DEFAULT_MFU) -> float:
    """Training throughput in tokens/s on one GPU: peak x MFU / (6 N)."""
    if not (params > 0 and peak_flops > 0 and 0 < mfu <= 1):
        raise ValueError("need params > 0, peak_flops > 0 and 0 < mfu <= 1")
    return peak_flops * mfu / (FLOPS_PER_PARAM_PER_TOKEN * params)


def get_gpu(key: str) -> Gpu:
    """The GPU called ``key``; ValueError naming the choices for an unknown key."""
    try:
        return GPUS[key]
    except KeyError:
        raise ValueError(f"unknown GPU {key!r}; choose from {', '.join(GPUS)}") from None


def mixed_precision_mode(gpu: Gpu | str) -> str:
    """The 16-bit format a chip runs mixed precision in: "bf16" where it has BF16 tensor cores, else "fp16".

    BF16 needs no loss scaling, so it is the choice wherever the hardware has
    it (A100 and later); the V100 and T4 only have FP16 tensor cores.
    """
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return "bf16" if g.peak("bf16") else "fp16"


def days_to_train(params: float, tokens: float, peak_flops: float, gpus: int = 1, mfu: float = DEFAULT_MFU) -> float:
    """Days to train ``params`` parameters on ``tokens`` tokens with ``gpus`` GPUs.

    6 N T / (peak x MFU x GPUs) seconds, / 86,400 (``peak_flops`` per GPU in
    FLOP/s, ``mfu`` in (0, 1]; MFU already absorbs the cost of communication).
    ValueError for a negative size, no GPUs, or a peak or MFU out of range.
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError("gpus must be a whole number >= 1")
    if not (peak_flops > 0 and 0 < mfu <= 1):
        raise ValueError("need peak_flops > 0 and 0 < mfu <= 1")
    if not (math.isfinite(params) and math.isfinite(tokens)):
        raise ValueError("params and tokens must be finite")
    return training_flops(params, tokens) / (peak_flops * mfu * gpus) / SECONDS_PER_DAY


# --- step 6's comparison of one chip's modes -----------------------------------------------------------------

# The precision of the memory each math mode trains with: TF32 is FP32 storage with a faster multiply, BF16 and
# FP16 are mixed precision (lensa.models.memory). FP8 is left out on purpose: FP8 training keeps its own mix of 8- and
# 16-bit copies that lensa.models.memory does not model, so step 6 draws no memory bar for it.
MEMORY_PRECISION: dict[str, Precision] = {"fp32": "fp32", "tf32": "fp32", "bf16": "mixed", "fp16": "mixed"}


@dataclass(frozen=True)
class StepTimes:
    """Seconds a training step takes in each math mode one chip has, slowest first (FP32 leads)."""

    modes: tuple[str, ...]
    seconds: tuple[float, ...]

    def of(self, mode: str) -> float:
        """Seconds a step in ``mode``; KeyError where the chip lacks it."""
        if mode not in self.modes:
            raise KeyError(mode)
        return self.seconds[self.modes.index(mode)]

    def speedup(self, mode: str) -> float:
        """How many times faster a step in ``mode`` is than in FP32 (1 for FP32 itself)."""
        return self.of("fp32") / self.of(mode)

    @property
    def fastest(self) -> str:
        """The mode with the shortest step (the chip's narrowest tensor-core format)."""
        return min(zip(self.seconds, self.modes, strict=True))[1]


def step_times(gpu: Gpu, params: float, tokens: float, mfu: float = DEFAULT_MFU) -> StepTimes:
    """Step time (:func:`step_time_s`) in FP32, TF32, the chip's 16-bit mixed mode and FP8, where it has them."""
    peaks = {m: gpu.peak(m) for m in ("fp32", "tf32", mixed_precision_mode(gpu), "fp8")}
    have = {m: p for m, p in peaks.items() if p is not None}
    return StepTimes(tuple(have), tuple(step_time_s(params, tokens, p, mfu) for p in have.values()))


def gpu_days_to_train(params: float, tokens: float, peak_flops: float, mfu: float = DEFAULT_MFU) -> float:
    """GPU-days for a token budget: the days on one GPU, which N GPUs share (N x days on N). Errors as
    :func:`days_to_train`."""
    return days_to_train(params, tokens, peak_flops, 1, mfu)


def peak_speedup(gpu: Gpu, mode: str) -> float | None:
    """How many times the datasheet's peak in ``mode`` exceeds its FP32 peak; None where the chip lacks it."""
    peak, fp32 = gpu.peak(mode), gpu.peak("fp32")
    return None if peak is None or fp32 is None else peak / fp32


def measured_speedup(rows: Sequence[Mapping[str, Any]], mode: str) -> float | None:
    """The same ratio from a matmul benchmark's rows (``mode`` and ``tflops``, None where not run): ``mode`` over
    FP32, or None unless both were measured."""
    tflops = {r["mode"]: r["tflops"] for r in rows if r["tflops"]}
    return tflops[mode] / tflops["fp32"] if "fp32" in tflops and mode in tflops else None


def step_memories(modes: Sequence[str], model: ModelShape, tokens: int) -> dict[str, MemoryBreakdown]:
    """Training memory (:func:`lensa.models.memory.training_memory`, Adam, one GPU) of each of ``modes`` whose memory
    is modelled (:data:`MEMORY_PRECISION`), in the order given; a mode without a memory model (FP8) is left out,
    wherever it stands. ``tokens`` per GPU per step; negative tokens raise ValueError."""
    return {m: training_memory(model, tokens, MEMORY_PRECISION[m]) for m in modes if m in MEMORY_PRECISION}
