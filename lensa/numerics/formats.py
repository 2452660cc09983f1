"""Binary floating-point formats as data, and exact rounding into them.

A format is one frozen record of its defining numbers (exponent bits, stored
significand bits, bias, how it spells infinity and NaN, what it does on
overflow); everything else is derived from those. All public functions take a
format by name (``"fp16"``) or as a :class:`FloatFormat`, accept anything
``numpy.asarray`` accepts, and return float64 values (or integer codes), so
results from different formats can be compared directly.

Rounding is to nearest, ties to even, from the *exact* value of the input.
For float32 (or narrower) inputs the casts of numpy and ml_dtypes are used;
they are correctly rounded and agree bit for bit with ``torch.Tensor.to``.
For float64 inputs a direct rounding is used instead, because casting float64
to bfloat16 or float8 through float32 can round twice (torch does: it rounds
``1 + 2**-8 + 2**-40`` to 1.0 in bfloat16, where the nearest value is 1.0078125).

Overflow follows the format: those with infinities (FP32, TF32, BF16, FP16,
FP8 E5M2) give ±inf. Those without *saturate*. FP8 E4M3 (the ``e4m3fn``
variant: no infinity, NaN only at the all-ones codes S.1111.111,
0x7F and 0xFF) turns every magnitude
above 464 (the midpoint between 448 and the next power-of-two step), ±inf
included, into ±448. That is torch's cast and the convention of FP8 training
libraries, which clamp after scaling; ml_dtypes would give NaN. FP6 and FP4
(OCP MX: no infinity, no NaN) saturate to ±28, ±7.5 and ±6, as ml_dtypes
does; E8M0 (the unsigned power-of-two block scale) to 2**127, where ml_dtypes
gives NaN. NaN stays NaN in every format, FP6 and FP4 included, which have
no code for it (ml_dtypes stores -0 there).

Arrays go through :func:`quantize`, :func:`to_bits` and :func:`from_bits`.
One value at a time, where numpy's per-call cost would dominate, goes
through their plain-Python counterparts :func:`scalar_rounder`,
:func:`code_of` and :func:`value_of`, tested against them at every code
point and midpoint. (:mod:`lensa.numerics.exact` rounds a typed number's exact
rational value, which no float64 path can hold.)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, NDArray

Category = Literal["zero", "subnormal", "normal", "overflow", "nan"]
FormatGroup = Literal["wide", "16bit", "fp8", "narrow", "scale"]
CATEGORIES: tuple[Category, ...] = ("zero", "subnormal", "normal", "overflow", "nan")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format, given by its defining numbers (as gfloat's ``FormatInfo``).

    ``significand_bits`` counts the stored fraction bits, without the implicit
    leading 1 (10 for FP16), as ``ml_dtypes.finfo(...).nmant`` does.
    ``has_inf``: the code just below the NaN codes is ±infinity.
    ``nan_codes``: how many codes at the top of each sign's range are NaN
    (gfloat's ``num_high_nans``): 2**m - 1 for IEEE formats (the all-ones
    exponent with a non-zero fraction), 1 for FP8 E4M3 (only the all-ones
    code, S.1111.111: 0x7F and 0xFF) and E8M0 (0xFF), 0 for FP6 and FP4, which have no NaN at all.
    ``has_subnormals``: exponent field 0 holds 0 and the subnormals; without
    them (E8M0) it holds the normal number 2**-bias, and the format has no zero.
    ``signed``: a sign bit leads the code; an unsigned format (E8M0) holds
    no negative value.

    Everything else (width, emin, emax, max, the NaN and infinity codes,
    overflow behaviour, the group a format is listed under) is derived, and
    no code branches on a format's name.
    """

    name: str
    label: str
    exponent_bits: int
    significand_bits: int
    bias: int
    has_inf: bool
    nan_codes: int
    dtype_name: str | None  # numpy / ml_dtypes dtype used for fast casts and checks, if any
    has_subnormals: bool = True
    signed: bool = True

    @property
    def bits(self) -> int:
        """Total width in bits: sign (if any) + exponent + stored significand."""
        return int(self.signed) + self.exponent_bits + self.significand_bits

    @property
    def _magnitude_codes(self) -> int:
        """How many codes one sign has: 2**(exponent_bits + significand_bits)."""
        return 1 << (self.exponent_bits + self.significand_bits)

    @property
    def sign_bit(self) -> int:
        """The sign bit's value in a code (0 for an unsigned format)."""
        return self._magnitude_codes if self.signed else 0

    @property
    def first_nan_code(self) -> int:
        """The lowest positive NaN code (one past the top code when the format has no NaN)."""
        return self._magnitude_codes - self.nan_codes

    @property
    def inf_code(self) -> int | None:
        """The code of +inf, or None without infinities."""
        return self.first_nan_code - 1 if self.has_inf else None

    @property
    def max_code(self) -> int:
        """The code of the largest finite value."""
        return self.first_nan_code - (2 if self.has_inf else 1)

    @property
    def nan_code(self) -> int:
        """The code :func:`to_bits` gives NaN: the lowest NaN code with the fraction's top bit set (the
        quiet NaN of IEEE formats, 0x7F in E4M3, 0xFF in E8M0); without NaN codes, -0's code, as ml_dtypes
        stores a NaN in FP6 and FP4."""
        if self.nan_codes == 0:
            return self.sign_bit
        quiet = (((1 << self.exponent_bits) - 1) << self.significand_bits) | ((1 << self.significand_bits) >> 1)
        return max(self.first_nan_code, quiet)

    @property
    def has_zero(self) -> bool:
        """Code 0 is zero where exponent field 0 holds the subnormals."""
        return self.has_subnormals

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        return (1 if self.has_subnormals else 0) - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        return (self.max_code >> self.significand_bits) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        m = self.significand_bits
        top_fraction = self.max_code & ((1 << m) - 1)
        return float(np.ldexp(1.0 + top_fraction / (1 << m), self.emax))

    @property
    def smallest_normal(self) -> float:
        """Smallest positive normal value, 2**emin."""
        return float(np.ldexp(1.0, self.emin))

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value: 2**(emin - significand_bits), or 2**emin without subnormals."""
        return float(np.ldexp(1.0, self.emin - (self.significand_bits if self.has_subnormals else 0)))

    @property
    def eps(self) -> float:
        """Gap between 1 and the next larger value, 2**-significand_bits."""
        return float(np.ldexp(1.0, -self.significand_bits))

    @property
    def overflow(self) -> Literal["inf", "saturate"]:
        """What a magnitude past ``max`` becomes: ±inf where the format has it, else ±max (saturation)."""
        return "inf" if self.has_inf else "saturate"

    @property
    def overflow_threshold(self) -> float:
        """Smallest magnitude that no longer rounds to ``max`` (ties included)."""
        return self.max + float(np.ldexp(1.0, self.emax - self.significand_bits - 1))

    @property
    def group(self) -> FormatGroup:
        """Where lists of formats put it, from its width: ``"wide"`` (FP32, TF32), ``"16bit"``, ``"fp8"``,
        ``"narrow"`` (6 and 4 bits) or ``"scale"`` (unsigned: a block's shared scale, E8M0)."""
        if not self.signed:
            return "scale"
        if self.bits > 16:
            return "wide"
        if self.bits > 8:
            return "16bit"
        return "fp8" if self.bits == 8 else "narrow"

    @cached_property
    def dtype(self) -> np.dtype | None:
        """The numpy dtype that stores this format, or None (TF32 has none)."""
        if self.dtype_name is None:
            return None
        return np.dtype(getattr(ml_dtypes, self.dtype_name, None) or self.dtype_name)

    @cached_property
    def float32_grid(self) -> bool:
        """Whether :func:`round_float32` can round float32 values to this format: a signed format with
        subnormals whose spacings are all float32 powers of two with room above (FP16, FP8, FP6, FP4)."""
        return (
            self.signed
            and self.has_subnormals
            and self.significand_bits < 23
            and self.emin >= -126
            and self.emax + 24 - self.significand_bits <= 127
        )

    @cached_property
    def library_rounds(self) -> bool:
        """Whether numpy's / ml_dtypes' cast rounds float32 inputs as :func:`quantize` does (then it is
        the fast path). Not for E8M0: ml_dtypes rounds float32 subnormals in (2**-127, 1.5 * 2**-127) up
        to 2**-126, where 2**-127 is nearer."""
        return self.dtype is not None and self.has_subnormals


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", "FP32", 8, 23, 127, True, (1 << 23) - 1, "float32"),
        # TF32 is a tensor-core mode: FP32's exponent with FP16's significand.
        FloatFormat("tf32", "TF32", 8, 10, 127, True, (1 << 10) - 1, None),
        FloatFormat("fp16", "FP16", 5, 10, 15, True, (1 << 10) - 1, "float16"),
        FloatFormat("bf16", "BF16", 8, 7, 127, True, (1 << 7) - 1, "bfloat16"),
        FloatFormat("fp8_e4m3", "FP8 E4M3", 4, 3, 7, False, 1, "float8_e4m3fn"),
        FloatFormat("fp8_e5m2", "FP8 E5M2", 5, 2, 15, True, 3, "float8_e5m2"),
        # OCP Microscaling v1.0 element formats: no infinity, no NaN.
        FloatFormat("fp6_e3m2", "FP6 E3M2", 3, 2, 3, False, 0, "float6_e3m2fn"),
        FloatFormat("fp6_e2m3", "FP6 E2M3", 2, 3, 1, False, 0, "float6_e2m3fn"),
        FloatFormat("fp4_e2m1", "FP4 E2M1", 2, 1, 1, False, 0, "float4_e2m1fn"),
        # OCP MX's shared block scale: unsigned powers of two 2**-127 .. 2**127, one NaN code, no zero.
        FloatFormat("e8m0", "E8M0", 8, 0, 127, False, 1, "float8_e8m0fnu", has_subnormals=False, signed=False),
    )
}


