"""The lesson's verdict on a recorded run as plain data: what ``python -m lensa report RUN.npz`` prints.

:func:`build` reads a run (one :class:`~lensa.runstats.RunStats`, or one per arm, as an upload gives) and
returns a JSON-ready dict, the document ``--json`` prints (its schema: ``docs/report.md``). Every number in
it comes from the functions steps 2-5 call (:mod:`lensa.runstats.measured`) on the same arm and step a page picks by
default, so each equals what the page shows for the same file:

- per kind, at that kind's last recorded step, for all layers together and for each layer: the shares of the
  non-zero values that round to 0, stay subnormal, are normal or overflow in every format the run statistics
  count exactly (FP16, BF16, FP8 E4M3, FP8 E5M2: :data:`lensa.runstats.SUMMARY_FORMATS`), and each format's
  mean relative error (steps 2 and 5);
- for each gradient kind, the useful loss-scale band in FP16 (step 3's two scales) and, per FP8 format, the
  largest scale that overflows none (step 3's FP8 table), and the run's own GradScaler history;
- at the last step with updates, the share of each layer's updates a weight held in each format would lose
  (step 4), and the layers FP16 weights would lose any of;
- step 5's FP16-against-BF16 verdict;
- per layer (file version 2), what every block recipe of :data:`lensa.numerics.blockscale.RECIPES` loses: the shares
  flushed to 0 and saturated and the SQNR (``recipes``; null for a version-1 file and for all layers together),
  and per kind every recipe on all its layers, each with its own scales (``recipes``: exact shares, the lowest
  SQNR, how many layers fit);
- per kind, FP8 as it is trained, each tensor with one power-of-two scale of its own (``fp8_scaled``): the
  columns of ``all.shares`` for FP8 are the raw, unscaled cast;
- per kind (file version 3), the dtypes the tensors had when recorded and the formats that hold those exactly
  (``trivial``: a BF16 tensor loses nothing "in BF16" by construction; only an FP32 recording answers the
  question); for updates, whether they are the updates the optimizer meant to make (``intended``).

:func:`check` turns a report into a pass or a fail for one format or block recipe (``--check fp16``,
``--check mxfp8_e4m3``, for CI).

This module imports numpy and the core only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lensa.numerics.blockscale import RECIPES, get_recipe
from lensa.numerics.formats import FORMATS, fp16_against_bf16
from lensa.runstats import KINDS, SUMMARY_FORMATS, RunStats, TensorStats, measured

SCHEMA = "lensa-report"
SCHEMA_VERSION = 2  # 2: recipes per kind, fp8_scaled, dtypes and trivial formats, intended updates, the plan
REPORT_FORMATS: tuple[str, ...] = SUMMARY_FORMATS  # the formats a run's statistics count exactly
GRADIENT_KINDS: tuple[str, ...] = ("weight_grad", "activation_grad")
LOST_KEYS: tuple[str, ...] = ("zero", "overflow")  # what a format loses of a value: rounded to 0, or overflowed
# The check's default: the loss-scale band's own tolerance, all but 0.1% kept.
DEFAULT_THRESHOLD = round(1 - measured.KEEP_SHARE, 12)
FP8_FORMATS: tuple[str, ...] = tuple(f for f in REPORT_FORMATS if f.startswith("fp8"))
CHECKABLE: tuple[str, ...] = (*REPORT_FORMATS, *RECIPES)  # --check takes a format or any block recipe
# The smallest SQNR a recipe check accepts (dB): the recipe verdict's own line (lensa.runstats.measured.MIN_SQNR_DB).
DEFAULT_MIN_SQNR_DB = measured.MIN_SQNR_DB
# What an AMP run stores in the low-precision format: its activations, gradients and the weights' low-precision
# copies. Updates go to an FP32 master copy, so they are checked only when asked for (--kinds ... update).
CHECKED_KINDS: tuple[str, ...] = tuple(k for k in KINDS if k != "update")


def _num(x: float) -> float | None:
    """A share or error for JSON: None where the page shows — (no values: NaN) or ∞ (an overflow to inf)."""
    return float(x) if math.isfinite(x) else None


def _shares(stats: TensorStats, fmt: str, scale_exp: int = 0) -> dict[str, float | None]:
    return {zone: _num(v) for zone, v in measured.zone_shares(stats, fmt, scale_exp).items()}


def _tensor(stats: TensorStats) -> dict[str, Any]:
    return {
        "nonzero": stats.nonzero,
        "exact_zero": stats.exact_zero,
        "shares": {f: _shares(stats, f) for f in REPORT_FORMATS},
        "error": {f: _num(stats.mean_relative_error(f)) for f in REPORT_FORMATS},
        "recipes": _recipes(stats),
    }


def _recipes(stats: TensorStats) -> dict[str, dict[str, float | None]] | None:
    """Per block recipe: shares flushed and saturated and the SQNR in dB (None: ±inf or NaN); None for a record
    without them (a version-1 file, or several layers together: blocks do not add up across tensors)."""
    if not stats.has_recipes:
        return None
    out = {}
    for key in RECIPES:
        got = stats.recipe(key)
        out[key] = {"flushed": _num(got.flushed), "saturated": _num(got.saturated), "sqnr_db": _num(got.sqnr_db)}
    return out


def _kind(run: RunStats, kind: str, step: int) -> dict[str, Any]:
    layers = measured.layers_at(run, kind, step)
    dtypes = measured.recorded_dtypes(run, kind, step)
    section = {
        "step": step,
        "steps": run.steps(kind),
        "dtypes": list(dtypes),
        "trivial": list(measured.trivial_formats(dtypes, REPORT_FORMATS)) if kind != "update" else [],
        "all": _tensor(measured.tensor_stats(run, kind, measured.ALL_LAYERS, step)),
        "layers": [{"name": name, **_tensor(s)} for name, s in layers.items()],
        "fp8_scaled": None,
        "recipes": _recipe_totals(run, kind, step),
    }
    if kind != "update":
        section["fp8_scaled"] = {
            f: {z: _num(v) for z, v in measured.per_tensor_scaled_shares(run, kind, step, f)[0].items()}
            for f in FP8_FORMATS
        }
    return section


def _recipe_totals(run: RunStats, kind: str, step: int) -> dict[str, dict[str, Any]] | None:
    """Per block recipe, on all of ``kind``'s layers each with its own scales; None without recipe records."""
    out = {}
    for key in RECIPES:
        total = measured.recipe_total(run, kind, step, key)
        if total is None:
            return None
        out[key] = {
            "flushed": _num(total.flushed),
            "saturated": _num(total.saturated),
            "sqnr_db": _num(total.sqnr_db),
            "fitting": total.fitting,
            "layers": total.tensors,
        }
    return out


