"""Results as rows: the article-style comparison table, the speed-up, the GradScaler trace, and CSV text."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from lensa.live.config import LOWP_ARMS
from lensa.numerics import training_recipes
from lensa.runstats.measured import ScalerHistory

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
    """An arm's loss scale step by step (steps from 1), as :class:`~lensa.runstats.measured.ScalerHistory`.

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


def rows_to_csv(
    rows: Sequence[dict[str, Any]] | Sequence[ComparisonRow] | Sequence[RecipeRow] | Sequence[MatmulRow],
) -> str:
    """CSV text (header from the first row's keys; None becomes an empty cell). Empty string for no rows."""
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


# --- the arms below 16 bits ----------------------------------------------------------------------------------------

CLOSE_TO_BF16_PCT = 1.0
"""A recipe whose final loss lies at most this many percent above BF16's is counted as keeping up with it."""


def final_loss(result: ArmResult) -> float:
    """:func:`lensa.numerics.training_recipes.final_loss` of ``result``'s training losses: the mean of the last
    tenth."""
    return training_recipes.final_loss(result.losses)


def diverged(result: ArmResult) -> bool:
    """:func:`lensa.numerics.training_recipes.diverged` of ``result``'s training losses."""
    return training_recipes.diverged(result.losses)


def gap_percent(comparison: Comparison, arm: str, base: str = "bf16") -> float | None:
    """How far ``arm``'s final loss lies above ``base``'s, in percent of ``base``'s (negative: below); None when
    either arm is missing or ``base`` has no finite final loss; NaN when ``arm``'s is not finite."""
    a, b = comparison.arms.get(arm), comparison.arms.get(base)
    if a is None or b is None:
        return None
    ref = final_loss(b)
    if not math.isfinite(ref) or ref == 0:
        return None
    return (final_loss(a) - ref) / ref * 100.0


@dataclass(frozen=True)
class RecipesVerdict:
    """What a comparison of recipes says at a glance: the recipes below 16 bits it trained (``arms``, run order),
    those whose final loss ended at most :data:`CLOSE_TO_BF16_PCT` above BF16's (``close``), those that diverged,
    and the one furthest above BF16 (``worst``, None when every gap is NaN) with its gap in percent."""

    arms: tuple[str, ...]
    close: tuple[str, ...]
    diverged: tuple[str, ...]
    worst: str | None
    worst_gap_pct: float


CLOSE_TO_BF16 = CLOSE_TO_BF16_PCT / 100.0
""":data:`CLOSE_TO_BF16_PCT` as a share, as a page writes it."""


def recipes_verdict(comparison: Comparison) -> RecipesVerdict:
    """The comparison's recipes below 16 bits against BF16 (see :class:`RecipesVerdict`)."""
    arms = tuple(a for a in comparison.arms if a in LOWP_ARMS)
    gaps = {a: gap_percent(comparison, a, "bf16") for a in arms}
    finite = {a: g for a, g in gaps.items() if g is not None and not math.isnan(g)}
    worst = max(finite, key=lambda a: finite[a]) if finite else None
    return RecipesVerdict(
        arms=arms,
        close=tuple(a for a, g in finite.items() if g <= CLOSE_TO_BF16_PCT),
        diverged=tuple(a for a in arms if diverged(comparison.arms[a])),
        worst=worst,
        worst_gap_pct=finite[worst] if worst is not None else math.nan,
    )


class RecipeRow(TypedDict):
    """One arm of a comparison of recipes: its final loss, the gaps, whether it diverged, the worst layer's shares."""

    arm: str
    label: str
    final_loss: float
    gap_vs_bf16_pct: float | None
    gap_vs_fp32_pct: float | None
    diverged: bool
    flushed_max: float | None
    flushed_layer: str | None
    saturated_max: float | None
    saturated_layer: str | None
    time_per_step_ms: float
    time_vs_fp32: float | None


def recipe_rows(comparison: Comparison) -> list[RecipeRow]:
    """One row per finished arm, the 16- and 32-bit ones first as they ran: final loss, its gap to BF16's and FP32's
    (percent), diverged or not, and for an arm below 16 bits the largest share flushed and saturated of any layer's
    tensor over the counted steps, with that layer and tensor ("layer input", "layer weight", "layer grad")."""
    rows: list[RecipeRow] = []
    base = comparison.arms.get("fp32")
    for name, a in comparison.arms.items():
        flushed = max(a.shares, key=lambda s: s.flushed, default=None)
        saturated = max(a.shares, key=lambda s: s.saturated, default=None)
        rows.append(
            RecipeRow(
                arm=name,
                label=a.label,
                final_loss=final_loss(a),
                gap_vs_bf16_pct=gap_percent(comparison, name, "bf16"),
                gap_vs_fp32_pct=gap_percent(comparison, name, "fp32"),
                diverged=diverged(a),
                flushed_max=None if flushed is None else flushed.flushed,
                flushed_layer=None if flushed is None else f"{flushed.layer} {flushed.role}",
                saturated_max=None if saturated is None else saturated.saturated,
                saturated_layer=None if saturated is None else f"{saturated.layer} {saturated.role}",
                time_per_step_ms=a.time_per_step_s * 1e3,
                time_vs_fp32=None
                if base is None or base.time_per_step_s <= 0
                else a.time_per_step_s / base.time_per_step_s,
            )
        )
    return rows
