"""Step 6's view: one training step of the 7B model on a chip, in each of its math modes: seconds and memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lensa.models.memory import BYTES_PER_GB, SEVEN_B, MemoryBreakdown
from lensa.models.speed import (
    GPUS,
    Gpu,
    StepTimes,
    days_to_train,
    gpu_days_to_train,
    mixed_precision_mode,
    step_memories,
    step_times,
    tokens_per_second,
)

# The memory chart's axis reaches at least this far (step 1's column starts at 0-200 GB too).
MEMORY_AXIS_MIN_GB = 200.0
HEADROOM = 1.2  # room beside the longest bar of any stop for its label


@dataclass(frozen=True)
class Hardware:
    """What step 6 depends on besides the tokens: the chip, the utilisation (0..1), the token budget and the
    cluster's GPU count."""

    gpu: str
    mfu: float
    budget: float
    cluster: int


@dataclass(frozen=True)
class SpeedView:
    """Step 6 at ``tokens`` tokens per step: seconds per mode, memory per modelled mode, the chip's 16-bit mixed
    mode, and throughput and days to train in its fastest mode."""

    hardware: Hardware
    tokens: int
    timing: StepTimes
    memories: dict[str, MemoryBreakdown]
    mixed: str
    tokens_per_s: float
    days: float
    gpu_days: float

    @property
    def gpu_spec(self) -> Gpu:
        return GPUS[self.hardware.gpu]

    @property
    def fastest(self) -> str:
        return self.timing.fastest

    @property
    def fp32_s(self) -> float:
        return self.timing.of("fp32")

    @property
    def mixed_s(self) -> float:
        return self.timing.of(self.mixed)

    @property
    def speedup(self) -> float:
        return self.timing.speedup(self.mixed)

    @property
    def has_fp8(self) -> bool:
        return "fp8" in self.timing.modes


def speed_view(hardware: Hardware, tokens: int) -> SpeedView:
    """Step 6's view of the 7B model on ``hardware`` at ``tokens`` tokens per GPU per step."""
    gpu = GPUS[hardware.gpu]
    timing = step_times(gpu, SEVEN_B.params, tokens, hardware.mfu)
    peak = gpu.peak(timing.fastest)
    assert peak is not None, "the fastest mode is one the chip has"
    return SpeedView(
        hardware,
        tokens,
        timing,
        step_memories(timing.modes, SEVEN_B, tokens),
        mixed_precision_mode(gpu),
        tokens_per_second(peak, SEVEN_B.params, hardware.mfu),
        days_to_train(SEVEN_B.params, hardware.budget, peak, hardware.cluster, hardware.mfu),
        gpu_days_to_train(SEVEN_B.params, hardware.budget, peak, hardware.mfu),
    )


def time_axis_top_s(views: Sequence[SpeedView]) -> float:
    """One time axis for every stop of ``views``: 1.2 times the slowest step of any of them, so the bars grow
    with the tokens instead of the axis moving under them."""
    return max((max(v.timing.seconds) for v in views), default=1.0) * HEADROOM


def memory_axis_top_gb(views: Sequence[SpeedView]) -> float:
    """One memory axis for every stop: at least 200 GB, and 1.2 times the largest total of any of them."""
    largest = max((b.total for v in views for b in v.memories.values()), default=0.0) / BYTES_PER_GB
    return max(MEMORY_AXIS_MIN_GB, largest * HEADROOM)
