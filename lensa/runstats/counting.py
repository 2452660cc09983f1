"""The numpy counting engine: :func:`summarize` and :func:`summarize_update`, exact integer work on float32 bits.

Counting. :func:`summarize` works on the float32 bit patterns with integer numpy operations, so nothing is
rounded: per chunk of 2**16 values, one ``np.add.at`` adds ``|bits| + P`` to an int64 total per fine bin
(:func:`lensa.runstats.binning.packing`: P = 2**36 holds both the bin's count and the sum of its low bits
exactly for up to 2**24 values, a window; its totals are then unpacked with divmod). Zeros, infinities and
float32 subnormals share fine bins with other values; the bins' low-bit sums say when they do
(:func:`~lensa.runstats.binning.edge_bin_count`), and only then is the window read again. The values at the
fractions the fine bins cannot place (:func:`~lensa.runstats.binning.exact_fractions`) are found per chunk by
a bit mask. With ``workers`` > 1, contiguous parts are counted on threads and added up: the counts are
integers, so any split gives the same record, bit for bit. The record itself is made by
:func:`lensa.runstats.record.from_histograms`, as the torch path's is.

Lost updates. :func:`summarize_update` takes a weight before and after a step, reads the update as
``u = w_after - w_before`` in float32 arithmetic, and for each format counts the non-zero updates that a weight
held in that format would lose: with ``q`` the weight before stored in the format (the library cast of
:func:`lensa.numerics.formats.cast`), ``q + u`` computed in float32 and stored in the format again equals ``q``. That is
how PyTorch applies a float32 update to a low-precision tensor (it computes in float32 and rounds the result
once into the tensor's type). :func:`summarize_intended` takes the update itself instead (the one the optimizer
meant to make, which a low-precision weight's after − before hides) and counts FP32's losses too.

This module imports numpy (and the rest of :mod:`lensa.runstats`, :mod:`lensa.numerics.formats`) only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.numerics.formats import stored_float32
from lensa.runstats.binning import (
    ABS_MASK,
    EXP_SPECIAL,
    FINE_PER_BINADE,
    FRAC_BITS,
    FRAC_MASK,
    INF_BITS,
    LOG_FINE,
    LOW_BITS,
    LOW_MASK,
    N_SUBNORMAL_BINADES,
    NORMAL_BIN_OFFSET,
    SMALLEST_NORMAL_BITS,
    SUMMARY_FORMATS,
    bin_subnormals,
    candidate_mask,
    count_exact,
    edge_bin_count,
    exact_fractions,
    packing,
)
from lensa.runstats.record import TensorStats, from_histograms, recipe_records

_ABS = np.uint32(ABS_MASK)
_WINDOW = 1 << 24  # values per packed accumulator, then it is unpacked
# A bin of c values whose low 12 bits sum to s holds c * (P + (key << 12)) + s: below 2**61 for c <= 2**24.
_PACK = packing(_WINDOW)
_CHUNK = 1 << 16  # values per np.add.at: small enough for the chunk and its scratch (1.5 MB) to stay in cache
_SMALL = 1 << 16  # values at most, for the sorting path of a small array (:func:`_summarize_small`)
_MIN_PART = 1 << 20  # values per thread at least: smaller arrays are counted on one
_N_EXPONENTS = EXP_SPECIAL + 1  # rows of the running totals: one per float32 exponent field


@dataclass
class _RunningTotals:
    """The running per-bin totals of one part of the array, merged by summing (exact: int64, or float64
    integers below 2**53)."""

    rows: NDArray[np.intp]  # the float32 exponent fields that hold values, ascending (no other holds any)
    fine_count: NDArray[np.int64]  # (rows.size, 2048): values per fine bin, by row and top 11 fraction bits
    fine_low_sum: NDArray[np.int64]  # (rows.size, 2048): sum of the low 12 fraction bits per fine bin
    exact_at: NDArray[np.int64]  # (len(exact_fractions()), 256): values at each exact F, by exponent field
    sub_count: NDArray[np.int64]  # the same three for float32 subnormals, by their own binade (-149 ... -127)
    sub_low_sum: NDArray[np.float64]
    sub_exact_at: NDArray[np.int64]
    zeros: int = 0
    infs: int = 0

    @classmethod
    def empty(cls) -> _RunningTotals:
        n_exact = len(exact_fractions())
        return cls(
            rows=np.zeros(0, np.intp),
            fine_count=np.zeros((0, FINE_PER_BINADE), np.int64),
            fine_low_sum=np.zeros((0, FINE_PER_BINADE), np.int64),
            exact_at=np.zeros((n_exact, _N_EXPONENTS), np.int64),
            sub_count=np.zeros(N_SUBNORMAL_BINADES * FINE_PER_BINADE, np.int64),
            sub_low_sum=np.zeros(N_SUBNORMAL_BINADES * FINE_PER_BINADE, np.float64),
            sub_exact_at=np.zeros((n_exact, N_SUBNORMAL_BINADES), np.int64),
        )

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
                both = np.zeros((union.size, FINE_PER_BINADE), np.int64)
                both[mine] = getattr(self, name)
                both[theirs] += add
                setattr(self, name, both)
            self.rows = union

    def __iadd__(self, other: _RunningTotals) -> _RunningTotals:
        self.add_rows(other.rows, other.fine_count, other.fine_low_sum)
        for name in ("exact_at", "sub_count", "sub_low_sum", "sub_exact_at"):
            getattr(self, name).__iadd__(getattr(other, name))
        self.zeros += other.zeros
        self.infs += other.infs
        return self


class _Buffers:
    """One thread's scratch: a chunk's keys, weights and masked bits, reused from chunk to chunk (fresh arrays cost
    page faults), and the packed totals of the current window (a fresh np.zeros per window)."""

    def __init__(self, n: int) -> None:
        self.key = np.empty(n, np.intp)
        self.weight = np.empty(n, np.int64)
        self.masked = np.empty(n, np.uint32)
        self.packed = np.zeros(0, np.int64)
        self.candidate_mask = np.uint32(candidate_mask())


def _count_window(bits: NDArray[np.uint32], acc: _RunningTotals, buf: _Buffers) -> None:
    """Add one window (at most _WINDOW values) of float32 bit patterns to ``acc``: integer work on the bits.

    A window of one chunk (a small tensor) keeps packed totals only for the exponent fields its values reach
    (a few dozen rows, not all 256: the 4 MB of zeros a full window needs cost more than counting 64 values); a
    larger one keeps all 256 rows. Both give the same totals."""
    fields: NDArray[np.intp] | None = None
    slot: NDArray[np.intp] | None = None
    if bits.size <= _CHUNK:
        fields = np.unique(np.right_shift(bits, FRAC_BITS) & np.uint32(0xFF)).astype(np.intp)
        slot = np.zeros(_N_EXPONENTS, np.intp)
        slot[fields] = np.arange(fields.size)
    buf.packed = np.zeros((_N_EXPONENTS if fields is None else fields.size) * FINE_PER_BINADE, np.int64)
    for i in range(0, bits.size, _CHUNK):
        _scatter_chunk(bits[i : i + _CHUNK], acc, buf, slot)
    _unpack_window(bits, acc, buf, np.arange(_N_EXPONENTS) if fields is None else fields)


def _scatter_chunk(
    bits: NDArray[np.uint32], acc: _RunningTotals, buf: _Buffers, slot: NDArray[np.intp] | None = None
) -> None:
    """Add a chunk to the window's packed totals, and count exactly the values at the exact fractions. ``slot``:
    each exponent field's row in a window that keeps only the fields its values reach (None: all 256 rows)."""
    n = bits.size
    key, weight, masked, packed = buf.key[:n], buf.weight[:n], buf.masked[:n], buf.packed
    np.bitwise_and(bits, _ABS, out=weight)  # |bits| in int64
    np.right_shift(weight, LOW_BITS, out=key)
    if slot is not None:  # the field's row, then the top 11 fraction bits
        key[:] = (slot[key >> LOG_FINE] << LOG_FINE) | (key & (FINE_PER_BINADE - 1))
    np.add(weight, _PACK, out=weight)
    first_is_zero_row = slot is None or (slot[0] == 0 and bool(np.any((bits & np.uint32(0x7F800000)) == 0)))
    before = int(packed[0])
    np.add.at(packed, key, weight)  # numpy's fast path for 1-d intp keys; exact in int64 (see _PACK)
    # This chunk's share of bin 0 (|bits| < 2**12): zeros only, this many, when its low bits add up to 0.
    zeros, low_bits = divmod(int(packed[0]) - before, _PACK) if first_is_zero_row else (0, 0)
    # The candidate mask lets through the values at the exact fractions, the zeros and a few more (±inf, some
    # subnormals); look closer only when it lets through more than the chunk's zeros.
    np.bitwise_and(bits, buf.candidate_mask, out=masked)
    candidates = n - int(np.count_nonzero(masked))
    if candidates > zeros or low_bits:
        mag = bits[masked == 0] & _ABS
        m0 = mag[mag != 0]
        acc.exact_at += count_exact(m0 & np.uint32(FRAC_MASK), m0 >> np.uint32(FRAC_BITS), _N_EXPONENTS)


