"""What a real tensor looks like to each low-precision format, kept small enough to save a whole run.

:func:`summarize` reads any float array as float32 values and keeps, for its
finite non-zero values, a table of counts with one row per binade (power of
two, 2**-149 ... 2**127, read from the float32 bits) and one column per
*significand interval*: the stored fraction bits F (0 <= F < 2**23) of each
value, cut at the few points where some format's class changes inside a
binade (the value that rounds up to the smallest normal, the half of the
smallest subnormal, the overflow point). Beside it: the numbers of exact
zeros, infinities and NaNs, and per format the sum of relative errors.
Nothing in it grows with the tensor.

Exact class counts, also after scaling (``counts(fmt, scale_exp=k)``).
Multiplying by 2**k moves a value k binades and leaves F alone, and whether
a value rounds to 0, stays subnormal, becomes normal or overflows in a
format depends only on its binade and on which side of those cut points F
lies. So each (binade + k, interval) cell has one class, found once per
format by asking :func:`lensa.formats.classify` about the cell's smallest
value (and checked against its largest), and the counts are sums over the
table. This is exact for every integer k (below 2**-150 every format rounds
to 0 and above 2**129 every one overflows): it answers what happens to the
exact product x * 2**k, which is also what torch's cast of the float32 product
gives whenever that product is itself exact in float32. Ties go to even; the
cut points, found by bisection with ``classify``, put ``2**-25`` (half the
smallest FP16 subnormal) in ``zero`` and the next float32 above it in
``subnormal``, 65520 (FP16's max plus half a step) in ``overflow``, and for
FP8 E4M3, which saturates (see :mod:`lensa.formats`), 464 in ``normal`` (it
becomes 448) and everything above 464, ±inf included, in ``overflow``
(stored as ±448).

Mean relative error. The values are also counted in finer bins (binade and
the top 11 bits of F) with the sum of their low 12 bits. Every rounding
point of these formats (midpoints between neighbours, E4M3's saturation
point) lies on a fine-bin edge, so all values of a bin round to the same
stored value and the sum of |stored - x| over the bin is exact; only the
division by |x| uses the bin's mean |x|, which is within 2**-11 of each
value's own |x|. The mean relative error is therefore within a relative
2**-11 (0.05%) of the exact mean, and exact when every value is rounded to
0 or stored exactly.

Counting. :func:`summarize` works on the float32 bit patterns with integer
numpy operations, so nothing is rounded: per chunk of 2**16 values, one
``np.add.at`` adds ``|bits| + 2**36`` to an int64 total per fine bin, which
holds both the bin's count and the sum of its low bits exactly for up to
2**24 values (a window; its totals are then unpacked with divmod). Zeros,
infinities and float32 subnormals share fine bins with other values; the
bins' low-bit sums say when they do, and only then is the window read again.
The values at the fractions the fine bins cannot place
(:func:`exact_fractions`) are found per chunk by a bit mask. With
``workers`` > 1, contiguous parts are counted on threads and added up: the
counts are integers, so any split gives the same record, bit for bit.

Lost updates. :func:`summarize_update` takes a weight before and after a step,
reads the update as ``u = w_after - w_before`` in float32 arithmetic, and for
each format counts the non-zero updates that a weight held in that format
would lose: with ``q`` the weight before stored in the format (the library
cast of :func:`lensa.formats.cast`), ``q + u`` computed in float32 and stored
in the format again equals ``q``. That is how PyTorch applies a float32 update
to a low-precision tensor (it computes in float32 and rounds the result once
into the tensor's type).

Block recipes (file version 2). :func:`summarize` with ``recipes=True`` also
keeps, for every recipe of :data:`lensa.blockscale.RECIPES`, what
:func:`lensa.blockscale.lost` says of the tensor: the share of non-zero values
flushed to 0, the share saturated, and the SQNR in dB, computed at record
time from the values themselves (:func:`lensa.blockscale.lost_all`, the same
code as ``lost``), so ``record.recipe(r) == lost(tensor, r)`` exactly: 36
float64 numbers a tensor. Blocks need the tensor's shape: the record is made
from the array as it is shaped (``x``'s own shape), and ``lost`` reads a
shape the same way: blocks of a row run along the last axis, 128×128 blocks
over the last two, each index of the axes before them its own matrix; a 1-D
tensor is one row, a 0-D one a single value. The recorder passes each tensor's
shape to its summary (:mod:`lensa.live.summaries`).

Amax at every step (version 2). A run may also keep, per (kind, name), the
largest magnitude of the tensor at every step (float32, NaN where not read):
what a delayed-scaling recipe's history holds (see
:func:`lensa.blockscale.replay_delayed`).

A run's statistics (:class:`RunStats`) are saved as a ``.npz`` file read with
``allow_pickle=False``: int64 counts, float64 sums, labels as JSON text, a
version number, and every count checked on load (:func:`load`). Version-1
files (without the recipe records and the amax series) still load:
:attr:`RunStats.version` says which one a run came from, and
:attr:`TensorStats.recipes` is None for their tensors.

This module imports numpy (and :mod:`lensa.formats`, :mod:`lensa.blockscale`) only.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.blockscale import RECIPES, Lost, get_recipe, lost_all
from lensa.formats import FloatFormat, cast, classify, formats_in, get_format, quantize

# The formats a recorded run is summarised for: the registry's 16-bit and FP8 groups (torch can store a tensor in
# each of them; FP6 and FP4 have no torch type to record with). Their order is the file's.
SUMMARY_FORMATS: tuple[str, ...] = formats_in("16bit", "fp8")
CLASS_KEYS: tuple[str, ...] = ("exact_zero", "zero", "subnormal", "normal", "overflow", "nan")
KINDS: tuple[str, ...] = ("weight_grad", "activation_grad", "activation", "weight", "update")

BINADE_MIN, BINADE_MAX = -149, 127  # finite non-zero float32 magnitudes lie in [2**-149, 2**128)
N_BINADES = BINADE_MAX - BINADE_MIN + 1  # 277

FILE_FORMAT = "lensa-runstats"
FILE_VERSION = 2  # 2: what every block recipe loses per tensor (recipe_lost), and amax at every step
READ_VERSIONS = (1, 2)
RECIPE_KEYS: tuple[str, ...] = tuple(RECIPES)  # the recipes a version-2 record keeps, in the file's order
LOST_FIELDS: tuple[str, ...] = ("flushed", "saturated", "sqnr_db")
MAX_FILE_BYTES = 25 * 1024 * 1024
MAX_TENSORS = 10_000
MAX_NAME_CHARS = 200
MAX_META_CHARS = 65_536

_FRAC_BITS = 23
_FINE_BITS = 12  # fine bins drop the low 12 fraction bits: 2**11 bins per binade
_LOG_FINE = _FRAC_BITS - _FINE_BITS
_FINE_PER_BINADE = 1 << _LOG_FINE
_FINE_LOW = np.uint32((1 << _FINE_BITS) - 1)
_ABS = np.uint32(0x7FFFFFFF)
_INF_BITS = 0x7F800000
_SMALLEST_NORMAL_BITS = 0x00800000
_N_SUBNORMAL_BINADES = -126 - BINADE_MIN  # float32 subnormals: binades -149 ... -127
# Below 2**-150 every summary format rounds to 0, above 2**129 every one overflows: the class table stops there.
_CLAMP_LO, _CLAMP_HI = -150, 129
_CLASS_ORDER = ("zero", "subnormal", "normal", "overflow")


class RunStatsError(ValueError):
    """A run statistics file that cannot be used; the message says why and what to do."""


# --- the cut points and the class of every (binade, interval) cell -------------------------------------------


def _summary_format(fmt: str | FloatFormat) -> FloatFormat:
    f = get_format(fmt)
    if f.name not in SUMMARY_FORMATS:
        raise ValueError(f"run statistics cover {', '.join(SUMMARY_FORMATS)}; not {f.name!r}")
    return f


def _class_index(f: FloatFormat, binade: NDArray[np.int64], frac: NDArray[np.int64]) -> NDArray[np.int8]:
    """Index into _CLASS_ORDER of (1 + frac / 2**23) * 2**binade, as lensa.formats.classify decides."""
    values = np.ldexp(1.0 + frac.astype(np.float64) / (1 << _FRAC_BITS), binade.astype(np.int64))  # exact
    cats = classify(values, f)
    out = np.zeros(cats.shape, np.int8)
    for i, name in enumerate(_CLASS_ORDER):
        out[cats == name] = i
    return out


@cache
def _edges() -> tuple[int, ...]:
    """Sorted fraction values F where some summary format's class changes inside some binade (0 first).

    Found by bisection on F with ``classify`` (its classes are monotone in the magnitude). For these four
    formats: 1 (the tie at half the smallest subnormal), E4M3's saturation point just above 0x680000, and
    the points where a binade's top values round up into the next binade.
    """
    binades = np.arange(_CLAMP_LO, _CLAMP_HI + 1)
    top = (1 << _FRAC_BITS) - 1
    edges = {0}
    for name in SUMMARY_FORMATS:
        f = get_format(name)
        lo = _class_index(f, binades, np.zeros_like(binades))
        hi = _class_index(f, binades, np.full_like(binades, top))
        for level in range(1, len(_CLASS_ORDER)):
            rows = binades[(lo < level) & (hi >= level)]
            left = np.zeros_like(rows)  # class < level here
            right = np.full_like(rows, top)  # class >= level here
            while np.any(right - left > 1):
                mid = (left + right) // 2
                up = _class_index(f, rows, mid) >= level
                right, left = np.where(up, mid, right), np.where(up, left, mid)
            edges.update(int(r) for r in right)
    out = tuple(sorted(edges))
    # summarize() counts F >= edge from fine bins of 2**12; an edge 1 past a bin edge needs the exact F == bin edge.
    bad = [e for e in out if e & int(_FINE_LOW) > 1]
    if bad:
        raise RuntimeError(f"significand edges {bad} are not at a fine-bin edge or one past it")
    return out


@cache
def _class_table(name: str) -> NDArray[np.int8]:
    """Class index (into _CLASS_ORDER) of each (binade _CLAMP_LO ... _CLAMP_HI, interval) cell of ``name``.

    Each cell is classified by its smallest value and checked by its largest: a cell whose two ends
    disagree would mean a missing edge, and stops the import rather than giving wrong counts.
    """
    f = get_format(name)
    edges = np.array(_edges(), np.int64)
    ends = np.append(edges[1:] - 1, (1 << _FRAC_BITS) - 1)
    binades = np.arange(_CLAMP_LO, _CLAMP_HI + 1)
    b, first = np.meshgrid(binades, edges, indexing="ij")
    _, last = np.meshgrid(binades, ends, indexing="ij")
    table = _class_index(f, b, first)
    if not np.array_equal(table, _class_index(f, b, last)):
        raise RuntimeError(f"a significand interval is not one class in {name}")
    return table


@cache
def _stored_in_fine_bins(name: str) -> NDArray[np.float64]:
    """Per fine bin (binade row, top 11 fraction bits): the stored value, in units of 2**(binade - 23).

    Every value of a bin rounds to this (a tie on the bin's lower edge is as far from it as from its
    other neighbour). inf where the format overflows to inf.
    """
    f = get_format(name)
    binade = np.arange(BINADE_MIN, BINADE_MAX + 1)[:, None]
    mid = (1 << _FRAC_BITS) + (np.arange(_FINE_PER_BINADE) << _FINE_BITS) + (1 << (_FINE_BITS - 1))
    x = np.ldexp(mid[None, :].astype(np.float64), binade - _FRAC_BITS)  # exact: 24 bits, in float64's range
    with np.errstate(over="ignore"):
        return np.ldexp(quantize(x, f), _FRAC_BITS - binade)


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
    only (see :func:`summarize_update`).
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
        _check_tensor_stats(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorStats):
            return NotImplemented
        return (
            (self.size, self.exact_zero, self.inf, self.nan, self.binade_lo, self.lost_counts)
            == (other.size, other.exact_zero, other.inf, other.nan, other.binade_lo, other.lost_counts)
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
        """What ``recipe`` (a key of :data:`lensa.blockscale.RECIPES`) loses on this tensor: the same record as
        ``lensa.blockscale.lost(tensor, recipe)``. ValueError when the record has none (a version-1 file)."""
        key = get_recipe(recipe).key
        if self.recipes is None:
            raise ValueError("this record predates block recipes (file version 1): record the run again")
        return Lost(*self.recipes[RECIPE_KEYS.index(key)])

    def with_recipes(self, values: ArrayLike) -> TensorStats:
        """This record with what every block recipe loses on ``values`` (the tensor it summarises, shaped)."""
        return _replace_recipes(self, recipe_records(values))

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
        f = _summary_format(fmt)
        k = int(scale_exp)
        out = dict.fromkeys(CLASS_KEYS, 0)
        out["exact_zero"], out["nan"], out["overflow"] = self.exact_zero, self.nan, self.inf
        if self.table.size:
            rows = np.clip(np.arange(self.table.shape[0]) + self.binade_lo + k, _CLAMP_LO, _CLAMP_HI) - _CLAMP_LO
            cls = _class_table(f.name)[rows]
            for i, name in enumerate(_CLASS_ORDER):
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
        f = _summary_format(fmt)
        n = self.finite_nonzero
        return self.rel_error_sum[SUMMARY_FORMATS.index(f.name)] / n if n else math.nan

    def lost(self, fmt: str | FloatFormat) -> int:
        """Number of non-zero updates a weight stored in ``fmt`` would lose (only for :func:`summarize_update`)."""
        f = _summary_format(fmt)
        if self.lost_counts is None:
            raise ValueError("lost() needs the statistics of an update, made by summarize_update(w_before, w_after)")
        return self.lost_counts[SUMMARY_FORMATS.index(f.name)]


def _check_tensor_stats(s: TensorStats) -> None:
    """Raise ValueError unless every count is a non-negative integer and the totals agree."""
    n_cols = len(_edges())
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
    if s.recipes is not None:
        if len(s.recipes) != len(RECIPE_KEYS) or any(len(row) != len(LOST_FIELDS) for row in s.recipes):
            raise ValueError(f"need {len(LOST_FIELDS)} numbers per block recipe ({len(RECIPE_KEYS)} recipes)")
        for key, (flushed, saturated, sqnr) in zip(RECIPE_KEYS, s.recipes, strict=True):
            if not (0 <= flushed <= 1 and 0 <= saturated <= 1):
                raise ValueError(f"the shares flushed and saturated under {key} must lie in 0 ... 1")
            if math.isnan(sqnr) and s.size and not (s.nan or s.inf):  # only blocks with a NaN or inf drop out
                raise ValueError(f"the SQNR under {key} is NaN for a tensor with numbers in it")


def recipe_records(values: ArrayLike) -> tuple[tuple[float, float, float], ...]:
    """Per recipe of :data:`RECIPE_KEYS`: (flushed, saturated, sqnr_db) of :func:`lensa.blockscale.lost`."""
    got = lost_all(values, RECIPE_KEYS)
    return tuple((got[k].flushed, got[k].saturated, got[k].sqnr_db) for k in RECIPE_KEYS)


def _replace_recipes(s: TensorStats, recipes: tuple[tuple[float, float, float], ...] | None) -> TensorStats:
    return TensorStats(
        size=s.size,
        exact_zero=s.exact_zero,
        inf=s.inf,
        nan=s.nan,
        binade_lo=s.binade_lo,
        table=s.table,
        rel_error_sum=s.rel_error_sum,
        lost_counts=s.lost_counts,
        recipes=recipes,
    )


def significand_edges() -> tuple[int, ...]:
    """The fraction values (0 <= F < 2**23) that start the table's significand intervals, ascending."""
    return _edges()


