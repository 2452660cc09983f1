"""Why mixed precision is faster: FLOPs, datasheet peaks, and step time.

A training step of a dense transformer costs about 6 FLOPs per parameter per
token (2 in the forward pass, 4 in the backward pass; Kaplan et al. 2020).
Dividing by the hardware's peak rate times the fraction of it a real run
reaches (model FLOPs utilisation, MFU) gives the step time.

Peaks are the dense (no structured sparsity) tensor-core or vector rates from
each vendor's datasheet, in FLOP/s, with the source next to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    )
}

DEFAULT_GPU = "a100"


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
