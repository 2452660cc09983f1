"""Block scaling as data: how FP8, MX and NVFP4 training recipes store a tensor, and what they lose.

A :class:`Recipe` is an element format (a key of :data:`lensa.numerics.formats.FORMATS`),
a block shape, a scale format and a scale rule. A block's values are divided
by the block's scale, rounded to the element format (nearest, ties to even;
a scaled value past the element's largest value saturates to it, in every
recipe), and stored; what a value stands for afterwards is element × scale.

Scale rules (``amax`` is the largest magnitude in the block):

``"amax"`` (FP8 current scaling, per tensor, per row, DeepSeek-V3's 1×128 tiles and 128×128 blocks)
    scale = amax / max_elem, in FP32, so that amax lands on the element's
    largest value. A block of zeros gets scale 1.
``"mx_floor"`` (OCP Microscaling v1.0, section 6.3)
    scale = 2**(floor(log2 amax) - emax_elem), an E8M0 power of two, its
    exponent clipped to [-127, 127]; a block of zeros gets 2**-127. amax /
    scale lies in [2**emax, 2**(emax + 1)), which can pass max_elem: MXFP8
    E4M3's 448 is 1.75 * 2**8, so a block whose amax has a significand above
    1.75 has its largest value scaled past 448. Rounding to nearest still
    brings it back to 448 up to 464 = 1.8125 * 2**8 (the midpoint to the next
    step, a tie that goes to 448); only a significand above 1.8125 (29/16)
    saturates it (:func:`floor_regime` says which of the three a block is in).
``"mx_ceil"`` (Mishra, Stosic, Layton and Micikevicius, "Recipes for Pre-training LLMs with MXFP8", arXiv:2506.08027)
    scale = 2**ceil(log2(amax / max_elem)): the power of two rounded *up*,
    so that amax / scale <= max_elem and nothing saturates. Computed exactly
    here: the smallest power of two with amax <= max_elem * scale, clipped as above.
``"nvfp4"`` (NVIDIA NVFP4: FP4 E2M1 elements, 16 to a block, two levels of scale)
    tensor_scale = amax_tensor / (448 * 6), in FP32: one per tensor;
    block_scale = e4m3(clamp(amax_block / 6 / tensor_scale, 2**-6, 448)): the
    block's FP8 E4M3 scale, kept within E4M3's normal range as torchao's
    reference (``torchao.prototype.mx_formats.nvfp4_tensor``) clamps it;
    element = e2m1(clamp(x / (tensor_scale * block_scale), -6, 6));
    stored = element * tensor_scale * block_scale, where the product
    tensor_scale * block_scale is the FP32 number the elements were divided by.
    The block with the tensor's amax gets block_scale 448 (up to E4M3's
    rounding), so its amax maps to 6.

Arithmetic: the values are taken as FP32 (a float64 input is rounded to
float32 first: these recipes quantize FP32 or BF16 tensors), and scaled in
FP32 as the kernels do: x / scale, rounded to float32, then to the element
format. For power-of-two scales (MX) the division is exact, so the result is
the element rounding of the exact quotient, which is what gfloat computes
(tests/test_blockscale.py checks every block against it).

Blocks run over the last axis (``(1, n)``), or over the last two (``(128,
128)``); ``None`` in a block shape is the whole axis, and a block shape of
``None`` is the whole tensor. An axis that is not a multiple of the block is
padded with zeros for the scale (zeros do not change amax) and cut back.
A block with a NaN or an infinity gets a NaN scale, and all its values are
stored as NaN (OCP MX: a NaN scale makes the whole block NaN). An FP32 scale
(the per-tensor and tile rules', NVFP4's tensor scale and its product with a
block's) that would underflow to 0 is FP32's smallest positive number,
2^-149, instead: a block of the tiniest float32 subnormals is then divided by
2^-149, lands within the element's range, and is stored as FP32 arithmetic
stores it, where a scale of 0 would give 0 / 0 (the power-of-two scales stop
at E8M0's 2^-127 already).

Public API: :data:`RECIPES`, :func:`quantize`, :func:`encode` (stored values,
the scales, which values saturated), :func:`lost` (shares flushed and
saturated, SQNR), :func:`outcomes` (kept, rounded, flushed or saturated,
per value) and :func:`floor_regime` (where OCP's floor rule stands against
the rounded-up scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.numerics import blockscale_dispatch
from lensa.numerics.formats import FORMATS, FloatFormat, classify, get_format, round_float32

ScaleRule = Literal["amax", "mx_floor", "mx_ceil", "nvfp4"]
Outcome = Literal["kept", "rounded", "flushed", "saturated"]
OUTCOMES: tuple[Outcome, ...] = ("kept", "rounded", "flushed", "saturated")
FloorRegime = Literal["fits", "rounds_back", "saturates"]

_E8M0_LO, _E8M0_HI = -127, 127  # E8M0's exponents: 2**-127 ... 2**127
_NVFP4_TENSOR_DIVISOR = np.float32(448.0 * 6.0)  # E4M3's max times E2M1's max
_SMALLEST_SCALE = np.float32(np.finfo(np.float32).smallest_subnormal)  # 2**-149: where an FP32 scale stops at
_FP32_MAX = np.float32(np.finfo(np.float32).max)  # what TE's delayed scaling puts in place of a scale that overflowed


@dataclass(frozen=True)
class Recipe:
    """How a tensor is stored: element format, block shape, scale format and scale rule.

    ``block`` is ``(rows, cols)`` over the last two axes (``(1, 32)`` is 32
    values of a row; ``None`` in it is the whole axis), or None for the
    whole tensor. ``scale_format`` is the format the scale is stored in
    (``"fp32"``, ``"e8m0"`` or ``"fp8_e4m3"``); NVFP4 adds an FP32 scale per tensor.
    """

    key: str
    label: str
    element: str
    block: tuple[int | None, int | None] | None
    scale_format: str
    rule: ScaleRule

    @property
    def element_format(self) -> FloatFormat:
        return get_format(self.element)

    @property
    def block_size(self) -> int | None:
        """Values per block along a row (None: the whole row or tensor)."""
        return None if self.block is None else self.block[1]

    @property
    def two_level(self) -> bool:
        """Whether a per-tensor FP32 scale sits above the block scales (NVFP4)."""
        return self.rule == "nvfp4"


RECIPES: dict[str, Recipe] = {
    r.key: r
    for r in (
        Recipe("fp8_tensor", "FP8 E4M3 per tensor", "fp8_e4m3", None, "fp32", "amax"),
        Recipe("fp8_row", "FP8 E4M3 per row", "fp8_e4m3", (1, None), "fp32", "amax"),
        Recipe("fp8_1x128", "FP8 E4M3 1×128 tiles", "fp8_e4m3", (1, 128), "fp32", "amax"),
        Recipe("fp8_128x128", "FP8 E4M3 128×128 blocks", "fp8_e4m3", (128, 128), "fp32", "amax"),
        Recipe("mxfp8_e4m3", "MXFP8 E4M3", "fp8_e4m3", (1, 32), "e8m0", "mx_floor"),
        Recipe("mxfp8_e4m3_ceil", "MXFP8 E4M3, scale rounded up", "fp8_e4m3", (1, 32), "e8m0", "mx_ceil"),
        Recipe("mxfp8_e5m2", "MXFP8 E5M2", "fp8_e5m2", (1, 32), "e8m0", "mx_floor"),
        Recipe("mxfp6_e3m2", "MXFP6 E3M2", "fp6_e3m2", (1, 32), "e8m0", "mx_floor"),
        Recipe("mxfp6_e2m3", "MXFP6 E2M3", "fp6_e2m3", (1, 32), "e8m0", "mx_floor"),
        Recipe("mxfp4_e2m1", "MXFP4 E2M1", "fp4_e2m1", (1, 32), "e8m0", "mx_floor"),
        Recipe("mxfp4_e2m1_ceil", "MXFP4 E2M1, scale rounded up", "fp4_e2m1", (1, 32), "e8m0", "mx_ceil"),
        Recipe("nvfp4", "NVFP4", "fp4_e2m1", (1, 16), "fp8_e4m3", "nvfp4"),
    )
}


def get_recipe(recipe: str | Recipe) -> Recipe:
    """Look a recipe up by key; a Recipe passes through."""
    if isinstance(recipe, Recipe):
        return recipe
    try:
        return RECIPES[recipe]
    except KeyError:
        raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}") from None


@dataclass(frozen=True)
class Encoded:
    """What a recipe stores for a tensor.

    ``stored``: the values it stands for (float64, the input's shape).
    ``scale``: the number each value was divided by (float64, the input's
    shape: its block's scale, times the tensor scale in NVFP4).
    ``block_scales``: one per block, as stored in ``scale_format`` (blocks
    in row-major order of the padded blocked tensor; NVFP4: the E4M3 block
    scales, without the tensor scale). ``tensor_scale``: NVFP4's FP32
    per-tensor scale (None otherwise). ``saturated``: which values were
    past the element's largest value after scaling by more than rounding
    absorbs (they would round beyond it), and were clamped to it.
    """

    stored: NDArray[np.float64]
    scale: NDArray[np.float64]
    block_scales: NDArray[np.float64]
    tensor_scale: float | None
    saturated: NDArray[np.bool_]


@dataclass(frozen=True)
class Lost:
    """What a recipe loses on a tensor: shares (0..1) and the signal-to-quantization-noise ratio.

    ``flushed``: of the non-zero values, the share stored as 0. ``saturated``:
    of all values, the share clamped to the largest element value (as
    :attr:`Encoded.saturated`).
    ``sqnr_db``: 10 log10(sum x**2 / sum (x - stored)**2); inf when nothing
    changed, NaN for an empty or all-NaN tensor.
    """

    flushed: float
    saturated: float
    sqnr_db: float


def _as_float32(values: ArrayLike) -> NDArray[np.float32]:
    a = np.asarray(values)
    if a.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            a = a.astype(np.float32)
    return a


def _exponent_floor(amax: NDArray[np.float32]) -> NDArray[np.int32]:
    """floor(log2(amax)) for finite amax > 0, exactly: the biased exponent field, less the bias, for normal
    numbers (several times faster than frexp); frexp for float32 subnormals, whose field is 0."""
    a = np.ascontiguousarray(amax, dtype=np.float32)
    field = (a.view(np.uint32) >> np.uint32(23)).astype(np.int32)
    e = field - np.int32(127)
    tiny = field == 0
    if tiny.any():
        _, sub = np.frexp(a[tiny])
        e[tiny] = sub - 1
    return e


def _mx_exponent(amax: NDArray[np.float32], f: FloatFormat, rule: ScaleRule) -> NDArray[np.int32]:
    """The E8M0 exponent of each block's scale, clipped to E8M0's range; 2**-127 for a block of zeros.

    Read from the bits (several times faster than frexp and clip): a normal amax is m * 2**E, E its exponent field
    less 127, and the floor rule gives E - emax. The round-up rule gives one more where m exceeds max_elem's
    significand M (amax = m * 2**E <= M * 2**emax * 2**e first holds at e = E - emax when m <= M), compared as
    fraction bits. A zero or subnormal amax (below 2**-126) comes out at most -126 - emax under either rule, which
    the clip takes to -127 when emax >= 1, as every element format's is: the block of zeros' 2**-127 included.
    The largest finite amax gives 127 - emax (128 - emax rounded up), within E8M0's 127.
    """
    if f.emax < 1:  # a format of one's own making: frexp, exactly
        return _mx_exponent_frexp(amax, f, rule)
    bits = np.ascontiguousarray(amax, dtype=np.float32).view(np.uint32)
    e = (bits >> np.uint32(23)).astype(np.int32)
    e -= np.int32(127 + f.emax)
    if rule == "mx_ceil":
        top = np.float32(f.max).view(np.uint32) & np.uint32(0x7FFFFF)
        e += (bits & np.uint32(0x7FFFFF)) > top
    np.maximum(e, np.int32(_E8M0_LO), out=e)
    return e


def _mx_exponent_frexp(amax: NDArray[np.float32], f: FloatFormat, rule: ScaleRule) -> NDArray[np.int32]:
    """:func:`_mx_exponent` through frexp, for any element format."""
    positive = amax > 0
    safe = np.where(positive, amax, np.float32(1.0))
    if rule == "mx_floor":
        e = _exponent_floor(safe) - f.emax
    else:
        # Smallest e with amax <= max_elem * 2**e: start from floor(log2(amax / max)), step up where short.
        _, ex = np.frexp(np.float64(f.max))
        e = _exponent_floor(safe) - (ex - 1)  # within one of the answer
        e = np.where(safe.astype(np.float64) > np.ldexp(f.max, e), e + 1, e)
        e = np.where(safe.astype(np.float64) <= np.ldexp(f.max, e - 1), e - 1, e).astype(np.int32)
    e = np.clip(e, _E8M0_LO, _E8M0_HI)
    return np.where(positive, e, np.int32(_E8M0_LO)).astype(np.int32)


def _powers_of_two(e: NDArray[np.int32]) -> NDArray[np.float32]:
    """2**e in float32 for e in -127 ... 127, from the bits: (e + 127) << 23, and 2**-127 (a float32 subnormal,
    bits 0x400000) where that gives 0."""
    bits = (e + np.int32(127)).astype(np.uint32) << np.uint32(23)
    np.maximum(bits, np.uint32(0x400000), out=bits)
    return bits.view(np.float32)


def _blocked(a: NDArray[np.float32], block: tuple[int | None, int | None] | None) -> tuple[NDArray[np.float32], Any]:
    """``a`` as (matrices, rows, column blocks, values per column block), the columns zero-padded to whole blocks;
    and how to undo it, with the rows per block. A block at least as large as its axis covers the axis."""
    shape = a.shape
    if block is None:  # the whole tensor: one row, one block
        return a.reshape(1, 1, 1, -1), (shape, 1, 1, a.size, 0, 1)
    rows = 1 if a.ndim < 2 else shape[-2]
    cols = 1 if a.ndim == 0 else shape[-1]
    lead = int(np.prod(shape[:-2])) if a.ndim > 2 else 1
    m = a.reshape(lead, rows, cols)
    br = rows if block[0] is None or block[0] > rows else block[0]
    bc = cols if block[1] is None or block[1] > cols else block[1]
    pc = (-cols) % max(bc, 1)
    if pc:
        m = np.pad(m, ((0, 0), (0, 0), (0, pc)))
    return m.reshape(lead, rows, (cols + pc) // max(bc, 1), max(bc, 1)), (shape, lead, rows, cols, pc, max(br, 1))


def _unblocked(b: NDArray[Any], how: Any) -> NDArray[Any]:
    shape, lead, rows, cols, pc, _ = how
    m = b.reshape(lead, rows, cols + pc)
    return (m[:, :, :cols] if pc else m).reshape(shape)


def _block_amax(b: NDArray[np.float32], br: int) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
    """Each block's amax (0 for a block with a NaN or an inf), shaped (matrices, row blocks, column blocks, 1),
    and which blocks have a NaN or an inf.

    Read from the bits: for floats without the sign bit, integer order is magnitude order, and an integer
    max is several times faster than abs then a float max. Rows are gathered per block with reduceat, so a
    partial last block of rows needs no padding.
    """
    if b.size == 0:
        empty = (b.shape[0], 0 if b.shape[1] == 0 else 1, b.shape[2], 1)
        return np.zeros(empty, np.float32), np.zeros(empty, bool)
    magnitude = np.ascontiguousarray(b).view(np.uint32) & np.uint32(0x7FFFFFFF)
    top = magnitude.max(axis=3, keepdims=True)  # the contiguous axis first
    if br > 1:
        top = np.maximum.reduceat(top, np.arange(0, b.shape[1], br), axis=1)
    bad = top >= np.uint32(0x7F800000)  # inf or NaN
    top[bad] = 0
    return top.view(np.float32), bad


def _per_row(per_block: NDArray[Any], br: int, rows: int) -> NDArray[Any]:
    """A per-block array (matrices, row blocks, column blocks, 1) spread over the block's rows."""
    return per_block if br == 1 else np.repeat(per_block, br, axis=1)[:, :rows]


def _past_the_top(scaled: NDArray[np.float32], f: FloatFormat) -> NDArray[np.bool_]:
    """Which scaled values round beyond the element's largest value (:func:`lensa.numerics.formats.classify`'s
    ``"overflow"``): the ones that saturation, not rounding, brings down to it."""
    threshold = f.overflow_threshold
    tie_goes_up = str(classify(threshold, f)) == "overflow"
    a = np.abs(scaled)
    return (a >= threshold) if tie_goes_up else (a > threshold)


def _encode(values: ArrayLike, recipe: str | Recipe, details: bool) -> Encoded:
    r = get_recipe(recipe)
    f = r.element_format
    x = _as_float32(values)
    b, how = _blocked(x, r.block)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        br, rows = how[5], how[2]
        amax, bad = _block_amax(b, br)
        tensor_scale: float | None = None
        if r.rule == "amax":
            scale = _amax_scales(amax, f)
            block_scales = scale
        elif r.rule == "nvfp4":
            t_amax = np.float32(np.max(amax)) if amax.size else np.float32(0)
            ts = _nvfp4_tensor_scale(t_amax)
            tensor_scale = float(ts)
            block = (amax / np.float32(f.max)) / ts
            smallest_normal = np.float32(FORMATS["fp8_e4m3"].smallest_normal)
            block = np.clip(block, smallest_normal, np.float32(FORMATS["fp8_e4m3"].max))
            block_scales = block.astype(FORMATS["fp8_e4m3"].dtype).astype(np.float32)
            scale = np.maximum(ts * block_scales, _SMALLEST_SCALE).astype(np.float32)
        else:
            e = _mx_exponent(amax, f, r.rule)
            scale = np.ldexp(np.float32(1.0), e).astype(np.float32)
            block_scales = scale
        any_bad = bool(bad.any())
        if any_bad:
            scale = np.where(bad, np.float32(np.nan), scale)
            block_scales = np.where(bad, np.nan, block_scales)
        scale = _per_row(scale, br, rows)
        scaled = b / scale
        saturated = _past_the_top(scaled, f) if details else None
        stored64 = np.empty(b.shape, np.float64)
        # clamped to ±max (saturation), round_float32 gives the element exactly; times the scale in float64, exactly
        element = round_float32(np.ascontiguousarray(scaled), f, limit=f.max, inplace=True)
        np.multiply(element, scale, out=stored64, dtype=np.float64)
        if any_bad:
            stored64[np.broadcast_to(_per_row(bad, br, rows), stored64.shape)] = np.nan
        stored = _unblocked(stored64, how)
        if saturated is None:
            return Encoded(stored, np.empty(0), np.empty(0), tensor_scale, np.empty(0, bool))
        full_scale = _unblocked(np.broadcast_to(scale, b.shape).astype(np.float64), how)
    return Encoded(
        stored, full_scale, block_scales.astype(np.float64).reshape(-1), tensor_scale, _unblocked(saturated, how)
    )


def quantize(values: ArrayLike, recipe: str | Recipe) -> NDArray[np.float64]:
    """The values ``recipe`` stores for ``values`` (float64, same shape), in blocks over the last axis."""
    r = get_recipe(recipe)
    x = _as_float32(values)
    stored = _stored_in_pieces(x, r) if x.size else None
    return _encode(x, r, details=False).stored if stored is None else stored


def encode(values: ArrayLike, recipe: str | Recipe) -> Encoded:
    """:func:`quantize`, with each value's scale, the block scales and which values saturated."""
    return _encode(values, recipe, details=True)


def outcomes(values: ArrayLike, enc: Encoded) -> NDArray[np.str_]:
    """Per value: ``"kept"`` (stored exactly), ``"rounded"``, ``"flushed"`` (non-zero stored as 0) or
    ``"saturated"`` (clamped to the largest element value); NaN inputs are ``"rounded"``."""
    x = _as_float32(values).astype(np.float64)
    out = np.full(x.shape, "rounded", dtype="<U9")
    out[enc.stored == x] = "kept"
    out[(x != 0) & (enc.stored == 0)] = "flushed"
    out[enc.saturated] = "saturated"
    return out


def sqnr_db(values: ArrayLike, stored: ArrayLike) -> float:
    """10 log10(signal power / noise power) in dB; inf when stored equals values, NaN when there is nothing."""
    x = np.asarray(values, np.float64)
    q = np.asarray(stored, np.float64)
    ok = ~np.isnan(x) & ~np.isnan(q)
    if not ok.any():
        return math.nan
    signal = float(np.sum(np.square(x[ok])))
    noise = float(np.sum(np.square(x[ok] - q[ok])))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


def _lost_from_encoding(values: ArrayLike, recipe: str | Recipe) -> Lost:
    """:func:`lost` through :func:`encode`, for tensors with a NaN or an infinity: their blocks drop out."""
    x = _as_float32(values).astype(np.float64)
    enc = encode(x, recipe)
    nonzero = (x != 0) & ~np.isnan(x)
    n_nonzero = int(np.count_nonzero(nonzero))
    n = int(np.count_nonzero(~np.isnan(x)))
    flushed = float(np.count_nonzero(nonzero & (enc.stored == 0))) / n_nonzero if n_nonzero else 0.0
    saturated = float(np.count_nonzero(enc.saturated)) / n if n else 0.0
    return Lost(flushed, saturated, sqnr_db(x, enc.stored))


_PIECE = 1 << 16  # values per piece in lost_all's passes: the piece and its scratch stay in cache


def _db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


def _amax_scales(amax: NDArray[np.float32], f: FloatFormat) -> NDArray[np.float32]:
    """The per-tensor and tile rules' scales, amax / max in FP32: 1 for a block of zeros, at least 2**-149."""
    scale = np.maximum(amax / np.float32(f.max), _SMALLEST_SCALE)
    return np.where(amax > 0, scale, np.float32(1.0)).astype(np.float32)


def _nvfp4_tensor_scale(tensor_amax: np.float32) -> np.float32:
    """NVFP4's FP32 scale per tensor, amax / (448 * 6): 1 for a tensor of zeros, at least 2**-149."""
    if not tensor_amax > 0:
        return np.float32(1.0)
    return np.float32(max(np.float32(tensor_amax / _NVFP4_TENSOR_DIVISOR), _SMALLEST_SCALE))


def _block_scales(r: Recipe, amax: NDArray[np.float32], tensor_amax: np.float32) -> NDArray[np.float32]:
    """Each block's scale (what its values are divided by), as :func:`encode` computes it, for finite blocks."""
    f = r.element_format
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if r.rule == "amax":
            return _amax_scales(amax, f)
        if r.rule == "nvfp4":
            ts = _nvfp4_tensor_scale(tensor_amax)
            block = np.ascontiguousarray(amax / np.float32(f.max), np.float32)
            block /= ts
            e4m3 = FORMATS["fp8_e4m3"]
            np.clip(block, np.float32(e4m3.smallest_normal), np.float32(e4m3.max), out=block)
            # E4M3's rounding in float32 arithmetic (lensa.numerics.formats.round_float32: the same values as ml_dtypes'
            # cast, checked code by code in tests/test_formats.py), several times faster; the clip keeps every
            # value within E4M3's normal range, so nothing saturates
            scales: NDArray[np.float32] = round_float32(block, e4m3, inplace=True)
            scales *= ts
            np.maximum(scales, _SMALLEST_SCALE, out=scales)
            return scales
        return _powers_of_two(_mx_exponent(amax, f, r.rule))


_MAGNITUDE = np.uint32(0x7FFFFFFF)
_EXPONENT = np.uint32(0x7F800000)
_AMAX_WIDTH = 16  # lost_all reads each row's maxima in blocks of 16 once; wider blocks are maxima of these


@dataclass(frozen=True)
class _Rounding:
    """What :func:`lost_all`'s pass needs of one recipe: its element format as constants, and each block's scale."""

    key: str
    scale: NDArray[np.float32]  # (rows of the tensor, blocks, 1); or one number for the whole tensor
    limit: np.float32  # the element's largest value
    threshold: np.float32  # past it (or at it, when the tie goes up), a value saturates
    tie_goes_up: bool
    low: np.uint32  # the bits of the element's smallest normal exponent: the floor of the rounding exponent
    shift: np.uint32  # (23 - fraction bits) << 23: the magic number's distance above the value's binade
    power_of_two: bool  # MX: dividing by the scale is multiplying by its exact inverse (the compiled pass does)
    saturates: bool  # False where the rule keeps amax within the element's range (the rounded-up MX scale)


@cache
def _tie_goes_up(f: FloatFormat) -> bool:
    """Whether a value exactly at ``f``'s overflow threshold saturates (exact, so worked out once a format)."""
    return str(classify(f.overflow_threshold, f)) == "overflow"


def _rounding(r: Recipe, scale: NDArray[np.float32]) -> _Rounding:
    f = r.element_format
    threshold = f.overflow_threshold
    return _Rounding(
        key=r.key,
        scale=scale,
        limit=np.float32(f.max),
        threshold=np.float32(threshold),
        tie_goes_up=_tie_goes_up(f),
        low=np.uint32((f.emin + 127) << 23),
        shift=np.uint32((23 - f.significand_bits) << 23),
        power_of_two=r.rule in ("mx_floor", "mx_ceil"),
        saturates=r.rule != "mx_ceil",
    )


class _Scratch:
    """One thread's buffers for a piece: the magnitudes, the scaled values, their exponents, the squared errors.

    numpy's maximum and minimum against a scalar take several times as long as against an array here, so the
    bounds are kept as arrays of the piece's size (:meth:`full`), made once per thread.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.a = np.zeros(shape, np.float32)  # zero-padded columns stay 0
        self.y = np.empty(shape, np.float32)
        self.s = np.empty(shape, np.float32)
        self.e = np.empty(shape, np.uint32)
        self.e2 = np.empty(shape, np.uint32)
        self.sq = np.empty(shape, np.float64)
        self.s64 = np.empty(shape, np.float64)
        self.flags = np.empty(shape, bool)
        self._full: dict[tuple[str, float], NDArray[Any]] = {}

    def full(self, value: np.generic) -> NDArray[Any]:
        key = (value.dtype.str, float(value))
        if key not in self._full:
            self._full[key] = np.full(self.a.shape, value)
        return self._full[key]


def _round_piece(a: NDArray[np.float32], s: Any, rd: _Rounding, sc: _Scratch, k: int) -> tuple[int, int, float]:
    """One piece of magnitudes ``a`` (the first ``k`` rows of ``sc``'s buffers, shaped as ``a``) and their
    scales ``s`` (broadcast) under one recipe: (values saturated, elements not 0, the sum of squared errors).

    The element is ``round_float32(|x| / s, limit=max)`` as :func:`encode` computes it, in fewer passes: the
    magic-number rounding on the magnitude (the sign changes neither counts nor squares), clamped only where
    something saturated (rounding is monotone and the largest value is on the grid, so clamping before or after
    rounding agree for every finite value; an infinite quotient only occurs where something saturated).
    """
    shape = a.shape
    y = sc.y[:k].reshape(shape)
    if np.ndim(s) == 3 and shape[-1] > 1:
        # a block scale spread over its values once (numpy's broadcast over a short last axis is slow), for the
        # division and again for the error below
        full = sc.s[:k].reshape(shape)
        np.copyto(full, s)
        s = full
    np.divide(a, s, out=y)
    saturated = 0
    if rd.saturates:
        flags = sc.flags[:k].reshape(shape)
        (np.greater_equal if rd.tie_goes_up else np.greater)(y, rd.threshold, out=flags)
        saturated = int(np.count_nonzero(flags))
        if saturated:
            np.minimum(y, sc.full(rd.limit)[:k].reshape(shape), out=y)
    magic = sc.e[:k].reshape(shape)
    np.bitwise_and(y.view(np.uint32), _EXPONENT, out=magic)
    np.maximum(magic, sc.full(rd.low)[:k].reshape(shape), out=magic)
    magic += rd.shift
    y += magic.view(np.float32)
    y -= magic.view(np.float32)
    flags = sc.flags[:k].reshape(shape)
    np.not_equal(y, 0, out=flags)
    kept = int(np.count_nonzero(flags))
    sq = sc.sq[:k].reshape(shape)
    # element * scale is exact in float64, and so is |x| minus it (the two lie within a factor 2 of each other, or
    # the element is 0): the same terms as encode()'s stored values give. (Not in float32, even for a power-of-two
    # scale: a rounded-up MX scale can put element * scale at 2**128, past FP32's largest value.)
    np.copyto(sq, y)
    if np.ndim(s) == 0:
        np.multiply(sq, np.float64(s), out=sq)
    else:  # widened first, as numpy's mixed float32 -> float64 multiply is slow
        wide = sc.s64[:k].reshape(shape)
        np.copyto(wide, s)
        np.multiply(sq, wide, out=sq)
    np.subtract(a, sq, out=sq)
    np.multiply(sq, sq, out=sq)
    return saturated, kept, float(np.sum(sq))


def _ranges(count: int, workers: int) -> list[tuple[int, int]]:
    parts = max(1, min(workers, count))
    cuts = [count * i // parts for i in range(parts + 1)]
    return [(cuts[i], cuts[i + 1]) for i in range(parts) if cuts[i + 1] > cuts[i]]


def _on_threads(fn: Callable[[int, int], Any], count: int, workers: int) -> list[Any]:
    """``fn(start, stop)`` over contiguous ranges of ``range(count)``, on ``workers`` threads when more than one;
    the results in range order. numpy releases the GIL in its passes."""
    ranges = _ranges(count, workers)

    def run(bounds: tuple[int, int]) -> Any:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            return fn(*bounds)

    if len(ranges) <= 1:
        return [run(r) for r in ranges]
    with ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="lensa-blockscale") as pool:
        return list(pool.map(run, ranges))


def _amax16(m_bits: NDArray[np.uint32], workers: int) -> NDArray[np.uint32]:
    """Each row's maxima of |x| (as bits) in blocks of 16 columns (a last partial block included), in pieces."""
    n_rows, cols = m_bits.shape
    nb = -(-cols // _AMAX_WIDTH)
    out = np.empty((n_rows, nb), np.uint32)
    step = max(1, _PIECE // (nb * _AMAX_WIDTH))

    def part(lo: int, hi: int) -> None:
        buf = np.zeros((step, nb * _AMAX_WIDTH), np.uint32)
        halves = [np.empty((step, nb * _AMAX_WIDTH >> j), np.uint32) for j in (1, 2, 3)]
        for i in range(lo * step, min(hi * step, n_rows), step):
            k = min(step, n_rows - i)
            np.bitwise_and(m_bits[i : i + k], _MAGNITUDE, out=buf[:k, :cols])
            # numpy reduces a short last axis slowly (16 values per inner loop): instead, the maxima of
            # neighbouring columns, halving the row four times, each an elementwise pass over whole rows
            src = buf[:k]
            for half in halves:
                np.maximum(src[:, 0::2], src[:, 1::2], out=half[:k])
                src = half[:k]
            np.maximum(src[:, 0::2], src[:, 1::2], out=out[i : i + k])

    _on_threads(part, -(-n_rows // step), workers)
    return out


def _compiled(t: _Rows, chosen: tuple[Recipe, ...]) -> blockscale_dispatch.Constants | None:
    """The compiled pass's constants for ``chosen`` where that pass runs on ``t`` (numba there, the tensor not
    small, the recipes within its reach); None for the numpy pass."""
    if t.n < blockscale_dispatch.MIN_VALUES or not blockscale_dispatch.available():
        return None
    return _jit_constants(chosen)


def _amax_of(
    block: tuple[int | None, int | None], a16: NDArray[np.uint32], bits: NDArray[np.uint32], lead: int, rows: int
) -> NDArray[np.float32]:
    """The block maxima :func:`_block_amax` gives for ``block``, shaped (matrices, row blocks, column blocks, 1),
    from the 16-wide row maxima (every recipe's block width is the whole row or a multiple of 16); ``bits`` are
    the magnitudes' bits, (rows of the tensor, columns)."""
    cols = bits.shape[1]
    bc = cols if block[1] is None or block[1] > cols else block[1]
    br = rows if block[0] is None or block[0] > rows else block[0]
    if bc != cols and bc % _AMAX_WIDTH:  # a block shape of one's own making: read the maxima again
        m = np.zeros((a16.shape[0], -(-cols // bc) * bc), np.uint32)
        m[:, :cols] = bits
        return _block_amax(m.view(np.float32).reshape(lead, rows, -1, bc), br)[0]
    if bc == cols:
        per = a16.max(axis=1, keepdims=True)
    else:
        group = bc // _AMAX_WIDTH
        nb = -(-cols // bc)
        if group == 1:
            per = a16
        else:
            padded = np.zeros((a16.shape[0], nb * group), np.uint32)
            padded[:, : a16.shape[1]] = a16
            blocks = padded.reshape(a16.shape[0], nb, group)
            per = blocks[:, :, 0].copy()  # the maximum over a short last axis, as elementwise maxima over long rows
            for j in range(1, group):
                np.maximum(per, blocks[:, :, j], out=per)
    per = per.reshape(lead, rows, per.shape[1], 1)
    if br > 1:
        per = np.maximum.reduceat(per, np.arange(0, rows, br), axis=1)
    return np.ascontiguousarray(per).view(np.float32)


class _Rows(NamedTuple):
    """A finite-or-not float32 tensor as :func:`lost_all` and :func:`_stored_in_pieces` read it: flat, and as
    rows (the matrices stacked) of its last axis, with their bits."""

    flat: NDArray[np.float32]
    n: int
    rows: int  # of one matrix
    cols: int
    lead: int  # matrices
    bits: NDArray[np.uint32]  # (lead * rows, cols)


def _as_rows(x: NDArray[np.float32]) -> _Rows:
    flat = np.ascontiguousarray(x).reshape(-1)
    n = flat.size
    rows = 1 if x.ndim < 2 else x.shape[-2]
    cols = 1 if x.ndim == 0 else x.shape[-1]
    lead = n // (rows * cols)
    return _Rows(flat, n, rows, cols, lead, flat.view(np.uint32).reshape(lead * rows, cols))


def _block_dims(block: tuple[int | None, int | None], rows: int, cols: int) -> tuple[int, int, int]:
    """(block rows, block columns, blocks a row) of ``block`` on a matrix of ``rows`` x ``cols``."""
    bc = cols if block[1] is None or block[1] > cols else block[1]
    br = rows if block[0] is None or block[0] > rows else block[0]
    return br, bc, -(-cols // bc)


def _store_piece(
    xs: NDArray[np.float32],
    s: Any,
    rd: _Rounding,
    sc: _Scratch,
    k: int,
    dst: NDArray[np.float64],
    bounds: tuple[NDArray[np.float32], NDArray[np.uint32]],
) -> None:
    """One piece of :func:`_stored_in_pieces`: ``xs`` over its scales ``s``, rounded to the element, times ``s``,
    written to ``dst``; ``bounds`` are ``sc.full`` of the element's largest value and of its lowest exponent."""
    shape = xs.shape
    if np.ndim(s) == 3 and shape[-1] > 1:  # the block scale spread over its values once (see _round_piece)
        full = sc.s[:k].reshape(shape)
        np.copyto(full, s)
        s = full
    y = sc.y[:k].reshape(shape)
    np.divide(xs, s, out=y)
    bits = y.view(np.uint32)
    sign = sc.e[:k].reshape(shape)
    np.bitwise_and(bits, np.uint32(0x80000000), out=sign)
    bits &= _MAGNITUDE
    limits, lows = bounds
    np.minimum(y, limits[:k].reshape(shape), out=y)  # saturation; a NaN cannot occur here
    magic = sc.e2[:k].reshape(shape)
    np.bitwise_and(bits, _EXPONENT, out=magic)
    np.maximum(magic, lows[:k].reshape(shape), out=magic)
    magic += rd.shift
    y += magic.view(np.float32)
    y -= magic.view(np.float32)
    bits |= sign
    # element * scale, exact in float64 (in float32 a rounded-up MX scale can pass FP32's range: see _round_piece);
    # widened first, as numpy's mixed float32 -> float64 multiply is slow
    np.copyto(dst, y)
    wide = sc.s64[:k].reshape(shape) if np.ndim(s) == 3 else None
    if wide is None:
        np.multiply(dst, np.float64(s), out=dst)
    else:
        np.copyto(wide, s)
        np.multiply(dst, wide, out=dst)


def _stored_in_pieces(x: NDArray[np.float32], r: Recipe) -> NDArray[np.float64] | None:
    """:func:`encode`'s stored values for a finite tensor, the same numbers, in pieces that stay in cache (see
    :func:`lost_all`); None for a tensor with an infinity or a NaN (their blocks take :func:`encode`'s path).

    Per piece (:func:`_store_piece`): the values divided by their scales in float32, clamped to the element's
    largest value, rounded to its grid by the magic-number addition (``round_float32``'s arithmetic, with the
    bounds held as arrays), and multiplied back by the scale in float64. Compiled where numba is
    (:func:`lensa.numerics.blockscale_dispatch.store`): the same arithmetic, value by value, in one loop."""
    t = _as_rows(x)
    out = np.empty(t.n, np.float64)
    consts = _compiled(t, (r,))
    if consts is not None:
        ran, stored = blockscale_dispatch.attempt(
            lambda: blockscale_dispatch.store(t.bits, t.lead, t.rows, consts, out.reshape(-1, t.cols), _on_threads)
        )
        if ran:
            return out.reshape(x.shape) if stored else None
    a16 = _amax16(t.bits, 1)
    top = a16.max()
    if top >= _EXPONENT:
        return None
    tensor_amax = np.uint32(top).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        if r.block is None:
            rd = _rounding(r, _block_scales(r, np.array([tensor_amax]), tensor_amax)[0])
            sc = _Scratch((_PIECE,))
            bounds = sc.full(rd.limit), sc.full(rd.low)
            for i in range(0, t.n, _PIECE):
                k = min(_PIECE, t.n - i)
                _store_piece(t.flat[i : i + k], rd.scale, rd, sc, k, out[i : i + k], bounds)
            return out.reshape(x.shape)
        br, bc, nb = _block_dims(r.block, t.rows, t.cols)
        amax = _amax_of(r.block, a16, t.bits, t.lead, t.rows)
        scale = np.ascontiguousarray(_per_row(_block_scales(r, amax, tensor_amax), br, t.rows)).reshape(-1, nb, 1)
        _store_rows(t, _rounding(r, scale), nb, bc, out.reshape(t.lead * t.rows, t.cols))
    return out.reshape(x.shape)


def _store_rows(t: _Rows, rd: _Rounding, nb: int, bc: int, rows_out: NDArray[np.float64]) -> None:
    """:func:`_stored_in_pieces` for a recipe of blocks: whole rows a piece, padded to ``nb`` blocks of ``bc``."""
    n_rows, width = t.lead * t.rows, nb * bc
    step = max(1, _PIECE // width)
    sc = _Scratch((step, width))
    bounds = sc.full(rd.limit), sc.full(rd.low)
    values = t.flat.reshape(n_rows, t.cols)
    padded = np.empty((step, width), np.float64) if width != t.cols else None
    for i in range(0, n_rows, step):
        k = min(step, n_rows - i)
        if padded is None:  # the rows tile into whole blocks: read them where they are
            xs = values[i : i + k].reshape(k, nb, bc)
            _store_piece(xs, rd.scale[i : i + k], rd, sc, k, rows_out[i : i + k].reshape(k, nb, bc), bounds)
            continue
        sc.a[:k, : t.cols] = values[i : i + k]  # the padding columns stay 0
        _store_piece(sc.a[:k].reshape(k, nb, bc), rd.scale[i : i + k], rd, sc, k, padded[:k].reshape(k, nb, bc), bounds)
        rows_out[i : i + k] = padded[:k, : t.cols]


def lost_all(values: ArrayLike, recipes: Iterable[str | Recipe] | None = None, workers: int = 1) -> dict[str, Lost]:
    """:func:`lost` for several recipes at once (default: every one of :data:`RECIPES`), keyed by recipe.

    The shared work is done once: the values as float32, each row's maxima in blocks of 16 (from which every
    block shape's maxima follow), and the signal power. Then the values are read in pieces that stay in
    cache, and every recipe whose blocks tile the rows the same way (MX's 32, 1×128 and 128×128 all pad a row
    alike) takes its pass over the piece while it is there. With ``workers`` > 1 the pieces are spread over
    that many threads; the result does not depend on it. :func:`lost` is this function with one recipe, so
    the two agree exactly, whatever the recipes of :data:`RECIPES` asked together. The shares are exact counts;
    the SQNR's sums are float64 sums of exact squared errors, numpy's pairwise sum over each piece (not BLAS: the
    same on every CPU), the pieces added in order. Where numba is installed, tensors of 64 values or more take
    the compiled pass of :mod:`lensa.numerics.blockscale_dispatch` instead: the same counts and squared errors, summed
    in an order of its own (the SQNR can differ from the numpy pass's in its last bits), the same on every CPU. A tensor
    with a NaN or an infinity takes the slower path through :func:`encode` (the blocks holding them are left out
    of both powers).
    """
    chosen = [get_recipe(r) for r in (RECIPES.values() if recipes is None else recipes)]
    x = _as_float32(values)
    if x.size == 0:
        return {r.key: _lost_from_encoding(x, r) for r in chosen}
    t = _as_rows(x)
    consts = _compiled(t, tuple(chosen))
    sums = {r.key: [0, 0, 0.0] for r in chosen}  # saturated, elements not 0, noise
    signal, nonzero = 0.0, 0
    ran, got = False, None
    if consts is not None:
        ran, got = blockscale_dispatch.attempt(
            lambda: blockscale_dispatch.lost(t.bits, t.lead, t.rows, consts, workers, _on_threads)
        )
    if ran:
        if got is None:  # an infinity or a NaN
            return {r.key: _lost_from_encoding(x, r) for r in chosen}
        signal, nonzero, per = got
        for r, counts in zip(chosen, per, strict=True):
            sums[r.key] = list(counts)
    else:
        a16 = _amax16(t.bits, workers)
        top = a16.max()
        if top >= _EXPONENT:  # an infinity or a NaN
            return {r.key: _lost_from_encoding(x, r) for r in chosen}
        layouts = _layouts(chosen, t, a16, np.uint32(top).view(np.float32))
        for layout, group in layouts.items():
            if layout == "flat":
                signal, nonzero = _flat_pass(t, group, workers, sums)
            else:
                _row_pass(t, int(layout), group, workers, sums)
    out: dict[str, Lost] = {}
    for r in chosen:
        saturated, kept, noise = sums[r.key]
        flushed = (nonzero - int(kept)) / nonzero if nonzero else 0.0
        out[r.key] = Lost(float(flushed), int(saturated) / t.n, _db(signal, float(noise)))
    return out


def _layouts(chosen: list[Recipe], t: _Rows, a16: NDArray[np.uint32], tensor_amax: Any) -> dict[Any, list[_Rounding]]:
    """The recipes by how their pieces lie: "flat" (the whole tensor, always there) or the padded row width."""
    layouts: dict[Any, list[_Rounding]] = {"flat": []}
    maxima: dict[tuple[int, int], NDArray[np.float32]] = {}  # the block maxima, once per block shape (MX's seven)
    for r in chosen:
        if r.block is None:
            layouts["flat"].append(_rounding(r, _block_scales(r, np.array([tensor_amax]), tensor_amax)[:1]))
            continue
        br, bc, nb = _block_dims(r.block, t.rows, t.cols)
        if (br, bc) not in maxima:
            maxima[br, bc] = _amax_of(r.block, a16, t.bits, t.lead, t.rows)
        amax = maxima[br, bc]
        scale = _per_row(_block_scales(r, amax, tensor_amax), br, t.rows)
        layouts.setdefault(nb * bc, []).append(_rounding(r, np.ascontiguousarray(scale).reshape(-1, nb, 1)))
    return layouts


_RULE_CODES = {"amax": 0, "mx_floor": 1, "mx_ceil": 2, "nvfp4": 3}  # lensa.numerics.blockscale_numba' codes


@cache
def _jit_constants(chosen: tuple[Recipe, ...]) -> blockscale_dispatch.Constants | None:
    """The recipes as the compiled pass reads them (:class:`lensa.numerics.blockscale_dispatch.Constants`), made once
    per tuple of recipes; None where one is beyond it (an MX element format of one's own with emax below 1). A threshold
    that saturates when reached becomes the float32 just below it (above it, then); a rule that cannot saturate
    gets inf."""
    if any(r.rule in ("mx_floor", "mx_ceil") and r.element_format.emax < 1 for r in chosen):
        return None
    rds = [_rounding(r, np.zeros(1, np.float32)) for r in chosen]

    def top(rd: _Rounding) -> np.float32:
        if not rd.saturates:
            return np.float32(np.inf)
        return np.float32(np.nextafter(rd.threshold, np.float32(0)) if rd.tie_goes_up else rd.threshold)

    def side(n: int | None) -> int:
        return -1 if n is None else n

    e4m3 = FORMATS["fp8_e4m3"]
    grid = _rounding(Recipe("", "", "fp8_e4m3", None, "fp32", "amax"), np.zeros(1, np.float32))
    return blockscale_dispatch.Constants(
        rule=np.array([_RULE_CODES[r.rule] for r in chosen], np.int64),
        block_rows=np.array([-2 if r.block is None else side(r.block[0]) for r in chosen], np.int64),
        block_cols=np.array([-2 if r.block is None else side(r.block[1]) for r in chosen], np.int64),
        max_elem=np.array([r.element_format.max for r in chosen], np.float32),
        emax=np.array([r.element_format.emax for r in chosen], np.int64),
        frac_top=np.array(
            [np.float32(r.element_format.max).view(np.uint32) & np.uint32(0x7FFFFF) for r in chosen], np.uint32
        ),
        two=np.array([rd.power_of_two for rd in rds], np.bool_),
        top=np.array([top(rd) for rd in rds], np.float32),
        limit=np.array([rd.limit for rd in rds], np.float32),
        low=np.array([rd.low for rd in rds], np.uint32),
        shift=np.array([rd.shift for rd in rds], np.uint32),
        e4m3=np.array([e4m3.smallest_normal, e4m3.max, _NVFP4_TENSOR_DIVISOR], np.float32),
        grid=np.array([grid.low, grid.shift], np.uint32),
    )


def _add_piece(sums: dict[str, list[Any]], group: list[_Rounding], per: list[tuple[int, int, float]]) -> None:
    for rd, (sat, kept, noise) in zip(group, per, strict=True):
        acc = sums[rd.key]
        acc[0] += sat
        acc[1] += kept
        acc[2] += noise


def _flat_pass(t: _Rows, group: list[_Rounding], workers: int, sums: dict[str, list[Any]]) -> tuple[float, int]:
    """:func:`lost_all`'s pass over the flat tensor: the tensor-scaled recipes of ``group`` into ``sums``; returns
    the signal power and the count of values not 0."""
    n = t.n

    def part(lo: int, hi: int) -> list[tuple[float, int, list[Any]]]:
        sc = _Scratch((_PIECE,))
        got = []
        for p in range(lo, hi):
            i = p * _PIECE
            k = min(_PIECE, n - i)
            a = sc.a[:k]
            np.bitwise_and(t.flat.view(np.uint32)[i : i + k], _MAGNITUDE, out=a.view(np.uint32))
            sq = sc.sq[:k]
            np.square(a, out=sq, dtype=np.float64)
            power, kept = float(np.sum(sq)), int(np.count_nonzero(a))
            got.append((power, kept, [_round_piece(a, rd.scale[0], rd, sc, k) for rd in group]))
        return got

    signal, nonzero = 0.0, 0
    for got in _on_threads(part, -(-n // _PIECE), workers):
        for power, kept, per in got:
            signal += power
            nonzero += kept
            _add_piece(sums, group, per)
    return signal, nonzero


def _row_pass(t: _Rows, width: int, group: list[_Rounding], workers: int, sums: dict[str, list[Any]]) -> None:
    """:func:`lost_all`'s pass over whole rows padded to ``width``, for the block recipes of ``group``."""
    n_rows = t.lead * t.rows
    step = max(1, _PIECE // width)

    def part(lo: int, hi: int) -> list[list[tuple[int, int, float]]]:
        sc = _Scratch((step, width))
        got = []
        for p in range(lo, hi):
            i = p * step
            k = min(step, n_rows - i)
            np.bitwise_and(t.bits[i : i + k], _MAGNITUDE, out=sc.a.view(np.uint32)[:k, : t.cols])
            per = []
            for rd in group:
                nb = rd.scale.shape[1]
                a = sc.a[:k].reshape(k, nb, width // nb)
                per.append(_round_piece(a, rd.scale[i : i + k], rd, sc, k))
            got.append(per)
        return got

    for got in _on_threads(part, -(-n_rows // step), workers):
        for per in got:
            _add_piece(sums, group, per)


def lost(values: ArrayLike, recipe: str | Recipe) -> Lost:
    """What ``recipe`` loses on ``values``: shares flushed and saturated, and the SQNR in dB (see :func:`lost_all`)."""
    r = get_recipe(recipe)
    return lost_all(values, (r,))[r.key]


def floor_regime(values: ArrayLike, recipe: str | Recipe = "mxfp8_e4m3") -> FloorRegime:
    """Where OCP's floor rule (``recipe``, an ``"mx_floor"`` recipe) leaves ``values`` against the rounded-up scale.

    ``"fits"``: every block gets the same scale under both rules (its amax, scaled, is at most the element's
    largest value: for E4M3 a significand of at most 1.75). ``"rounds_back"``: some block's scale differs, its
    largest value lands past the element's largest value under OCP's scale, and rounding to nearest brings it
    back (E4M3: a significand above 1.75, up to 1.8125 = 464 / 2**8). ``"saturates"``: some value is past what
    rounding absorbs and is clamped (:attr:`Encoded.saturated`; E4M3: a significand above 1.8125). A tensor of
    several blocks is in the regime of its worst block.
    """
    r = get_recipe(recipe)
    if r.rule != "mx_floor":
        raise ValueError(f"{r.key} does not use OCP's floor rule (its rule is {r.rule!r})")
    floor = encode(values, r)
    if floor.saturated.any():
        return "saturates"
    ceil = encode(values, replace(r, key=f"{r.key}_ceil", rule="mx_ceil"))
    same = np.array_equal(floor.block_scales, ceil.block_scales, equal_nan=True)
    return "fits" if same else "rounds_back"


# --- delayed scaling, replayed on a recorded amax sequence ---------------------------------------------------


def delayed_scales(
    amax: ArrayLike, history: int = 1024, margin: float = 0, fmt: str = "fp8_e4m3"
) -> NDArray[np.float32]:
    """The scale each step would use under Transformer Engine's ``DelayedScaling`` (``amax_compute_algo="max"``).

    As TE's ``amax_and_scale_update`` kernel (transformer_engine/common/recipe/delayed_scaling.cu): after each
    step the step's amax enters a history of the last ``history`` steps, and the next step's scale is
    ``(fmt_max * 2**-margin) / max(history)`` in FP32; where that maximum is not finite or not above 0, the
    scale stays what it was, and where the quotient overflows FP32 (a maximum below about 1.3e-36 for E4M3) it
    is FP32's largest finite value instead, as the kernel sets it. The first step has no history and uses TE's
    initial scale, 1.0. A NaN amax (a step where the tensor was not read) leaves the history and the scale alone.
    """
    if isinstance(history, bool) or not isinstance(history, int | np.integer) or history < 1:
        raise ValueError(f"the amax history holds at least 1 step, not {history!r}")
    a = np.asarray(amax, np.float64).reshape(-1)
    f = get_format(fmt)
    scaled_max = np.float32(f.max) * np.float32(2.0 ** -float(margin))
    out = np.empty(a.size, np.float32)
    scale = np.float32(1.0)
    window: list[tuple[int, float]] = []  # (index, amax), amax decreasing: the front is the window's max
    seen = 0
    for t, v in enumerate(a.tolist()):
        out[t] = scale
        if math.isnan(v):
            continue
        seen += 1
        while window and window[-1][1] <= v:
            window.pop()
        window.append((seen, v))
        while window[0][0] <= seen - history:
            window.pop(0)
        top = np.float32(window[0][1])
        if math.isfinite(top) and top > 0:
            with np.errstate(over="ignore"):
                scale = np.float32(scaled_max / top)
            # TE replaces a scale that overflowed with FP32's largest finite value: the amax then maps below
            # the format's largest value, but every value stays finite once scaled.
            if math.isinf(scale):
                scale = _FP32_MAX
    return out


def replay_delayed(amax: ArrayLike, history: int = 1024, margin: float = 0, fmt: str = "fp8_e4m3") -> NDArray[np.bool_]:
    """One boolean per step: True where the delayed scale (:func:`delayed_scales`) would have overflowed it.

    Step t overflows when ``amax_t * scale_t`` (FP32) lies past what rounds to the format's largest value (as
    :attr:`Encoded.saturated` counts it: its largest values would be clamped), or when amax_t is infinite.
    Current scaling (scale from the step's own amax) never does. NaN amax (not read): False.
    """
    a = np.asarray(amax, np.float64).reshape(-1)
    f = get_format(fmt)
    scales = delayed_scales(a, history, margin, fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        product = a.astype(np.float32) * scales
    past = _past_the_top(product, f)
    return np.asarray(past | np.isinf(a), dtype=bool)
