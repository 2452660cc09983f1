"""Results as rows: the article-style comparison table, the speed-up, the GradScaler trace, and CSV text."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from lensa.measured import ScalerHistory

if TYPE_CHECKING:
    from lensa.live.arms import ArmResult, Comparison
    from lensa.live.matmul import MatmulRow


def speedup(comparison: Comparison, arm: str) -> float | None:
    """FP32 arm's time / ``arm``'s time (>1 means faster than FP32); None when either is missing."""
    base, other = comparison.arms.get("fp32"), comparison.arms.get(arm)
    if base is None or other is None or other.time_s <= 0:
        return None
    return base.time_s / other.time_s


# A speed-up past this is more than the noise of timing a short run on a shared machine: below it the lab
# says this CPU or GPU has no fast path for the format (its step is then about as slow as FP32's, or slower).
CLEARLY_FASTER = 1.2


def clearly_faster(comparison: Comparison, arm: str) -> bool | None:
    """Whether ``arm`` beat FP32 by more than :data:`CLEARLY_FASTER`; None when the speed-up is unknown."""
    ratio = speedup(comparison, arm)
    return None if ratio is None else ratio > CLEARLY_FASTER


def loss_gap(comparison: Comparison, arm: str, magnitude: bool = False) -> float | None:
    """``arm``'s final training loss minus FP32's (its absolute value with ``magnitude``); None when either
    arm is missing. NaN when a loss was NaN."""
    base, other = comparison.arms.get("fp32"), comparison.arms.get(arm)
    if base is None or other is None:
        return None
    gap = other.final_loss - base.final_loss
    return abs(gap) if magnitude else gap


def arm_scale_history(result: ArmResult) -> ScalerHistory:
    """An arm's loss scale step by step (steps from 1), as :class:`~lensa.measured.ScalerHistory`.

    A step without a scale (an arm with no scaler) is drawn at 2**0, the scale that changes nothing.
    """
    steps = tuple(range(1, len(result.loss_scales) + 1))
    log2_scales = tuple(math.log2(s) if s else 0.0 for s in result.loss_scales)
    return ScalerHistory(steps, log2_scales, tuple(result.skipped))


class ComparisonRow(TypedDict):
    """One row of the article-style table; None where a value was not measured."""

    arm: str
    label: str
    time_s: float
    time_per_step_ms: float
    final_loss: float
    accuracy: float
    peak_memory_mb: float | None
    saved_for_backward_mb: float
    skipped_steps: int
    speedup_vs_fp32: float | None


def comparison_rows(comparison: Comparison) -> list[ComparisonRow]:
    """One row per finished arm: time (s), ms per step, final loss, accuracy, memory (MB = 10**6 bytes), speed-up."""
    rows: list[ComparisonRow] = []
    for name, a in comparison.arms.items():
        rows.append(
            ComparisonRow(
                arm=name,
                label=a.label,
                time_s=a.time_s,
                time_per_step_ms=a.time_per_step_s * 1e3,
                final_loss=a.final_loss,
                accuracy=a.accuracy,
                peak_memory_mb=None if a.peak_memory_bytes is None else a.peak_memory_bytes / 1e6,
                saved_for_backward_mb=a.saved_for_backward_bytes / 1e6,
                skipped_steps=a.skipped_steps,
                speedup_vs_fp32=speedup(comparison, name),
            )
        )
    return rows


def rows_to_csv(rows: Sequence[dict[str, Any]] | Sequence[ComparisonRow] | Sequence[MatmulRow]) -> str:
    """CSV text (header from the first row's keys; None becomes an empty cell). Empty string for no rows."""
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()
