"""The numba kernels of :mod:`lensa.numerics.blockscale_dispatch` (this module imports numba: only that module imports
it, and only when a tensor needs it).

Compiled once per machine (10 to 15 seconds) and kept in numba's on-disk cache: beside this file, or in
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
PAD = 128  # zeros after a stretch's values: a block that the stretch's end cuts short is read whole

# Kept in numba's on-disk cache unless LENSA_NUMBA_CACHE=0 (lensa.numerics.blockscale_dispatch sets it where numba finds
# no writable place for its cache: neither beside this file, nor NUMBA_CACHE_DIR, nor the user's cache directory).
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


# Scale rules, as lensa.numerics.blockscale_dispatch.Constants codes them
AMAX, MX_FLOOR, MX_CEIL, NVFP4 = 0, 1, 2, 3
SMALLEST_SCALE = np.float32(2.0**-149)  # an FP32 scale that would underflow to 0 stops here (blockscale says why)
WHOLE = -1  # a block dimension that is the whole axis (None in a Recipe's block)
TENSOR = -2  # block_rows of a recipe whose block is the whole tensor


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
    """``lensa.numerics.formats.round_float32``'s rounding: add and take away 2**(max(exponent of y, emin) + 23 -
    fraction bits), whose last bit is the element's spacing there (``low`` and ``shift`` as in
    ``blockscale._Rounding``)."""
    e = _bits_of(y) & np.uint32(0x7F800000)
    e = low if e < low else e
    magic = _float_of(e + shift)
    return (y + magic) - magic


@_inline
def _scale_of(rule: Any, amax_bits: Any, sr: Any) -> Any:
    """A block's scale from its amax (as bits), as ``lensa.numerics.blockscale._block_scales`` computes it. ``sr``: the
    recipe's (largest element, emax, the largest element's fraction bits) and the tensor's NVFP4 scale, E4M3's
    (smallest normal, largest, -) and its rounding's (low, shift)."""
    max_elem, emax, frac_top, ts, e4m3, grid = sr
    amax = _float_of(amax_bits)
    if rule == AMAX:  # amax / max_elem in FP32, at least 2**-149; a block of zeros gets 1
        return max(np.float32(amax / max_elem), SMALLEST_SCALE) if amax > 0 else np.float32(1.0)
    if rule == NVFP4:  # E4M3(clamp(amax / 6 / tensor_scale, 2**-6, 448)) * tensor_scale, in FP32, at least 2**-149
        block = np.float32(np.float32(amax / max_elem) / ts)
        block = min(max(block, e4m3[0]), e4m3[1])
        return max(np.float32(_to_grid(block, grid[0], grid[1]) * ts), SMALLEST_SCALE)
    # MX: 2**(E - emax) from amax's exponent field E (one more, rounded up, where amax's significand passes
    # max_elem's), at least 2**-127 (lensa.numerics.blockscale._mx_exponent says why this is exact)
    e = np.int32(amax_bits >> np.uint32(23)) - np.int32(127) - np.int32(emax)
    if rule == MX_CEIL and (amax_bits & np.uint32(0x7FFFFF)) > frac_top:
        e += np.int32(1)
    e = max(e, np.int32(-127))
    return _float_of(max(np.uint32(e + 127) << np.uint32(23), np.uint32(0x400000)))


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
    a: Any,
    sq: Any,
    maxima: Any,
    nb: Any,
    k: Any,
    rule: Any,
    sr: Any,
    two: Any,
    top: Any,
    limit: Any,
    low: Any,
    shift: Any,
) -> Any:
    """``nb`` whole blocks of a constant width ``k`` (the inner loop then vectorises whole), each over the scale
    its maximum gives."""
    sat = np.int32(0)
    kept = np.int32(0)
    for b in range(nb):
        o = b * k
        s = _scale_of(rule, maxima[b], sr)
        st, kp = _one_block(a[o : o + k], sq[o : o + k], k, s, two, top, limit, low, shift)
        sat += st
        kept += kp
    return sat, kept


