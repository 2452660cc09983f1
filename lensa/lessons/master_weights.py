"""Step 4's view: one weight w and one small update, held in FP16 or kept in an FP32 master copy."""

from __future__ import annotations

from dataclasses import dataclass

from lensa.models.master import (
    EXAMPLE_GRAD,
    EXAMPLE_LR,
    MASTER_FORMAT,
    NOTICEABLE_ROUNDING,
    MasterWeightExample,
    UpdateOutcome,
    master_weight_example,
    update_outcome,
)
from lensa.numerics.formats import get_format, next_down, spacing

STEPS = 1000
TICKS_EACH_SIDE = 4
LOW_PRECISION = ("fp16", "bf16")
EXAMPLE_FORMAT = "fp16"  # the format the illustration's weight is held in, beside its FP32 master copy
OUTCOME_FORMATS = (*LOW_PRECISION, MASTER_FORMAT)


@dataclass(frozen=True)
class MasterWeightsView:
    """Step 4 at one weight and update: the number line's example in FP16, and what one update does to a weight
    held in FP16, BF16 and FP32.

    ``spacing_below`` is FP16's spacing just below w: half ``example.spacing`` where w is a power of two (the
    values below it have one exponent less), the same elsewhere.
    """

    example: MasterWeightExample
    outcomes: dict[str, UpdateOutcome]
    spacing_below: float

    @property
    def w(self) -> float:
        return self.example.w

    @property
    def update(self) -> float:
        return self.example.update

    @property
    def spacing_changes_at_w(self) -> bool:
        """True where the spacing below w differs from the spacing above it (w a power of two)."""
        return self.spacing_below != self.example.spacing

    @property
    def fp16_lost(self) -> bool:
        return self.outcomes["fp16"].kind == "lost"

    @property
    def master(self) -> UpdateOutcome:
        return self.outcomes[MASTER_FORMAT]


def master_weights_view(update: float, w: float) -> MasterWeightsView:
    """Step 4's view of ``update`` (a positive finite number) added to a weight ``w``."""
    example = master_weight_example(w, update, STEPS, EXAMPLE_FORMAT, TICKS_EACH_SIDE)
    below = float(spacing(next_down(example.w_stored, EXAMPLE_FORMAT), EXAMPLE_FORMAT))
    return MasterWeightsView(example, {f: update_outcome(w, update, f) for f in OUTCOME_FORMATS}, below)


@dataclass(frozen=True)
class NotesNumbers:
    """The notes' worked example: an update of EXAMPLE_LR × EXAMPLE_GRAD at w = 1 and w = 10, from the formats."""

    fp16_at_1: float
    fp16_at_10: float
    fp16_needed: float  # half FP16's spacing at 1: the smallest update that is not lost there
    lr: float
    grad: float
    update: float
    extra_bits: int  # FP32's significand bits beyond FP16's
    fp32_at_1: float
    fp32_at_10: float
    fp32_applied: float
    fp32_error: float  # |applied ÷ update - 1|
    adam_spacings: float  # the learning rate in FP32 spacings at 1 (Adam's step is about lr)
    adam_error: float  # half an FP32 spacing at 1 over the learning rate
    noticeable_pct: float  # NOTICEABLE_ROUNDING in percent


def notes_numbers() -> NotesNumbers:
    update = EXAMPLE_LR * EXAMPLE_GRAD
    fp16_at_1 = float(spacing(1.0, "fp16"))
    fp32_at_1 = float(spacing(1.0, "fp32"))
    example = update_outcome(1.0, update, "fp32")
    return NotesNumbers(
        fp16_at_1=fp16_at_1,
        fp16_at_10=float(spacing(10.0, "fp16")),
        fp16_needed=fp16_at_1 / 2,
        lr=EXAMPLE_LR,
        grad=EXAMPLE_GRAD,
        update=update,
        extra_bits=get_format("fp32").significand_bits - get_format("fp16").significand_bits,
        fp32_at_1=fp32_at_1,
        fp32_at_10=float(spacing(10.0, "fp32")),
        fp32_applied=example.applied,
        fp32_error=example.error_size,
        adam_spacings=EXAMPLE_LR / fp32_at_1,
        adam_error=fp32_at_1 / 2 / EXAMPLE_LR,
        noticeable_pct=NOTICEABLE_ROUNDING * 100,
    )