def formats_in(*groups: FormatGroup) -> tuple[str, ...]:
    """The keys of the formats in ``groups``, in registry order (``formats_in("16bit", "fp8")``)."""
    return tuple(k for k, f in FORMATS.items() if f.group in groups)


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    """Look a format up by name; a FloatFormat passes through."""
    if isinstance(fmt, FloatFormat):
        return fmt
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}") from None


# Inputs whose every value is exactly a float32 take the fast, library cast.
_EXACT_IN_FLOAT32 = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def _as_float_array(x: ArrayLike) -> NDArray[Any]:
    a = np.asarray(x)
    if a.dtype in _EXACT_IN_FLOAT32 or a.dtype == np.float64:
        return a
    return a.astype(np.float64)  # ints, bools, lists, longdouble: as float64


def _round_unbounded(a: NDArray[np.float64], f: FloatFormat) -> NDArray[np.float64]:
    """Round finite magnitudes ``a >= 0`` to the format's grid, ignoring the top.

    Exact for every float64 input: scaling by a power of two is exact and
    ``rint`` rounds half to even. Values past ``max`` come back past ``max``.
    """
    _, e = np.frexp(a)  # a = m * 2**e with m in [0.5, 1)
    binade = np.maximum(e - 1, f.emin)  # subnormals share the lowest binade's spacing
    shift = f.significand_bits - binade
    rounded: NDArray[np.float64] = np.ldexp(np.rint(np.ldexp(a, shift)), -shift)
    return rounded


