"""The numba kernels of :mod:`lensa.blockscale_jit` (this module imports numba: only that module imports it, and
only when a tensor needs it).

Compiled once per machine (a few seconds) and kept in numba's on-disk cache: beside this file, or in
``NUMBA_CACHE_DIR`` or the user's cache directory where this one is read-only; a process reads it back in a fraction
of a second.
"""

from __future__ import annotations

import os
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

LANES = 8  # running sums per chunk and recipe
PAD = 128  # zeros after a stretch's values, so that blocks of 16, 32 and 128 are read whole

# Kept in numba's on-disk cache unless LENSA_NUMBA_CACHE=0 (lensa.blockscale_jit sets it where numba finds no
# writable place for its cache: neither beside this file, nor NUMBA_CACHE_DIR, nor the user's cache directory).
_CACHE = os.environ.get("LENSA_NUMBA_CACHE", "1").strip() != "0"
_jit = numba.njit(nogil=True, error_model="numpy", cache=_CACHE)
_inline = numba.njit(nogil=True, error_model="numpy", inline="always", cache=_CACHE)


def _bitcast(result: Any, argument: Any, llvm_type: Any) -> Any:
    """An intrinsic that reads a value's 32 bits as another type (no instruction: the register is the same)."""

    def typer(typingctx: Any, x: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.bitcast(args[0], llvm_type)

        return result(argument), codegen

    return intrinsic(typer)


_bits_of: Any = _bitcast(types.uint32, types.float32, ir.IntType(32))  # numpy's view(np.uint32) of one float32
_float_of: Any = _bitcast(types.float32, types.uint32, ir.FloatType())  # and back


@_inline
def _add_lanes(sq: Any, n: Any, acc: Any) -> None:
    """``acc[i % 8] += sq[i]`` for i in order: eight separate sums (written out, so none is reassociated)."""
    a0, a1, a2, a3, a4, a5, a6, a7 = acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
    m = n - n % 8
    for i in range(0, m, 8):
        a0 += sq[i]
        a1 += sq[i + 1]
        a2 += sq[i + 2]
        a3 += sq[i + 3]
        a4 += sq[i + 4]
        a5 += sq[i + 5]
        a6 += sq[i + 6]
        a7 += sq[i + 7]
    acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7] = a0, a1, a2, a3, a4, a5, a6, a7
    for i in range(n - m):
        acc[i] += sq[m + i]


@_inline
def _to_grid(y: Any, low: Any, shift: Any) -> Any:
    """``lensa.formats.round_float32``'s rounding: add and take away 2**(max(exponent of y, emin) + 23 - fraction
    bits), whose last bit is the element's spacing there (``low`` and ``shift`` as in ``blockscale._Rounding``)."""
    e = _bits_of(y) & np.uint32(0x7F800000)
    e = low if e < low else e
    magic = _float_of(e + shift)
    return (y + magic) - magic


@_inline
def _power_of_two(a: Any, sq: Any, n: Any, s: Any, top: Any, limit: Any, low: Any, shift: Any) -> Any:
    """Values ``a[:n]`` over a power-of-two scale ``s``: |x| * (1 / s) is |x| / s (1 / s is exact), and the error
    |x| - element * s is exact in float64. Writes the squared errors to ``sq``; returns (values saturated, elements
    not 0)."""
    inv = np.float32(1.0) / s
    s64 = np.float64(s)
    sat = np.int32(0)
    kept = np.int32(0)
    for i in range(n):
        v = a[i]
        y = v * inv
        sat += np.int32(y > top)
        q = _to_grid(min(y, limit), low, shift)
        kept += np.int32(q != 0)
        e = np.float64(v) - np.float64(q) * s64  # exact; in float64, as element * 2**127 can pass FP32's range
        sq[i] = e * e
    return sat, kept


@_inline
def _any_scale(a: Any, sq: Any, n: Any, s: Any, top: Any, limit: Any, low: Any, shift: Any) -> Any:
    """:func:`_power_of_two` for any FP32 scale: the quotient rounded to float32, the error exact in float64."""
    s64 = np.float64(s)
    sat = np.int32(0)
    kept = np.int32(0)
    for i in range(n):
        v = a[i]
        y = v / s
        sat += np.int32(y > top)
        q = _to_grid(min(y, limit), low, shift)
        kept += np.int32(q != 0)
        e = np.float64(v) - np.float64(q) * s64
        sq[i] = e * e
    return sat, kept


