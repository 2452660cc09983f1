"""The "Training below 16 bits" page's numbers, as pure functions: control state in, everything a part shows out.

Three parts, each one function returning a frozen dataclass of the numbers, arrays and sentence values it shows:

- :func:`rounding_view`: one value between two neighbours of FP4 E2M1's grid, rounded many times, as a gradient is
  at every step: round-to-nearest gives the same neighbour every time and loses the difference every time;
  stochastic rounding gives the upper one with probability p (where the value lies between them), so the mean
  of its roundings tends to the value itself. The draws are numpy's, from :data:`ROUNDING_SEED`.
- :func:`rotation_view`: a block of 16 values with one outlier, before and after the 16-point Hadamard rotation
  (:func:`lensa.numerics.training_recipes.hadamard_matrix`), stored in MXFP4 (its E8M0 scale, a power of two, shows the
  block's amax directly): the scale, what is flushed, and the SQNR of the block and of its other values.
- :func:`comparison_view`: the shipped comparison of the recipes on the reference transformer
  (:data:`RECORDED`, made by ``python -m lensa.live.lowp_reference``): each arm's loss per step, its final loss,
  its gap to BF16's and FP32's, whether it diverged, and what its layers flushed and saturated.

numpy only (no torch): the lesson pages run without it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from lensa.numerics import blockscale
from lensa.numerics.formats import get_format, quantize
from lensa.numerics.training_recipes import TRAINING_RECIPES, diverged, final_loss, hadamard_matrix
from lensa.runstats import reference_run

# --- stochastic rounding ----------------------------------------------------------------------------------------

ROUNDING_FORMAT = "fp4_e2m1"
ROUNDING_LOW = 1.0
"""The value the learner drags lies between E2M1's 1 and its next value up, 1.5."""
ROUNDING_DRAWS = 200
ROUNDING_SEED = 32


@dataclass(frozen=True)
class RoundingView:
    """``value`` = ``low`` + ``position`` × ``step``, between two neighbours of the grid (``low``, ``high``).

    ``nearest``: what round-to-nearest gives (every time), ``nearest_error`` its distance from the value.
    ``p_up``: stochastic rounding's probability of ``high``; ``ups``: how many of the ``draws`` went up;
    ``means``: the mean of the first n roundings, n = 1 .. draws; ``mean``, ``mean_error``: after all of them;
    ``standard_error``: the spread such a mean has, step × sqrt(p (1 − p) / draws).
    """

    position: float
    value: float
    low: float
    high: float
    step: float
    nearest: float
    nearest_error: float
    p_up: float
    draws: int
    ups: int
    means: NDArray[np.float64]
    mean: float
    mean_error: float
    standard_error: float


def rounding_view(position: float, draws: int = ROUNDING_DRAWS, seed: int = ROUNDING_SEED) -> RoundingView:
    """A value ``position`` of the way from E2M1's 1 to 1.5 (0 ≤ position ≤ 1), rounded ``draws`` times."""
    if not 0.0 <= position <= 1.0:
        raise ValueError(f"position must lie in [0, 1], not {position!r}")
    f = get_format(ROUNDING_FORMAT)
    low = ROUNDING_LOW
    step = math.ldexp(1.0, math.floor(math.log2(low)) - f.significand_bits)
    high = low + step
    value = low + position * step
    nearest = float(quantize(np.array([value]), f)[0])
    p = (value - low) / step
    up = np.random.default_rng(seed).random(draws) < p
    rounded = np.where(up, high, low)
    means = np.cumsum(rounded) / np.arange(1, draws + 1)
    return RoundingView(
        position=position,
        value=value,
        low=low,
        high=high,
        step=step,
        nearest=nearest,
        nearest_error=abs(nearest - value),
        p_up=p,
        draws=draws,
        ups=int(up.sum()),
        means=means,
        mean=float(means[-1]),
        mean_error=abs(float(means[-1]) - value),
        standard_error=step * math.sqrt(p * (1.0 - p) / draws),
    )


# --- the rotation -----------------------------------------------------------------------------------------------

ROTATION_RECIPE = "mxfp4_e2m1"
ROTATION_SIZE = 16
OUTLIER_AT = 3
OUTLIER_POSITION = OUTLIER_AT + 1  # the outlier's place as a reader counts, from 1
RECOVERED_DB = 1.0  # the rotation recovers the other values when their SQNR rises by more than this (dB)
ROTATION_SEED = 32
ROTATION_SPREAD = 0.01
"""The block: 16 values drawn from a normal distribution times 0.01, value 4 set to 2**k times the largest other."""


RotationVerdict = Literal["same_scale", "recovers", "spreads"]