def _round_grid(a: NDArray[np.float64], f: FloatFormat) -> NDArray[np.float64]:
    """:func:`_round_unbounded`, and a format without zero (E8M0) lifts what is below its smallest value to it."""
    r = _round_unbounded(a, f)
    return r if f.has_zero else np.maximum(r, f.smallest_subnormal)


def _no_code(x: NDArray[np.float64], f: FloatFormat) -> NDArray[np.bool_]:
    """Where the format holds no value for ``x``: NaN, a negative in an unsigned format, 0 without a zero."""
    out = np.isnan(x)
    if not f.signed:
        out = out | (x < 0)
    if not f.has_zero:
        out = out | (x == 0)
    return out


def _quantize_direct(x: NDArray[np.float64], f: FloatFormat) -> NDArray[np.float64]:
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(x)
        finite = np.isfinite(a)
        r = _round_grid(np.where(finite, a, 0.0), f)
        over = ~finite | (r > f.max)
        top = np.inf if f.has_inf else f.max
        r = np.where(over, top, r)
        if f.signed:
            r = np.copysign(r, x)
        return np.where(_no_code(x, f), np.nan, r)


def _quantize_float32_bits(x32: NDArray[np.float32], significand_bits: int) -> NDArray[np.float64]:
    # Round float32 bits to fewer fraction bits, ties to even; a carry into the
    # exponent is exactly the next binade (or inf past the top), as it should be.
    shape = np.shape(x32)  # ascontiguousarray turns a 0-d array into 1-d; give the caller's shape back
    bits = np.ascontiguousarray(x32).view(np.uint32)
    drop = 23 - significand_bits
    keep_odd = (bits >> np.uint32(drop)) & np.uint32(1)
    half = np.uint32((1 << (drop - 1)) - 1)
    rounded = (bits + half + keep_odd) & np.uint32((0xFFFFFFFF >> drop) << drop)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    out = np.where(special, bits, rounded).view(np.float32)
    return out.astype(np.float64).reshape(shape)


