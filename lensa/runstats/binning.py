"""The class table and the exact binning of a run statistics record: every rule defined once, here.

Both binning paths follow these rules: the numpy one (:mod:`lensa.runstats.counting`) and the torch one
(:mod:`lensa.live.torch_binning`), each with kernels of its own; so do the measured views
(:mod:`lensa.runstats.measured`), which ask :func:`cell_classes` what a cell is.

The grid. A finite non-zero float32 value lies in one binade b (|x| in [2**b, 2**(b+1)), -149 ... 127, read
from its bits; a float32 subnormal by its own binade, see :func:`bin_subnormals`) and has 23 fraction bits F
(the value normalised to 1.F). A *fine bin* is (binade, top 11 bits of F): grid bin ``(b - BINADE_MIN) * 2048
+ (F >> 12)``. Read from the bits, a normal value's key ``|bits| >> 12`` is (exponent field, top 11 bits of
F), ordered like |x|; its grid bin is ``key + NORMAL_BIN_OFFSET``. Key 0 holds ±0 and the smallest
subnormals, key :data:`INF_KEY` holds ±inf and some NaNs (:func:`edge_bin_count`).

The class table. The record counts values per (binade, *significand interval*): F cut at the few points where
some format's class changes inside a binade (:func:`significand_edges`: the value that rounds up to the
smallest normal, the half of the smallest subnormal, the overflow point). Multiplying by 2**k moves a value k
binades and leaves F alone, and whether a value rounds to 0, stays subnormal, becomes normal or overflows in a
format depends only on its binade and on which side of those cut points F lies. So each (binade + k,
interval) cell has one class (:data:`CELL_CLASSES`), found once per format by asking
:func:`lensa.numerics.formats.classify` about the cell's smallest value (and checked against its largest): the table
:func:`cell_classes` reads. This is exact for every integer k (below 2**-150 every format rounds to 0 and above
2**129 every one overflows): it answers what happens to the exact product x * 2**k, which is also what torch's
cast of the float32 product gives whenever that product is itself exact in float32. Ties go to even; the cut
points, found by bisection with ``classify``, put ``2**-25`` (half the smallest FP16 subnormal) in ``zero`` and
the next float32 above it in ``subnormal``, 65520 (FP16's max plus half a step) in ``overflow``, and for FP8
E4M3, which saturates (see :mod:`lensa.numerics.formats`), 464 in ``normal`` (it becomes 448) and everything above 464,
±inf included, in ``overflow`` (stored as ±448).

Exact fractions. A cut point that is not a fine-bin edge lies one past one (checked): the values of that bin
whose F is one below the cut (:func:`exact_fractions`) belong to the interval before it, and are counted
exactly, found by a cheap bit test (:func:`candidate_mask`).

This module imports numpy and :mod:`lensa.numerics.formats` only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from numpy.typing import NDArray

from lensa.numerics.formats import FloatFormat, classify, formats_in, get_format

# The formats a recorded run is summarised for: the registry's 16-bit and FP8 groups (torch can store a tensor in
# each of them; FP6 and FP4 have no torch type to record with). Their order is the file's.
SUMMARY_FORMATS: tuple[str, ...] = formats_in("16bit", "fp8")
CLASS_KEYS: tuple[str, ...] = ("exact_zero", "zero", "subnormal", "normal", "overflow", "nan")
CELL_CLASSES: tuple[str, ...] = ("zero", "subnormal", "normal", "overflow")  # what a cell's values become

BINADE_MIN, BINADE_MAX = -149, 127  # finite non-zero float32 magnitudes lie in [2**-149, 2**128)
N_BINADES = BINADE_MAX - BINADE_MIN + 1  # 277

# float32's bits
FRAC_BITS = 23
FRAC_MASK = (1 << FRAC_BITS) - 1
ABS_MASK = 0x7FFFFFFF  # all but the sign
INF_BITS = 0x7F800000  # |bits| of ±inf; NaNs lie above
SMALLEST_NORMAL_BITS = 0x00800000  # |bits| below it: ±0 and the subnormals (exponent field 0)
EXP_SPECIAL = 255  # exponent field of ±inf and NaN

# the fine bins
LOW_BITS = 12  # fine bins drop the low 12 fraction bits: 2**11 bins per binade
LOW_MASK = (1 << LOW_BITS) - 1
LOG_FINE = FRAC_BITS - LOW_BITS
FINE_PER_BINADE = 1 << LOG_FINE  # 2048
N_SUBNORMAL_BINADES = -126 - BINADE_MIN  # float32 subnormals: binades -149 ... -127, the grid's first 23 rows
NORMAL_ROW_OFFSET = N_SUBNORMAL_BINADES - 1  # grid row of a normal value = its exponent field + this
NORMAL_BIN_OFFSET = NORMAL_ROW_OFFSET << LOG_FINE  # grid bin of a normal value = its key (|bits| >> 12) + this
INF_KEY = INF_BITS >> LOW_BITS  # the key of ±inf: the first bin of exponent field 255

# Below 2**-150 every summary format rounds to 0, above 2**129 every one overflows: the class table stops there.
CLAMP_LO, CLAMP_HI = -150, 129


# --- the cut points and the class of every (binade, interval) cell -------------------------------------------


def summary_format(fmt: str | FloatFormat) -> FloatFormat:
    """``fmt`` as a format of :data:`SUMMARY_FORMATS`; ValueError for any other."""
    f = get_format(fmt)
    if f.name not in SUMMARY_FORMATS:
        raise ValueError(f"run statistics cover {', '.join(SUMMARY_FORMATS)}; not {f.name!r}")
    return f


def _class_index(f: FloatFormat, binade: NDArray[np.int64], frac: NDArray[np.int64]) -> NDArray[np.int8]:
    """Index into CELL_CLASSES of (1 + frac / 2**23) * 2**binade, as lensa.numerics.formats.classify decides."""
    values = np.ldexp(1.0 + frac.astype(np.float64) / (1 << FRAC_BITS), binade.astype(np.int64))  # exact
    cats = classify(values, f)
    out = np.zeros(cats.shape, np.int8)
    for i, name in enumerate(CELL_CLASSES):
        out[cats == name] = i
    return out


@cache
def significand_edges() -> tuple[int, ...]:
    """The fraction values (0 <= F < 2**23) that start the table's significand intervals, ascending (0 first).

    Where some summary format's class changes inside some binade, found by bisection on F with ``classify`` (its
    classes are monotone in the magnitude). For these four formats: 1 (the tie at half the smallest subnormal),
    E4M3's saturation point just above 0x680000, and the points where a binade's top values round up into the
    next binade.
    """
    binades = np.arange(CLAMP_LO, CLAMP_HI + 1)
    edges = {0}
    for name in SUMMARY_FORMATS:
        f = get_format(name)
        lo = _class_index(f, binades, np.zeros_like(binades))
        hi = _class_index(f, binades, np.full_like(binades, FRAC_MASK))
        for level in range(1, len(CELL_CLASSES)):
            rows = binades[(lo < level) & (hi >= level)]
            left = np.zeros_like(rows)  # class < level here
            right = np.full_like(rows, FRAC_MASK)  # class >= level here
            while np.any(right - left > 1):
                mid = (left + right) // 2
                up = _class_index(f, rows, mid) >= level
                right, left = np.where(up, mid, right), np.where(up, left, mid)
            edges.update(int(r) for r in right)
    out = tuple(sorted(edges))
    # The fine bins place F >= edge; an edge 1 past a bin edge needs the exact F == bin edge (exact_fractions).
    bad = [e for e in out if e & LOW_MASK > 1]
    if bad:
        raise RuntimeError(f"significand edges {bad} are not at a fine-bin edge or one past it")
    return out


@cache
def _class_table(name: str) -> NDArray[np.int8]:
    """Class index (into CELL_CLASSES) of each (binade CLAMP_LO ... CLAMP_HI, interval) cell of ``name``.

    Each cell is classified by its smallest value and checked by its largest: a cell whose two ends
    disagree would mean a missing edge, and stops the import rather than giving wrong counts. Read only.
    """
    f = get_format(name)
    edges = np.array(significand_edges(), np.int64)
    ends = np.append(edges[1:] - 1, FRAC_MASK)
    binades = np.arange(CLAMP_LO, CLAMP_HI + 1)
    b, first = np.meshgrid(binades, edges, indexing="ij")
    _, last = np.meshgrid(binades, ends, indexing="ij")
    table = _class_index(f, b, first)
    if not np.array_equal(table, _class_index(f, b, last)):
        raise RuntimeError(f"a significand interval is not one class in {name}")
    table.setflags(write=False)
    return table


def cell_classes(fmt: str | FloatFormat, binades: NDArray[np.integer]) -> NDArray[np.int8]:
    """(len(binades), intervals): the class (index into :data:`CELL_CLASSES`) of each (binade, interval) cell.

    Any integer binades (a record's, moved by a scale 2**k): below -150 every cell rounds to 0, above 129 every
    one overflows. ValueError for a format outside :data:`SUMMARY_FORMATS`.
    """
    rows = np.clip(np.asarray(binades, np.int64), CLAMP_LO, CLAMP_HI) - CLAMP_LO
    return _class_table(summary_format(fmt).name)[rows]


@cache
def exact_fractions() -> tuple[int, ...]:
    """The fraction values F (0 <= F < 2**23) whose values are counted exactly, beside the fine bins. Ascending.

    One below each significand edge that is not a multiple of 2**12 (a fine-bin edge): the fine bins alone
    cannot tell those values from the rest of their bin.
    """
    return tuple(e - 1 for e in significand_edges() if e & LOW_MASK)


@cache
def candidate_mask() -> int:
    """Fraction bits that are 0 in every one of :func:`exact_fractions`: a value with any of them set is none of
    those F. The cheap test both paths run on every value; it also lets through the zeros and a few more."""
    either = 0
    for f in exact_fractions():
        either |= f
    return FRAC_MASK & ~either


def count_exact(frac: NDArray[np.integer], row: NDArray[np.integer], n_rows: int) -> NDArray[np.int64]:
    """(len(exact_fractions()), n_rows): per row, how many of the values (fraction bits ``frac``, row ``row``) have
    each of the exact fractions."""
    return np.stack([np.bincount(row[frac == f], minlength=n_rows) for f in exact_fractions()]).astype(np.int64)


@cache
def interval_of_column() -> NDArray[np.int64]:
    """Per fine-bin column (F >> 12): the significand interval its values are in (the later one at the bin of an
    edge one past the bin's start: the values at exact_fractions() move back one). Read only."""
    starts = np.array(significand_edges(), np.int64) >> LOW_BITS
    out = np.searchsorted(starts, np.arange(FINE_PER_BINADE), side="right") - 1
    out.setflags(write=False)
    return out


# --- what both binning paths do the same way -----------------------------------------------------------------


def packing(window: int) -> int:
    """The constant P that packs a fine bin's count and its sum of low bits into one total: ``count * P + sum``.

    Each value adds P plus its low 12 bits (the numpy path adds P plus all of ``|bits|``, ``(key << 12) + low``,
    and divides by ``P + (key << 12)``). While at most ``window`` values are added before the totals are
    unpacked, their low sum is below ``window * 2**12 = P``, so division gives back count and sum exactly. The
    numpy path packs 2**24 values in int64 (totals below 2**61), the torch path 2**20 in float64 (below 2**53).
    """
    return window << LOW_BITS


def edge_bin_count(count: int, low_sum: float, count_exactly: Callable[[], int]) -> int:
    """How many of a fine bin's ``count`` values lie on its lower edge: key 0's ±0, key :data:`INF_KEY`'s ±inf.

    A bin whose low bits add up to 0 holds only values on its lower edge, so all of them; otherwise it also
    holds tiny subnormals (key 0) or NaNs (key INF_KEY), and ``count_exactly()`` reads the values again.
    """
    return int(count) if low_sum == 0 else count_exactly()


def bin_subnormals(
    mag: NDArray[np.integer],
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]:
    """The fine bins of float32 subnormals given as their magnitude bits (int32 or uint32, none of them 0).

    Each by its own binade (-149 ... -127, the grid's first 23 rows): times 2**64 is exact for a float32
    subnormal and makes it normal, its exponent then its binade + 64. Returns, over the 23 * 2048 grid bins of
    those rows: the count and the sum of the low 12 fraction bits (float64 integers) per fine bin, and the
    (len(exact_fractions()), 23) counts of the exact fractions per row.
    """
    norm = (mag.view(np.float32) * np.float32(2.0**64)).view(np.uint32)
    row = (norm >> np.uint32(FRAC_BITS)).astype(np.int64) - 127 - 64 - BINADE_MIN
    frac = norm & np.uint32(FRAC_MASK)
    key = row * FINE_PER_BINADE + (frac >> np.uint32(LOW_BITS))
    n_bins = N_SUBNORMAL_BINADES * FINE_PER_BINADE
    count = np.bincount(key, minlength=n_bins).astype(np.int64)
    low_sum = np.bincount(key, weights=frac & np.uint32(LOW_MASK), minlength=n_bins).astype(np.float64, copy=False)
    return count, low_sum, count_exact(frac, row, N_SUBNORMAL_BINADES)