@dataclass(frozen=True)
class RotationView:
    """One block before and after the rotation, as MXFP4 stores each.

    ``values`` and ``rotated`` (16 each); ``amax`` and ``rotated_amax``; ``scale`` and ``rotated_scale`` (the E8M0
    block scales, powers of two; ``scale_exponent`` and ``rotated_scale_exponent`` their exponents); ``stored``
    (the block as MXFP4 stores it) and ``restored`` (the rotated block as MXFP4 stores it, rotated back);
    ``flushed`` and ``rotated_flushed``: how many values not 0 were stored as 0 (of the block; of the rotated
    block); ``sqnr_db`` and ``restored_sqnr_db`` of the whole block, ``others_sqnr_db`` and
    ``restored_others_sqnr_db`` of its other 15 values only.
    """

    outlier_log2: float
    values: NDArray[np.float64]
    rotated: NDArray[np.float64]
    amax: float
    rotated_amax: float
    scale: float
    rotated_scale: float
    scale_exponent: int
    rotated_scale_exponent: int
    stored: NDArray[np.float64]
    restored: NDArray[np.float64]
    flushed: int
    rotated_flushed: int
    sqnr_db: float
    restored_sqnr_db: float
    others_sqnr_db: float
    restored_others_sqnr_db: float

    @property
    def verdict(self) -> RotationVerdict:
        """What the rotation did to the block: ``"same_scale"`` (the rotated block keeps the block's scale: its
        largest value has the same power of two at or below it, so only where the values fall between FP4's steps
        changes), else the scale drops and ``"recovers"`` (the other 15 values' SQNR rises by more than
        :data:`RECOVERED_DB`) or ``"spreads"``. The explanations of the last two say the scale drops: at every stop
        of the page's slider a changed scale is a lower one (tests/test_lowp_lesson.py checks it)."""
        if self.rotated_scale_exponent == self.scale_exponent:
            return "same_scale"
        return "recovers" if self.restored_others_sqnr_db > self.others_sqnr_db + RECOVERED_DB else "spreads"


def outlier_times(outlier_log2: float) -> float:
    """How many times the largest other value the outlier is: 2**``outlier_log2``."""
    return float(2.0**outlier_log2)


def outlier_block(outlier_log2: float) -> NDArray[np.float32]:
    """The block the rotation part shows (see :data:`ROTATION_SPREAD`)."""
    x = (np.random.default_rng(ROTATION_SEED).standard_normal(ROTATION_SIZE) * ROTATION_SPREAD).astype(np.float32)
    others = np.abs(np.delete(x, OUTLIER_AT))
    x[OUTLIER_AT] = np.float32(float(others.max()) * 2.0**outlier_log2)
    return x


def rotation_view(outlier_log2: float) -> RotationView:
    """The block with its outlier 2**``outlier_log2`` times the largest other value, before and after rotating."""
    x = outlier_block(outlier_log2)
    r = hadamard_matrix()
    rotated = (x.astype(np.float64) @ r).astype(np.float32)
    plain, turned = blockscale.encode(x, ROTATION_RECIPE), blockscale.encode(rotated, ROTATION_RECIPE)
    restored = turned.stored @ r.T
    others = np.arange(ROTATION_SIZE) != OUTLIER_AT
    return RotationView(
        outlier_log2=outlier_log2,
        values=x.astype(np.float64),
        rotated=rotated.astype(np.float64),
        amax=float(np.abs(x).max()),
        rotated_amax=float(np.abs(rotated).max()),
        scale=float(plain.block_scales[0]),
        rotated_scale=float(turned.block_scales[0]),
        scale_exponent=int(np.log2(plain.block_scales[0])),
        rotated_scale_exponent=int(np.log2(turned.block_scales[0])),
        stored=plain.stored,
        restored=restored,
        flushed=int(np.count_nonzero((x != 0) & (plain.stored == 0))),
        rotated_flushed=int(np.count_nonzero((rotated != 0) & (turned.stored == 0))),
        sqnr_db=blockscale.sqnr_db(x, plain.stored),
        restored_sqnr_db=blockscale.sqnr_db(x, restored),
        others_sqnr_db=blockscale.sqnr_db(x[others], plain.stored[others]),
        restored_others_sqnr_db=blockscale.sqnr_db(x[others], restored[others]),
    )


# --- the recorded comparison --------------------------------------------------------------------------------------

RECORDED = Path(__file__).resolve().parent.parent / "data" / "reference_recipes.npz"  # lensa/data
BASES = ("fp32", "bf16")