def quantize(
    x: ArrayLike, fmt: str | FloatFormat, workers: int = 1, out: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """Round each value to the nearest value of ``fmt``, ties to even.

    Returns float64 values of the same shape. 0 and -0 are kept; NaN stays
    NaN (also in FP6 and FP4, which have no NaN code: ml_dtypes would store
    -0). Overflow (and ±inf) gives ±inf where the format has infinities;
    formats without them saturate to ±max (FP8 E4M3 to ±448, see the module
    docstring). A value the format has no code for (a negative or zero in
    unsigned E8M0, which has no zero) gives NaN; E8M0 rounds a positive value
    below 2**-127 up to 2**-127, its smallest. Rounding is from the input's exact
    value, never through an intermediate format. With ``workers`` > 1 a large
    float32 array is rounded in chunks on that many threads (same result).
    ``out``: a C-contiguous float64 array of the input's shape to write into and
    return, instead of a new one (a loop rounding many tensors of one shape then
    reuses memory the system has already handed over, as torch's caching allocator does).
    """
    f = get_format(fmt)
    a = _as_float_array(x)
    if out is not None and (
        not isinstance(out, np.ndarray)
        or out.dtype != np.float64
        or out.shape != a.shape
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        raise ValueError(f"out must be a writable C-contiguous float64 array of shape {a.shape}")
    if a.dtype in _EXACT_IN_FLOAT32 and f.float32_grid:
        dst = np.empty(a.shape, np.float64) if out is None else out
        _in_chunks(a, dst, lambda src, d: _grid_quantize(src, d, f), workers)
        return dst
    if a.dtype in _EXACT_IN_FLOAT32 and f.library_rounds:
        dst = np.empty(a.shape, np.float64) if out is None else out
        _in_chunks(a, dst, lambda src, d: _library_quantize(src, d, f), workers)
        return dst
    with np.errstate(invalid="ignore", over="ignore"):
        if a.dtype in _EXACT_IN_FLOAT32 and f.dtype is None and (f.exponent_bits, f.bias) == (8, 127):
            got = _quantize_float32_bits(a.astype(np.float32), f.significand_bits)  # TF32: float32's range
        elif f.dtype == np.dtype(np.float32):
            # IEEE float64 -> float32 conversion is itself a single correct rounding.
            got = a.astype(np.float32).astype(np.float64)
        else:
            got = _quantize_direct(a.astype(np.float64, copy=False), f)
    if out is None:
        return got
    np.copyto(out, got)
    return out


def scalar_rounder(fmt: str | FloatFormat) -> Callable[[float], float]:
    """A function that rounds one Python float to ``fmt`` as :func:`quantize` does, ~20x faster for one value.

    For loops that round one value at a time (accumulating updates). The
    same arithmetic as :func:`_round_unbounded` in plain Python: scaling by
    a power of two is exact and ``round`` ties to even. Zeros, ±inf, NaN and
    overflow go through :func:`quantize`, so those rules live in one place.
    """
    f = get_format(fmt)
    m, emin, top = f.significand_bits, f.emin, f.max
    if not (f.signed and f.has_zero):
        return lambda v: float(quantize(v, f))  # E8M0's missing zero and sign: quantize's rules, one call each

    def rnd(v: float) -> float:
        if v == 0.0 or not math.isfinite(v):
            return float(quantize(v, f))
        a = abs(v)
        binade = max(math.frexp(a)[1] - 1, emin)  # subnormals share the lowest binade's spacing
        shift = m - binade
        r = math.ldexp(round(math.ldexp(a, shift)), -shift)
        if r > top:
            return float(quantize(v, f))
        return math.copysign(r, v)

    return rnd


def cast(x: ArrayLike, fmt: str | FloatFormat, workers: int = 1) -> NDArray[Any]:
    """Store each value in ``fmt``: the array in the format's own numpy dtype, like ``torch.Tensor.to``.

    Same rounding as :func:`quantize` (bit for bit torch's casts on float32
    inputs, FP8 E4M3 saturating; a NaN stays NaN, though the libraries pick
    different NaN bit patterns). TF32 has no storage type of its own: it
    comes back as float32 holding TF32 values. With ``workers`` > 1 a large
    float32 array is cast in chunks on that many threads (same result).
    """
    f = get_format(fmt)
    a = _as_float_array(x)
    if f.dtype is None:
        return quantize(a, f).astype(np.float32)
    if a.dtype not in _EXACT_IN_FLOAT32 or not f.library_rounds:
        with np.errstate(invalid="ignore", over="ignore"):
            return quantize(a, f).astype(f.dtype)  # exact: every value is already in the format
    out = np.empty(a.shape, f.dtype)
    _in_chunks(a, out, lambda src, dst: np.copyto(dst, _library_cast(src, f)), workers)
    return out


def stored_float32(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float32]:
    """``cast(x, fmt).astype(np.float32)`` for float32 ``x``: each value as ``fmt`` stores it, as a float32 (every
    such value is one), bit for bit the same (a NaN stays NaN). Where the format is on the float32 grid (FP16,
    FP8, FP6, FP4) it is rounded in float32 arithmetic (:func:`_grid_quantize`), several times faster than the
    library's cast and back (ml_dtypes takes about 7 ns a value each way for FP8)."""
    f = get_format(fmt)
    a = _as_float_array(x)
    if a.dtype == np.float32 and f.float32_grid:
        out = np.empty(a.shape, np.float32)
        _in_chunks(a, out, lambda src, d: _grid_quantize(src, d, f))
        return out
    return cast(a, f).astype(np.float32)


def round_float32(
    x: NDArray[np.float32], fmt: str | FloatFormat, limit: float | None = None, inplace: bool = False
) -> NDArray[np.float32]:
    """Round float32 values to ``fmt``'s grid in float32 arithmetic, ties to even; for ``fmt.float32_grid`` formats.

    Adding 2**(b + 23 - m) to |x| (b: x's binade, emin at least) leaves float32
    exactly ``m`` fraction bits of x's binade, so the hardware's own
    round-to-nearest-even does the rounding; subtracting it again is exact.
    Several times faster than the library casts (numpy rounds FP16
    subnormals one by one). The top is *not* handled unless ``limit`` is
    given: magnitudes are first clamped to it (saturation; give ``fmt.max``);
    otherwise a magnitude past ``max`` comes back past it (or as inf). NaN
    stays NaN, -0 and the signs are kept. ``x`` is changed only with
    ``inplace`` (a C-contiguous float32 array).
    """
    f = get_format(fmt)
    bits = (x if inplace else np.ascontiguousarray(x, dtype=np.float32)).view(np.uint32)
    sign = bits & np.uint32(0x80000000)
    if inplace:
        magnitude = bits
        magnitude &= np.uint32(0x7FFFFFFF)
    else:
        magnitude = bits & np.uint32(0x7FFFFFFF)
    a = magnitude.view(np.float32)
    if limit is not None:
        np.minimum(a, np.float32(limit), out=a)  # NaN stays NaN
    exp = magnitude & np.uint32(0x7F800000)
    np.clip(exp, np.uint32((f.emin + 127) << 23), np.uint32((f.emax + 128) << 23), out=exp)
    exp += np.uint32((23 - f.significand_bits) << 23)
    magic = exp.view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        a += magic
        a -= magic
    magnitude |= sign
    return magnitude.view(np.float32)


_SCRATCH = threading.local()  # per thread: two uint32 buffers of _CACHE_CHUNK values for _grid_quantize


def _scratch(size: int) -> tuple[NDArray[np.uint32], NDArray[np.uint32]]:
    """This thread's two uint32 buffers, at least ``size`` long: made once, not per piece. A fresh 256 KB array
    per numpy pass can come back from the system each time (glibc maps blocks that size anew once an 80 MB array
    has been freed), which tripled the time of FP16's quantize here."""
    bufs: tuple[NDArray[np.uint32], NDArray[np.uint32]] | None = getattr(_SCRATCH, "bufs", None)
    if bufs is None or bufs[0].size < size:
        bufs = (np.empty(max(size, _CACHE_CHUNK), np.uint32), np.empty(max(size, _CACHE_CHUNK), np.uint32))
        _SCRATCH.bufs = bufs
    return bufs[0][:size], bufs[1][:size]


def _grid_quantize(src: NDArray[Any], dst: NDArray[np.float64], f: FloatFormat) -> None:
    """:func:`round_float32`'s arithmetic, then the top: past ``max`` becomes ±inf, or ±max where the format
    saturates. Written out rather than called, with one magnitude array rounded in place and the sign bits put
    back with an integer ``or`` at the end (numpy's ``copysign`` is a scalar loop, several times slower), in the
    thread's own scratch: the fewest passes over a chunk that stays in cache (see :func:`_in_chunks`)."""
    bits = np.ascontiguousarray(src, dtype=np.float32).view(np.uint32)
    magnitude, exp = _scratch(bits.size)
    np.bitwise_and(bits, np.uint32(0x7FFFFFFF), out=magnitude)
    np.bitwise_and(magnitude, np.uint32(0x7F800000), out=exp)
    np.clip(exp, np.uint32((f.emin + 127) << 23), np.uint32((f.emax + 128) << 23), out=exp)
    exp += np.uint32((23 - f.significand_bits) << 23)
    a, magic = magnitude.view(np.float32), exp.view(np.float32)
    a += magic
    a -= magic
    top = np.float32(f.max)
    if np.fmax.reduce(a) > top:  # fmax passes over NaN; the mask is made only where something is past the top
        a[a > top] = np.float32(np.inf if f.has_inf else f.max)
    np.bitwise_and(bits, np.uint32(0x80000000), out=exp)
    magnitude |= exp
    np.copyto(dst, a.reshape(dst.shape))


def _library_cast(a: NDArray[Any], f: FloatFormat) -> NDArray[Any]:
    """numpy's / ml_dtypes' cast of float32-exact values, with saturation applied first where there is no inf."""
    if not f.has_inf:
        # ml_dtypes gives NaN past E4M3's 464; beyond max every finite value saturates (clip keeps NaN).
        a = np.clip(a, -f.max, f.max)
    return a.astype(f.dtype)


def _library_quantize(src: NDArray[Any], dst: NDArray[np.float64], f: FloatFormat) -> None:
    """:func:`_library_cast` into float64 ``dst``; NaN stays NaN where the format has no NaN code (FP6, FP4)."""
    np.copyto(dst, _library_cast(src, f))
    if f.nan_codes == 0:
        np.copyto(dst, np.nan, where=np.isnan(src))


_CHUNK = 1 << 20  # values per task: big enough to amortise a task, small enough to spread the work
# values per call of ``work`` within a task: its several passes then run over data still in the core's cache
# (64K float32 and float64 values with their scratch, about 2 MB), which made FP16's quantize 2-3x faster
_CACHE_CHUNK = 1 << 16


def _in_chunks(
    src: NDArray[Any], out: NDArray[Any], work: Callable[[NDArray[Any], NDArray[Any]], None], workers: int = 1
) -> None:
    """Apply ``work(src_part, out_part)`` over matching flat chunks, on ``workers`` threads when more than one.

    numpy and ml_dtypes release the GIL in casts and ufuncs, so threads use
    the cores. The pool lives for this call only (the core keeps no threads);
    arrays under two chunks, or one worker, are done inline. Each task calls
    ``work`` on pieces of ``_CACHE_CHUNK`` values, so a work of several numpy
    passes reads each piece from cache rather than memory. Every value is
    rounded on its own, so the result does not depend on ``workers``.
    """
    flat_src, flat_out = np.ascontiguousarray(src).reshape(-1), out.reshape(-1)
    n = flat_src.size

    def part(i: int, size: int) -> None:
        # numpy's error state is per thread: signalling NaNs and overflow are documented results here.
        with np.errstate(invalid="ignore", over="ignore"):
            for j in range(i, min(i + size, n), _CACHE_CHUNK):
                k = min(j + _CACHE_CHUNK, i + size, n)
                work(flat_src[j:k], flat_out[j:k])

    if n < 2 * _CHUNK or workers <= 1:
        part(0, n)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lensa-round") as pool:
        list(pool.map(lambda i: part(i, _CHUNK), range(0, n, _CHUNK)))


def classify(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.str_]:
    """Name what storing each value in ``fmt`` does to it.

    ``"zero"``: it rounds to ±0 (0 itself included). ``"subnormal"``: it is
    kept with fewer significand bits than a normal number. ``"normal"``: it
    keeps full precision. ``"overflow"``: it is beyond the largest finite
    value after rounding (±inf included), so it becomes ±inf, or ±max in a
    format without infinities, which saturates (±448 in FP8 E4M3, ±6 in
    FP4). ``"nan"``: the input is NaN, or the format has no code for it (a
    negative value or zero in unsigned E8M0).
    """
    f = get_format(fmt)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        x64 = _as_float_array(x).astype(np.float64)
        a = np.abs(x64)
        finite = np.isfinite(a)
        r = _round_grid(np.where(finite, a, 0.0), f)
        out = np.full(a.shape, "normal", dtype="<U9")
        out[r < f.smallest_normal] = "subnormal"
        out[r == 0] = "zero"
        out[~finite | (r > f.max)] = "overflow"
        out[_no_code(x64, f)] = "nan"
    return out


def category_shares(x: ArrayLike, fmt: str | FloatFormat) -> dict[str, float]:
    """Fraction (0..1) of the values in each category of :func:`classify`."""
    cats = classify(x, fmt)
    n = max(cats.size, 1)
    return {c: float(np.count_nonzero(cats == c)) / n for c in CATEGORIES}


def spacing(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """Gap between neighbouring values of ``fmt`` where |x| lies (its ULP).

    For |x| in the binade [2**e, 2**(e+1)) this is 2**(e - significand_bits);
    at and below the smallest normal it is the smallest subnormal (so 0 gives
    the smallest subnormal). Beyond ``max`` (and for ±inf) the next value is
    infinite: inf. NaN gives NaN.
    """
    f = get_format(fmt)
    a = np.abs(_as_float_array(x).astype(np.float64))
    with np.errstate(invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(a), a, 0.0))
        binade = np.where(a == 0, f.emin, np.maximum(e - 1, f.emin))
        gap = np.ldexp(1.0, binade - f.significand_bits)
        gap = np.where(a > f.max, np.inf, gap)
        return np.where(np.isnan(a), np.nan, gap)


def relative_error(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """|quantize(x) - x| / |x|: 0 for exact values, 1 (100%) for values lost to 0.

    0 itself has no relative error (0); ±inf stored as ±inf is exact (0);
    overflow of a finite value gives inf; NaN, and a value the format has
    no code for (0 or a negative in E8M0), gives NaN.
    """
    a = _as_float_array(x).astype(np.float64)
    q = quantize(a, fmt)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(q - a) / np.abs(a)
        err = np.where((a == 0) & ~np.isnan(q), 0.0, err)  # E8M0 has no zero: NaN there
        err = np.where(np.isinf(a) & (q == a), 0.0, err)
    return err


# --- bit-level view -----------------------------------------------------------


def to_bits(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.int64]:
    """The format's bit pattern (an unsigned integer code) for each value.

    Values are first rounded with :func:`quantize`. NaN (and a value the
    format has no code for) gives ``fmt.nan_code``: the canonical quiet NaN
    with the sign bit clear, or -0's code in FP6 and FP4, as ml_dtypes.
    """
    f = get_format(fmt)
    q = quantize(x, f)
    m = f.significand_bits
    with np.errstate(invalid="ignore"):
        sign = np.where(np.signbit(q), f.sign_bit, 0).astype(np.int64)
        a = np.abs(q)
        finite = np.isfinite(a)
        af = np.where(finite, a, 0.0)
        _, e = np.frexp(af)
        normal = af >= f.smallest_normal
        exp_field = np.where(normal, e - 1 + f.bias, 0).astype(np.int64)
        frac = np.where(
            normal,
            np.ldexp(af, m - (e - 1)) - (1 << m),
            np.ldexp(af, m - f.emin),
        ).astype(np.int64)
        code = sign | (exp_field << m) | frac
        if f.inf_code is not None:
            code = np.where(np.isinf(a), sign | f.inf_code, code)
        code = np.where(np.isnan(a), f.nan_code, code)
    return code


def from_bits(code: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """The value (float64) that each bit pattern stands for in ``fmt``.

    Codes are taken modulo 2**bits, so any integer is some pattern.
    """
    f = get_format(fmt)
    m = f.significand_bits
    c = np.asarray(code, dtype=np.int64) & ((1 << f.bits) - 1)
    p = c & ~np.int64(f.sign_bit)  # the magnitude's code
    exp_field = p >> m
    frac = p & ((1 << m) - 1)
    with np.errstate(over="ignore"):
        mag = np.where(
            (exp_field == 0) & f.has_subnormals,
            np.ldexp(frac.astype(np.float64), f.emin - m),
            np.ldexp(1.0 + frac / float(1 << m), (exp_field - f.bias).astype(np.int64)),
        )
    if f.inf_code is not None:
        mag = np.where(p == f.inf_code, np.inf, mag)
    mag = np.where(p >= f.first_nan_code, np.nan, mag)
    return np.where((c & f.sign_bit) != 0, -mag, mag)


def code_of(stored: float, fmt: str | FloatFormat) -> int:
    """The code of one value already in ``fmt``: :func:`to_bits` for a single float, in plain Python.

    For one value plain Python is far cheaper than numpy, and the inspector
    encodes a value and its neighbours on every keystroke. ``stored`` must
    be a value of the format (as :func:`quantize` returns it); it is not
    rounded here. NaN gives ``fmt.nan_code``; -0 and -inf have the sign bit.
    """
    f = get_format(fmt)
    m = f.significand_bits
    if math.isnan(stored):
        return f.nan_code
    sign = f.sign_bit if math.copysign(1.0, stored) < 0 else 0
    a = abs(stored)
    if math.isinf(a):
        return sign | (f.inf_code if f.inf_code is not None else f.max_code)
    if a < f.smallest_normal:  # subnormals and zero: exponent field 0, no implicit bit
        return sign | int(math.ldexp(a, m - f.emin))
    e = math.frexp(a)[1] - 1  # a = 1.f * 2**e
    return sign | ((e + f.bias) << m) | (int(math.ldexp(a, m - e)) - (1 << m))


def value_of(code: int, fmt: str | FloatFormat) -> float:
    """The value of one code in ``fmt``: :func:`from_bits` for a single int, in plain Python.

    As there, the code is taken modulo 2**bits.
    """
    f = get_format(fmt)
    m = f.significand_bits
    code &= (1 << f.bits) - 1
    p = code & ~f.sign_bit
    exponent_field, frac = p >> m, p & ((1 << m) - 1)
    if p >= f.first_nan_code:
        mag = math.nan
    elif p == f.inf_code:
        mag = math.inf
    elif exponent_field == 0 and f.has_subnormals:
        mag = math.ldexp(frac, f.emin - m)
    else:
        mag = math.ldexp((1 << m) | frac, exponent_field - f.bias - m)
    return -mag if code & f.sign_bit else mag


def _field(value: int, width: int) -> str:
    """``value`` as ``width`` binary digits; a field of no bits (E8M0's significand, its sign) is ""."""
    return format(value, f"0{width}b") if width else ""


@dataclass(frozen=True)
class BitFields:
    """The three fields of a stored value; ``exponent`` is the biased field."""

    sign: int
    exponent: int
    significand: int
    fmt: FloatFormat

    @property
    def code(self) -> int:
        f = self.fmt
        return (
            (self.sign << (f.exponent_bits + f.significand_bits))
            | (self.exponent << f.significand_bits)
            | self.significand
        )

    @property
    def unbiased_exponent(self) -> int:
        """The power of two the stored value is scaled by (emin for subnormals)."""
        return self.fmt.emin if self.exponent == 0 else self.exponent - self.fmt.bias

    def bit_string(self) -> str:
        """The bits as ``"s eeeee mmmmmmmmmm"`` groups (fields of no bits left out)."""
        f = self.fmt
        parts = (
            _field(self.sign, int(f.signed)),
            _field(self.exponent, f.exponent_bits),
            _field(self.significand, f.significand_bits),
        )
        return " ".join(p for p in parts if p)


def fields(x: float, fmt: str | FloatFormat) -> BitFields:
    """Sign, biased exponent and stored significand of one value stored in ``fmt``."""
    f = get_format(fmt)
    code = int(to_bits(np.float64(x), f))
    m, eb = f.significand_bits, f.exponent_bits
    return BitFields(
        sign=int(code & f.sign_bit != 0),
        exponent=(code >> m) & ((1 << eb) - 1),
        significand=code & ((1 << m) - 1),
        fmt=f,
    )


def next_up(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """The smallest value of ``fmt`` strictly greater than quantize(x).

    At ``max`` and beyond there is no larger finite value: inf (also for
    formats without an inf of their own). NaN gives NaN.
    """
    f = get_format(fmt)
    q = quantize(x, f)
    code = to_bits(q, f)
    neg = (code & f.sign_bit) != 0
    # -0 -> +smallest subnormal; negatives move toward zero; positives away.
    nxt = np.where(neg, code - 1, code + 1)
    nxt = np.where(q == 0, 1, nxt)
    out = from_bits(nxt, f)
    with np.errstate(invalid="ignore"):
        out = np.where(q >= f.max, np.inf, out)
        out = np.where(q == -np.inf, -f.max, out)
        out = np.where(np.isnan(q), np.nan, out)
    return out


def next_down(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """The largest value of ``fmt`` strictly less than quantize(x) (mirror of next_up).

    Below the smallest value of an unsigned format (E8M0's 2**-127) there is none: -inf.
    """
    f = get_format(fmt)
    if f.signed:
        return -next_up(-np.asarray(quantize(x, f)), f)
    q = quantize(x, f)
    code = to_bits(q, f)
    out = from_bits(np.maximum(code - 1, 0), f)
    with np.errstate(invalid="ignore"):
        out = np.where(code == 0, -np.inf, out)
        out = np.where(q > f.max, f.max, out)
        return np.where(np.isnan(q), np.nan, out)


def representable_between(lo: float, hi: float, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """Every value of ``fmt`` in the closed interval [lo, hi], ascending (-0 left out).

    At most 100 000 values; a wider interval, or a non-finite or reversed
    one, raises ValueError.
    """
    f = get_format(fmt)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi < lo:
        raise ValueError("need finite lo <= hi")
    hi = min(hi, f.max)
    lo = max(lo, -f.max if f.signed else 0.0)
    parts = []
    if lo < 0:  # negative codes grow as the magnitude grows: walk them from the top
        neg_hi = min(hi, -f.smallest_subnormal)
        if neg_hi >= lo:
            parts.append(-_positive_grid(-neg_hi, -lo, f)[::-1])
    if lo <= 0 <= hi and f.has_zero:
        parts.append(np.zeros(1))
    pos_lo = max(lo, f.smallest_subnormal)
    if hi >= pos_lo:
        parts.append(_positive_grid(pos_lo, hi, f))
    return np.concatenate(parts) if parts else np.zeros(0)


def _positive_grid(lo: float, hi: float, f: FloatFormat) -> NDArray[np.float64]:
    """Values of ``f`` in [lo, hi] for smallest <= lo <= hi <= max: positive codes are monotone."""
    first = int(to_bits(lo, f))
    first += value_of(first, f) < lo
    last = int(to_bits(hi, f))
    last -= value_of(last, f) > hi
    if last - first >= 100_000:
        raise ValueError("too many values in that interval")
    return from_bits(np.arange(first, last + 1), f)


# --- what steps 2 and 5 say about a sample ---------------------------------------------------------------

Fp16AgainstBf16 = Literal["fp16_overflows", "fp16_loses", "both_hold"]


def largest_magnitude(x: ArrayLike) -> float:
    """The largest |value| (a tensor's amax); 0 for an empty array; NaN is ignored unless all are NaN."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    if a.size == 0:
        return 0.0
    return float(np.nanmax(a)) if not np.all(np.isnan(a)) else math.nan


def mean_relative_error(x: ArrayLike, fmt: str | FloatFormat) -> float:
    """The mean of :func:`relative_error` over ``x`` (0..1, inf if a value overflows to inf; NaN if empty)."""
    errors = relative_error(x, fmt)
    return float(errors.mean()) if errors.size else math.nan


def most_common_category(shares: dict[str, float], among: tuple[str, ...] = ("zero", "subnormal", "normal")) -> str:
    """The category of ``among`` with the largest share (the first of them on a tie: all-zero shares give
    ``among[0]``)."""
    return max(among, key=lambda c: shares[c])


def fp16_against_bf16(fp16_overflow_share: float, fp16_error: float, bf16_error: float) -> Fp16AgainstBf16:
    """Step 5's verdict: FP16 overflows some values, or loses more (a larger mean relative error), or both hold."""
    if fp16_overflow_share > 0:
        return "fp16_overflows"
    if fp16_error > bf16_error:
        return "fp16_loses"
    return "both_hold"