def _loss_scale(run: RunStats, kind: str, step: int) -> dict[str, Any]:
    stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, step)
    bounds = measured.scale_bounds(stats, "fp16")
    return {
        "step": step,
        "format": "fp16",
        "keep_share": measured.KEEP_SHARE,
        "keep_k": bounds.keep_k,
        "safe_k": bounds.safe_k,
        "window": bounds.window,
        "safe_k_by_format": {f: measured.scale_bounds(stats, f).safe_k for f in REPORT_FORMATS},
    }


def _history(run: RunStats | None) -> dict[str, Any] | None:
    history = None if run is None else measured.scaler_history(run)
    if history is None:
        return None
    return {
        "steps": len(history.steps),
        "first_k": history.first_k,
        "last_k": history.last_k,
        "skipped_steps": list(history.skipped_steps),
    }


def _updates(run: RunStats, step: int) -> dict[str, Any]:
    stats = measured.tensor_stats(run, "update", measured.ALL_LAYERS, step)
    rows = measured.lost_by_layer(run, step, REPORT_FORMATS)
    all_lost = {f: _num(measured.lost_share(stats, f)) for f in REPORT_FORMATS} if stats.lost_counts else {}
    records = list(measured.layers_at(run, "update", step).values())
    intended = bool(records) and all(r.intended for r in records)
    return {
        "step": step,
        "nonzero": stats.nonzero,
        "intended": intended,
        "fp32_lost": _num(measured.lost_share(stats, "fp32")) if intended and stats.lost_counts else None,
        "dtypes": list(measured.recorded_dtypes(run, "update", step)),
        "lost": all_lost,
        "layers": [
            {"name": r.name, "nonzero": r.nonzero, "lost": {f: _num(v) for f, v in r.lost.items()}} for r in rows
        ],
        "losing": {f: [r.name for r in rows if r.lost[f] > 0] for f in REPORT_FORMATS},
    }