# --- summarising a tensor --------------------------------------------------------------------------------------


@dataclass
class _Partial:
    """Counts from one part of the array, merged by summing (counts and sums exact: int64, or float64 integers)."""

    rows: NDArray[np.intp]  # the float32 exponent fields that hold values, ascending (no other holds any)
    fine_count: NDArray[np.int64]  # (rows.size, 2048): values per fine bin, by row and top 11 fraction bits
    fine_low_sum: NDArray[np.int64]  # (rows.size, 2048): sum of the low 12 fraction bits per fine bin
    exact_at: NDArray[np.int64]  # (n_unaligned, 256): values with F exactly one below an unaligned edge
    sub_count: NDArray[np.int64]  # the same three for float32 subnormals, by their own binade (-149 ... -127)
    sub_low_sum: NDArray[np.float64]  # integers below 2**53
    sub_exact_at: NDArray[np.int64]
    zeros: int = 0
    infs: int = 0

    def add_rows(self, rows: NDArray[np.intp], count: NDArray[np.int64], low_sum: NDArray[np.int64]) -> None:
        """Add the counts and low sums of the fine bins of exponent fields ``rows`` (ascending), one row each.

        May keep ``count`` and ``low_sum`` themselves: the caller hands them over.
        """
        if not rows.size:
            return
        if not self.rows.size:
            self.rows, self.fine_count, self.fine_low_sum = rows, count, low_sum
        elif np.array_equal(rows, self.rows):
            self.fine_count += count
            self.fine_low_sum += low_sum
        else:
            union = np.union1d(self.rows, rows)
            mine, theirs = np.searchsorted(union, self.rows), np.searchsorted(union, rows)
            for name, add in (("fine_count", count), ("fine_low_sum", low_sum)):
                both = np.zeros((union.size, _FINE_PER_BINADE), np.int64)
                both[mine] = getattr(self, name)
                both[theirs] += add
                setattr(self, name, both)
            self.rows = union

    def __iadd__(self, other: _Partial) -> _Partial:
        self.add_rows(other.rows, other.fine_count, other.fine_low_sum)
        for name in ("exact_at", "sub_count", "sub_low_sum", "sub_exact_at"):
            getattr(self, name).__iadd__(getattr(other, name))
        self.zeros += other.zeros
        self.infs += other.infs
        return self