@dataclass(frozen=True)
class RecordedRecipes:
    """The shipped comparison: ``arms`` in run order, ``losses`` (arms × steps), per arm, layer and tensor the
    counts (values, not 0, flushed, saturated) summed over ``counted_steps``, and the run's ``meta`` (its recipe,
    seed, command, torch version and kernels, seconds per arm)."""

    arms: tuple[str, ...]
    layers: tuple[str, ...]
    roles: tuple[str, ...]
    losses: NDArray[np.float32]
    counts: NDArray[np.int64]
    meta: dict[str, object]

    @property
    def counted_steps(self) -> tuple[int, ...]:
        steps = self.meta.get("counted_steps", [])
        return tuple(int(s) for s in steps) if isinstance(steps, list) else ()

    def losses_of(self, arm: str) -> NDArray[np.float32]:
        row: NDArray[np.float32] = self.losses[self.arms.index(arm)]
        return row


@cache
def recorded(path: Path = RECORDED) -> RecordedRecipes:
    """The shipped comparison (read once per process)."""
    with np.load(path, allow_pickle=False) as f:
        return RecordedRecipes(
            arms=tuple(str(a) for a in f["arms"]),
            layers=tuple(str(a) for a in f["layers"]),
            roles=tuple(str(a) for a in f["roles"]),
            losses=f["losses"].astype(np.float32),
            counts=f["counts"].astype(np.int64),
            meta=json.loads(str(f["meta"])),
        )


@dataclass(frozen=True)
class ArmSummary:
    """One arm of the comparison: its final loss (:func:`lensa.numerics.training_recipes.final_loss`), the gaps to
    BF16's and FP32's final losses in percent of them, whether it diverged
    (:func:`lensa.numerics.training_recipes.diverged`), and the largest shares of one layer's tensor flushed and
    saturated (0 for FP32 and BF16, which quantize nothing)."""

    arm: str
    final_loss: float
    gap_bf16_pct: float
    gap_fp32_pct: float
    diverged: bool
    flushed: float
    flushed_at: tuple[str, str] | None
    saturated: float
    saturated_at: tuple[str, str] | None

    @property
    def gap_bf16(self) -> float:
        """:attr:`gap_bf16_pct` as a share (0.01 for 1%), as a page writes it."""
        return self.gap_bf16_pct / 100.0


@dataclass(frozen=True)
class ComparisonView:
    """What the recorded part shows for one chosen ``recipe``: every arm's summary (``summaries``, run order), the
    chosen one's losses beside FP32's and BF16's (``curves``: arm -> losses; ``relative``: FP32's and the chosen one's
    over BF16's, :func:`relative_to_bf16`), the chosen one's layers (``layer_rows``:
    layer, tensor, values, share flushed, share saturated), and the sentence values: how many recipes ended within
    ``close_pct`` of BF16 (``close``, of ``recipes``), which diverged, the NVFP4 ablation's gaps (``ablation``)."""

    recipe: str
    summaries: tuple[ArmSummary, ...]
    curves: dict[str, NDArray[np.float32]]
    relative: dict[str, NDArray[np.float64]]
    layer_rows: tuple[tuple[str, str, int, float, float], ...]
    close_pct: float
    close: tuple[str, ...]
    recipes: tuple[str, ...]
    diverged: tuple[str, ...]
    ablation: dict[str, float]
    steps: int
    seed: int
    command: str
    parameters: int

    @property
    def paper_times(self) -> tuple[float, float]:
        """How many times the recorded model's :attr:`parameters` the NVFP4 papers' models have: *FP4 All the
        Way*'s, then NVIDIA's."""
        if self.parameters <= 0:
            return (math.nan, math.nan)
        return (FP4_ALL_THE_WAY_RUN[0] / self.parameters, NVIDIA_NVFP4_RUN[0] / self.parameters)

    @property
    def close_share(self) -> float:
        """:attr:`close_pct` as a share."""
        return self.close_pct / 100.0

    @property
    def ablation_shares(self) -> dict[str, float]:
        """:attr:`ablation`'s gaps as shares."""
        return {arm: gap / 100.0 for arm, gap in self.ablation.items()}


# The NVFP4 papers' training runs, beside which the recorded model is small: (parameters, tokens trained).
FP4_ALL_THE_WAY_RUN = (7e9, 200e9)  # Chmiel et al., arXiv:2505.19115, abstract: a 7B model, up to 200B tokens
NVIDIA_NVFP4_RUN = (12e9, 10e12)  # NVIDIA, arXiv:2509.25149, abstract: a 12B model on 10T tokens

NVFP4_ABLATION = ("nvfp4", "nvfp4_sr", "nvfp4_rht", "nvfp4_2d", "nvfp4_recipe")
CLOSE_PCT = 1.0
RELATIVE_WINDOW = 10
"""The step-by-step comparison divides the mean loss of the last 10 steps (fewer at the start) by BF16's: one step's
ratio jumps with that step alone (around the learning rate's peak, at the end of the warm-up, by tens of percent)."""


