"""The numba kernel of :mod:`lensa.live.lowp`: one tensor quantized under a block recipe, in two passes over it.

The torch path of :func:`lensa.live.lowp._quantize` makes about ten whole-tensor torch operations a quantization
(the magnitudes, the block maxima, the division, the clamp, the rounding's mask, add and subtract, the product with
the scale, the sign), each a read and a write of the tensor and a few microseconds of dispatch. Here the same
arithmetic runs in two passes: the block maxima (as bits) and each block's scale
(:func:`lensa.numerics.blockscale_numba._scale_of`, the rules of :mod:`lensa.numerics.blockscale`); then, row by row,
each value over its scale, saturated and rounded to the element's grid (to nearest, ties to even, or stochastically),
and times the scale with its sign, the row still in the first-level cache (and, where asked, the values saturated,
not 0 and flushed counted). Every operation is the torch path's IEEE float32 operation in the same order (neither
reassociated nor contracted: numba's default), so the two give the same numbers bit for bit
(``tests/test_lowp.py``), on every vector width (``make test-kernels`` compiles for the baseline x86-64 CPU too).

Stochastic rounding's draws come from :func:`draw`, a hash of each value's place in the tensor and two 32-bit keys
(drawn from the caller's ``torch.Generator``): the torch path computes the same hash, so both paths round alike.

Only :mod:`lensa.live.lowp` imports this module, through :func:`lensa.numerics.blockscale_dispatch.available` (numba
installed and not switched off); it shares :mod:`lensa.numerics.blockscale_numba`' helpers and its on-disk cache
setting.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lensa.numerics.blockscale_numba import (
    NVFP4,
    SMALLEST_SCALE,
    _bits_of,
    _float_of,
    _inline,
    _jit,
    _scale_of,
    _to_grid,
)
from lensa.numerics.training_recipes import DRAW_HASH

MAGNITUDE = np.uint32(0x7FFFFFFF)
SIGN = np.uint32(0x80000000)
EXPONENT = np.uint32(0x7F800000)
HASH_A, HASH_B = DRAW_HASH
DRAW_UNIT = np.float32(2.0**-24)


@_inline
def _mix(x: Any) -> Any:
    """lowbias32 (:data:`lensa.numerics.training_recipes.DRAW_HASH`): a bijection of uint32 whose every output bit
    depends on every input bit."""
    x = np.uint32(x ^ (x >> np.uint32(16)))
    x = np.uint32(x * np.uint32(HASH_A))
    x = np.uint32(x ^ (x >> np.uint32(15)))
    x = np.uint32(x * np.uint32(HASH_B))
    return np.uint32(x ^ (x >> np.uint32(15)))


@_inline
def draw(i: Any, k0: Any, k1: Any) -> Any:
    """The uniform draw for the value at flat index ``i`` (modulo 2**32) under keys ``k0``, ``k1``: a multiple of
    2**-24 in [0, 1), as ``torch.rand`` gives (its top 24 bits of ``mix(mix(i ^ k0) ^ k1)``)."""
    x = _mix(np.uint32(np.uint32(i) ^ k0))
    x = _mix(np.uint32(x ^ k1))
    return np.float32(x >> np.uint32(8)) * DRAW_UNIT


@_inline
def _row_maxima(bits: Any, dst: Any, cols: Any, bc: Any) -> None:
    """``dst[j]`` = the largest of ``dst[j]`` and the magnitudes (as bits) of columns ``j * bc`` to ``(j + 1) * bc``
    of the row ``bits`` (a NaN's bits are above every number's, an infinity's above every finite one's)."""
    if bc == 1:
        for c in range(cols):
            v = np.uint32(bits[c] & MAGNITUDE)
            d = dst[c]
            dst[c] = v if v > d else d
        return
    nb = (cols + bc - 1) // bc
    for j in range(nb):
        c0 = j * bc
        n = min(bc, cols - c0)
        block = bits[c0 : c0 + n]  # a slice read from 0: numba's loop then vectorises (ten times faster)
        m = np.uint32(dst[j])
        for c in range(n):
            v = np.uint32(block[c] & MAGNITUDE)
            m = v if v > m else m
        dst[j] = m


@_inline
def _nearest(bits: Any, q: Any, n: Any, scales: Any, given: Any, elem: Any) -> None:
    """Each value of the row ``bits`` over its column's scale (times ``given`` instead, where that is not NaN),
    saturated at the element's largest value (a NaN stays NaN), rounded to the nearest element (ties to even):
    into ``q``. No branch in the loops: they vectorise."""
    limit, low, shift, _, _, _ = elem
    if given == given:
        for c in range(n):
            y = _float_of(np.uint32(bits[c] & MAGNITUDE)) * given
            y = limit if y > limit else y
            q[c] = _to_grid(y, low, shift)
    else:
        for c in range(n):
            y = _float_of(np.uint32(bits[c] & MAGNITUDE)) / scales[c]
            y = limit if y > limit else y
            q[c] = _to_grid(y, low, shift)


@_inline
def _stochastic(bits: Any, q: Any, n: Any, scales: Any, given: Any, elem: Any, base: Any, k0: Any, k1: Any) -> None:
    """:func:`_nearest` with stochastic rounding: ``y`` over its grid step ``u`` (a power of two) is ``t``; the
    element is ``(floor(t) + (draw < t - floor(t))) * u``, the draw :func:`draw` of the value's flat place
    ``base + c``."""
    limit, low, _, sig_shift, _, _ = elem
    has_given = given == given
    for c in range(n):
        a = _float_of(np.uint32(bits[c] & MAGNITUDE))
        y = a * given if has_given else a / scales[c]
        y = limit if y > limit else y
        e = np.uint32(_bits_of(y) & EXPONENT)
        e = low if e < low else e
        step = _float_of(np.uint32(e - sig_shift))
        t = y / step
        lo = np.floor(t)
        q[c] = (lo + np.float32(draw(base + c, k0, k1) < t - lo)) * step


@_inline
def _count(bits: Any, q: Any, n: Any, scales: Any, given: Any, elem: Any) -> Any:
    """(saturated, not 0, flushed) of a row rounded into ``q``: a value saturates when its scaled magnitude passes
    the threshold (reaches it, where ``inclusive``); it is flushed when it is not 0 and its element is."""
    _, _, _, _, threshold, inclusive = elem
    has_given = given == given
    sat = np.int64(0)
    nonzero = np.int64(0)
    flushed = np.int64(0)
    for c in range(n):
        mag = np.uint32(bits[c] & MAGNITUDE)
        a = _float_of(mag)
        y = a * given if has_given else a / scales[c]
        sat += np.int64(y >= threshold) if inclusive else np.int64(y > threshold)
        nz = mag != np.uint32(0)
        nonzero += np.int64(nz)
        flushed += np.int64(nz & (q[c] == np.float32(0.0)))
    return sat, nonzero, flushed


@_inline
def _times(bits: Any, out: Any, n: Any, scales: Any) -> None:
    """Each element of ``out`` times its column's scale, with the sign of its value in ``bits``."""
    for c in range(n):
        out[c] = _float_of(np.uint32((_bits_of(out[c] * scales[c]) & MAGNITUDE) | (bits[c] & SIGN)))


