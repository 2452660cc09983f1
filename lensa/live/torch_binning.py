"""The recorder's binning in torch: :func:`lensa.runstats.summarize` and :func:`lensa.runstats.summarize_update`
with the per-value work done by torch, equal bit for bit.

The kernels are torch's; the rules are :mod:`lensa.runstats.binning`'s (the fine bins and their keys, the
packing of counts and low bits, the bins of zeros and infinities, the candidate mask of the exact fractions,
the re-binning of float32 subnormals), and the record is made by :func:`lensa.runstats.from_histograms`, as the
numpy path makes it: equal histograms give equal records (tests/test_capture.py checks them against numpy).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from lensa.numerics.formats import FORMATS
from lensa.runstats import SUMMARY_FORMATS, TensorStats, from_histograms
from lensa.runstats.binning import (
    ABS_MASK,
    FINE_PER_BINADE,
    FRAC_BITS,
    FRAC_MASK,
    INF_BITS,
    INF_KEY,
    LOW_BITS,
    LOW_MASK,
    N_BINADES,
    N_SUBNORMAL_BINADES,
    NORMAL_BIN_OFFSET,
    NORMAL_ROW_OFFSET,
    SMALLEST_NORMAL_BITS,
    bin_subnormals,
    candidate_mask,
    count_exact,
    edge_bin_count,
    exact_fractions,
    packing,
)

_CHUNK = 1 << 20  # values per bincount
_PACK = float(packing(_CHUNK))  # a value's weight is _PACK + its low 12 bits; float64 totals stay below 2**53
_KEY_MASK = ABS_MASK >> LOW_BITS  # a value's key, |bits| >> 12, from its bits shifted right by 12
_N_EXACT = len(exact_fractions())
_CANDIDATE_MASK = candidate_mask()


def _packed_histogram(bits: torch.Tensor) -> tuple[NDArray[Any], NDArray[np.int64], NDArray[Any]]:
    """(keys, counts, low sums) of the non-empty fine bins of ``bits``, keys ascending (key = |bits| >> 12).

    One ``bincount`` per 2**20 values, its weights packing each value's count and low 12 bits, unpacked per chunk
    (floor is the count) and the chunks added up.
    """
    keys, counts, lows = [], [], []
    for start in range(0, bits.numel(), _CHUNK):
        b = bits[start : start + _CHUNK]
        chunk_key = torch.bitwise_right_shift(b, LOW_BITS).bitwise_and_(_KEY_MASK)
        lo = int(chunk_key.min())
        weight = torch.bitwise_and(b, LOW_MASK).to(torch.float64).add_(_PACK)
        packed = torch.bincount(chunk_key.sub_(lo), weights=weight).numpy()
        held = np.flatnonzero(packed)  # the bins that hold values
        totals = packed[held]
        n = np.floor(totals * (1 / _PACK))  # the counts: each total's low sum is below _PACK
        keys.append(held + lo)
        counts.append(n)
        lows.append(totals - n * _PACK)
    key: NDArray[Any]
    count: NDArray[Any]
    low: NDArray[Any]
    if len(keys) > 1:
        key, where = np.unique(np.concatenate(keys), return_inverse=True)
        count = np.bincount(where, weights=np.concatenate(counts))  # exact: integers below 2**53
        low = np.bincount(where, weights=np.concatenate(lows))
    elif keys:
        key, count, low = keys[0], counts[0], lows[0]
    else:
        key, count, low = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    return key, count.astype(np.int64), low


class _Magnitudes:
    """``|bits|`` (int32), computed the first time a rare case needs it, then kept."""

    def __init__(self, bits: torch.Tensor) -> None:
        self._bits = bits
        self._mag: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self._mag is None:
            self._mag = torch.bitwise_and(self._bits, ABS_MASK)
        return self._mag


def _summarize_bits(bits: torch.Tensor, lost_counts: tuple[int, ...] | None = None) -> TensorStats:
    """:func:`lensa.runstats.summarize` of float32 values given as their int32 bit patterns (1-D, CPU), in torch.

    The per-value work is integer work in torch (:func:`_packed_histogram`, and a masked test for the few values
    at the exact fractions). What is left is per non-empty bin and is done by
    :func:`lensa.runstats.from_histograms`, which :func:`~lensa.runstats.summarize` ends with too, so the record
    equals ``summarize`` of those values bit for bit (tests/test_capture.py checks it).
    """
    key, count, low = _packed_histogram(bits)
    i_normal, i_special = np.searchsorted(key, [FINE_PER_BINADE, INF_KEY])
    magnitudes = _Magnitudes(bits)
    zeros = infs = 0
    if key.size and key[0] == 0:
        zeros = edge_bin_count(count[0], low[0], lambda: int(torch.count_nonzero(magnitudes() == 0)))
    if i_special < key.size and key[i_special] == INF_KEY:
        infs = edge_bin_count(
            count[i_special], low[i_special], lambda: int(torch.count_nonzero(magnitudes() == INF_BITS))
        )
    nan = int(count[i_special:].sum()) - infs
    subnormals = int(count[:i_normal].sum()) - zeros

    bins = key[i_normal:i_special] + NORMAL_BIN_OFFSET
    count, low = count[i_normal:i_special], low[i_normal:i_special]
    exact = np.zeros((_N_EXACT, N_BINADES), np.int64)
    # The values at the exact fractions: the candidate mask lets through those (and zeros, and a few more).
    if int(torch.count_nonzero(torch.bitwise_and(bits, _CANDIDATE_MASK) == 0)) > zeros:
        m = magnitudes()[torch.bitwise_and(bits, _CANDIDATE_MASK) == 0].numpy()
        m = m[(m >= SMALLEST_NORMAL_BITS) & (m < INF_BITS)]  # normal values; subnormals are counted below
        exact += count_exact(m & FRAC_MASK, (m >> FRAC_BITS).astype(np.int64) + NORMAL_ROW_OFFSET, N_BINADES)
    if subnormals:
        mags = magnitudes()
        sub_count, sub_low, sub_exact = bin_subnormals(mags[(mags < SMALLEST_NORMAL_BITS) & (mags != 0)].numpy())
        sub_bins = np.flatnonzero(sub_count)
        bins = np.concatenate([sub_bins, bins])  # subnormal rows come first on the grid
        count = np.concatenate([sub_count[sub_bins], count])
        low = np.concatenate([sub_low[sub_bins], low])
        exact[:, :N_SUBNORMAL_BINADES] += sub_exact
    return from_histograms(
        size=bits.numel(),
        exact_zero=zeros,
        inf=infs,
        nan=nan,
        bins=bins,
        fine_count=count,
        fine_low_sum=low,
        exact_at=exact,
        lost_counts=lost_counts,
    )


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as float32 on the CPU, their bit patterns as a 1-D int32 tensor (no copy if possible)."""
    return t.detach().float().cpu().contiguous().view(-1).view(torch.int32)