@_inline
def _segment(
    a: Any,
    sq: Any,
    m: Any,
    c: Any,
    maxima: Any,
    w: Any,
    rule: Any,
    sr: Any,
    two: Any,
    top: Any,
    limit: Any,
    low: Any,
    shift: Any,
    padded: Any,
) -> Any:
    """Values ``a[:m]``, columns ``c`` to ``c + m`` of a row (or of rows end to end, where ``w`` divides the row),
    whose blocks of ``w`` have the maxima ``maxima`` (the first for the block holding column 0): a block cut at
    the start, the whole blocks (a constant width of 16, 32 or 128 vectorises whole), a block cut at the end
    (read whole where ``padded``: zeros follow ``a[:m]``)."""
    sat = np.int32(0)
    kept = np.int32(0)
    i = 0
    j = 0  # the block of maxima[j] holds a[i]
    if c:  # (a division only where the segment does not start a row)
        j = c // w
        lead = c - j * w
        if lead:  # the segment starts inside a block
            take = min(w - lead, m)
            st, kp = _one_block(a, sq, take, _scale_of(rule, maxima[j], sr), two, top, limit, low, shift)
            sat += st
            kept += kp
            i += take
            j += 1
    fast = w == 16 or w == 32 or w == 128
    # whole blocks; with zeros after the segment, a block its end cuts short is read whole too (a zero adds nothing)
    nb = (m - i + w - 1) // w if padded and fast else (m - i) // w
    if nb:
        if w == 16:
            st, kp = _blocks_of(a[i:], sq[i:], maxima[j:], nb, 16, rule, sr, two, top, limit, low, shift)
        elif w == 32:
            st, kp = _blocks_of(a[i:], sq[i:], maxima[j:], nb, 32, rule, sr, two, top, limit, low, shift)
        elif w == 128:
            st, kp = _blocks_of(a[i:], sq[i:], maxima[j:], nb, 128, rule, sr, two, top, limit, low, shift)
        else:  # a width of one's own making, or whole rows
            st = np.int32(0)
            kp = np.int32(0)
            for b in range(nb):
                o = i + b * w
                s = _scale_of(rule, maxima[j + b], sr)
                got_sat, got_kept = _one_block(a[o:], sq[o:], w, s, two, top, limit, low, shift)
                st += got_sat
                kp += got_kept
        sat += st
        kept += kp
        i += nb * w
        j += nb
    if i < m:  # the segment ends inside a block
        st, kp = _one_block(a[i:], sq[i:], m - i, _scale_of(rule, maxima[j], sr), two, top, limit, low, shift)
        sat += st
        kept += kp
    return sat, kept


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


@_jit
def block_maxima(a16: Any, bits: Any, lead: Any, rows: Any, top: Any, block_rows: Any, block_cols: Any) -> Any:
    """Every recipe's block maxima (as bits), once per block shape (MX's seven recipes share theirs), from each
    row's maxima in blocks of 16 (``a16``) or, for a block width not a multiple of 16, from the values' bits:
    (maxima, first, per_row, width). Recipe r's maxima are ``maxima[first[r]:]``, ``per_row[r]`` to a row of the
    tensor's rows (0: one for the tensor, ``top``), each over ``width[r]`` columns; a block of several rows has
    its maximum on each of its rows."""
    n_rec = block_rows.size
    cols = bits.shape[1]
    n_rows, n16 = a16.shape
    per_row = np.zeros(n_rec, np.int64)
    width = np.zeros(n_rec, np.int64)
    tall = np.zeros(n_rec, np.int64)  # rows per block
    first = np.zeros(n_rec, np.int64)
    total = 0
    for r in range(n_rec):
        if block_rows[r] == TENSOR:
            width[r] = cols
        else:
            bc, br = block_cols[r], block_rows[r]
            width[r] = cols if bc == WHOLE or bc > cols else bc
            tall[r] = rows if br == WHOLE or br > rows else br
            per_row[r] = (cols + width[r] - 1) // width[r]
        first[r] = -1
        for q in range(r):
            if block_rows[q] == block_rows[r] and width[q] == width[r] and tall[q] == tall[r]:
                first[r] = first[q]  # the same blocks: the same maxima
                break
        if first[r] < 0:
            first[r] = total
            total += 1 if block_rows[r] == TENSOR else n_rows * per_row[r]
    maxima = np.empty(total, np.uint32)
    done = np.zeros(total + 1, np.bool_)
    for r in range(n_rec):
        if done[first[r]]:
            continue
        done[first[r]] = True
        if block_rows[r] == TENSOR:
            maxima[first[r]] = top
            continue
        bc, nb, br = width[r], per_row[r], tall[r]
        g = bc // 16
        out = maxima[first[r] : first[r] + n_rows * nb]
        for i in range(n_rows):  # each row's maxima over its blocks
            o = i * nb
            row16 = a16[i]
            if nb == 1:
                mx = np.uint32(0)
                for c in range(n16):
                    mx = max(mx, row16[c])
                out[o] = mx
            elif bc % 16 == 0:
                for j in range(nb):
                    c0 = j * g
                    mx = row16[c0]
                    for c in range(c0 + 1, min(c0 + g, n16)):
                        mx = max(mx, row16[c])
                    out[o + j] = mx
            else:  # a block width of one's own making: from the values
                src = bits[i]
                for j in range(nb):
                    mx = np.uint32(0)
                    for c in range(j * bc, min(j * bc + bc, cols)):
                        mx = max(mx, src[c] & np.uint32(0x7FFFFFFF))
                    out[o + j] = mx
        if br > 1:  # blocks of several rows: their rows' maximum, on each of their rows
            for m in range(lead):
                for r0 in range(0, rows, br):
                    lo = (m * rows + r0) * nb
                    hi = (m * rows + min(r0 + br, rows)) * nb
                    for j in range(nb):
                        mx = np.uint32(0)
                        for o in range(lo + j, hi, nb):
                            mx = max(mx, out[o])
                        for o in range(lo + j, hi, nb):
                            out[o] = mx
    return maxima, first, per_row, width