def _unaligned() -> tuple[int, ...]:
    """F values that must be counted exactly: one below each edge that is not a multiple of 2**12."""
    return tuple(e - 1 for e in _edges() if e & int(_FINE_LOW))


def _empty_partial() -> _Partial:
    n_un = len(_unaligned())
    return _Partial(
        rows=np.zeros(0, np.intp),
        fine_count=np.zeros((0, _FINE_PER_BINADE), np.int64),
        fine_low_sum=np.zeros((0, _FINE_PER_BINADE), np.int64),
        exact_at=np.zeros((n_un, 256), np.int64),
        sub_count=np.zeros(_N_SUBNORMAL_BINADES * _FINE_PER_BINADE, np.int64),
        sub_low_sum=np.zeros(_N_SUBNORMAL_BINADES * _FINE_PER_BINADE, np.float64),
        sub_exact_at=np.zeros((n_un, _N_SUBNORMAL_BINADES), np.int64),
    )


# A fine bin's key is |bits| >> 12 (exponent field and top 11 fraction bits, ordered like |x|); its lower edge in
# |bits| is key << 12. Each value adds |bits| + 2**36 to its bin's int64 total, so a bin of c values whose low
# 12 bits sum to s holds c * (2**36 + (key << 12)) + s. While c <= 2**24, s <= c * 4095 < 2**36: divmod by
# 2**36 + (key << 12) gives back c and s exactly, and the total stays below 2**61.
_PACK = 1 << 36
_WINDOW = 1 << 24  # values per packed accumulator, then it is unpacked: at most 2**24, which _PACK needs
_CHUNK = 1 << 16  # values per np.add.at: small enough for the chunk and its scratch (1.5 MB) to stay in cache
_MIN_PART = 1 << 20  # values per thread at least: smaller arrays are counted on one


class _Buffers:
    """One thread's scratch: a chunk's keys, weights and masked bits, reused from chunk to chunk (fresh arrays cost
    page faults), and the packed totals of the current window (a fresh np.zeros per window)."""

    def __init__(self, n: int) -> None:
        self.key = np.empty(n, np.intp)
        self.weight = np.empty(n, np.int64)
        self.masked = np.empty(n, np.uint32)
        self.packed = np.zeros(0, np.int64)


def _count_window(bits: NDArray[np.uint32], acc: _Partial, unaligned: tuple[int, ...], buf: _Buffers) -> None:
    """Add one window (at most _WINDOW values) of float32 bit patterns to ``acc``: integer work on the bits."""
    buf.packed = np.zeros(256 * _FINE_PER_BINADE, np.int64)
    for i in range(0, bits.size, _CHUNK):
        _scatter_chunk(bits[i : i + _CHUNK], acc, unaligned, buf)
    _unpack_window(bits, acc, unaligned, buf)


def _scatter_chunk(bits: NDArray[np.uint32], acc: _Partial, unaligned: tuple[int, ...], buf: _Buffers) -> None:
    """Add a chunk to the window's packed totals, and count exactly the values at the unaligned edges' F."""
    n = bits.size
    key, weight, masked, packed = buf.key[:n], buf.weight[:n], buf.masked[:n], buf.packed
    np.bitwise_and(bits, _ABS, out=weight)  # |bits| in int64
    np.right_shift(weight, _FINE_BITS, out=key)
    np.add(weight, _PACK, out=weight)
    before = int(packed[0])
    np.add.at(packed, key, weight)  # numpy's fast path for 1-d intp keys; exact in int64 (see _PACK)
    # This chunk's share of bin 0 (|bits| < 2**12): zeros only, this many, when its low bits add up to 0.
    zeros, low_bits = divmod(int(packed[0]) - before, _PACK)
    # The exact F of the unaligned edges. A cheap test lets through those values, the zeros and a few more (±inf,
    # some subnormals); look closer only when it lets through more than the chunk's zeros.
    np.bitwise_and(bits, _candidate_mask(unaligned), out=masked)
    candidates = n - int(np.count_nonzero(masked))
    if candidates > zeros or low_bits:
        mag = bits[masked == 0] & _ABS
        m0 = mag[mag != 0]
        frac0 = m0 & np.uint32((1 << _FRAC_BITS) - 1)
        exp0 = m0 >> np.uint32(_FRAC_BITS)
        for i, f_exact in enumerate(unaligned):
            acc.exact_at[i] += np.bincount(exp0[frac0 == f_exact], minlength=256)