@_inline
def _one_block(a: Any, sq: Any, n: Any, s: Any, two: Any, top: Any, limit: Any, low: Any, shift: Any) -> Any:
    if two:
        return _power_of_two(a, sq, n, s, top, limit, low, shift)
    return _any_scale(a, sq, n, s, top, limit, low, shift)


@_inline
def _blocks_of(
    a: Any, sq: Any, scales: Any, nb: Any, k: Any, two: Any, top: Any, limit: Any, low: Any, shift: Any
) -> Any:
    """``nb`` blocks of a constant width ``k`` (the inner loop then vectorises whole). The stretch is followed by
    zeros up to a whole block, and a zero adds nothing to a count or a sum."""
    sat = np.int32(0)
    kept = np.int32(0)
    for b in range(nb):
        o = b * k
        st, kp = _one_block(a[o : o + k], sq[o : o + k], k, scales[b], two, top, limit, low, shift)
        sat += st
        kept += kp
    return sat, kept


@_jit
def chunks_pass(
    bits: Any,
    table: Any,
    marks: Any,
    k0: Any,
    k1: Any,
    scales: Any,
    first: Any,
    per_row: Any,
    width: Any,
    two: Any,
    top: Any,
    limit: Any,
    low: Any,
    shift: Any,
    out_sat: Any,
    out_kept: Any,
    out_noise: Any,
    out_signal: Any,
    out_nonzero: Any,
) -> None:
    """Chunks ``k0`` to ``k1`` (see :func:`lensa.blockscale_jit.stretches`) under every recipe: per chunk and
    recipe the values saturated, the elements not 0 and eight sums of squared errors; per chunk eight sums of
    x**2 and the count of values not 0. ``bits`` are the tensor's rows as uint32; recipe r's block scales are
    ``scales[first[r]:]``, ``per_row[r]`` of them a row (0: one for the tensor), each over ``width[r]`` values."""
    n_rec = first.size
    longest = 0
    for u in range(table.shape[0]):
        longest = max(longest, table[u, 2] - table[u, 1])
    a = np.zeros(longest + PAD, np.float32)
    sq = np.zeros(longest + PAD, np.float64)
    acc = np.zeros((n_rec, LANES))
    sig = np.zeros(LANES)
    sats = np.zeros(n_rec, np.int64)
    kepts = np.zeros(n_rec, np.int64)
    for k in range(k0, k1):
        acc[:, :] = 0.0
        sig[:] = 0.0
        sats[:] = 0
        kepts[:] = 0
        nonzero = 0
        for u in range(marks[k], marks[k + 1]):
            row = table[u, 0]
            c0 = table[u, 1]
            n = table[u, 2] - c0
            src = bits[row, c0 : c0 + n]
            for i in range(n):  # slices indexed from 0: no negative-index test in the loop, which then vectorises
                v = _float_of(src[i] & np.uint32(0x7FFFFFFF))
                a[i] = v
                sq[i] = np.float64(v) * np.float64(v)
                nonzero += v != 0
            for i in range(PAD):
                a[n + i] = 0
            _add_lanes(sq, n, sig)
            for r in range(n_rec):
                w = width[r]
                lo = first[r] + row * per_row[r] + c0 // w
                hi = first[r] + row * per_row[r] + (c0 + n + w - 1) // w
                sc = scales[lo:hi]
                t, lim, lw, sh, tw = top[r], limit[r], low[r], shift[r], two[r]
                if hi - lo == 1:
                    st, kp = _one_block(a, sq, n, sc[0], tw, t, lim, lw, sh)
                elif w == 16:
                    st, kp = _blocks_of(a, sq, sc, hi - lo, 16, tw, t, lim, lw, sh)
                elif w == 32:
                    st, kp = _blocks_of(a, sq, sc, hi - lo, 32, tw, t, lim, lw, sh)
                elif w == 128:
                    st, kp = _blocks_of(a, sq, sc, hi - lo, 128, tw, t, lim, lw, sh)
                else:  # a block width of one's own making
                    st = np.int32(0)
                    kp = np.int32(0)
                    for b in range(hi - lo):
                        o = b * w
                        got_sat, got_kept = _one_block(a[o:], sq[o:], min(w, n - o), sc[b], tw, t, lim, lw, sh)
                        st += got_sat
                        kp += got_kept
                sats[r] += st
                kepts[r] += kp
                _add_lanes(sq, n, acc[r])
        for r in range(n_rec):
            out_sat[k, r] = sats[r]
            out_kept[k, r] = kepts[r]
            for j in range(LANES):
                out_noise[k, r, j] = acc[r, j]
        for j in range(LANES):
            out_signal[k, j] = sig[j]
        out_nonzero[k] = nonzero


