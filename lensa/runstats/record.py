"""The per-tensor record (:class:`TensorStats`): what a float32 tensor looks like to each summary format.

A record holds, for the tensor's finite non-zero values, the table of counts per (binade, significand
interval) of :mod:`lensa.runstats.binning`; beside it the numbers of exact zeros, infinities and NaNs, and
per format the sum of relative errors. Nothing in it grows with the tensor. :func:`from_histograms` makes one
from fine histograms, whoever did the binning (numpy or torch), so both paths give equal records.

Mean relative error. The values are also counted in finer bins (binade and the top 11 bits of F) with the
sum of their low 12 bits. Every rounding point of these formats (midpoints between neighbours, E4M3's
saturation point) lies on a fine-bin edge, so all values of a bin round to the same stored value and the sum
of |stored - x| over the bin is exact; only the division by |x| uses the bin's mean |x|, which is within
2**-11 of each value's own |x|. The mean relative error is therefore within a relative 2**-11 (0.05%) of the
exact mean, and exact when every value is rounded to 0 or stored exactly.

Block recipes (file version 2). A record may also keep, for every recipe of :data:`lensa.numerics.blockscale.RECIPES`,
what :func:`lensa.numerics.blockscale.lost` says of the tensor: the share of non-zero values flushed to 0, the share
saturated, and the SQNR in dB, computed at record time from the values themselves
(:func:`lensa.numerics.blockscale.lost_all`, the same code as ``lost``), so ``record.recipe(r) == lost(tensor, r)``
exactly: 36 float64 numbers a tensor. Blocks need the tensor's shape: the record is made from the array as it
is shaped, and ``lost`` reads a shape the same way: blocks of a row run along the last axis, 128×128 blocks
over the last two, each index of the axes before them its own matrix; a 1-D tensor is one row, a 0-D one a
single value. The recorder passes each tensor's shape to its summary (:mod:`lensa.live.summaries`).

File version 3 adds two things a record may say. ``dtype``: the type the tensor had when it was read (torch's
name: ``"float32"``, ``"bfloat16"``, ``"float16"``), so a reader knows when a format's column is trivial (a BF16
tensor "in BF16" loses nothing by construction: only an FP32 recording asks the question). ``lost_fp32``: for an
update judged against the update the optimizer meant to make (an *intended* update, :func:`summarize_intended`,
which the recorder works out for weights held in a type other than FP32), how many of them an FP32 weight would
lose too; for an update read as after − before of an FP32 weight that count is 0 by construction
(:func:`lensa.models.master.master_lost_count`) and is not kept.

Records of one tensor that several ranks each hold a part of (each rank's activations, in data-parallel
training) become one with :func:`combine_over_ranks`: counts and sums add, and the block recipe records too.

This module imports numpy (and :mod:`lensa.numerics.formats`, :mod:`lensa.numerics.blockscale`) only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.numerics.blockscale import RECIPES, Lost, get_recipe, lost_all
from lensa.numerics.formats import FloatFormat, get_format, quantize
from lensa.runstats.binning import (
    BINADE_MAX,
    BINADE_MIN,
    CELL_CLASSES,
    CLASS_KEYS,
    FINE_PER_BINADE,
    FRAC_BITS,
    LOG_FINE,
    LOW_BITS,
    N_BINADES,
    SUMMARY_FORMATS,
    cell_classes,
    exact_fractions,
    interval_of_column,
    significand_edges,
    summary_format,
)

RECIPE_KEYS: tuple[str, ...] = tuple(RECIPES)  # the recipes a version-2 record keeps, in the file's order
# Where a record came from, which says why one without block recipes has none (see TensorStats.recipe).
Origin = Literal["summary", "version_1", "combined"]
LOST_FIELDS: tuple[str, ...] = ("flushed", "saturated", "sqnr_db")
MAX_DTYPE_CHARS = 120
_DTYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_+")


# Why a record has no block recipes, by its origin (developer-facing: the pages and the report ask has_recipes first).
_NO_RECIPES: dict[str, str] = {
    "summary": (
        "this record was made without block recipes (recipes=False, the default); to keep them, record with "
        "Recorder(..., recipes=True) or LensaCallback(..., recipes=True), or summarize with recipes=True"
    ),
    "version_1": "this record predates block recipes (file version 1): record the run again with recipes=True",
    "combined": (
        "a record of several tensors together keeps no block recipes (blocks do not add up across tensors): "
        "ask each tensor's own record"
    ),
}

# --- the per-tensor record -----------------------------------------------------------------------------------


def _frozen(a: ArrayLike, dtype: type) -> NDArray[Any]:
    out: NDArray[Any] = np.array(a, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class TensorStats:
    """What one float32 tensor looks like to each summary format; small, immutable, exact.

    ``table[i, j]`` counts the finite non-zero values in binade ``binade_lo + i`` (|x| in
    [2**b, 2**(b+1))) whose fraction bits lie in significand interval j (see :func:`significand_edges`).
    ``exact_zero``, ``inf`` and ``nan`` count those values (either sign); ``size`` is the total.
    ``rel_error_sum[i]`` is the sum over the finite non-zero values of |stored - x| / |x| in
    ``SUMMARY_FORMATS[i]`` (inf where some value overflows to inf). ``lost_counts`` is set for updates
    only (see :func:`lensa.runstats.summarize_update`). ``recipes``: what each block recipe loses (file version 2).
    ``dtype``: the tensor's type when it was read (torch's name, ``"bfloat16"``; several, sorted and joined by
    ``+``, for a record of tensors of several types together), None where unknown (files before version 3).
    ``lost_fp32``: for an intended update (:func:`summarize_intended`), how many an FP32 weight would lose.
    ``origin`` says where the record came from: a summary of one tensor (``"summary"``, the default), a
    file of version 1 (``"version_1"``, before block recipes), or :func:`combine` of several tensors without
    their recipes (``"combined"``); only the last two can never hold recipes. It is not compared.
    """

    size: int
    exact_zero: int
    inf: int
    nan: int
    binade_lo: int
    table: NDArray[np.int64]
    rel_error_sum: tuple[float, ...]
    lost_counts: tuple[int, ...] | None = None
    recipes: tuple[tuple[float, float, float], ...] | None = None
    dtype: str | None = None
    lost_fp32: int | None = None
    origin: Origin = "summary"

    def __post_init__(self) -> None:
        if np.asarray(self.table).dtype.kind not in "iu":
            raise ValueError(f"counts must be integers, not {np.asarray(self.table).dtype}")
        table = _frozen(self.table, np.int64)
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "rel_error_sum", tuple(float(v) for v in self.rel_error_sum))
        if self.lost_counts is not None:
            object.__setattr__(self, "lost_counts", tuple(int(v) for v in self.lost_counts))
        if self.recipes is not None:
            object.__setattr__(self, "recipes", tuple(tuple(float(v) for v in row) for row in self.recipes))
        if self.lost_fp32 is not None and not isinstance(self.lost_fp32, bool):
            object.__setattr__(self, "lost_fp32", int(self.lost_fp32))
        _check_tensor_stats(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorStats):
            return NotImplemented
        mine = (self.size, self.exact_zero, self.inf, self.nan, self.binade_lo, self.lost_counts, self.lost_fp32)
        theirs = (other.size, other.exact_zero, other.inf, other.nan, other.binade_lo, other.lost_counts)
        return (
            mine == (*theirs, other.lost_fp32)
            and self.dtype == other.dtype
            and np.array_equal(self.table, other.table)
            and np.array_equal(self.rel_error_sum, other.rel_error_sum)
            and (self.recipes is None) == (other.recipes is None)
            and (
                self.recipes is None or np.array_equal(np.array(self.recipes), np.array(other.recipes), equal_nan=True)
            )
        )

    @property
    def has_recipes(self) -> bool:
        """Whether the record keeps what each block recipe loses (file version 2, ``summarize(recipes=True)``)."""
        return self.recipes is not None

    def recipe(self, recipe: str) -> Lost:
        """What ``recipe`` (a key of :data:`lensa.numerics.blockscale.RECIPES`) loses on this tensor: the same record as
        ``lensa.numerics.blockscale.lost(tensor, recipe)``. ValueError when the record has none, saying why (its
        ``origin``): made without recipes, read from a version-1 file, or several tensors combined."""
        key = get_recipe(recipe).key
        if self.recipes is None:
            raise ValueError(_NO_RECIPES[self.origin])
        return Lost(*self.recipes[RECIPE_KEYS.index(key)])

    def with_recipes(self, values: ArrayLike, workers: int = 1) -> TensorStats:
        """This record with what every block recipe loses on ``values`` (the tensor it summarises, shaped),
        worked out on ``workers`` threads."""
        return replace(self, recipes=recipe_records(values, workers), origin="summary")

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The types the tensor (or the tensors of a combined record) had when read; () where unknown."""
        return () if self.dtype is None else tuple(self.dtype.split("+"))

    @property
    def intended(self) -> bool:
        """Whether this update record holds the update the optimizer meant to make (:func:`summarize_intended`)."""
        return self.lost_fp32 is not None

    @property
    def finite_nonzero(self) -> int:
        """Number of finite non-zero values (what the table holds)."""
        return int(self.table.sum())

    @property
    def nonzero(self) -> int:
        """Number of values that are not ±0 (inf and NaN included)."""
        return self.size - self.exact_zero

    def counts(self, fmt: str | FloatFormat, scale_exp: int = 0) -> dict[str, int]:
        """Exact number of values in each class of ``fmt`` after multiplying by 2**scale_exp.

        Keys (in this order): ``exact_zero`` (x == 0), ``zero`` (non-zero, rounds to ±0), ``subnormal``,
        ``normal``, ``overflow`` (beyond the largest finite value after rounding, ties to even: ±inf, or
        ±448 in FP8 E4M3, which saturates; ±inf inputs always count here) and ``nan``. They add up to
        ``size``. The scaling is exact (x * 2**k as a real number), for any integer k.
        """
        f = summary_format(fmt)
        k = int(scale_exp)
        out = dict.fromkeys(CLASS_KEYS, 0)
        out["exact_zero"], out["nan"], out["overflow"] = self.exact_zero, self.nan, self.inf
        if self.table.size:
            cls = cell_classes(f, np.arange(self.table.shape[0]) + self.binade_lo + k)
            for i, name in enumerate(CELL_CLASSES):
                out[name] += int(self.table[cls == i].sum())
        return out

    def binade_histogram(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(exponents -149 ... 127, number of finite non-zero values with |x| in [2**e, 2**(e+1)))."""
        counts = np.zeros(N_BINADES, np.int64)
        i = self.binade_lo - BINADE_MIN
        counts[i : i + self.table.shape[0]] = self.table.sum(axis=1)
        return np.arange(BINADE_MIN, BINADE_MAX + 1, dtype=np.int64), counts

    def mean_relative_error(self, fmt: str | FloatFormat) -> float:
        """Mean of |stored - x| / |x| over the finite non-zero values, as a fraction (1.0 = 100%).

        A value rounded to 0 counts as 1 (100%); a value that overflows to inf makes the mean inf (FP8
        E4M3 saturates instead, so its error stays finite). Exact zeros, ±inf and NaN are left out; with
        no value left the mean is NaN. Within a relative 2**-11 of the exact mean (see the module notes).
        """
        f = summary_format(fmt)
        n = self.finite_nonzero
        return self.rel_error_sum[SUMMARY_FORMATS.index(f.name)] / n if n else math.nan

    def lost(self, fmt: str | FloatFormat) -> int:
        """Number of non-zero updates a weight stored in ``fmt`` would lose (only for :func:`summarize_update`)."""
        f = summary_format(fmt)
        if self.lost_counts is None:
            raise ValueError("lost() needs the statistics of an update, made by summarize_update(w_before, w_after)")
        return self.lost_counts[SUMMARY_FORMATS.index(f.name)]


def _check_tensor_stats(s: TensorStats) -> None:
    """Raise ValueError unless every count is a non-negative integer and the totals agree."""
    n_cols = len(significand_edges())
    for field in ("size", "exact_zero", "inf", "nan", "binade_lo"):
        v = getattr(s, field)
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"{field} must be an integer, not {v!r}")
    if min(s.size, s.exact_zero, s.inf, s.nan) < 0:
        raise ValueError("counts must not be negative")
    if s.table.ndim != 2 or s.table.shape[1] != n_cols:
        raise ValueError(f"the table must have {n_cols} columns, one per significand interval")
    rows = s.table.shape[0]
    if rows and not (s.binade_lo >= BINADE_MIN and s.binade_lo + rows - 1 <= BINADE_MAX):
        raise ValueError(f"binades {s.binade_lo} ... {s.binade_lo + rows - 1} are outside float32's -149 ... 127")
    if rows and s.table.min() < 0:
        raise ValueError("counts must not be negative")
    finite_nonzero = int(s.table.sum())
    if s.exact_zero + s.inf + s.nan + finite_nonzero != s.size:
        raise ValueError(
            f"the counts add up to {s.exact_zero + s.inf + s.nan + finite_nonzero}, not to the size {s.size}"
        )
    if len(s.rel_error_sum) != len(SUMMARY_FORMATS):
        raise ValueError(f"need one relative error sum per format ({len(SUMMARY_FORMATS)})")
    for name, v in zip(SUMMARY_FORMATS, s.rel_error_sum, strict=True):
        if math.isnan(v) or v < 0:
            raise ValueError(f"the relative error sum for {name} must be >= 0, not {v}")
        if math.isinf(v):
            continue  # a finite value that overflows to inf; whether one does is for the table to say
        if v > finite_nonzero * (1 + 1e-9):
            raise ValueError(f"the relative error sum for {name} exceeds one per value")
    if s.lost_counts is not None:
        if len(s.lost_counts) != len(SUMMARY_FORMATS):
            raise ValueError(f"need one lost count per format ({len(SUMMARY_FORMATS)})")
        if any(v < 0 or v > s.size - s.exact_zero for v in s.lost_counts):
            raise ValueError("lost counts must lie between 0 and the number of non-zero updates")
    if s.origin not in _NO_RECIPES:
        raise ValueError(f"a record's origin is one of {', '.join(_NO_RECIPES)}, not {s.origin!r}")
    if s.dtype is not None and not (
        isinstance(s.dtype, str) and 0 < len(s.dtype) <= MAX_DTYPE_CHARS and _DTYPE_CHARS.issuperset(s.dtype)
    ):
        raise ValueError(f"a dtype is a name like 'bfloat16' (letters, digits, _ and +), not {s.dtype!r:.80}")
    if s.lost_fp32 is not None:
        if s.lost_counts is None:
            raise ValueError("an FP32 lost count belongs to an update's record, which has lost counts")
        if isinstance(s.lost_fp32, bool) or not 0 <= s.lost_fp32 <= s.size - s.exact_zero:
            raise ValueError("the FP32 lost count must lie between 0 and the number of non-zero updates")
    if s.recipes is not None:
        if s.origin != "summary":
            raise ValueError(f"a record of origin {s.origin!r} holds no block recipes")
        if len(s.recipes) != len(RECIPE_KEYS) or any(len(row) != len(LOST_FIELDS) for row in s.recipes):
            raise ValueError(f"need {len(LOST_FIELDS)} numbers per block recipe ({len(RECIPE_KEYS)} recipes)")
        for key, (flushed, saturated, sqnr) in zip(RECIPE_KEYS, s.recipes, strict=True):
            if not (0 <= flushed <= 1 and 0 <= saturated <= 1):
                raise ValueError(f"the shares flushed and saturated under {key} must lie in 0 ... 1")
            if math.isnan(sqnr) and s.size and not (s.nan or s.inf):  # only blocks with a NaN or inf drop out
                raise ValueError(f"the SQNR under {key} is NaN for a tensor with numbers in it")


def recipe_records(values: ArrayLike, workers: int = 1) -> tuple[tuple[float, float, float], ...]:
    """Per recipe of :data:`RECIPE_KEYS`: (flushed, saturated, sqnr_db) of :func:`lensa.numerics.blockscale.lost`, on
    ``workers`` threads (the same numbers on any count)."""
    got = lost_all(values, RECIPE_KEYS, workers=workers)
    return tuple((got[k].flushed, got[k].saturated, got[k].sqnr_db) for k in RECIPE_KEYS)


# --- a record from fine histograms, whoever binned them -----------------------------------------------------


def from_histograms(
    *,
    size: int,
    exact_zero: int,
    inf: int,
    nan: int,
    bins: ArrayLike,
    fine_count: ArrayLike,
    fine_low_sum: ArrayLike,
    exact_at: ArrayLike,
    lost_counts: tuple[int, ...] | None = None,
) -> TensorStats:
    """The summary of a float32 tensor, from its fine histograms: what a summary is, whoever did the binning.

    :func:`summarize` bins with numpy and ends here; :mod:`lensa.live.torch_binning` bins with torch and ends here
    too, so both give equal records from equal histograms. The fine bins of the finite non-zero values lie on
    a grid of 277 binades (-149 ... 127; |x| in [2**b, 2**(b+1)), float32 subnormals by their own binade)
    times 2**11 columns (the top 11 of the 23 fraction bits F of the value normalised to 1.F): bin
    ``(b + 149) * 2048 + (F >> 12)``. Only the bins that hold values are given:

    - ``bins``: their grid indices, strictly ascending (int);
    - ``fine_count``: the number of values in each (int, > 0);
    - ``fine_low_sum``: the sum of those values' low 12 fraction bits, ``F & 4095`` (float64 holding integers);
    - ``exact_at`` (len(:func:`exact_fractions`), 277): per binade, the number of values whose F equals
      ``exact_fractions()[k]`` (int).

    ``size`` is the number of values, ``exact_zero`` / ``inf`` / ``nan`` the numbers of ±0, ±inf and NaN.
    Raises ValueError for shapes that do not fit, bins out of order or off the grid, and counts that do not
    add up to ``size``.
    """
    idx, count, lows, exact = _checked_histograms(bins, fine_count, fine_low_sum, exact_at)
    lo, table = _interval_table(idx, count, exact)
    return TensorStats(
        size=int(size),
        exact_zero=int(exact_zero),
        inf=int(inf),
        nan=int(nan),
        binade_lo=BINADE_MIN + lo,
        table=table,
        rel_error_sum=_relative_error_sums(idx, count, lows),
        lost_counts=lost_counts,
    )


def _checked_histograms(
    bins: ArrayLike, fine_count: ArrayLike, fine_low_sum: ArrayLike, exact_at: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.integer], NDArray[np.float64], NDArray[np.integer]]:
    """The histograms of :func:`from_histograms` as arrays (bins as int64); ValueError where they do not fit."""
    idx = np.asarray(bins)
    count = np.asarray(fine_count)
    lows = np.asarray(fine_low_sum, np.float64)
    exact = np.asarray(exact_at)
    if idx.dtype.kind not in "iu" or count.dtype.kind not in "iu" or exact.dtype.kind not in "iu":
        raise ValueError("bins, fine_count and exact_at must hold integers")
    if idx.ndim != 1 or count.shape != idx.shape or lows.shape != idx.shape:
        raise ValueError(f"need one count and one low sum per bin; got {idx.shape}, {count.shape}, {lows.shape}")
    if exact.shape != (len(exact_fractions()), N_BINADES):
        raise ValueError(f"exact_at must have shape {(len(exact_fractions()), N_BINADES)}, not {exact.shape}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx[0] < 0 or idx[-1] >= N_BINADES * FINE_PER_BINADE or np.any(np.diff(idx) <= 0)):
        raise ValueError("bins must be strictly ascending indices into the grid of 277 * 2048 fine bins")
    if idx.size and count.min() <= 0:
        raise ValueError("every bin given must hold values (count > 0)")
    return idx, count, lows, exact


def _interval_table(
    idx: NDArray[np.int64], count: NDArray[np.integer], exact: NDArray[np.integer]
) -> tuple[int, NDArray[np.int64]]:
    """(first grid row, counts per (row, significand interval)) of the fine bins ``idx`` holding ``count`` values.

    Each fine bin lies in one significand interval, but for an unaligned edge e (one past a fine-bin edge): its
    bin goes to the interval from e on, and the values with F == e - 1 (``exact``) move back one.
    """
    edges = significand_edges()
    n_cols = len(edges)
    row = idx >> LOG_FINE
    lo, hi = (int(row[0]), int(row[-1]) + 1) if idx.size else (0, 0)
    cell = row - lo
    cell *= n_cols
    cell += interval_of_column()[idx & (FINE_PER_BINADE - 1)]
    table = np.zeros((hi - lo, n_cols), np.int64)
    np.add.at(table.reshape(-1), cell, count.astype(np.int64, copy=False))  # exact integers; a view of table
    for i, f_exact in enumerate(exact_fractions()):
        j = int(np.searchsorted(edges, int(f_exact) + 1))
        table[:, j] -= exact[i, lo:hi]
        table[:, j - 1] += exact[i, lo:hi]
    return lo, table


def _relative_error_sums(
    idx: NDArray[np.int64], fine_count: NDArray[np.integer], lows: NDArray[np.float64]
) -> tuple[float, ...]:
    """Sum of |stored - x| / |x| per summary format, from the fine bins (see the module notes for the bound).

    ``idx``: the non-empty bins' indices into the grid of binades -149 ... 127 (2**11 bins each), ascending;
    ``fine_count`` and ``lows``: their counts and sums of low bits. The sums run over the bins in that order.
    """
    if not idx.size:
        return (0.0,) * len(SUMMARY_FORMATS)
    count = fine_count.astype(np.float64)
    # x = (d0 + low) * 2**(binade - 23), with d0 the bin's lower edge in those units.
    d0 = ((1 << FRAC_BITS) + ((idx & (FINE_PER_BINADE - 1)) << LOW_BITS)).astype(np.float64)
    mean_abs = d0 + lows / count
    # The sign of x - stored is the same across a bin, so the bin's sum of |x - stored| is exact; where the
    # format overflows to inf, d0 - stored is -inf and so is the sum (|.| makes it inf).
    terms = np.take(_bin_offsets(), idx, axis=1)  # (formats, bins): d0 - stored
    terms *= count
    terms += lows
    np.abs(terms, out=terms)
    terms /= mean_abs
    return tuple(float(np.sum(row)) for row in terms)


@cache
def _stored_in_fine_bins(name: str) -> NDArray[np.float64]:
    """Per fine bin (binade row, top 11 fraction bits): the stored value, in units of 2**(binade - 23).

    Every value of a bin rounds to this (a tie on the bin's lower edge is as far from it as from its
    other neighbour). inf where the format overflows to inf.
    """
    f = get_format(name)
    binade = np.arange(BINADE_MIN, BINADE_MAX + 1)[:, None]
    mid = (1 << FRAC_BITS) + (np.arange(FINE_PER_BINADE) << LOW_BITS) + (1 << (LOW_BITS - 1))
    x = np.ldexp(mid[None, :].astype(np.float64), binade - FRAC_BITS)  # exact: 24 bits, in float64's range
    with np.errstate(over="ignore"):
        return np.ldexp(quantize(x, f), FRAC_BITS - binade)


@cache
def _bin_offsets() -> NDArray[np.float64]:
    """(formats, all fine bins of binades -149 ... 127): the bin's lower edge minus its stored value, in units of
    2**(binade - 23); -inf where the format overflows to inf. Read only."""
    d0 = (1 << FRAC_BITS) + (np.arange(FINE_PER_BINADE, dtype=np.int64) << LOW_BITS)
    d0 = np.tile(d0, N_BINADES).astype(np.float64)
    with np.errstate(invalid="ignore"):
        out = np.stack([d0 - _stored_in_fine_bins(name).reshape(-1) for name in SUMMARY_FORMATS])
    out.setflags(write=False)
    return out


def combine(stats: Iterable[TensorStats]) -> TensorStats:
    """One record for several tensors together (as if concatenated): counts and sums add.

    Lost counts (and FP32 lost counts) are kept only if every record has them; block recipe records are not
    (blocks do not add up across tensors). The dtype is every record's, sorted and joined by ``+`` (None when
    one is unknown). No records give an empty record (size 0).
    """
    items = list(stats)
    return _combined(items, recipes=None)


def _combined(items: list[TensorStats], recipes: tuple[tuple[float, float, float], ...] | None) -> TensorStats:
    """:func:`combine` of ``items``, with ``recipes`` as the combined record's block recipe records."""
    lo = min((s.binade_lo for s in items if s.table.size), default=BINADE_MIN)
    hi = max((s.binade_lo + s.table.shape[0] for s in items if s.table.size), default=lo)
    table = np.zeros((hi - lo, len(significand_edges())), np.int64)
    for s in items:
        if s.table.size:
            table[s.binade_lo - lo : s.binade_lo - lo + s.table.shape[0]] += s.table
    lost = None
    if items and all(s.lost_counts is not None for s in items):
        lost = tuple(int(sum(v)) for v in zip(*(s.lost_counts for s in items), strict=True))
    rel = np.zeros(len(SUMMARY_FORMATS))
    for s in items:
        rel += s.rel_error_sum
    fp32 = sum(int(s.lost_fp32) for s in items if s.lost_fp32 is not None)
    intended = bool(items) and lost is not None and all(s.lost_fp32 is not None for s in items)
    known = bool(items) and all(s.dtype is not None for s in items)
    dtype = "+".join(sorted({d for s in items for d in s.dtypes})) if known else None
    return TensorStats(
        size=sum(s.size for s in items),
        exact_zero=sum(s.exact_zero for s in items),
        inf=sum(s.inf for s in items),
        nan=sum(s.nan for s in items),
        binade_lo=lo,
        table=table,
        rel_error_sum=tuple(rel.tolist()),
        lost_counts=lost,
        recipes=recipes,
        dtype=dtype,
        lost_fp32=fp32 if intended else None,
        origin="combined" if recipes is None else "summary",
    )


