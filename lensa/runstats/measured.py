"""What the lesson's steps 2–5 say about a recorded run: shares, loss scales and lost updates, from run statistics.

Everything here reads :class:`lensa.runstats.RunStats` and :class:`lensa.runstats.TensorStats` and returns
plain numbers; the view formats them. Shares are fractions (0..1) of the *non-zero* values of a tensor
(exact zeros are stored exactly by every format, so they are neither lost nor kept; NaN counts in the
denominator and in no class). A record with no non-zero value gives NaN shares.

This module imports numpy and the core only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from lensa.models.master import MASTER_FORMAT, master_lost_count
from lensa.numerics.formats import FORMATS, cast, get_format
from lensa.runstats import RunStats, TensorStats, combine, combine_over_ranks
from lensa.runstats.binning import CELL_CLASSES, cell_classes

ALL_LAYERS = "all"
ZONES: tuple[str, ...] = CELL_CLASSES  # zero, subnormal, normal, overflow: what a format does to a value
KEEP_SHARE = 0.999  # the smallest useful loss scale keeps all but 0.1% of the non-zero gradients from rounding to 0
# Loss scales searched for the two bounds: 2**-64 ... 2**64 reaches past every float32 gradient's need.
SCALE_SEARCH = range(-64, 65)


def arms_of(runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats]) -> dict[str, RunStats]:
    """A run or several (one per arm) as {arm: run}; the arm's name from the mapping or the run's meta["arm"].

    TypeError when there is no run in it.
    """
    if isinstance(runs, RunStats):
        runs = [runs]
    if isinstance(runs, Mapping):
        items = list(runs.items())
    else:
        items = [(str(r.meta.get("arm", i)), r) for i, r in enumerate(runs)]
    out = {str(arm): run for arm, run in items if isinstance(run, RunStats)}
    if not out:
        raise TypeError("need a RunStats, or a mapping or sequence of them")
    return out


def tensors_arm(arms: Mapping[str, RunStats]) -> str:
    """The arm whose tensors steps 2-5 read: FP32 where there is one (its values are the run's true ones), else
    the arm with most tensor statistics (the first of those)."""
    if "fp32" in arms:
        return "fp32"
    return max(arms, key=lambda arm: len(arms[arm]))


def scaler_arm(arms: Mapping[str, RunStats]) -> str | None:
    """The first arm with a loss-scale history (step 3's dynamic run), or None."""
    return next((arm for arm, run in arms.items() if run.loss_scales()), None)


def tensor_stats(run: RunStats, kind: str, layer: str, step: int) -> TensorStats:
    """The statistics of one tensor, or of every tensor of ``kind`` recorded at ``step`` together (``layer="all"``).

    KeyError when ``layer`` was not recorded at ``step``; an empty record when nothing of ``kind`` was.
    """
    if layer != ALL_LAYERS:
        return run.get(kind, layer, step)
    return combine(_recorded(run, kind, step).values())


def _recorded(run: RunStats, kind: str, step: int) -> dict[str, TensorStats]:
    out = {}
    for name in run.names(kind):
        try:
            out[name] = run.get(kind, name, step)
        except KeyError:
            continue  # this tensor was not recorded at this step
    return out


def layers_at(run: RunStats, kind: str, step: int) -> dict[str, TensorStats]:
    """Each tensor of ``kind`` recorded at ``step``, by name, in the model's order."""
    return _recorded(run, kind, step)


def zone_counts(stats: TensorStats, fmt: str = "fp16", scale_exp: int = 0) -> dict[str, int]:
    """Non-zero values by what ``fmt`` does to them after scaling by 2**scale_exp (±inf in ``overflow``), and NaNs."""
    c = stats.counts(fmt, scale_exp=scale_exp)
    return {zone: c[zone] for zone in ZONES} | {"nan": c["nan"]}


def zone_shares(stats: TensorStats, fmt: str = "fp16", scale_exp: int = 0) -> dict[str, float]:
    """Share of the non-zero values in each zone of ``fmt`` after scaling by 2**scale_exp (NaN if there are none)."""
    counts = zone_counts(stats, fmt, scale_exp)
    n = stats.nonzero
    return {zone: counts[zone] / n if n else math.nan for zone in ZONES}


@dataclass(frozen=True)
class ZoneHistogram:
    """Finite non-zero values per binade (|x| in [2**e, 2**(e+1)), after scaling), split by zone."""

    exponents: NDArray[np.int64]
    counts: dict[str, NDArray[np.int64]]  # zone -> count per exponent

    @property
    def total(self) -> int:
        return int(sum(int(c.sum()) for c in self.counts.values()))


def zone_histogram(stats: TensorStats, fmt: str = "fp16", scale_exp: int = 0) -> ZoneHistogram:
    """The binade histogram of ``stats`` times 2**scale_exp, each binade's values split by what ``fmt`` does.

    Exact: a binade can hold values of two zones (the top of FP16's largest binade overflows, the bottom of
    the binade at half the smallest subnormal rounds to 0), and each significand interval of the run
    statistics lies in one zone. ±inf, NaN and exact zeros have no binade and are left out.
    """
    table = stats.table
    exponents = np.arange(table.shape[0], dtype=np.int64) + stats.binade_lo + int(scale_exp)
    if not table.size:
        return ZoneHistogram(exponents, {zone: np.zeros(0, np.int64) for zone in ZONES})
    zone = cell_classes(fmt, exponents)  # the class table the counts read: one definition of a cell's zone
    counts = {z: np.where(zone == i, table, 0).sum(axis=1).astype(np.int64) for i, z in enumerate(ZONES)}
    return ZoneHistogram(exponents, counts)


@dataclass(frozen=True)
class ScaleSweep:
    """Shares of the non-zero gradients lost to 0 and to inf at each loss scale S = 2**k."""

    ks: tuple[int, ...]
    zero: tuple[float, ...]
    overflow: tuple[float, ...]


def scale_sweep(stats: TensorStats, ks: Sequence[int], fmt: str = "fp16") -> ScaleSweep:
    """For each k, the shares of the non-zero values that round to 0 and that overflow after scaling by 2**k."""
    shares = [zone_shares(stats, fmt, k) for k in ks]
    return ScaleSweep(tuple(int(k) for k in ks), tuple(s["zero"] for s in shares), tuple(s["overflow"] for s in shares))


@dataclass(frozen=True)
class ScaleBounds:
    """The two loss scales of a gradient record (as k in S = 2**k), or None where no S in the search does it.

    ``keep_k``: the smallest S that keeps all but ``1 - KEEP_SHARE`` of the non-zero gradients from
    rounding to 0. ``safe_k``: the largest S at which none overflows.
    """

    keep_k: int | None
    safe_k: int | None

    @property
    def window(self) -> bool:
        """Whether some S does both (the keep scale is no larger than the safe one)."""
        return self.keep_k is not None and self.safe_k is not None and self.keep_k <= self.safe_k


def scale_bounds(stats: TensorStats, fmt: str = "fp16", keep: float = KEEP_SHARE) -> ScaleBounds:
    """The smallest S = 2**k keeping ``keep`` of the non-zero values from 0, and the largest that overflows none.

    Searched over k in -64 ... 64. Rounding to 0 only falls as k grows and overflow only rises, so the
    first k and the last k are the answers. ±inf values overflow at every S: then no safe S exists.
    With no non-zero value both are None.
    """
    n = stats.nonzero
    if not n:
        return ScaleBounds(None, None)
    keep_k = safe_k = None
    for k in SCALE_SEARCH:
        counts = zone_counts(stats, fmt, k)
        if keep_k is None and counts["zero"] <= (1 - keep) * n:
            keep_k = k
        if counts["overflow"] == 0:
            safe_k = k
        elif keep_k is not None:
            break  # overflow only grows with k: both answers are known
    return ScaleBounds(keep_k, safe_k)


def rescaled_formats(stats: TensorStats, fmts: Sequence[str]) -> dict[str, int]:
    """Each of ``fmts`` that its safe scale (:func:`scale_bounds`' ``safe_k``) changes, with that exponent k.

    Two kinds are left out, for different reasons: a format with no safe scale (``safe_k`` None: some value
    is ±inf, so every S overflows, or no value is non-zero), and one whose safe scale is S = 1 (k = 0), where
    the scaled values are the recorded ones. A negative k (the values must shrink to fit) is kept.
    """
    out = {}
    for f in fmts:
        k = scale_bounds(stats, f).safe_k
        if k is not None and k != 0:
            out[f] = k
    return out


def mean_relative_errors(stats: TensorStats, fmts: Sequence[str]) -> dict[str, float]:
    """Mean relative error of each format over the finite non-zero values (1.0 = 100%; inf if one overflows)."""
    return {f: stats.mean_relative_error(f) for f in fmts}


def lost_share(stats: TensorStats, fmt: str) -> float:
    """Share of the non-zero updates that a weight held in ``fmt`` would lose (NaN when there are none).

    ``fmt`` FP32 is the master copy: for an update read as after − before of an FP32 weight the record keeps no
    count for it, and :func:`lensa.models.master.master_lost_count` gives it (none); for an intended update (a weight of
    a narrow type, file version 3) the record counts what an FP32 weight would lose of it. A record that is not an
    update raises ValueError.
    """
    if stats.lost_counts is None:
        raise ValueError("a lost share needs the statistics of an update, made by summarize_update")
    n = stats.nonzero
    if get_format(fmt).name == MASTER_FORMAT:
        lost = master_lost_count(n) if stats.lost_fp32 is None else stats.lost_fp32
    else:
        lost = stats.lost(fmt)
    return lost / n if n else math.nan


@dataclass(frozen=True)
class LayerRow:
    """One tensor at one step: its name, its number of non-zero values, and shares per (format, zone)."""

    name: str
    nonzero: int
    shares: dict[str, dict[str, float]]  # format -> zone -> share
    errors: dict[str, float]  # format -> mean relative error


def layer_rows(run: RunStats, kind: str, step: int, fmts: Sequence[str] = ("fp16",)) -> list[LayerRow]:
    """Every tensor of ``kind`` at ``step``, the ones that lose most to 0 in ``fmts[0]`` first (then by subnormals).

    Tensors without a non-zero value go last.
    """
    rows = [
        LayerRow(
            name,
            s.nonzero,
            {f: zone_shares(s, f) for f in fmts},
            mean_relative_errors(s, fmts),
        )
        for name, s in layers_at(run, kind, step).items()
    ]

    def order(row: LayerRow) -> tuple[float, float]:
        first = row.shares[fmts[0]]
        if not row.nonzero:
            return (1.0, 1.0)
        return (-first["zero"], -first["subnormal"])

    return sorted(rows, key=order)


@dataclass(frozen=True)
class LostRow:
    name: str
    nonzero: int
    lost: dict[str, float]  # format -> share of non-zero updates lost


def lost_by_layer(run: RunStats, step: int, fmts: Sequence[str]) -> list[LostRow]:
    """The share of each weight's updates at ``step`` that a weight held in each format would lose, model order."""
    return [
        LostRow(name, s.nonzero, {f: lost_share(s, f) for f in fmts})
        for name, s in layers_at(run, "update", step).items()
        if s.lost_counts is not None
    ]


def lost_over_training(run: RunStats, layer: str, fmts: Sequence[str]) -> tuple[list[int], dict[str, list[float]]]:
    """Per recorded step: the share of updates (one tensor's, or all) that each format would lose."""
    steps: list[int] = []
    shares: dict[str, list[float]] = {f: [] for f in fmts}
    for step in run.steps("update"):
        try:
            stats = tensor_stats(run, "update", layer, step)
        except KeyError:
            continue
        if stats.lost_counts is None or not stats.nonzero:
            continue
        steps.append(step)
        for f in fmts:
            shares[f].append(lost_share(stats, f))
    return steps, shares


@dataclass(frozen=True)
class ScalerHistory:
    """A recorded loss-scale history: the steps, log2 of the scale at each, and whether each was skipped."""

    steps: tuple[int, ...]
    log2_scales: tuple[float, ...]
    skipped: tuple[bool, ...]

    @property
    def skipped_steps(self) -> tuple[int, ...]:
        return tuple(s for s, k in zip(self.steps, self.skipped, strict=True) if k)

    @property
    def first_k(self) -> int:
        """The exponent k of the first step's scale S = 2**k (nearest whole k)."""
        return round(self.log2_scales[0])

    @property
    def last_k(self) -> int:
        """The exponent k of the last step's scale (nearest whole k)."""
        return round(self.log2_scales[-1])


class ScaleStep(Protocol):
    """A step of a loss-scaling run: :class:`lensa.models.scaling.ScalerStep`, or a live run's ``TraceStep`` (read
    only)."""

    @property
    def step(self) -> int: ...

    @property
    def scale(self) -> float: ...

    @property
    def skipped(self) -> bool: ...


def history_of(run: Sequence[ScaleStep]) -> ScalerHistory:
    """A simulated (:func:`lensa.models.scaling.dynamic_run`) or live run, as the same history a recording gives."""
    return ScalerHistory(
        tuple(s.step for s in run), tuple(float(np.log2(s.scale)) for s in run), tuple(s.skipped for s in run)
    )


def scaler_history(run: RunStats) -> ScalerHistory | None:
    """The run's GradScaler history (the steps that have a loss scale), or None if it recorded none."""
    scales = run.loss_scales()
    if not scales:
        return None
    skipped = set(run.skipped_steps())
    steps = tuple(scales)
    return ScalerHistory(steps, tuple(float(np.log2(scales[s])) for s in steps), tuple(s in skipped for s in steps))


def most_lost(rows: Sequence[LostRow], fmt: str, limit: int) -> list[LostRow]:
    """The ``limit`` rows that lose the largest share in ``fmt``, kept in their own (the model's) order."""
    ranked = sorted(range(len(rows)), key=lambda i: -np.nan_to_num(rows[i].lost[fmt], nan=-1.0))[:limit]
    return [rows[i] for i in sorted(ranked)]


@dataclass(frozen=True)
class DepthFinding:
    """What a run's activation gradients say about depth: the share rounding to 0 in FP16 next to the loss and
    furthest from it, at one recorded step (``nearest``/``furthest``: the tensors' names)."""

    step: int
    nearest: str
    nearest_zero: float
    furthest: str
    furthest_zero: float

    @property
    def furthest_smallest(self) -> bool:
        """True when the tensor furthest from the loss loses more to 0 than the one next to it."""
        return self.furthest_zero > self.nearest_zero


def depth_finding(run: RunStats, fmt: str = "fp16", step: int | None = None) -> DepthFinding | None:
    """The activation gradients next to the loss against those furthest from it, at ``step`` (the last recorded
    one by default); None when the run recorded no activation gradients there.

    The recorder stores activation gradients in the order the backward pass reaches them, so the first name is
    the tensor next to the loss and the last the one furthest from it.
    """
    if "activation_grad" not in run.kinds():
        return None
    steps = run.steps("activation_grad")
    at = steps[-1] if step is None else step
    if at not in steps:
        return None
    layers = layers_at(run, "activation_grad", at)
    if len(layers) < 2:
        return None
    names = list(layers)
    near, far = layers[names[0]], layers[names[-1]]
    if not (near.nonzero and far.nonzero):
        return None
    return DepthFinding(at, names[0], zone_shares(near, fmt)["zero"], names[-1], zone_shares(far, fmt)["zero"])


# --- block recipes on a recorded run (file version 2) -----------------------------------------------------------

# Which layers could go to a narrower recipe: the three families an engineer weighs, each by one recipe (MXFP8 with
# the scale rounded up, as the MXFP8 pre-training recipe of Mishra, Stosic, Layton and Micikevicius, arXiv:2506.08027,
# does).
VERDICT_RECIPES: tuple[str, ...] = ("fp8_tensor", "mxfp8_e4m3_ceil", "nvfp4")
# The thresholds are Lensa's product choice, not a published criterion (the page says so): a recipe "fits" a
# tensor when it flushes at most 1% of its non-zero values to 0, saturates at most 0.1% of its values, and
# keeps the signal at least 25 dB above the rounding noise (FP8 E4M3's three significand bits give about 31 dB
# on normally distributed values, FP4's one bit about 19 dB: the line falls between the two).
MAX_FLUSHED = 0.01
MAX_SATURATED = 0.001
MIN_SQNR_DB = 25.0


@dataclass(frozen=True)
class RecipeRow:
    """What each block recipe loses on one recorded tensor (:meth:`lensa.runstats.TensorStats.recipe`)."""

    name: str
    nonzero: int
    lost: dict[str, tuple[float, float, float]]  # recipe key: (flushed, saturated, sqnr_db)


def fits(lost: tuple[float, float, float]) -> bool:
    """Whether a recipe's (flushed, saturated, sqnr_db) on a tensor passes the three thresholds above."""
    flushed, saturated, sqnr = lost
    return flushed <= MAX_FLUSHED and saturated <= MAX_SATURATED and not (sqnr < MIN_SQNR_DB or math.isnan(sqnr))


def recipe_rows(run: RunStats, kind: str, step: int, recipes: Sequence[str]) -> list[RecipeRow]:
    """Per layer of ``kind`` recorded at ``step`` (the model's order): what each of ``recipes`` loses.

    Layers whose record has no recipe statistics (a version-1 file) are left out.
    """
    rows = []
    for name, stats in _recorded(run, kind, step).items():
        if not stats.has_recipes:
            continue
        lost = {}
        for r in recipes:
            got = stats.recipe(r)
            lost[r] = (got.flushed, got.saturated, got.sqnr_db)
        rows.append(RecipeRow(name, stats.nonzero, lost))
    return rows


def recipe_over_training(
    run: RunStats, kind: str, layer: str, recipe: str
) -> tuple[list[int], list[tuple[float, float, float]]]:
    """(steps, (flushed, saturated, sqnr_db) per step) of ``recipe`` on one layer; with ``layer="all"``, the worst
    layer at each step (largest shares, smallest SQNR: blocks do not add up across tensors)."""
    steps, values = [], []
    for step in run.steps(kind):
        rows = recipe_rows(run, kind, step, (recipe,))
        if layer != ALL_LAYERS:
            rows = [r for r in rows if r.name == layer]
        if not rows:
            continue
        lost = [r.lost[recipe] for r in rows]
        steps.append(step)
        values.append((max(v[0] for v in lost), max(v[1] for v in lost), min(v[2] for v in lost)))
    return steps, values


@dataclass(frozen=True)
class DelayedReplay:
    """Delayed scaling replayed on one tensor's amax at every step
    (:func:`lensa.numerics.blockscale.replay_delayed`)."""

    name: str
    steps: list[int]
    overflow: dict[int, list[int]]  # history length: the steps whose stale scale would have overflowed


def delayed_replays(
    run: RunStats, kind: str, layer: str, histories: Sequence[int] = (1024, 16), fmt: str = "fp8_e4m3"
) -> list[DelayedReplay]:
    """Per layer of ``kind`` with an amax series (one layer, or every one for ``layer="all"``): the steps where
    Transformer Engine's delayed scaling (``"max"`` over the history, margin 0) would have overflowed."""
    from lensa.numerics.blockscale import replay_delayed

    names = run.amax_names(kind) if layer == ALL_LAYERS else [n for n in run.amax_names(kind) if n == layer]
    out = []
    for name in names:
        steps, amax = run.amax(kind, name)
        over = {h: steps[replay_delayed(amax, history=h, fmt=fmt)].tolist() for h in histories}
        out.append(DelayedReplay(name, steps.tolist(), over))
    return out


# --- what a recording in a narrow type can say (file version 3 keeps each tensor's dtype) ---------------------


def format_of_dtype(dtype: str) -> str | None:
    """The key of the format a torch dtype name stores (``"bfloat16"`` -> ``"bf16"``), or None for one Lensa has no
    format for (``"float64"``)."""
    return next((k for k, f in FORMATS.items() if f.dtype_name == dtype), None)


@cache
def holds_exactly(dtype: str, fmt: str) -> bool:
    """Whether every finite value of torch type ``dtype`` is stored exactly by ``fmt`` (so a tensor of that type
    loses nothing in ``fmt`` by construction). Exact: every value of an 8- or 16-bit type is cast and compared; a
    32-bit type is held only by FP32 itself."""
    key = format_of_dtype(dtype)
    if key is None:
        return False
    if key == get_format(fmt).name:
        return True
    source = FORMATS[key]
    if source.bits > 16 or source.dtype is None or source.dtype.itemsize * 8 != source.bits:
        return False
    codes = np.arange(2**source.bits, dtype=np.uint16 if source.bits > 8 else np.uint8)
    with np.errstate(all="ignore"):
        values = codes.view(source.dtype).astype(np.float64)
        values = values[np.isfinite(values)]
        return bool(np.array_equal(cast(values, fmt), values))


def trivial_formats(dtypes: Iterable[str], fmts: Sequence[str]) -> tuple[str, ...]:
    """The formats of ``fmts`` that hold every value of every one of ``dtypes`` exactly: their columns say 0% lost by
    construction (a BF16 tensor "in BF16"), and only a recording in FP32 answers whether the format would do. None
    when no dtype is known (files before version 3)."""
    known = list(dtypes)
    if not known:
        return ()
    return tuple(f for f in fmts if all(holds_exactly(d, f) for d in known))


def recorded_dtypes(run: RunStats, kind: str, step: int) -> tuple[str, ...]:
    """The dtypes the tensors of ``kind`` had when recorded at ``step`` (sorted; () where the file does not say)."""
    found: set[str] = set()
    for stats in _recorded(run, kind, step).values():
        if stats.dtype is None:
            return ()
        found.update(stats.dtypes)
    return tuple(sorted(found))


# --- FP8 as it is trained: one scale per tensor --------------------------------------------------------------------


def per_tensor_scaled_shares(run: RunStats, kind: str, step: int, fmt: str) -> tuple[dict[str, float], dict[str, int]]:
    """The zone shares of all of ``kind``'s non-zero values at ``step`` when each tensor is first multiplied by its
    own power of two, the largest that overflows none in ``fmt`` (its ``safe_k``; none where every scale overflows,
    a tensor with inf): FP8 with one scale per tensor, as FP8 training stores it, exactly from the records (a
    power-of-two scale moves each value's binade and nothing else). Also the k each tensor got, by name."""
    counts = dict.fromkeys(ZONES, 0)
    nonzero = 0
    ks: dict[str, int] = {}
    for name, stats in _recorded(run, kind, step).items():
        k = scale_bounds(stats, fmt).safe_k
        ks[name] = 0 if k is None else k
        for zone, n in zone_counts(stats, fmt, ks[name]).items():
            if zone in counts:
                counts[zone] += n
        nonzero += stats.nonzero
    return {z: c / nonzero if nonzero else math.nan for z, c in counts.items()}, ks


@dataclass(frozen=True)
class RecipeTotal:
    """A block recipe on every tensor of one kind at one step, each tensor with its own scales: the shares of all
    their values flushed to 0 and saturated (exact counts, added over the tensors), the lowest SQNR of the tensors
    (dB), and how many of them :func:`fits`."""

    recipe: str
    flushed: float
    saturated: float
    sqnr_db: float
    fitting: int
    tensors: int

    @property
    def lost(self) -> float:
        """The share flushed or saturated (the two are counted of different wholes; their sum bounds the loss)."""
        return self.flushed + self.saturated


def recipe_total(run: RunStats, kind: str, step: int, recipe: str) -> RecipeTotal | None:
    """:class:`RecipeTotal` of ``recipe`` on ``kind`` at ``step``; None where the records keep no recipes."""
    records = [s for s in _recorded(run, kind, step).values() if s.has_recipes]
    if not records:
        return None
    together = combine_over_ranks(records)  # each tensor stored with its own scales: counts add, the SQNR's minimum
    got = together.recipe(recipe)
    rows = recipe_rows(run, kind, step, (recipe,))
    return RecipeTotal(
        recipe, got.flushed, got.saturated, got.sqnr_db, sum(fits(r.lost[recipe]) for r in rows), len(rows)
    )