@_jit
def in_order(parts: Any) -> Any:
    """(chunks, sums, lanes) -> (sums,): each chunk's lanes added in order, then the chunks in order."""
    out = np.zeros(parts.shape[1])
    for k in range(parts.shape[0]):
        for r in range(parts.shape[1]):
            s = 0.0
            for j in range(parts.shape[2]):
                s += parts[k, r, j]
            out[r] += s
    return out


@_jit
def row_maxima(bits: Any, out: Any, r0: Any, r1: Any, width: Any) -> None:
    """``out[i, j]`` = the largest magnitude (as bits: for floats without the sign bit, integer order is magnitude
    order) of row i's columns ``j * width`` to ``(j + 1) * width``, for rows ``r0`` to ``r1``."""
    cols = bits.shape[1]
    nb = out.shape[1]
    for i in range(r0, r1):
        src = bits[i]
        dst = out[i]
        for j in range(nb):
            lo = j * width
            m = min(width, cols - lo)
            block = src[lo : lo + m]
            top = np.uint32(0)
            for c in range(m):
                v = block[c] & np.uint32(0x7FFFFFFF)
                top = v if v > top else top
            dst[j] = top


@_inline
def _store(a: Any, sign: Any, dst: Any, n: Any, s: Any, two: Any, limit: Any, low: Any, shift: Any) -> None:
    """Values ``a[:n]`` (magnitudes; ``sign`` their sign bits) over scale ``s``: the element, clamped to ``limit``
    and rounded to the grid, with the value's sign, times the scale in float64 (exact), into ``dst``."""
    s64 = np.float64(s)
    inv = np.float32(1.0) / s
    if two:
        for i in range(n):
            q = _to_grid(min(a[i] * inv, limit), low, shift)
            dst[i] = np.float64(_float_of(_bits_of(q) | sign[i])) * s64
    else:
        for i in range(n):
            q = _to_grid(min(a[i] / s, limit), low, shift)
            dst[i] = np.float64(_float_of(_bits_of(q) | sign[i])) * s64


@_jit
def store_pass(
    bits: Any,
    table: Any,
    u0: Any,
    u1: Any,
    scales: Any,
    per_row: Any,
    width: Any,
    two: Any,
    limit: Any,
    low: Any,
    shift: Any,
    out: Any,
) -> None:
    """What one recipe stores (``lensa.blockscale.quantize``) for stretches ``u0`` to ``u1``, into ``out`` (the
    tensor's rows, float64); the recipe's scales as in :func:`chunks_pass`, for one recipe."""
    longest = 0
    for u in range(table.shape[0]):
        longest = max(longest, table[u, 2] - table[u, 1])
    a = np.zeros(longest, np.float32)
    sign = np.zeros(longest, np.uint32)
    for u in range(u0, u1):
        row = table[u, 0]
        c0 = table[u, 1]
        n = table[u, 2] - c0
        src = bits[row, c0 : c0 + n]
        dst = out[row, c0 : c0 + n]
        for i in range(n):
            b = src[i]
            a[i] = _float_of(b & np.uint32(0x7FFFFFFF))
            sign[i] = b & np.uint32(0x80000000)
        lo = row * per_row + c0 // width
        hi = row * per_row + (c0 + n + width - 1) // width
        for b in range(hi - lo):
            o = b * width
            m = min(width, n - o)
            _store(a[o:], sign[o:], dst[o:], m, scales[lo + b], two, limit, low, shift)


# Scale rules, as lensa.blockscale_jit.Constants codes them
AMAX, MX_FLOOR, MX_CEIL, NVFP4 = 0, 1, 2, 3
WHOLE = -1  # a block dimension that is the whole axis (None in a Recipe's block)
TENSOR = -2  # block_rows of a recipe whose block is the whole tensor