def summarize_tensor(t: torch.Tensor) -> TensorStats:
    """:func:`lensa.runstats.summarize` of a torch tensor's values read as float32, computed with torch.

    Equal to ``summarize(t.detach().float().cpu().numpy())`` bit for bit, counts and relative error sums
    alike (FP16 and BF16 tensors are read exactly; float64 ones are rounded to float32 first). About 1 to 2
    ns of CPU per value on one core, against about 13 for the numpy binning.
    """
    return _summarize_bits(_as_bits(t))


# SUMMARY_FORMATS: torch's type, and the saturation bound of a format without inf (E4M3 saturates, as
# lensa.numerics.formats: clamp first; torch would give NaN past 464).
_CASTS: tuple[tuple[torch.dtype, float | None], ...] = tuple(
    (getattr(torch, FORMATS[k].dtype_name or ""), None if FORMATS[k].has_inf else FORMATS[k].max)
    for k in SUMMARY_FORMATS
)


def _stored(x: torch.Tensor, dtype: torch.dtype, bound: float | None) -> torch.Tensor:
    """``x`` (float32) stored in the format and read back as float32, as :func:`lensa.numerics.formats.cast` stores
    it."""
    if bound is not None:
        x = x.clamp(-bound, bound)  # NaN stays NaN
    return x.to(dtype).to(torch.float32)


def summarize_update_tensors(w_before: torch.Tensor, w_after: torch.Tensor, recipes: bool = False) -> TensorStats:
    """:func:`lensa.runstats.summarize_update` of two torch tensors, computed with torch; equal bit for bit
    (``recipes`` as there).

    Both are read as float32 and must have the same shape (ValueError otherwise). The update is
    ``w_after - w_before`` in float32; the lost counts use torch's casts (round to nearest, ties to even,
    FP8 E4M3 saturating at ±448 like :func:`lensa.numerics.formats.cast`).
    """
    if w_before.shape != w_after.shape:
        raise ValueError(f"w_before has shape {tuple(w_before.shape)} but w_after has {tuple(w_after.shape)}")
    before = w_before.detach().float().cpu().reshape(-1)
    update = w_after.detach().float().cpu().reshape(-1) - before
    return _update_stats(before, update, w_before.shape, recipes, intended=False)


def summarize_intended_tensors(w_before: torch.Tensor, update: torch.Tensor, recipes: bool = False) -> TensorStats:
    """:func:`lensa.runstats.summarize_intended` of two torch tensors (the weight before the step and the update the
    optimizer meant to make), computed with torch; equal bit for bit. Both are read as float32."""
    if w_before.shape != update.shape:
        raise ValueError(f"w_before has shape {tuple(w_before.shape)} but the update has {tuple(update.shape)}")
    before = w_before.detach().float().cpu().reshape(-1)
    u = update.detach().float().cpu().reshape(-1)
    return _update_stats(before, u, w_before.shape, recipes, intended=True)


def _update_stats(
    before: torch.Tensor, update: torch.Tensor, shape: torch.Size, recipes: bool, intended: bool
) -> TensorStats:
    """The record of ``update`` to ``before`` (both 1-D float32 on the CPU): lost counts, and FP32's if ``intended``."""
    moved = update != 0
    lost = []
    for dtype, bound in _CASTS:
        stored = _stored(before, dtype, bound)
        again = _stored(stored + update, dtype, bound)
        lost.append(int(torch.count_nonzero(moved & (again == stored))))
    stats = _summarize_bits(update.contiguous().view(torch.int32), lost_counts=tuple(lost))
    if intended:
        stats = replace(stats, lost_fp32=int(torch.count_nonzero(moved & ((before + update) == before))))
    return stats.with_recipes(update.reshape(shape).numpy()) if recipes else stats
