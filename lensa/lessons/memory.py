"""Step 1's view: the memory of one training step, part by part, for one setup and a number of tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lensa.models.memory import (
    BYTES_PER_GB,
    PRECISIONS,
    Checkpointing,
    Fit,
    MemoryBreakdown,
    ModelShape,
    Optimizer,
    Precision,
    StateComponent,
    activation_format,
    fit_on_gpu,
    other_precision,
    split_bytes_per_param,
    training_memory,
    zero_divisor,
)

# The stacked column's axis: 0 to 200 GB at least (the seed's), grown in steps of 50 GB to fit the tallest column.
AXIS_MIN_GB = 200.0
AXIS_STEP_GB = 50.0
AXIS_HEADROOM = 1.1


@dataclass(frozen=True)
class MemorySetup:
    """Everything step 1's memory depends on besides the tokens: precision, model and training setup."""

    precision: Precision
    model: ModelShape
    optimizer: Optimizer = "adam"
    zero: int = 0
    gpus: int = 1
    checkpointing: Checkpointing = "none"
    flash: bool = True
    gpu_gb: int = 80


@dataclass(frozen=True)
class StatePart:
    """One model-state component on one GPU: its bytes and how many GPUs share it (1: not divided)."""

    component: StateComponent
    n_bytes: float
    divisor: int


@dataclass(frozen=True)
class MemoryView:
    """What step 1 shows for a setup at ``tokens`` tokens per GPU per step (bytes; GB where the name says so).

    ``other`` is the other precision on one GPU without ZeRO (the paragraph compares activations, which ZeRO
    does not divide); ``whole_bpp`` and ``split_bpp`` are the bytes a parameter every GPU keeps and that ZeRO
    splits (``states_formula``).
    """

    setup: MemorySetup
    tokens: int
    memory: MemoryBreakdown
    other: MemoryBreakdown
    parts: tuple[StatePart, ...]
    activation_format: str
    whole_bpp: float
    split_bpp: float
    fit: Fit

    @property
    def total_gb(self) -> float:
        return self.memory.total / BYTES_PER_GB


def memory_view(setup: MemorySetup, tokens: int) -> MemoryView:
    """Step 1's view of ``setup`` at ``tokens`` tokens per GPU per step."""
    s = setup
    memory = training_memory(s.model, tokens, s.precision, s.optimizer, s.zero, s.gpus, s.checkpointing, s.flash)
    other = training_memory(s.model, tokens, other_precision(s.precision), s.optimizer, 0, 1, s.checkpointing, s.flash)
    parts = tuple(StatePart(c, b, zero_divisor(c.group, s.zero, s.gpus)) for c, b in memory.states)
    whole, split = split_bytes_per_param(s.precision, s.optimizer, s.zero, s.gpus)
    return MemoryView(
        s, tokens, memory, other, parts, activation_format(s.precision), whole, split, fit_on_gpu(memory, s.gpu_gb)
    )


def axis_top_gb(views: Sequence[MemoryView]) -> float:
    """One axis for every column of ``views`` (a slider's stops): at least 0-200 GB, grown in steps of 50 GB
    to 1.1 times the tallest, so the column grows as the tokens do instead of the axis moving under it."""
    tallest = max((v.total_gb for v in views), default=0.0)
    return max(AXIS_MIN_GB, math.ceil(tallest * AXIS_HEADROOM / AXIS_STEP_GB) * AXIS_STEP_GB)


def shared_axis_top_gb(setup: MemorySetup, tokens: Sequence[int]) -> float:
    """One axis for both precisions of ``setup`` at every stop of ``tokens``: switching *Training with* keeps the
    scale, so FP32's taller column is drawn taller instead of on an axis grown to fit it."""
    return axis_top_gb([memory_view(replace(setup, precision=p), t) for p in PRECISIONS for t in tokens])