def relative_to_bf16(
    losses: NDArray[np.floating[Any]], bf16: NDArray[np.floating[Any]], window: int = RELATIVE_WINDOW
) -> NDArray[np.float64]:
    """Per step, 100 × (the mean of ``losses`` over the last ``window`` steps / BF16's over the same steps − 1)."""
    a, b = np.asarray(losses, np.float64), np.asarray(bf16, np.float64)

    def trailing(x: NDArray[np.float64]) -> NDArray[np.float64]:
        c = np.concatenate([[0.0], np.cumsum(x)])
        n = np.arange(1, x.size + 1)
        lo = np.maximum(n - window, 0)
        out: NDArray[np.float64] = (c[n] - c[lo]) / (n - lo)
        return out

    out: NDArray[np.float64] = 100.0 * (trailing(a) / trailing(b) - 1.0)
    return out


def _shares(counts: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Shares flushed (of the values not 0) and saturated (of all) from counts (..., 4)."""
    values, nonzero, flushed, saturated = (counts[..., i].astype(np.float64) for i in range(4))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nonzero > 0, flushed / nonzero, 0.0), np.where(values > 0, saturated / values, 0.0)


def summarize(data: RecordedRecipes, arm: str) -> ArmSummary:
    losses = data.losses_of(arm)
    final = final_loss(losses)
    base = {b: final_loss(data.losses_of(b)) for b in BASES if b in data.arms}
    flushed, saturated = _shares(data.counts[data.arms.index(arm)])

    def worst(share: NDArray[np.float64]) -> tuple[float, tuple[str, str] | None]:
        if not share.size or float(share.max()) == 0.0:
            return 0.0, None
        j, k = np.unravel_index(int(np.argmax(share)), share.shape)
        return float(share[j, k]), (data.layers[j], data.roles[k])

    f, f_at = worst(flushed)
    s, s_at = worst(saturated)
    return ArmSummary(
        arm=arm,
        final_loss=final,
        gap_bf16_pct=(final - base["bf16"]) / base["bf16"] * 100.0 if "bf16" in base else math.nan,
        gap_fp32_pct=(final - base["fp32"]) / base["fp32"] * 100.0 if "fp32" in base else math.nan,
        diverged=diverged(losses),
        flushed=f,
        flushed_at=f_at,
        saturated=s,
        saturated_at=s_at,
    )


def _parameters(recipe_meta: object) -> int:
    """The recorded model's parameter count from the run's recipe; 0 where the file does not give its sizes."""
    try:
        return reference_run.parameters(recipe_meta) if isinstance(recipe_meta, dict) else 0
    except (KeyError, TypeError, ValueError):
        return 0


def comparison_view(recipe: str, data: RecordedRecipes | None = None) -> ComparisonView:
    """The recorded part for ``recipe`` (a key of :data:`lensa.numerics.training_recipes.TRAINING_RECIPES` the run
    holds)."""
    data = recorded() if data is None else data
    if recipe not in data.arms or recipe in BASES:
        raise ValueError(f"the recorded comparison has no recipe {recipe!r}")
    summaries = tuple(summarize(data, a) for a in data.arms)
    by_arm = {s.arm: s for s in summaries}
    recipes = tuple(a for a in data.arms if a in TRAINING_RECIPES)
    i = data.arms.index(recipe)
    flushed, saturated = _shares(data.counts[i])
    rows = tuple(
        (layer, role, int(data.counts[i, j, k, 0]), float(flushed[j, k]), float(saturated[j, k]))
        for j, layer in enumerate(data.layers)
        for k, role in enumerate(data.roles)
        if data.counts[i, j, k, 0] > 0
    )
    meta = data.meta
    recipe_meta = meta.get("recipe", {})
    steps = int(recipe_meta["steps"]) if isinstance(recipe_meta, dict) and "steps" in recipe_meta else 0
    steps = steps or int(data.losses.shape[1])
    return ComparisonView(
        recipe=recipe,
        summaries=summaries,
        curves={a: data.losses_of(a) for a in (*BASES, recipe) if a in data.arms},
        relative={a: relative_to_bf16(data.losses_of(a), data.losses_of("bf16")) for a in ("fp32", recipe)},
        layer_rows=rows,
        close_pct=CLOSE_PCT,
        close=tuple(a for a in recipes if by_arm[a].gap_bf16_pct <= CLOSE_PCT and not by_arm[a].diverged),
        recipes=recipes,
        diverged=tuple(a for a in recipes if by_arm[a].diverged),
        ablation={a: by_arm[a].gap_bf16_pct for a in NVFP4_ABLATION if a in by_arm},
        steps=steps,
        seed=int(str(meta.get("seed", 0))),
        command=str(meta.get("command", "")),
        parameters=_parameters(recipe_meta),
    )