def combine_over_ranks(stats: Iterable[TensorStats]) -> TensorStats:
    """One record of a tensor whose parts several ranks hold (each rank's activations in data-parallel training).

    As :func:`combine` (counts and sums add: the record of the ranks' values together), and the block recipe
    records combine too, since each rank stores its own part with its own scales: the shares flushed and
    saturated add up as the counts they are (exact), and the SQNR is the lowest of the ranks' (a bound: the
    combined signal-to-noise ratio, the ranks' signals over their noises added, is at least the smallest one's).
    Recipe records are kept only when every part has them.
    """
    items = list(stats)
    recipes = None
    if items and all(s.recipes is not None for s in items):
        rows = []
        nonzero = sum(s.size - s.exact_zero - s.nan for s in items)
        values = sum(s.size - s.nan for s in items)
        for i in range(len(RECIPE_KEYS)):
            flushed = sum(round(s.recipes[i][0] * (s.size - s.exact_zero - s.nan)) for s in items if s.recipes)
            saturated = sum(round(s.recipes[i][1] * (s.size - s.nan)) for s in items if s.recipes)
            sqnr = [s.recipes[i][2] for s in items if s.recipes and not math.isnan(s.recipes[i][2])]
            rows.append(
                (
                    flushed / nonzero if nonzero else 0.0,
                    saturated / values if values else 0.0,
                    min(sqnr) if sqnr else math.nan,
                )
            )
        recipes = tuple(rows)
    return _combined(items, recipes)
