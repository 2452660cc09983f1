"""Accumulating small updates in a given format: why master weights stay in FP32.

Every addition is rounded to the format, as a weight tensor stored in that
format would be after each optimizer step. Sums are formed in float64 and then
rounded once; for formats no wider than FP32 this equals the correctly rounded
sum (when float64 itself rounds, the addend is far below half a spacing of the
format and the result is the larger operand either way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.numerics.formats import FloatFormat, get_format, quantize, representable_between, scalar_rounder, spacing


def round_scalar(value: float, fmt: str | FloatFormat) -> float:
    """Round one Python float to ``fmt`` (same rules as :func:`lensa.numerics.formats.quantize`)."""
    return float(quantize(float(value), fmt))


def accumulate(w: float, update: float, steps: int, fmt: str | FloatFormat) -> float:
    """The weight after adding ``update`` to ``w`` ``steps`` times in ``fmt``.

    ``w`` is first stored in ``fmt``, ``update`` is the value the optimizer
    computed in that format (so it is rounded too), and every sum is rounded
    to ``fmt``. ``steps`` must be a non-negative int. Once a sum rounds back
    to the same weight the rest of the updates are lost as well, so the loop
    stops there. inf or NaN in, inf or NaN out.
    """
    if steps < 0:
        raise ValueError("steps must be >= 0")
    f = get_format(fmt)
    rnd = scalar_rounder(f)  # the loop rounds one value at a time: quantize's numpy overhead would dominate
    value = rnd(float(w))
    step = rnd(float(update))
    for _ in range(steps):
        new = rnd(value + step)
        if new == value:
            break
        value = new
    return value


def total_change(w: float, update: float, steps: int, fmt: str | FloatFormat) -> float:
    """accumulate(...) minus the stored starting weight: what the updates achieved."""
    start = round_scalar(w, fmt)
    return accumulate(w, update, steps, fmt) - start


def is_update_lost(w: float, update: float, fmt: str | FloatFormat) -> bool:
    """True when w + update, rounded to ``fmt``, is the stored w again."""
    f = get_format(fmt)
    start = round_scalar(w, f)
    return round_scalar(start + round_scalar(update, f), f) == start


@dataclass(frozen=True)
class MasterWeightExample:
    """Step 4's example: one weight ``w`` and one ``update``, in a 16-bit format and with an FP32 master copy.

    ``spacing``: the gap between ``fmt`` values at ``w``; ``w_stored``: ``w``
    as ``fmt`` stores it; ``after_one``: that weight after one update, all in
    ``fmt``; ``grid``: the ``fmt`` values near ``w`` (enough to show
    ``ticks_each_side`` spacings, and the update itself); ``exact_change``,
    ``fp32_change`` and ``low_change``: what ``steps`` updates add exactly, to an
    FP32 master copy, and to a weight kept in ``fmt``; ``ratio``: the update
    over the spacing (below one half, a single update is lost).
    """

    w: float
    update: float
    steps: int
    spacing: float
    w_stored: float
    after_one: float
    grid: NDArray[np.float64]
    exact_change: float
    fp32_change: float
    low_change: float

    @property
    def ratio(self) -> float:
        return self.update / self.spacing


# The number line reaches a little past the update itself, so its mark is never on the edge.
REACH_PAST_UPDATE = 1.05


def master_weight_example(
    w: float, update: float, steps: int, fmt: str | FloatFormat = "fp16", ticks_each_side: int = 4
) -> MasterWeightExample:
    """Everything step 4 draws for one weight and update (see :class:`MasterWeightExample`)."""
    f = get_format(fmt)
    gap = float(spacing(w, f))
    w_stored = round_scalar(w, f)
    reach = max(ticks_each_side * gap, update * REACH_PAST_UPDATE)
    return MasterWeightExample(
        w=w,
        update=update,
        steps=steps,
        spacing=gap,
        w_stored=w_stored,
        after_one=round_scalar(w_stored + round_scalar(update, f), f),
        grid=representable_between(w_stored - reach, w_stored + reach, f),
        exact_change=steps * update,
        fp32_change=total_change(w, update, steps, "fp32"),
        low_change=total_change(w, update, steps, f),
    )


# --- what one update does to a weight held in each format ------------------------------------

Outcome = Literal["exact", "rounded", "lost"]
Direction = Literal["lost", "exact", "up", "down"]  # "rounded" split by the sign of the error
Regime = Literal["lost", "exact", "close", "up", "down"]  # "up" and "down" only when the rounding is noticeable

# The notes' worked example: a learning rate times a gradient, an update of EXAMPLE_LR * EXAMPLE_GRAD.
EXAMPLE_LR = 1e-4
EXAMPLE_GRAD = 1e-3

# Step 4 calls FP32's rounding of an update out, with its share and its reason, once it is off by more than this.
NOTICEABLE_ROUNDING = 0.01


@dataclass(frozen=True)
class UpdateOutcome:
    """One update added once to a weight held in ``fmt``.

    ``applied`` is what the stored weight moves by (the weight after the step,
    rounded to ``fmt``, minus the weight before, both as ``fmt`` stores them);
    ``spacing`` is the gap between ``fmt`` values at the weight. ``kind`` is
    ``"lost"`` when the weight does not move, ``"exact"`` when it moves by the
    update exactly, and ``"rounded"`` otherwise; ``error`` is applied ÷ update − 1
    (positive: rounded up, so the weight moves further than asked).
    """

    fmt: str
    w: float
    update: float
    applied: float
    spacing: float

    @property
    def kind(self) -> Outcome:
        if self.applied == 0.0:
            return "lost"
        return "exact" if self.applied == self.update else "rounded"

    @property
    def error(self) -> float:
        return self.applied / self.update - 1.0

    @property
    def error_size(self) -> float:
        """How far off the stored update is, as a share of the update: |applied ÷ update − 1|."""
        return abs(self.error)

    @property
    def noticeable(self) -> bool:
        """True when the update is kept but rounded by more than :data:`NOTICEABLE_ROUNDING`."""
        return self.kind == "rounded" and abs(self.error) > NOTICEABLE_ROUNDING

    @property
    def direction(self) -> Direction:
        """lost, exact, or which way the update was rounded."""
        if self.kind != "rounded":
            return self.kind
        return "up" if self.error > 0 else "down"

    @property
    def regime(self) -> Regime:
        """How step 4 words it: lost, exact, ``"close"`` (rounded by at most NOTICEABLE_ROUNDING), up or down."""
        if self.kind == "rounded" and not self.noticeable:
            return "close"
        return self.direction


def update_outcome(w: float, update: float, fmt: str | FloatFormat) -> UpdateOutcome:
    """What a weight ``w`` held in ``fmt`` does with one ``update`` (a positive, finite number).

    The update is first computed in ``fmt`` (rounded to it), as in :func:`accumulate`;
    the error is measured against the exact ``update``.
    """
    if not (math.isfinite(update) and update > 0):
        raise ValueError(f"an update must be a positive finite number, not {update!r}")
    f = get_format(fmt)
    start = round_scalar(w, f)
    after = round_scalar(start + round_scalar(update, f), f)
    return UpdateOutcome(f.name, float(w), float(update), after - start, float(spacing(w, f)))


# --- a recorded update, added to a weight held in a format ----------------------------------------------------

# The format of the master copy: it holds the weight as the run itself holds it.
MASTER_FORMAT = "fp32"


def lost_updates(w_before: ArrayLike, w_after: ArrayLike, fmt: str | FloatFormat) -> int:
    """How many non-zero updates ``u = w_after - w_before`` (float32 arithmetic) a weight held in ``fmt`` loses.

    The definition of :func:`lensa.runstats.summarize_update`, for any format: with ``q`` = ``w_before``
    stored in ``fmt``, an update is lost when ``q + u``, added in float32 and stored in ``fmt``, is ``q``
    again. With ``fmt`` FP32, ``q`` is ``w_before`` itself: the master copy. A NaN update is never lost (NaN
    equals nothing). Arrays of different shapes raise ValueError.
    """
    before, after = np.asarray(w_before, np.float32), np.asarray(w_after, np.float32)
    if before.shape != after.shape:
        raise ValueError(f"w_before has shape {before.shape} but w_after has {after.shape}")
    f = get_format(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        update = after - before
        stored = quantize(before, f).astype(np.float32)  # exact: a format no wider than FP32
        again = quantize(stored + update, f).astype(np.float32)
    return int(np.count_nonzero((update != 0) & (again == stored)))


def master_lost_count(nonzero: int) -> int:
    """How many of ``nonzero`` recorded non-zero updates an FP32 master copy loses: none, whatever the run.

    A recorded update is ``u = fl(a - b)`` with ``b`` the weight before and ``a`` after, both float32, and the
    master copy holds ``b`` itself. If the subtraction is exact, ``b + u = a``, which is representable and is
    not ``b`` (u is not 0). If it is not exact, ``a`` and ``b`` are not within a factor of two of each other
    with the same sign (Sterbenz's lemma; with subnormals a difference below the normal range is exact too), so
    ``|a - b| >= |b| / 2`` and, rounding being monotonic, ``|u| >= |b| / 2``: far more than the half spacing
    at ``b`` that rounding back to ``b`` allows. A ``b`` of 0 gives ``u`` itself, an overflowing ``u`` gives
    inf. So the FP32 row is computed, not assumed: :func:`lost_updates` with FP32 counts 0 on any arrays,
    which tests/test_core_units.py checks on float32 pairs of every kind and on every pair of a small format.
    A negative count raises ValueError.
    """
    if nonzero < 0:
        raise ValueError(f"a count of updates is >= 0, not {nonzero}")
    return 0