def _verdict(run: RunStats, kind: str, step: int) -> str:
    stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, step)
    errors = measured.mean_relative_errors(stats, ("fp16", "bf16"))
    return fp16_against_bf16(measured.zone_shares(stats, "fp16")["overflow"], errors["fp16"], errors["bf16"])


def build(
    runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats], step: int | None = None, name: str = ""
) -> dict[str, Any]:
    """The report of a run (or of several arms: the one steps 2-5 read, see
    :func:`lensa.runstats.measured.tensors_arm`).

    ``step``: report every kind at this recorded step (ValueError when no kind was recorded then); None (the
    default, and the pages' default) takes each kind's last recorded step. ``name`` is the file's name, kept
    as it is. Shares are fractions 0..1 of the non-zero values; None where the page shows — or ∞.
    """
    arms = measured.arms_of(runs)
    arm = measured.tensors_arm(arms)
    run = arms[arm]
    kinds = [k for k in KINDS if run.steps(k)]
    if step is not None and not any(step in run.steps(k) for k in kinds):
        steps = sorted({s for k in kinds for s in run.steps(k)})
        raise ValueError(f"step {step} was not recorded; recorded steps: {', '.join(map(str, steps)) or 'none'}")

    def step_of(kind: str) -> int | None:
        steps = run.steps(kind)
        if step is None:
            return steps[-1]
        return step if step in steps else None

    chosen = {k: s for k in kinds if (s := step_of(k)) is not None}
    scaler = measured.scaler_arm(arms)
    update_step = chosen.get("update")
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "file": name,
        "arm": arm,
        "arms": list(arms),
        "meta": run.meta,
        "formats": list(REPORT_FORMATS),
        "labels": {f: FORMATS[f].label for f in REPORT_FORMATS},
        "kinds": {k: _kind(run, k, s) for k, s in chosen.items()},
        "loss_scale": {k: _loss_scale(run, k, chosen[k]) for k in GRADIENT_KINDS if k in chosen},
        "scaler_history": _history(None if scaler is None else arms[scaler]),
        "updates": None if update_step is None else _updates(run, update_step),
        "fp16_against_bf16": {k: _verdict(run, k, s) for k, s in chosen.items() if k != "update"},
        "recorder": run.meta.get("recorder"),
        "ranks": run.meta.get("ranks"),
    }


@dataclass(frozen=True)
class CheckItem:
    """One checked number: the share of ``kind``'s non-zero values ``fmt`` loses (at 2**scale_k, for gradients),
    or for a block recipe, the shares flushed and saturated and the lowest SQNR of its layers."""

    kind: str
    step: int
    share: float | None  # None: nothing to count (no non-zero value)
    scale_k: int  # the loss scale applied first, as k in 2**k (0: none)
    how: str = "cast"  # "cast", "loss_scale" (gradients at 2**scale_k), "per_tensor" (FP8), "raw" (FP8), "recipe"
    trivial: bool = False  # the tensors were recorded in a type the format holds exactly: 0 by construction
    sqnr_db: float | None = None  # a recipe's lowest SQNR over the layers
    min_sqnr_db: float | None = None  # and the least the check accepts

    @property
    def failed_at(self) -> float:
        return -1.0 if self.share is None else self.share

    def fails(self, threshold: float) -> bool:
        """Whether this item is past ``threshold`` (or, for a recipe, its SQNR below the least accepted)."""
        over = self.share is not None and self.share > threshold
        low = self.sqnr_db is not None and self.min_sqnr_db is not None and self.sqnr_db < self.min_sqnr_db
        return over or low


@dataclass(frozen=True)
class CheckResult:
    fmt: str
    threshold: float
    items: tuple[CheckItem, ...]

    @property
    def worst(self) -> CheckItem | None:
        return max(self.items, key=lambda i: i.failed_at, default=None)

    @property
    def passed(self) -> bool:
        return not any(i.fails(self.threshold) for i in self.items)

    @property
    def failed(self) -> tuple[CheckItem, ...]:
        return tuple(i for i in self.items if i.fails(self.threshold))

    @property
    def is_recipe(self) -> bool:
        return self.fmt in RECIPES