@_inline
def _recipe(r: Any, max_elem: Any, emax: Any, frac_top: Any, ts: Any, e4m3: Any, grid: Any) -> Any:
    return (max_elem[r], emax[r], frac_top[r], ts, e4m3, grid)


@_jit
def chunks_pass(
    bits: Any,
    table: Any,
    marks: Any,
    k0: Any,
    k1: Any,
    maxima: Any,
    first: Any,
    per_row: Any,
    width: Any,
    rule: Any,
    max_elem: Any,
    emax: Any,
    frac_top: Any,
    ts: Any,
    e4m3: Any,
    grid: Any,
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
    """Chunks ``k0`` to ``k1`` (see :func:`lensa.numerics.blockscale_dispatch.stretches`) under every recipe: per chunk
    and recipe the values saturated, the elements not 0 and eight sums of squared errors; per chunk eight sums of
    x**2 and the count of values not 0. ``bits`` are the tensor's rows as uint32; the block maxima as
    :func:`block_maxima` lays them out, each block's scale made from its maximum as it is read."""
    n_rec = first.size
    longest = 0
    for u in range(table.shape[0]):
        longest = max(longest, table[u, 2] - table[u, 1])
    a = np.zeros(longest + PAD, np.float32)
    sq = np.zeros(longest + PAD, np.float64)
    flat = bits.reshape(-1)
    cols = bits.shape[1]
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
            src = flat[row * cols + c0 : row * cols + c0 + n]  # a part of a row, or whole rows end to end
            for i in range(n):  # slices indexed from 0: no negative-index test in the loop, which then vectorises
                v = _float_of(src[i] & np.uint32(0x7FFFFFFF))
                a[i] = v
                sq[i] = np.float64(v) * np.float64(v)
                nonzero += v != 0
            for i in range(PAD):
                a[n + i] = 0
            _add_lanes(sq, n, sig)
            for r in range(n_rec):
                w, pr = width[r], per_row[r]
                rl, sr = rule[r], _recipe(r, max_elem, emax, frac_top, ts, e4m3, grid)
                t, lim, lw, sh, tw = top[r], limit[r], low[r], shift[r], two[r]
                if pr == 0:  # one scale for the tensor
                    st, kp = _one_block(a, sq, n, _scale_of(rl, maxima[first[r]], sr), tw, t, lim, lw, sh)
                elif c0 + n <= cols or cols % w == 0:  # one part of a row, or rows whose blocks run end to end
                    mx = maxima[first[r] + row * pr :]
                    st, kp = _segment(a, sq, n, c0, mx, w, rl, sr, tw, t, lim, lw, sh, True)
                else:  # whole rows that a recipe of one's own cuts short at each end: row by row, block by block
                    st = np.int32(0)
                    kp = np.int32(0)
                    for i in range(n // cols):
                        mx = maxima[first[r] + (row + i) * pr :]
                        for b in range(pr):
                            o = i * cols + b * w
                            s = _scale_of(rl, mx[b], sr)
                            got_sat, got_kept = _one_block(a[o:], sq[o:], min(w, cols - b * w), s, tw, t, lim, lw, sh)
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
    maxima: Any,
    per_row: Any,
    width: Any,
    rule: Any,
    sr: Any,
    two: Any,
    limit: Any,
    low: Any,
    shift: Any,
    out: Any,
) -> None:
    """What one recipe stores (``lensa.numerics.blockscale.quantize``) for every stretch of ``table``, into ``out`` (the
    tensor's rows, float64); its block maxima as :func:`block_maxima` lays them out (``first`` 0)."""
    longest = 0
    for u in range(table.shape[0]):
        longest = max(longest, table[u, 2] - table[u, 1])
    a = np.zeros(longest, np.float32)
    sign = np.zeros(longest, np.uint32)
    flat, flat_out = bits.reshape(-1), out.reshape(-1)
    cols = bits.shape[1]
    for u in range(table.shape[0]):
        row = table[u, 0]
        c0 = table[u, 1]
        n = table[u, 2] - c0
        src = flat[row * cols + c0 : row * cols + c0 + n]  # a part of a row, or whole rows end to end
        dst = flat_out[row * cols + c0 : row * cols + c0 + n]
        for i in range(n):
            b = src[i]
            a[i] = _float_of(b & np.uint32(0x7FFFFFFF))
            sign[i] = b & np.uint32(0x80000000)
        if per_row == 0:  # one scale for the tensor
            _store(a, sign, dst, n, _scale_of(rule, maxima[0], sr), two, limit, low, shift)
            continue
        for i in range(0, n, cols if c0 + n > cols else n):  # row by row where the stretch is whole rows
            r_at = row + i // cols if c0 + n > cols else row
            c = c0 if c0 + n <= cols else 0
            m = min(n - i, cols - c)
            o = i
            while m > 0:  # block by block: cut at the start, whole, cut at the end
                j = c // width
                take = min(width - c % width, m)
                s = _scale_of(rule, maxima[r_at * per_row + j], sr)
                _store(a[o:], sign[o:], dst[o:], take, s, two, limit, low, shift)
                o += take
                c += take
                m -= take