def _unpack_window(
    bits: NDArray[np.uint32], acc: _RunningTotals, buf: _Buffers, fields: NDArray[np.intp] | None = None
) -> None:
    """Add the window's packed totals to ``acc`` as counts and sums of low bits.

    ``bits`` is the whole window, read again only for what the fine bins cannot tell: zeros beside tiny
    subnormals in bin 0, infinities beside NaNs in the first exponent-255 bin, and float32 subnormals.
    ``fields``: the exponent field of each row of the packed totals (default: all 256, in order).
    """
    fields = np.arange(_N_EXPONENTS) if fields is None else fields
    # Only the exponent fields the values reached (every value adds at least _PACK): a few dozen, not all 256.
    packed = buf.packed.reshape(fields.size, FINE_PER_BINADE)
    held = np.flatnonzero(packed.max(axis=1))
    if not held.size:
        return
    rows = fields[held]
    step = (rows[:, None] << FRAC_BITS) + (np.arange(FINE_PER_BINADE) << LOW_BITS)  # each bin's key << 12
    step += _PACK
    count, low = np.divmod(packed[held], step)
    acc.add_rows(rows, count, low)
    zeros = subnormals = 0
    if rows[0] == 0:
        zeros = edge_bin_count(count[0, 0], low[0, 0], lambda: int(np.count_nonzero((bits & _ABS) == 0)))
        subnormals = int(count[0].sum()) - zeros
    if rows[-1] == EXP_SPECIAL:
        acc.infs += edge_bin_count(count[-1, 0], low[-1, 0], lambda: int(np.count_nonzero((bits & _ABS) == INF_BITS)))
    acc.zeros += zeros
    # Exponent field 0 holds the zeros and the float32 subnormals; the latter (rare) are binned by their own binade.
    if subnormals:
        mag = bits & _ABS
        sub_count, sub_low_sum, sub_exact = bin_subnormals(mag[(mag < SMALLEST_NORMAL_BITS) & (mag != 0)])
        acc.sub_count += sub_count
        acc.sub_low_sum += sub_low_sum
        acc.sub_exact_at += sub_exact