# The recipe's constants, as :func:`quantize` reads them from three arrays (arrays: numba's dispatcher types them in a
# fraction of a microsecond, where a tuple of a dozen numbers costs it about ten): their places.
F_MAX_ELEM, F_E4M3_SMALLEST, F_E4M3_MAX, F_NVFP4_DIVISOR, F_THRESHOLD = range(5)  # float32
U_FRAC_TOP, U_GRID_LOW, U_GRID_SHIFT, U_LOW, U_SHIFT, U_SIG_SHIFT = range(6)  # uint32
I_RULE, I_EMAX, I_INCLUSIVE = range(3)  # int64


@_jit
def quantize(
    x: Any,
    out: Any,
    br: Any,
    bc: Any,
    f32: Any,
    u32: Any,
    i64: Any,
    given64: Any,
    stochastic: Any,
    k0: Any,
    k1: Any,
    counts: Any,
) -> Any:
    """``x`` (float32, (matrices, rows, columns), C-contiguous) stored under a recipe, into ``out`` (the same shape):
    blocks of ``br`` rows by ``bc`` columns of each matrix (the last ones cut short; zeros would leave a block's
    maximum alone), each over its scale. Returns the tensor's amax (the largest block maximum of the blocks without
    an infinity or a NaN, whose every value becomes NaN).

    ``f32``, ``u32``, ``i64``: the recipe's constants at the places ``F_*``, ``U_*``, ``I_*`` name: the element's
    largest value, its saturation threshold (and whether a value at it saturates), its rounding's ``low``, ``shift``
    and fraction bits << 23, its largest exponent and the largest value's fraction bits (the MX rules), E4M3's
    smallest normal, largest value and rounding (NVFP4's block scales), NVFP4's tensor divisor 448 * 6, and the
    scale rule's code (:mod:`lensa.numerics.blockscale_numba`). ``given64``: a float32 scale given from outside (delayed
    scaling: values times it, elements times its float32 reciprocal) as a float, or NaN. ``stochastic``: round with
    :func:`draw` (keys ``k0``, ``k1``) instead of to nearest. ``counts``: None, or (int64, 3) to add (saturated,
    not 0, flushed) to.

    Two passes: the block maxima, then row by row the elements (into ``out``) and their products with the scales
    (the row still in the first-level cache); counting reads the row once more between the two."""
    lead, rows, cols = x.shape
    bits = x.view(np.uint32)
    nrb = (rows + br - 1) // br
    ncb = (cols + bc - 1) // bc
    maxima = np.zeros((lead, nrb, ncb), np.uint32)
    for m in range(lead):
        for r in range(rows):
            _row_maxima(bits[m, r], maxima[m, r // br], cols, bc)
    top = np.uint32(0)
    for m in range(lead):
        for i in range(nrb):
            for j in range(ncb):
                v = maxima[m, i, j]
                if v < EXPONENT and v > top:
                    top = v
    tensor_amax = _float_of(top)
    rule = i64[I_RULE]
    e4m3 = (f32[F_E4M3_SMALLEST], f32[F_E4M3_MAX])
    grid = (u32[U_GRID_LOW], u32[U_GRID_SHIFT])
    ts = np.float32(1.0)
    if rule == NVFP4 and tensor_amax > 0:
        ts = np.float32(tensor_amax / f32[F_NVFP4_DIVISOR])
        ts = SMALLEST_SCALE if ts < SMALLEST_SCALE else ts
    sr = (f32[F_MAX_ELEM], i64[I_EMAX], u32[U_FRAC_TOP], ts, e4m3, grid)
    elem = (
        f32[F_MAX_ELEM],
        u32[U_LOW],
        u32[U_SHIFT],
        u32[U_SIG_SHIFT],
        f32[F_THRESHOLD],
        i64[I_INCLUSIVE] != 0,
    )
    given = np.float32(given64)  # exact: a float32's value
    nan = np.float32(np.nan)
    has_given = given == given
    given_out = np.float32(np.float32(1.0) / given) if has_given else nan
    scales = np.empty(cols, np.float32)  # each column's scale in the current block row
    sat = np.int64(0)
    nonzero = np.int64(0)
    flushed = np.int64(0)
    for m in range(lead):
        for i in range(nrb):
            for j in range(ncb):
                v = maxima[m, i, j]
                # A block with an infinity or a NaN: all NaN. A given scale: the values are multiplied by it (the
                # rounding reads ``given``), the elements by its reciprocal (``scales``).
                s = nan if v >= EXPONENT else (given_out if has_given else _scale_of(rule, v, sr))
                c0 = j * bc
                n = min(bc, cols - c0)
                s_block = scales[c0 : c0 + n]
                for c in range(n):
                    s_block[c] = s
            for r in range(i * br, min((i + 1) * br, rows)):
                row, dst = bits[m, r], out[m, r]
                if stochastic:
                    _stochastic(row, dst, cols, scales, given, elem, (m * rows + r) * cols, k0, k1)
                else:
                    _nearest(row, dst, cols, scales, given, elem)
                if counts is not None:
                    st, nz, fl = _count(row, dst, cols, scales, given, elem)
                    sat += st
                    nonzero += nz
                    flushed += fl
                _times(row, dst, cols, scales)
    if counts is not None:
        counts[0] += sat
        counts[1] += nonzero
        counts[2] += flushed
    return tensor_amax