def _unpack_window(bits: NDArray[np.uint32], acc: _Partial, unaligned: tuple[int, ...], buf: _Buffers) -> None:
    """Add the window's packed totals to ``acc`` as counts and sums of low bits.

    ``bits`` is the whole window, read again only for what the fine bins cannot tell: zeros beside tiny
    subnormals in bin 0, infinities beside NaNs in the first exponent-255 bin, and float32 subnormals.
    """
    # Only the exponent fields the values reached (every value adds at least 2**36): a few dozen, not all 256.
    packed = buf.packed.reshape(256, _FINE_PER_BINADE)
    rows = np.flatnonzero(packed.max(axis=1))
    if not rows.size:
        return
    step = (rows[:, None] << _FRAC_BITS) + (np.arange(_FINE_PER_BINADE) << _FINE_BITS)  # each bin's key << 12
    step += _PACK
    count, low = np.divmod(packed[rows], step)
    acc.add_rows(rows, count, low)
    # Bin 0 holds |bits| < 2**12 and the first exponent-255 bin holds [inf, inf + 2**12): where their low bits
    # add up to 0 they hold only zeros, only infinities; otherwise count those exactly (tiny subnormals, NaNs).
    zeros = subnormals = 0
    if rows[0] == 0:
        zeros = int(count[0, 0]) if low[0, 0] == 0 else int(np.count_nonzero((bits & _ABS) == 0))
        subnormals = int(count[0].sum()) - zeros
    if rows[-1] == 255:
        acc.infs += int(count[-1, 0]) if low[-1, 0] == 0 else int(np.count_nonzero((bits & _ABS) == _INF_BITS))
    acc.zeros += zeros
    # Exponent field 0 holds the zeros and the float32 subnormals; the latter (rare) are binned by their own binade.
    if subnormals:
        mag = bits & _ABS
        _count_subnormals(mag[(mag < _SMALLEST_NORMAL_BITS) & (mag != 0)], acc, unaligned)


@cache
def _candidate_mask(unaligned: tuple[int, ...]) -> np.uint32:
    """Fraction bits that are 0 in every unaligned F: a value with any of them set is none of those F."""
    either = 0
    for f in unaligned:
        either |= f
    return np.uint32(((1 << _FRAC_BITS) - 1) & ~either)


def _count_subnormals(sub: NDArray[np.uint32], acc: _Partial, unaligned: tuple[int, ...]) -> None:
    # Times 2**64 is exact for a float32 subnormal and makes it normal: its exponent is then its binade + 64.
    norm = (sub.view(np.float32) * np.float32(2.0**64)).view(np.uint32)
    row = (norm >> np.uint32(_FRAC_BITS)).astype(np.int64) - 127 - 64 - BINADE_MIN
    frac = norm & np.uint32((1 << _FRAC_BITS) - 1)
    key = row * _FINE_PER_BINADE + (frac >> np.uint32(_FINE_BITS))
    acc.sub_count += np.bincount(key, minlength=acc.sub_count.size)
    acc.sub_low_sum += np.bincount(key, weights=frac & _FINE_LOW, minlength=acc.sub_count.size)
    for i, f_exact in enumerate(unaligned):
        acc.sub_exact_at[i] += np.bincount(row[frac == f_exact], minlength=_N_SUBNORMAL_BINADES)