def _count(bits: NDArray[np.uint32], workers: int = 1) -> _RunningTotals:
    """Count all of ``bits`` window by window, chunk by chunk; with ``workers`` > 1, one contiguous part per thread
    (numpy releases the GIL in add.at and the array operations), on a pool that lives for this call only. Counts
    and sums are exact integers, so the parts add up to the same record whatever ``workers`` is."""

    def part(lo: int, hi: int) -> _RunningTotals:
        acc = _RunningTotals.empty()
        buf = _Buffers(min(_CHUNK, hi - lo))
        for i in range(lo, hi, _WINDOW):
            _count_window(bits[i : min(i + _WINDOW, hi)], acc, buf)
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
    ``x`` as it is shaped (:meth:`TensorStats.recipe`; see :mod:`lensa.runstats.record`).
    """
    stats = _summarize(x, workers)
    return stats.with_recipes(x, workers) if recipes else stats


def _summarize(x: ArrayLike, workers: int) -> TensorStats:
    bits = _as_float32(x).view(np.uint32)
    if bits.size <= _SMALL:
        return _summarize_small(bits)
    acc = _count(bits, workers)

    # The fine bins of the finite non-zero values, on the grid of binades -149 ... 127 (2**11 bins each):
    # float32 subnormals by their own binade (rows 0 ... 22), then exponent fields 1 ... 254 (rows 23 ... 276).
    # Only the exponent fields the values reached (a tensor spans a few dozen binades), less 0 and 255.
    normal = (acc.rows >= 1) & (acc.rows < EXP_SPECIAL)
    rows = acc.rows[normal]
    grid = (rows[:, None] << LOG_FINE) + np.arange(FINE_PER_BINADE) + NORMAL_BIN_OFFSET
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
        nan=int(acc.fine_count[acc.rows == EXP_SPECIAL].sum()) - acc.infs,
        bins=bins,
        fine_count=fine_count,
        fine_low_sum=fine_low_sum,
        exact_at=np.concatenate([acc.sub_exact_at, acc.exact_at[:, 1:EXP_SPECIAL]], axis=1),
    )


def _summarize_small(bits: NDArray[np.uint32]) -> TensorStats:
    """:func:`_summarize` of a small array (at most :data:`_SMALL` values): the same record, from the same fine
    bins, found by sorting the values' keys instead of adding into the 2,048 bins of every binade they reach (whose
    zeroed rows, unpacking and compaction cost a small tensor more than its values do: 0.7 ms for 4,096 values)."""
    mag = bits & _ABS
    zeros = int(np.count_nonzero(mag == 0))
    infs = int(np.count_nonzero(mag == np.uint32(INF_BITS)))
    nan = int(np.count_nonzero(mag > np.uint32(INF_BITS)))
    normal = np.sort(mag[(mag >= np.uint32(SMALLEST_NORMAL_BITS)) & (mag < np.uint32(INF_BITS))])
    key = normal >> np.uint32(LOW_BITS)  # sorted too: the values of a fine bin are one run
    if key.size:
        run = np.empty(key.size, bool)
        run[0] = True
        np.not_equal(key[1:], key[:-1], out=run[1:])
        starts = np.flatnonzero(run)
        count = np.diff(np.append(starts, key.size))
        low_sum = np.add.reduceat((normal & np.uint32(LOW_MASK)).astype(np.int64), starts).astype(np.float64)
        keys = key[starts].astype(np.int64)
    else:
        keys, count, low_sum = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    exact = count_exact(normal & np.uint32(FRAC_MASK), normal >> np.uint32(FRAC_BITS), _N_EXPONENTS)
    sub = mag[(mag < np.uint32(SMALLEST_NORMAL_BITS)) & (mag != 0)]
    if sub.size:
        sub_count, sub_low_sum, sub_exact = bin_subnormals(sub)
        sub_bins = np.flatnonzero(sub_count)
        sub_count, sub_low_sum = sub_count[sub_bins], sub_low_sum[sub_bins]
    else:
        sub_bins, sub_count, sub_low_sum = np.zeros(0, np.intp), np.zeros(0, np.int64), np.zeros(0)
        sub_exact = np.zeros((len(exact_fractions()), N_SUBNORMAL_BINADES), np.int64)
    return from_histograms(
        size=int(bits.size),
        exact_zero=zeros,
        inf=infs,
        nan=nan,
        bins=np.concatenate([sub_bins.astype(np.int64), keys + NORMAL_BIN_OFFSET]),
        fine_count=np.concatenate([sub_count, count.astype(np.int64)]),
        fine_low_sum=np.concatenate([sub_low_sum, low_sum]),
        exact_at=np.concatenate([sub_exact, exact[:, 1:EXP_SPECIAL]], axis=1),
    )


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
    return _update_stats(wb, update, before.shape, recipes, intended=False)


def summarize_intended(w_before: ArrayLike, update: ArrayLike, recipes: bool = False) -> TensorStats:
    """Statistics of an update the optimizer meant to make, ``update``, to the weight ``w_before``.

    As :func:`summarize_update`, with the update given rather than read as after − before: a weight held in a
    low-precision type rounds its own update away (after − before is then 0, and a lost update would look like
    no update at all), so the recorder works the intended one out (:mod:`lensa.live.capture`) and judges every
    format against it, FP32 too: ``lost_fp32`` counts the non-zero updates u with ``w + u == w`` in float32.
    Both arrays are read as float32 and must have the same shape.
    """
    before = np.asarray(w_before)
    u = np.asarray(update)
    if before.shape != u.shape:
        raise ValueError(f"w_before has shape {before.shape} but the update has {u.shape}")
    return _update_stats(_as_float32(before), _as_float32(u), before.shape, recipes, intended=True)


def _update_stats(
    wb: NDArray[np.float32], update: NDArray[np.float32], shape: tuple[int, ...], recipes: bool, intended: bool
) -> TensorStats:
    """The record of ``update`` (float32) to the weights ``wb`` (float32), with lost counts (and the FP32 one)."""
    with np.errstate(invalid="ignore", over="ignore"):
        stats = summarize(update)
        moved = update != 0
        lost = []
        for name in SUMMARY_FORMATS:
            stored = stored_float32(wb, name)  # the library's cast, as float32 (exact: each stored value is one)
            again = stored_float32(stored + update, name)
            lost.append(int(np.count_nonzero(moved & (again == stored))))
        lost_fp32 = int(np.count_nonzero(moved & ((wb + update) == wb))) if intended else None
    return replace(
        stats,
        lost_counts=tuple(lost),
        recipes=recipe_records(update.reshape(shape)) if recipes else None,
        lost_fp32=lost_fp32,
    )