def check_scale_k(bounds: Mapping[str, Any], scaled: bool) -> int:
    """The loss scale a gradient check applies: the power of two nearest 1 inside the format's useful band.

    0 (no scaling) when scaling is off, when 1 is inside the band, or when there is no band (then no single
    loss scale keeps them all, and the unscaled share is what is checked).
    """
    if not scaled:
        return 0
    keep, safe = bounds["keep_k"], bounds["safe_k"]
    if keep is None or safe is None or keep > safe:
        return 0
    return int(min(max(0, keep), safe))


def check(
    runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats],
    fmt: str,
    threshold: float = DEFAULT_THRESHOLD,
    kinds: Sequence[str] = CHECKED_KINDS,
    loss_scaling: bool = True,
    step: int | None = None,
    min_sqnr_db: float = DEFAULT_MIN_SQNR_DB,
) -> CheckResult:
    """Whether ``fmt`` keeps every checked kind of the run within ``threshold`` (a share 0..1 of non-zero values).

    Each kind is read as :func:`build` reads it (all layers, its last recorded step or ``step``). For values
    (activations, weights): the share that rounds to 0 or overflows. For gradients: the same after the loss
    scale :func:`check_scale_k` picks in ``fmt`` (``loss_scaling=False``: unscaled). FP8 as it is trained: every
    tensor, gradients and values alike, at its own power-of-two scale, the largest that overflows none
    (:func:`lensa.runstats.measured.per_tensor_scaled_shares`; ``loss_scaling=False``: the raw, unscaled cast). For
    ``update``: the share a weight held in ``fmt`` would lose (step 4). A block recipe (any key of
    :data:`lensa.numerics.blockscale.RECIPES`): the share of the values it flushes to 0 or saturates, every layer with
    its own scales, and its lowest SQNR, which must reach ``min_sqnr_db``; a run recorded without ``recipes=True``
    raises ValueError. A kind the run did not record is left out.
    """
    if fmt not in CHECKABLE:
        raise ValueError(f"unknown format or recipe {fmt!r}; checkable: {', '.join(CHECKABLE)}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    arms = measured.arms_of(runs)
    run = arms[measured.tensors_arm(arms)]
    recipe = fmt in RECIPES
    if recipe and not run.has_recipes:
        raise ValueError(f"the run keeps no block recipes (record it with recipes=True) to check {fmt!r}")
    items = []
    for kind in kinds:
        steps = run.steps(kind)
        at = steps[-1] if steps and step is None else step
        if at is None or at not in steps:
            continue
        items.append(_check_item(run, kind, at, fmt, loss_scaling, min_sqnr_db))
    return CheckResult(get_recipe(fmt).key if recipe else fmt, float(threshold), tuple(items))


def _check_item(run: RunStats, kind: str, at: int, fmt: str, loss_scaling: bool, min_sqnr_db: float) -> CheckItem:
    """One kind's checked share in ``fmt`` (see :func:`check`)."""
    if fmt in RECIPES:
        total = measured.recipe_total(run, kind, at, fmt)
        assert total is not None, "the run has recipes"
        return CheckItem(kind, at, _num(total.lost), 0, "recipe", sqnr_db=total.sqnr_db, min_sqnr_db=min_sqnr_db)
    stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, at)
    if kind == "update":
        share = measured.lost_share(stats, fmt) if stats.lost_counts is not None else math.nan
        return CheckItem(kind, at, _num(share), 0)
    trivial = fmt in measured.trivial_formats(measured.recorded_dtypes(run, kind, at), (fmt,))
    if fmt in FP8_FORMATS:
        if not loss_scaling:
            shares = measured.zone_shares(stats, fmt)
            return CheckItem(kind, at, _num(shares["zero"] + shares["overflow"]), 0, "raw", trivial)
        shares, _ = measured.per_tensor_scaled_shares(run, kind, at, fmt)
        return CheckItem(kind, at, _num(shares["zero"] + shares["overflow"]), 0, "per_tensor", trivial)
    k = 0
    if kind in GRADIENT_KINDS:
        b = measured.scale_bounds(stats, fmt)
        k = check_scale_k({"keep_k": b.keep_k, "safe_k": b.safe_k}, loss_scaling)
    shares = measured.zone_shares(stats, fmt, k)
    return CheckItem(kind, at, _num(shares["zero"] + shares["overflow"]), k, "loss_scale" if k else "cast", trivial)