def _count(bits: NDArray[np.uint32], workers: int = 1) -> _Partial:
    """Count all of ``bits`` window by window, chunk by chunk; with ``workers`` > 1, one contiguous part per thread
    (numpy releases the GIL in add.at and the array operations), on a pool that lives for this call only. Counts
    and sums are exact integers, so the parts add up to the same record whatever ``workers`` is."""
    unaligned = _unaligned()

    def part(lo: int, hi: int) -> _Partial:
        acc = _empty_partial()
        buf = _Buffers(min(_CHUNK, hi - lo))
        for i in range(lo, hi, _WINDOW):
            _count_window(bits[i : min(i + _WINDOW, hi)], acc, unaligned, buf)
        return acc

    n = bits.size
    if n < 2 * _MIN_PART or workers <= 1:
        return part(0, n)
    cuts = [n * i // workers for i in range(workers + 1)]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lensa-runstats") as pool:
        parts = list(pool.map(lambda i: part(cuts[i], cuts[i + 1]), range(workers)))
    total = parts[0]
    for p in parts[1:]:
        total += p
    return total


def _as_float32(x: ArrayLike) -> NDArray[np.float32]:
    a = np.asarray(x)
    if a.dtype.kind in "bOUSMm" or a.dtype.names is not None:
        raise TypeError(f"need an array of numbers, not {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1)


def summarize(x: ArrayLike, workers: int = 1, recipes: bool = False) -> TensorStats:
    """Summarise the values of a float array, read as float32 (float64 values are rounded to float32 first).

    Exact counts of ±0, ±inf and NaN, the binade and significand interval of every finite non-zero value,
    and the relative error sums; the size of the record does not depend on the array's. The sign of a
    value plays no part (every class is symmetric). An empty array gives size 0. ``workers`` > 1 counts a large
    array on that many threads, with the same result. ``recipes=True`` adds what every block recipe loses on
    ``x`` as it is shaped (:meth:`TensorStats.recipe`; see the module's notes).
    """
    stats = _summarize(x, workers)
    return stats.with_recipes(x) if recipes else stats


def _summarize(x: ArrayLike, workers: int) -> TensorStats:
    bits = _as_float32(x).view(np.uint32)
    acc = _count(bits, workers)

    # The fine bins of the finite non-zero values, on the grid of binades -149 ... 127 (2**11 bins each):
    # float32 subnormals by their own binade (rows 0 ... 22), then exponent fields 1 ... 254 (rows 23 ... 276).
    # Only the exponent fields the values reached (a tensor spans a few dozen binades), less 0 and 255.
    normal = (acc.rows >= 1) & (acc.rows <= 254)
    rows = acc.rows[normal]
    # exponent field e is binade e - 127, grid row e - 127 - BINADE_MIN
    grid = ((rows[:, None] + _N_SUBNORMAL_BINADES - 1) << _LOG_FINE) + np.arange(_FINE_PER_BINADE)
    count = acc.fine_count[normal].reshape(-1)
    low_sum = acc.fine_low_sum[normal].reshape(-1).astype(np.float64)  # exact: integers below 2**53
    grid = grid.reshape(-1)
    if np.count_nonzero(count) < count.size:  # only the bins that hold values
        held = np.flatnonzero(count)
        grid, count, low_sum = grid[held], count[held], low_sum[held]
    sub_bins = np.flatnonzero(acc.sub_count)
    bins = np.concatenate([sub_bins, grid])
    fine_count = np.concatenate([acc.sub_count[sub_bins], count])
    fine_low_sum = np.concatenate([acc.sub_low_sum[sub_bins], low_sum])
    return from_histograms(
        size=int(bits.size),
        exact_zero=acc.zeros,
        inf=acc.infs,
        nan=int(acc.fine_count[acc.rows == 255].sum()) - acc.infs,
        bins=bins,
        fine_count=fine_count,
        fine_low_sum=fine_low_sum,
        exact_at=np.concatenate([acc.sub_exact_at, acc.exact_at[:, 1:255]], axis=1),
    )


def exact_fractions() -> tuple[int, ...]:
    """The fraction values F (0 <= F < 2**23) whose values :func:`from_histograms` needs counted exactly.

    One below each significand edge that is not a multiple of 2**12 (a fine-bin edge): the fine bins alone
    cannot tell those values from the rest of their bin. Ascending.
    """
    return _unaligned()


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

    :func:`summarize` bins with numpy and ends here; :mod:`lensa.live.summaries` bins with torch and ends here
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
    edges = _edges()
    n_cols = len(edges)
    idx = np.asarray(bins)
    count = np.asarray(fine_count)
    lows = np.asarray(fine_low_sum, np.float64)
    exact = np.asarray(exact_at)
    if idx.dtype.kind not in "iu" or count.dtype.kind not in "iu" or exact.dtype.kind not in "iu":
        raise ValueError("bins, fine_count and exact_at must hold integers")
    if idx.ndim != 1 or count.shape != idx.shape or lows.shape != idx.shape:
        raise ValueError(f"need one count and one low sum per bin; got {idx.shape}, {count.shape}, {lows.shape}")
    if exact.shape != (len(_unaligned()), N_BINADES):
        raise ValueError(f"exact_at must have shape {(len(_unaligned()), N_BINADES)}, not {exact.shape}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx[0] < 0 or idx[-1] >= N_BINADES * _FINE_PER_BINADE or np.any(np.diff(idx) <= 0)):
        raise ValueError("bins must be strictly ascending indices into the grid of 277 * 2048 fine bins")
    if idx.size and count.min() <= 0:
        raise ValueError("every bin given must hold values (count > 0)")

    # Each fine bin lies in one significand interval, but for an unaligned edge e (one past a fine-bin edge):
    # its bin goes to the interval from e on, and the values with F == e - 1 (exact_at) move back one.
    row = idx >> _LOG_FINE
    lo, hi = (int(row[0]), int(row[-1]) + 1) if idx.size else (0, 0)
    cell = row - lo
    cell *= n_cols
    cell += _interval_of_column()[idx & (_FINE_PER_BINADE - 1)]
    table = np.zeros((hi - lo, n_cols), np.int64)
    np.add.at(table.reshape(-1), cell, count.astype(np.int64, copy=False))  # exact integers; a view of table
    for i, f_exact in enumerate(_unaligned()):
        j = int(np.searchsorted(edges, int(f_exact) + 1))
        table[:, j] -= exact[i, lo:hi]
        table[:, j - 1] += exact[i, lo:hi]
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


@cache
def _interval_of_column() -> NDArray[np.int64]:
    """Per fine-bin column (F >> 12): the significand interval its values are in (the later one at an unaligned
    edge's bin)."""
    starts = np.array(_edges(), np.int64) >> _FINE_BITS
    return np.searchsorted(starts, np.arange(_FINE_PER_BINADE), side="right") - 1


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
    d0 = ((1 << _FRAC_BITS) + ((idx & (_FINE_PER_BINADE - 1)) << _FINE_BITS)).astype(np.float64)
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
def _bin_offsets() -> NDArray[np.float64]:
    """(formats, all fine bins of binades -149 ... 127): the bin's lower edge minus its stored value, in units of
    2**(binade - 23); -inf where the format overflows to inf. Read only."""
    d0 = (1 << _FRAC_BITS) + (np.arange(_FINE_PER_BINADE, dtype=np.int64) << _FINE_BITS)
    d0 = np.tile(d0, N_BINADES).astype(np.float64)
    with np.errstate(invalid="ignore"):
        out = np.stack([d0 - _stored_in_fine_bins(name).reshape(-1) for name in SUMMARY_FORMATS])
    out.setflags(write=False)
    return out


def summarize_update(w_before: ArrayLike, w_after: ArrayLike, recipes: bool = False) -> TensorStats:
    """Statistics of the update ``w_after - w_before`` (float32 arithmetic), with lost counts per format.

    Both arrays are read as float32 and must have the same shape. A non-zero update u of a weight w is
    *lost* in a format when, with q = w stored in that format, ``q + u`` (computed in float32, then
    stored in the format) equals q. A NaN update or weight is never lost; a weight that overflows the
    format (stored as ±inf) loses every finite update; +0 and -0 count as the same stored weight.
    ``recipes=True`` adds what every block recipe loses on the update (shaped as the weight).
    """
    before = np.asarray(w_before)
    after = np.asarray(w_after)
    if before.shape != after.shape:
        raise ValueError(f"w_before has shape {before.shape} but w_after has {after.shape}")
    wb = _as_float32(before)
    with np.errstate(invalid="ignore", over="ignore"):
        update = _as_float32(after) - wb
        stats = summarize(update)
        moved = update != 0
        lost = []
        for name in SUMMARY_FORMATS:
            stored = cast(wb, name).astype(np.float32)  # exact: every stored value is a float32
            again = cast(stored + update, name).astype(np.float32)
            lost.append(int(np.count_nonzero(moved & (again == stored))))
    return TensorStats(
        size=stats.size,
        exact_zero=stats.exact_zero,
        inf=stats.inf,
        nan=stats.nan,
        binade_lo=stats.binade_lo,
        table=stats.table,
        rel_error_sum=stats.rel_error_sum,
        lost_counts=tuple(lost),
        recipes=recipe_records(update.reshape(before.shape)) if recipes else None,
    )


def combine(stats: Iterable[TensorStats]) -> TensorStats:
    """One record for several tensors together (as if concatenated): counts and sums add.

    Lost counts are kept only if every record has them; block recipe records are not (blocks do not add
    up across tensors). No records give an empty record (size 0).
    """
    items = list(stats)
    lo = min((s.binade_lo for s in items if s.table.size), default=BINADE_MIN)
    hi = max((s.binade_lo + s.table.shape[0] for s in items if s.table.size), default=lo)
    table = np.zeros((hi - lo, len(_edges())), np.int64)
    for s in items:
        if s.table.size:
            table[s.binade_lo - lo : s.binade_lo - lo + s.table.shape[0]] += s.table
    lost = None
    if items and all(s.lost_counts is not None for s in items):
        lost = tuple(int(sum(v)) for v in zip(*(s.lost_counts for s in items), strict=True))
    rel = np.zeros(len(SUMMARY_FORMATS))
    for s in items:
        rel += s.rel_error_sum
    return TensorStats(
        size=sum(s.size for s in items),
        exact_zero=sum(s.exact_zero for s in items),
        inf=sum(s.inf for s in items),
        nan=sum(s.nan for s in items),
        binade_lo=lo,
        table=table,
        rel_error_sum=tuple(rel.tolist()),
        lost_counts=lost,
    )


# --- a run: many tensors, labelled; saved and loaded -----------------------------------------------------------

_Label = tuple[str, str, int]
_SCALAR_FIELDS = ("size", "exact_zero", "inf", "nan")


def _check_label(kind: str, name: str, step: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"a tensor name must be a string of 1 to {MAX_NAME_CHARS} characters, not {name!r:.80}")
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
        raise ValueError(f"steps count from 1; got {step!r}")


class RunStats:
    """The statistics of one training run (one arm): tensors labelled (kind, name, step), and per-step scalars.

    ``kind`` is one of :data:`KINDS`; ``name`` is PyTorch's own (``named_parameters`` / ``named_modules``);
    steps count from 1. Per step it also keeps the loss and, for FP16 arms, the loss scale and whether the
    step was skipped (its gradients overflowed). ``meta`` holds a few JSON values (the arm, the recipe).
    """

    def __init__(self, meta: Mapping[str, Any] | None = None) -> None:
        self._meta: dict[str, Any] = dict(meta or {})
        text = json.dumps(self._meta, allow_nan=False)  # raises for anything JSON cannot hold
        if len(text) > MAX_META_CHARS:
            raise ValueError(f"meta is {len(text):,} characters of JSON; at most {MAX_META_CHARS:,}")
        self._tensors: dict[_Label, TensorStats] = {}
        self._steps: dict[int, tuple[float, float | None, bool]] = {}
        self._amax: dict[tuple[str, str], dict[int, float]] = {}
        self.version = FILE_VERSION  # the file version it was read from (a run built here: the current one)

    # building

    def add(self, kind: str, name: str, step: int, stats: TensorStats) -> None:
        """Keep ``stats`` under (kind, name, step); a label is used once, and a run holds at most 10,000 tensors."""
        _check_label(kind, name, step)
        if not isinstance(stats, TensorStats):
            raise TypeError(f"need a TensorStats, not {type(stats).__name__}")
        label = (kind, name, int(step))
        if label in self._tensors:
            raise ValueError(f"{kind} {name!r} at step {step} is already recorded")
        if len(self._tensors) >= MAX_TENSORS:
            raise ValueError(f"a run holds at most {MAX_TENSORS:,} tensors")
        self._tensors[label] = stats

    def record_step(self, step: int, loss: float, loss_scale: float | None = None, skipped: bool = False) -> None:
        """Keep one step's loss (any float, inf and NaN included), loss scale (> 0, FP16 arms) and skip flag."""
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
            raise ValueError(f"steps count from 1; got {step!r}")
        if loss_scale is not None and not (math.isfinite(loss_scale) and loss_scale > 0):
            raise ValueError(f"a loss scale is a finite number > 0, not {loss_scale!r}")
        self._steps[int(step)] = (float(loss), None if loss_scale is None else float(loss_scale), bool(skipped))

    def record_amax(self, kind: str, name: str, step: int, amax: float) -> None:
        """Keep the largest magnitude of tensor (kind, name) at ``step`` (any step, recorded or not).

        Kept as float32 (a float32 tensor's amax is one); a tensor holding a NaN is kept as inf (no scale
        holds it), so that NaN in a file means "not read at that step".
        """
        _check_label(kind, name, step)
        if (kind, name) not in self._amax and len(self._amax) >= MAX_TENSORS:
            raise ValueError(f"a run keeps amax for at most {MAX_TENSORS:,} tensors")
        value = float(np.float32(amax))
        if math.isnan(value):
            value = math.inf
        if value < 0:
            raise ValueError(f"an amax is a magnitude (>= 0), not {amax!r}")
        self._amax.setdefault((kind, name), {})[int(step)] = value

    def amax_names(self, kind: str) -> list[str]:
        """The tensor names of ``kind`` with an amax series, in the order they were first kept."""
        return [n for k, n in self._amax if k == kind]

    def amax(self, kind: str, name: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(steps, amax) of tensor (kind, name), ascending steps; empty arrays if none was kept."""
        series = self._amax.get((kind, name), {})
        steps = np.array(sorted(series), np.int64)
        return steps, np.array([series[int(t)] for t in steps], np.float64)

    @property
    def has_recipes(self) -> bool:
        """Whether every tensor's record keeps what each block recipe loses (False for a version-1 file)."""
        return bool(self._tensors) and all(s.recipes is not None for s in self._tensors.values())

    # querying

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = json.loads(json.dumps(self._meta))
        return meta

    def __len__(self) -> int:
        return len(self._tensors)

    def get(self, kind: str, name: str, step: int) -> TensorStats:
        """The statistics recorded under (kind, name, step); KeyError if there are none."""
        try:
            return self._tensors[(kind, name, int(step))]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"no {kind} {name!r} at step {step} in this run") from None

    def items(self) -> list[tuple[tuple[str, str, int], TensorStats]]:
        """Every ((kind, name, step), statistics) pair, in the order they were added (a file keeps that order)."""
        return list(self._tensors.items())

    def kinds(self) -> list[str]:
        """The kinds recorded, in the order of :data:`KINDS`."""
        present = {k for k, _, _ in self._tensors}
        return [k for k in KINDS if k in present]

    def names(self, kind: str) -> list[str]:
        """The tensor names recorded for ``kind``, in the order they were first added (the model's order)."""
        return list(dict.fromkeys(n for k, n, _ in self._tensors if k == kind))

    def steps(self, kind: str) -> list[int]:
        """The steps at which ``kind`` was recorded, ascending."""
        return sorted({s for k, _, s in self._tensors if k == kind})

    def losses(self) -> dict[int, float]:
        """Loss per recorded step, by step."""
        return {s: v[0] for s, v in sorted(self._steps.items())}

    def loss_scales(self) -> dict[int, float]:
        """Loss scale per step, for the steps that have one (FP16 arms)."""
        return {s: v[1] for s, v in sorted(self._steps.items()) if v[1] is not None}

    def skipped_steps(self) -> list[int]:
        """The steps whose optimizer step was skipped, ascending."""
        return [s for s, v in sorted(self._steps.items()) if v[2]]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunStats):
            return NotImplemented
        same_steps = self._steps.keys() == other._steps.keys() and all(
            np.array_equal(np.array(self._steps[s][:2], float), np.array(other._steps[s][:2], float), equal_nan=True)
            and self._steps[s][2] == other._steps[s][2]
            for s in self._steps
        )
        same_amax = self._amax.keys() == other._amax.keys() and all(
            self._amax[k].keys() == other._amax[k].keys()
            and np.array_equal(list(self._amax[k].values()), list(other._amax[k].values()), equal_nan=True)
            for k in self._amax
        )
        return (
            self._meta == other._meta
            and list(self._tensors.items()) == list(other._tensors.items())
            and same_steps
            and same_amax
        )

    # saving and loading

    def to_bytes(self) -> bytes:
        """The ``.npz`` file's bytes (see :meth:`save`)."""
        labels = list(self._tensors)
        stats = list(self._tensors.values())
        names = list(dict.fromkeys([*(n for _, n, _ in labels), *(n for _, n in self._amax)]))
        name_index = {n: i for i, n in enumerate(names)}
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "formats": list(SUMMARY_FORMATS),
            "significand_edges": list(_edges()),
            "kinds": list(KINDS),
            "recipes": list(RECIPE_KEYS),
            "names": names,
            "meta": self._meta,
        }
        n_cols = len(_edges())
        steps = sorted(self._steps)
        arrays: dict[str, NDArray[Any]] = {
            "header": np.array(json.dumps(header, allow_nan=False)),
            "tensor_kind": np.array([KINDS.index(k) for k, _, _ in labels], np.int64),
            "tensor_name": np.array([name_index[n] for _, n, _ in labels], np.int64),
            "tensor_step": np.array([s for _, _, s in labels], np.int64),
            "tensor_counts": np.array([[getattr(s, f) for f in _SCALAR_FIELDS] for s in stats], np.int64).reshape(
                -1, len(_SCALAR_FIELDS)
            ),
            "tensor_binade_lo": np.array([s.binade_lo for s in stats], np.int64),
            "tensor_rows": np.array([s.table.shape[0] for s in stats], np.int64),
            "table": np.concatenate([s.table for s in stats]) if stats else np.zeros((0, n_cols), np.int64),
            "rel_error_sum": np.array([s.rel_error_sum for s in stats], np.float64).reshape(-1, len(SUMMARY_FORMATS)),
            "has_lost": np.array([s.lost_counts is not None for s in stats], np.bool_),
            "lost": np.array([s.lost_counts or (0,) * len(SUMMARY_FORMATS) for s in stats], np.int64).reshape(
                -1, len(SUMMARY_FORMATS)
            ),
            "step": np.array(steps, np.int64),
            "step_loss": np.array([self._steps[s][0] for s in steps], np.float64),
            "step_loss_scale": np.array(
                [math.nan if self._steps[s][1] is None else self._steps[s][1] for s in steps], np.float64
            ),
            "step_skipped": np.array([self._steps[s][2] for s in steps], np.bool_),
            "has_recipes": np.array([s.recipes is not None for s in stats], np.bool_),
            "recipe_lost": np.array(
                [s.recipes or ((0.0,) * len(LOST_FIELDS),) * len(RECIPE_KEYS) for s in stats], np.float64
            ).reshape(-1, len(RECIPE_KEYS), len(LOST_FIELDS)),
            **self._amax_arrays(name_index),
        }
        buf = io.BytesIO()
        # allow_pickle=True is numpy's default; naming it tells the type checker no array takes that name.
        np.savez_compressed(buf, allow_pickle=True, **arrays)
        data = buf.getvalue()
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"the file would be {len(data):,} bytes; load() reads at most {MAX_FILE_BYTES:,}")
        return data

    def _amax_arrays(self, name_index: dict[str, int]) -> dict[str, NDArray[Any]]:
        series = list(self._amax)
        amax_steps = sorted({t for v in self._amax.values() for t in v})
        col = {t: i for i, t in enumerate(amax_steps)}
        values = np.full((len(series), len(amax_steps)), np.nan, np.float32)
        for i, key in enumerate(series):
            for t, v in self._amax[key].items():
                values[i, col[t]] = v
        return {
            "amax_kind": np.array([KINDS.index(k) for k, _ in series], np.int64),
            "amax_name": np.array([name_index[n] for _, n in series], np.int64),
            "amax_step": np.array(amax_steps, np.int64),
            "amax": values,
        }

    def __reduce__(self) -> tuple[Any, tuple[bytes, int]]:
        """Pickled as its file (compressed, checked again when unpickled): a run's records are many small arrays."""
        return (_unpickle, (self.to_bytes(), self.version))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the run to ``path`` as a versioned ``.npz`` (no pickles: int64 counts, float64 sums, JSON labels)."""
        data = self.to_bytes()
        with open(path, "wb") as fh:
            fh.write(data)

    @classmethod
    def load(cls, source: str | os.PathLike[str] | bytes | IO[bytes]) -> RunStats:
        """Read a file written by :meth:`save` (see :func:`load`)."""
        return load(source)


_ARRAYS: dict[str, tuple[str, int]] = {  # name: (dtype kind and size, number of dimensions)
    "header": ("U", 0),
    "tensor_kind": ("i8", 1),
    "tensor_name": ("i8", 1),
    "tensor_step": ("i8", 1),
    "tensor_counts": ("i8", 2),
    "tensor_binade_lo": ("i8", 1),
    "tensor_rows": ("i8", 1),
    "table": ("i8", 2),
    "rel_error_sum": ("f8", 2),
    "has_lost": ("b1", 1),
    "lost": ("i8", 2),
    "step": ("i8", 1),
    "step_loss": ("f8", 1),
    "step_loss_scale": ("f8", 1),
    "step_skipped": ("b1", 1),
}
_ARRAYS_V2: dict[str, tuple[str, int]] = {
    **_ARRAYS,
    "has_recipes": ("b1", 1),
    "recipe_lost": ("f8", 3),
    "amax_kind": ("i8", 1),
    "amax_name": ("i8", 1),
    "amax_step": ("i8", 1),
    "amax": ("f4", 2),
}
# A valid file at the limits unpacks to about 200 MB (10,000 tensors of 277 rows); refuse to unpack more.
_MAX_UNPACKED_BYTES = 256 * 1024 * 1024


def _unpickle(data: bytes, version: int) -> RunStats:
    run = load(data)
    run.version = version
    return run


def _read_source(source: str | os.PathLike[str] | bytes | IO[bytes]) -> bytes:
    too_big = f"the file is over {MAX_FILE_BYTES // (1024 * 1024)} MB; run statistics files are smaller: record fewer"
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    elif isinstance(source, str | os.PathLike):
        try:
            if os.path.getsize(source) > MAX_FILE_BYTES:
                raise RunStatsError(too_big + " tensors or steps")
            with open(source, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise RunStatsError(f"cannot read {os.fspath(source)!r}: {e.strerror or e}") from None
    elif hasattr(source, "read"):
        data = source.read(MAX_FILE_BYTES + 1)
        if not isinstance(data, bytes | bytearray):
            raise RunStatsError("the file object must be opened in binary mode ('rb')")
        data = bytes(data)
    else:
        raise RunStatsError(f"cannot read run statistics from a {type(source).__name__}; give a path, bytes or a file")
    if len(data) > MAX_FILE_BYTES:
        raise RunStatsError(too_big + " tensors or steps")
    return data


def load(source: str | os.PathLike[str] | bytes | IO[bytes]) -> RunStats:
    """Read run statistics saved by :meth:`RunStats.save` from a path, bytes or a binary file object.

    Everything is checked; anything unusable raises :class:`RunStatsError` (a ValueError) saying what is
    wrong: not a ``.npz``, truncated or damaged, object or pickled arrays, a wrong or missing version,
    negative or non-integer counts, totals that disagree, more than 10,000 tensors, names over 200
    characters, a file over 25 MB.
    """
    data = _read_source(source)
    try:
        return _load_bytes(data)
    except RunStatsError:
        raise
    except Exception as e:  # a damaged file can fail deep inside zipfile, zlib or numpy: report, never crash
        raise RunStatsError(
            f"the file is damaged or is not a Lensa run statistics file ({type(e).__name__}: {e})"
        ) from e


def _load_bytes(data: bytes) -> RunStats:
    if not data.startswith(b"PK"):
        raise RunStatsError("this is not a .npz (zip) file; save run statistics with RunStats.save()")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except zipfile.BadZipFile as e:
        raise RunStatsError(f"the .npz file is truncated or damaged ({e}); save it again") from None
    members = {i.filename.removesuffix(".npy") for i in infos}
    expected = _ARRAYS_V2 if set(_ARRAYS_V2) - set(_ARRAYS) <= members else _ARRAYS  # a version-1 file has fewer
    missing = sorted(set(expected) - members)
    if "header" in missing:
        raise RunStatsError("the file has no header, so no version: it was not written by RunStats.save()")
    if missing or len(infos) != len(expected):
        extra = sorted(members - set(expected))
        raise RunStatsError(f"the file's arrays do not match this version (missing {missing}, unexpected {extra})")
    if sum(i.file_size for i in infos) > _MAX_UNPACKED_BYTES:
        raise RunStatsError("the file unpacks to more than a valid run statistics file can hold")

    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {}
        for name, (dtype, ndim) in expected.items():
            try:
                a = npz[name]
            except ValueError as e:
                if "pickle" in str(e) or "Object arrays" in str(e):
                    raise RunStatsError(
                        f"array {name!r} holds Python objects (a pickle); Lensa never reads those"
                    ) from e
                raise
            ok = a.dtype.kind == "U" if dtype == "U" else a.dtype.str.lstrip("<>=|") == dtype
            if not ok:
                what = "counts must be integers (int64)" if dtype == "i8" else f"expected {dtype}"
                raise RunStatsError(f"array {name!r} has type {a.dtype}: {what}")
            if a.ndim != ndim:
                raise RunStatsError(f"array {name!r} has {a.ndim} dimensions, expected {ndim}")
            arrays[name] = a
    return _from_arrays(arrays)


def _from_arrays(a: dict[str, NDArray[Any]]) -> RunStats:
    try:
        header = json.loads(str(a["header"][()]))
    except json.JSONDecodeError as e:
        raise RunStatsError(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
        raise RunStatsError("the header does not name the Lensa run statistics format")
    version = header.get("version")
    if version is None:
        raise RunStatsError("the header has no version; save the run again with this Lensa")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise RunStatsError(f"file version {version!r}; this Lensa reads versions 1 and 2: save it again")
    if (version == 2) != ("recipe_lost" in a):
        raise RunStatsError(f"the file says version {version} but holds the arrays of the other version")
    if version == 2 and header.get("recipes") != list(RECIPE_KEYS):
        raise RunStatsError("the file records other block recipes than this Lensa")
    if header.get("formats") != list(SUMMARY_FORMATS) or header.get("significand_edges") != list(_edges()):
        raise RunStatsError("the file counts other formats or significand intervals than this Lensa")
    if header.get("kinds") != list(KINDS):
        raise RunStatsError("the file uses other tensor kinds than this Lensa")
    names, meta = header.get("names"), header.get("meta")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RunStatsError("the header's tensor names are not a list of strings")
    long = [n for n in names if not 1 <= len(n) <= MAX_NAME_CHARS]
    if long:
        raise RunStatsError(f"tensor name {long[0][:40]!r}… has {len(long[0])} characters; at most {MAX_NAME_CHARS}")
    if not isinstance(meta, dict):
        raise RunStatsError("the header's meta is not a JSON object")

    n = a["tensor_kind"].shape[0]
    if n > MAX_TENSORS:
        raise RunStatsError(f"the file holds {n:,} tensors; at most {MAX_TENSORS:,}: record fewer steps or layers")
    n_cols, n_fmt = len(_edges()), len(SUMMARY_FORMATS)
    shapes = {
        "tensor_name": (n,),
        "tensor_step": (n,),
        "tensor_counts": (n, len(_SCALAR_FIELDS)),
        "tensor_binade_lo": (n,),
        "tensor_rows": (n,),
        "rel_error_sum": (n, n_fmt),
        "has_lost": (n,),
        "lost": (n, n_fmt),
    }
    if version == 2:
        shapes["has_recipes"] = (n,)
        shapes["recipe_lost"] = (n, len(RECIPE_KEYS), len(LOST_FIELDS))
        k = a["amax_kind"].shape[0]
        shapes["amax_name"] = (k,)
        shapes["amax"] = (k, a["amax_step"].shape[0])
    for key, shape in shapes.items():
        if a[key].shape != shape:
            raise RunStatsError(f"array {key!r} has shape {a[key].shape}, expected {shape}")
    if a["table"].shape[1] != n_cols:
        raise RunStatsError(f"the table has {a['table'].shape[1]} columns, expected {n_cols}")
    m = a["step"].shape[0]
    for key in ("step_loss", "step_loss_scale", "step_skipped"):
        if a[key].shape != (m,):
            raise RunStatsError(f"array {key!r} has shape {a[key].shape}, expected {(m,)}")
    for key in ("tensor_counts", "table", "lost", "tensor_rows"):
        if a[key].size and a[key].min() < 0:
            raise RunStatsError(f"array {key!r} holds negative counts")
    rows = a["tensor_rows"]
    if int(rows.sum()) != a["table"].shape[0]:
        raise RunStatsError(f"the tensors claim {int(rows.sum())} table rows but the table has {a['table'].shape[0]}")
    if n and (a["tensor_kind"].min() < 0 or a["tensor_kind"].max() >= len(KINDS)):
        raise RunStatsError("a tensor's kind is out of range")
    if n and (a["tensor_name"].min() < 0 or a["tensor_name"].max() >= len(names)):
        raise RunStatsError("a tensor's name index is out of range")

    meta_text = json.dumps(meta)
    if len(meta_text) > MAX_META_CHARS:
        raise RunStatsError(f"meta is {len(meta_text):,} characters of JSON; at most {MAX_META_CHARS:,}")
    run = RunStats(meta)
    run.version = int(version)
    offsets = np.concatenate([[0], np.cumsum(rows)])
    for i in range(n):
        label = (KINDS[int(a["tensor_kind"][i])], names[int(a["tensor_name"][i])], int(a["tensor_step"][i]))
        size, exact_zero, inf, nan = (int(v) for v in a["tensor_counts"][i])
        try:
            stats = TensorStats(
                size=size,
                exact_zero=exact_zero,
                inf=inf,
                nan=nan,
                binade_lo=int(a["tensor_binade_lo"][i]),
                table=a["table"][offsets[i] : offsets[i + 1]],
                rel_error_sum=tuple(float(v) for v in a["rel_error_sum"][i]),
                lost_counts=tuple(int(v) for v in a["lost"][i]) if a["has_lost"][i] else None,
                recipes=tuple(map(tuple, a["recipe_lost"][i].tolist()))
                if version == 2 and a["has_recipes"][i]
                else None,
            )
            run.add(*label, stats)
        except ValueError as e:
            raise RunStatsError(f"{label[0]} {label[1]!r} at step {label[2]}: {e}") from None
    for step, loss, scale, skipped in zip(
        a["step"].tolist(),
        a["step_loss"].tolist(),
        a["step_loss_scale"].tolist(),
        a["step_skipped"].tolist(),
        strict=True,
    ):
        try:
            run.record_step(step, loss, None if math.isnan(scale) else scale, skipped)
        except ValueError as e:
            raise RunStatsError(f"step {step}: {e}") from None
    if len(run._steps) != m:
        raise RunStatsError("a step is recorded twice")
    if version == 2:
        _load_amax(run, a, names)
    return run


def _load_amax(run: RunStats, a: dict[str, NDArray[Any]], names: list[str]) -> None:
    kinds, idx, steps, values = a["amax_kind"], a["amax_name"], a["amax_step"], a["amax"]
    if kinds.size and (kinds.min() < 0 or kinds.max() >= len(KINDS)):
        raise RunStatsError("an amax series' kind is out of range")
    if idx.size and (idx.min() < 0 or idx.max() >= len(names)):
        raise RunStatsError("an amax series' name index is out of range")
    if steps.size and (steps.min() < 1 or np.any(np.diff(steps) <= 0)):
        raise RunStatsError("the amax steps must count from 1 and ascend")
    if len(set(zip(kinds.tolist(), idx.tolist(), strict=True))) != kinds.size:
        raise RunStatsError("an amax series is recorded twice")
    if values.size and np.nanmin(values, initial=0.0) < 0:
        raise RunStatsError("an amax is negative")
    step_list = steps.tolist()
    for i in range(kinds.size):
        kind, name = KINDS[int(kinds[i])], names[int(idx[i])]
        row = values[i]
        for t, v in zip(step_list, row.tolist(), strict=True):
            if not math.isnan(v):
                run.record_amax(kind, name, t, v)