@_inline
def _scale_of(rule: Any, amax_bits: Any, max_elem: Any, emax: Any, frac_top: Any, ts: Any, e4m3: Any, grid: Any) -> Any:
    """One block's scale from its amax (as bits), as ``lensa.blockscale._block_scales`` computes it."""
    amax = _float_of(amax_bits)
    if rule == AMAX:  # amax / max_elem in FP32; a block of zeros gets 1
        return np.float32(amax / max_elem) if amax > 0 else np.float32(1.0)
    if rule == NVFP4:  # E4M3(clamp(amax / 6 / tensor_scale, 2**-6, 448)) * tensor_scale, in FP32
        block = np.float32(np.float32(amax / max_elem) / ts)
        block = min(max(block, e4m3[0]), e4m3[1])
        return np.float32(_to_grid(block, grid[0], grid[1]) * ts)
    # MX: 2**(E - emax) from amax's exponent field E (one more, rounded up, where amax's significand passes
    # max_elem's), at least 2**-127 (see lensa.blockscale._mx_exponent)
    e = np.int32(amax_bits >> np.uint32(23)) - np.int32(127) - np.int32(emax)
    if rule == MX_CEIL and (amax_bits & np.uint32(0x7FFFFF)) > frac_top:
        e += np.int32(1)
    e = max(e, np.int32(-127))
    return _float_of(max(np.uint32(e + 127) << np.uint32(23), np.uint32(0x400000)))


@_jit
def block_scales(
    a16: Any,
    bits: Any,
    lead: Any,
    rows: Any,
    rule: Any,
    block_rows: Any,
    block_cols: Any,
    max_elem: Any,
    emax: Any,
    frac_top: Any,
    e4m3: Any,
    grid: Any,
) -> Any:
    """Every recipe's block scales, from each row's maxima in blocks of 16 (``a16``, bits) or, for a block width
    that is not a multiple of 16, from the values' bits: (scales, first, per_row, width), laid out as
    :func:`chunks_pass` reads them (a block of several rows repeats its scale on each of its rows). ``e4m3``:
    NVFP4's E4M3 smallest normal, largest value and tensor divisor (448 * 6); ``grid``: E4M3's ``low`` and
    ``shift`` for the rounding."""
    n_rec = rule.size
    cols = bits.shape[1]
    n_rows = a16.shape[0]
    top = np.uint32(0)
    for i in range(n_rows):
        for j in range(a16.shape[1]):
            top = max(top, a16[i, j])
    tensor_amax = _float_of(top)
    ts = np.float32(tensor_amax / e4m3[2]) if tensor_amax > 0 else np.float32(1.0)
    per_row = np.zeros(n_rec, np.int64)
    width = np.zeros(n_rec, np.int64)
    first = np.zeros(n_rec, np.int64)
    total = 0
    for r in range(n_rec):
        first[r] = total
        if block_rows[r] == TENSOR:
            width[r] = cols
            total += 1
        else:
            bc = block_cols[r]
            width[r] = cols if bc == WHOLE or bc > cols else bc
            per_row[r] = (cols + width[r] - 1) // width[r]
            total += n_rows * per_row[r]
    scales = np.empty(total, np.float32)
    for r in range(n_rec):
        if block_rows[r] == TENSOR:
            scales[first[r]] = _scale_of(rule[r], top, max_elem[r], emax[r], frac_top[r], ts, e4m3, grid)
            continue
        br = block_rows[r]
        br = rows if br == WHOLE or br > rows else br
        bc = width[r]
        nb = per_row[r]
        from16 = bc % 16 == 0 or nb == 1
        g = bc // 16
        for m in range(lead):
            for r0 in range(0, rows, br):
                r1 = min(r0 + br, rows)
                for j in range(nb):
                    mx = np.uint32(0)
                    for i in range(m * rows + r0, m * rows + r1):
                        if nb == 1:
                            src = a16[i]
                        elif from16:
                            src = a16[i, j * g : min((j + 1) * g, a16.shape[1])]
                        else:
                            src = bits[i, j * bc : min((j + 1) * bc, cols)]
                        for c in range(src.size):
                            mx = max(mx, src[c] & np.uint32(0x7FFFFFFF))
                    s = _scale_of(rule[r], mx, max_elem[r], emax[r], frac_top[r], ts, e4m3, grid)
                    for i in range(m * rows + r0, m * rows + r1):
                        scales[first[r] + i * nb + j] = s
    return scales, first, per_row, width
