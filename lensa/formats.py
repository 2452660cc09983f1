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

Overflow follows the format: FP32, TF32, BF16, FP16 and FP8 E5M2 give ±inf.
FP8 E4M3 (the ``e4m3fn`` variant: no infinity, and NaN only at S.1111.111,
0x7F and 0xFF) *saturates*:
every magnitude above 464 (the midpoint between 448 and the next power-of-two
step), ±inf included, becomes ±448. That is torch's cast and the convention of
FP8 training libraries, which clamp after scaling; ml_dtypes would give NaN.
NaN stays NaN in every format.

Arrays go through :func:`quantize`, :func:`to_bits` and :func:`from_bits`.
One value at a time, where numpy's per-call cost would dominate, goes
through their plain-Python counterparts :func:`scalar_rounder`,
:func:`code_of` and :func:`value_of`, tested against them at every code
point and midpoint. (:mod:`lensa.exact` rounds a typed number's exact
rational value, which no float64 path can hold.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, NDArray

Category = Literal["zero", "subnormal", "normal", "overflow", "nan"]
CATEGORIES: tuple[Category, ...] = ("zero", "subnormal", "normal", "overflow", "nan")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format.

    ``significand_bits`` counts the stored fraction bits, without the implicit
    leading 1 (10 for FP16), as ``ml_dtypes.finfo(...).nmant`` does.
    ``nan_style`` is ``"ieee"`` (the all-ones exponent holds inf and NaN) or
    ``"fn"`` (finite-only, as FP8 E4M3: the all-ones exponent holds normal
    numbers and only the all-ones exponent and fraction, S.1111.111 with
    either sign, is NaN).
    """

    name: str
    label: str
    exponent_bits: int
    significand_bits: int
    bias: int
    has_inf: bool
    nan_style: Literal["ieee", "fn"]
    overflow: Literal["inf", "saturate"]
    dtype_name: str | None  # numpy / ml_dtypes dtype used for fast casts, if any

    @property
    def bits(self) -> int:
        """Total width in bits: sign + exponent + stored significand."""
        return 1 + self.exponent_bits + self.significand_bits

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        top = (1 << self.exponent_bits) - 1
        return (top - 1 if self.nan_style == "ieee" else top) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        m = self.significand_bits
        # IEEE: all-ones fraction; "fn": all-ones fraction is NaN, so one less.
        top_fraction = (1 << m) - (1 if self.nan_style == "ieee" else 2)
        return float(np.ldexp(1.0 + top_fraction / (1 << m), self.emax))

    @property
    def smallest_normal(self) -> float:
        """Smallest positive normal value, 2**emin."""
        return float(np.ldexp(1.0, self.emin))

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value, 2**(emin - significand_bits)."""
        return float(np.ldexp(1.0, self.emin - self.significand_bits))

    @property
    def eps(self) -> float:
        """Gap between 1 and the next larger value, 2**-significand_bits."""
        return float(np.ldexp(1.0, -self.significand_bits))

    @property
    def overflow_threshold(self) -> float:
        """Smallest magnitude that no longer rounds to ``max`` (ties included)."""
        return self.max + float(np.ldexp(1.0, self.emax - self.significand_bits - 1))

    @cached_property
    def dtype(self) -> np.dtype | None:
        """The numpy dtype that stores this format, or None (TF32 has none)."""
        if self.dtype_name is None:
            return None
        return np.dtype(getattr(ml_dtypes, self.dtype_name, None) or self.dtype_name)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", "FP32", 8, 23, 127, True, "ieee", "inf", "float32"),
        # TF32 is a tensor-core mode: FP32's exponent with FP16's significand.
        FloatFormat("tf32", "TF32", 8, 10, 127, True, "ieee", "inf", None),
        FloatFormat("bf16", "BF16", 8, 7, 127, True, "ieee", "inf", "bfloat16"),
        FloatFormat("fp16", "FP16", 5, 10, 15, True, "ieee", "inf", "float16"),
        FloatFormat("fp8_e4m3", "FP8 E4M3", 4, 3, 7, False, "fn", "saturate", "float8_e4m3fn"),
        FloatFormat("fp8_e5m2", "FP8 E5M2", 5, 2, 15, True, "ieee", "inf", "float8_e5m2"),
    )
}


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


def _quantize_direct(x: NDArray[np.float64], f: FloatFormat) -> NDArray[np.float64]:
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(x)
        finite = np.isfinite(a)
        r = _round_unbounded(np.where(finite, a, 0.0), f)
        over = ~finite | (r > f.max)
        top = np.inf if f.overflow == "inf" else f.max
        r = np.where(over, top, r)
        r = np.copysign(r, x)
        return np.where(np.isnan(x), np.nan, r)


def _quantize_tf32_bits(x32: NDArray[np.float32]) -> NDArray[np.float64]:
    # Round float32 bits to 10 fraction bits, ties to even; a carry into the
    # exponent is exactly the next binade (or inf past the top), as it should be.
    shape = np.shape(x32)  # ascontiguousarray turns a 0-d array into 1-d; give the caller's shape back
    bits = np.ascontiguousarray(x32).view(np.uint32)
    keep_odd = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0x0FFF) + keep_odd) & np.uint32(0xFFFFE000)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    out = np.where(special, bits, rounded).view(np.float32)
    return out.astype(np.float64).reshape(shape)


def quantize(x: ArrayLike, fmt: str | FloatFormat, workers: int = 1) -> NDArray[np.float64]:
    """Round each value to the nearest value of ``fmt``, ties to even.

    Returns float64 values of the same shape. 0 and -0 are kept; NaN stays
    NaN; overflow (and ±inf) gives ±inf, except FP8 E4M3 which saturates to
    ±448 (see the module docstring). Rounding is from the input's exact
    value, never through an intermediate format. With ``workers`` > 1 a large
    float32 array is rounded in chunks on that many threads (same result).
    """
    f = get_format(fmt)
    a = _as_float_array(x)
    if a.dtype in _EXACT_IN_FLOAT32 and f.name != "tf32":
        out = np.empty(a.shape, np.float64)
        _in_chunks(a, out, lambda src, dst: np.copyto(dst, _library_cast(src, f)), workers)
        return out
    with np.errstate(invalid="ignore", over="ignore"):
        if a.dtype in _EXACT_IN_FLOAT32:
            return _quantize_tf32_bits(a.astype(np.float32))
        if f.name == "fp32":
            # IEEE float64 -> float32 conversion is itself a single correct rounding.
            return a.astype(np.float32).astype(np.float64)
        return _quantize_direct(a.astype(np.float64, copy=False), f)


def scalar_rounder(fmt: str | FloatFormat) -> Callable[[float], float]:
    """A function that rounds one Python float to ``fmt`` as :func:`quantize` does, ~20x faster for one value.

    For loops that round one value at a time (accumulating updates). The
    same arithmetic as :func:`_round_unbounded` in plain Python: scaling by
    a power of two is exact and ``round`` ties to even. Zeros, ±inf, NaN and
    overflow go through :func:`quantize`, so those rules live in one place.
    """
    f = get_format(fmt)
    m, emin, top = f.significand_bits, f.emin, f.max

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
    if a.dtype not in _EXACT_IN_FLOAT32:
        with np.errstate(invalid="ignore", over="ignore"):
            return quantize(a, f).astype(f.dtype)  # exact: every value is already in the format
    out = np.empty(a.shape, f.dtype)
    _in_chunks(a, out, lambda src, dst: np.copyto(dst, _library_cast(src, f)), workers)
    return out


def _library_cast(a: NDArray[Any], f: FloatFormat) -> NDArray[Any]:
    """numpy's / ml_dtypes' cast of float32-exact values, with E4M3's saturation applied first."""
    if f.overflow == "saturate":
        # The library gives NaN past 464; beyond max every finite value saturates (clip keeps NaN).
        a = np.clip(a, -f.max, f.max)
    return a.astype(f.dtype)


_CHUNK = 1 << 20  # values per task: big enough to amortise a task, small enough to spread the work


def _in_chunks(
    src: NDArray[Any], out: NDArray[Any], work: Callable[[NDArray[Any], NDArray[Any]], None], workers: int = 1
) -> None:
    """Apply ``work(src_part, out_part)`` over matching flat chunks, on ``workers`` threads when more than one.

    numpy and ml_dtypes release the GIL in casts and ufuncs, so threads use
    the cores. The pool lives for this call only (the core keeps no threads);
    arrays under two chunks, or one worker, are done inline. Every value is
    rounded on its own, so the result does not depend on ``workers``.
    """
    flat_src, flat_out = np.ascontiguousarray(src).reshape(-1), out.reshape(-1)
    n = flat_src.size

    def part(i: int, size: int) -> None:
        # numpy's error state is per thread: signalling NaNs and overflow are documented results here.
        with np.errstate(invalid="ignore", over="ignore"):
            work(flat_src[i : i + size], flat_out[i : i + size])

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
    value after rounding (±inf included), so it becomes ±inf, or ±448 in
    FP8 E4M3, which saturates. ``"nan"``: the input is NaN.
    """
    f = get_format(fmt)
    a = np.abs(_as_float_array(x).astype(np.float64))
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(a)
        r = _round_unbounded(np.where(finite, a, 0.0), f)
        out = np.full(a.shape, "normal", dtype="<U9")
        out[r < f.smallest_normal] = "subnormal"
        out[r == 0] = "zero"
        out[~finite | (r > f.max)] = "overflow"
        out[np.isnan(a)] = "nan"
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
    overflow of a finite value gives inf; NaN gives NaN.
    """
    a = _as_float_array(x).astype(np.float64)
    q = quantize(a, fmt)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(q - a) / np.abs(a)
        err = np.where(a == 0, 0.0, err)
        err = np.where(np.isinf(a) & (q == a), 0.0, err)
    return err


# --- bit-level view -----------------------------------------------------------


def _nan_code(f: FloatFormat) -> int:
    e, m = f.exponent_bits, f.significand_bits
    if f.nan_style == "fn":
        return (1 << (e + m)) - 1  # S.1111.111
    return (((1 << e) - 1) << m) | (1 << (m - 1))  # quiet NaN


def to_bits(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.int64]:
    """The format's bit pattern (an unsigned integer code) for each value.

    Values are first rounded with :func:`quantize`. NaN gives the format's
    canonical quiet NaN with the sign bit clear.
    """
    f = get_format(fmt)
    q = quantize(x, f)
    m = f.significand_bits
    with np.errstate(invalid="ignore"):
        sign = np.signbit(q).astype(np.int64)
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
        code = (sign << (f.exponent_bits + m)) | (exp_field << m) | frac
        inf_code = (sign << (f.exponent_bits + m)) | (((1 << f.exponent_bits) - 1) << m)
        code = np.where(np.isinf(a), inf_code, code)
        code = np.where(np.isnan(a), _nan_code(f), code)
    return code


def from_bits(code: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """The value (float64) that each bit pattern stands for in ``fmt``.

    Codes are taken modulo 2**bits, so any integer is some pattern.
    """
    f = get_format(fmt)
    m, eb = f.significand_bits, f.exponent_bits
    c = np.asarray(code, dtype=np.int64) & ((1 << f.bits) - 1)
    sign = (c >> (eb + m)) & 1
    exp_field = (c >> m) & ((1 << eb) - 1)
    frac = c & ((1 << m) - 1)
    top = (1 << eb) - 1
    mag = np.where(
        exp_field == 0,
        np.ldexp(frac.astype(np.float64), f.emin - m),
        np.ldexp(1.0 + frac / float(1 << m), (exp_field - f.bias).astype(np.int64)),
    )
    if f.nan_style == "ieee":
        mag = np.where(exp_field == top, np.where(frac == 0, np.inf, np.nan), mag)
    else:
        mag = np.where((exp_field == top) & (frac == (1 << m) - 1), np.nan, mag)
    return np.where(sign == 1, -mag, mag)


def code_of(stored: float, fmt: str | FloatFormat) -> int:
    """The code of one value already in ``fmt``: :func:`to_bits` for a single float, in plain Python.

    For one value plain Python is far cheaper than numpy, and the inspector
    encodes a value and its neighbours on every keystroke. ``stored`` must
    be a value of the format (as :func:`quantize` returns it); it is not
    rounded here. NaN gives the canonical quiet NaN with the sign bit clear;
    -0 and -inf have the sign bit.
    """
    f = get_format(fmt)
    m, eb = f.significand_bits, f.exponent_bits
    if math.isnan(stored):
        return _nan_code(f)
    sign = (1 << (eb + m)) if math.copysign(1.0, stored) < 0 else 0
    a = abs(stored)
    if math.isinf(a):
        return sign | (((1 << eb) - 1) << m)
    if a < f.smallest_normal:  # subnormals and zero: exponent field 0, no implicit bit
        return sign | int(math.ldexp(a, m - f.emin))
    e = math.frexp(a)[1] - 1  # a = 1.f * 2**e
    return sign | ((e + f.bias) << m) | (int(math.ldexp(a, m - e)) - (1 << m))


def value_of(code: int, fmt: str | FloatFormat) -> float:
    """The value of one code in ``fmt``: :func:`from_bits` for a single int, in plain Python.

    As there, the code is taken modulo 2**bits.
    """
    f = get_format(fmt)
    m, eb = f.significand_bits, f.exponent_bits
    top = (1 << eb) - 1
    code &= (1 << f.bits) - 1
    negative = (code >> (eb + m)) & 1
    exponent_field = (code >> m) & top
    frac = code & ((1 << m) - 1)
    if f.nan_style == "ieee" and exponent_field == top:
        mag = math.nan if frac else math.inf
    elif f.nan_style == "fn" and exponent_field == top and frac == (1 << m) - 1:
        mag = math.nan
    elif exponent_field == 0:
        mag = math.ldexp(frac, f.emin - m)
    else:
        mag = math.ldexp((1 << m) | frac, exponent_field - f.bias - m)
    return -mag if negative else mag


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
        """The bits as ``"s eeeee mmmmmmmmmm"`` groups."""
        f = self.fmt
        return " ".join(
            (
                str(self.sign),
                format(self.exponent, f"0{f.exponent_bits}b"),
                format(self.significand, f"0{f.significand_bits}b"),
            )
        )


def fields(x: float, fmt: str | FloatFormat) -> BitFields:
    """Sign, biased exponent and stored significand of one value stored in ``fmt``."""
    f = get_format(fmt)
    code = int(to_bits(np.float64(x), f))
    m, eb = f.significand_bits, f.exponent_bits
    return BitFields(
        sign=(code >> (eb + m)) & 1,
        exponent=(code >> m) & ((1 << eb) - 1),
        significand=code & ((1 << m) - 1),
        fmt=f,
    )


def next_up(x: ArrayLike, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """The smallest value of ``fmt`` strictly greater than quantize(x).

    At ``max`` and beyond there is no larger finite value: inf (also for
    FP8 E4M3, which has no inf of its own). NaN gives NaN.
    """
    f = get_format(fmt)
    q = quantize(x, f)
    code = to_bits(q, f)
    sign_bit = 1 << (f.bits - 1)
    neg = (code & sign_bit) != 0
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
    """The largest value of ``fmt`` strictly less than quantize(x) (mirror of next_up)."""
    return -next_up(-np.asarray(quantize(x, fmt)), fmt)


def representable_between(lo: float, hi: float, fmt: str | FloatFormat) -> NDArray[np.float64]:
    """Every value of ``fmt`` in the closed interval [lo, hi], ascending (-0 left out).

    At most 100 000 values; a wider interval, or a non-finite or reversed
    one, raises ValueError.
    """
    f = get_format(fmt)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi < lo:
        raise ValueError("need finite lo <= hi")
    hi = min(hi, f.max)
    lo = max(lo, -f.max)
    parts = []
    if lo < 0:  # negative codes grow as the magnitude grows: walk them from the top
        neg_hi = min(hi, -f.smallest_subnormal)
        if neg_hi >= lo:
            parts.append(-_positive_grid(-neg_hi, -lo, f)[::-1])
    if lo <= 0 <= hi:
        parts.append(np.zeros(1))
    pos_lo = max(lo, f.smallest_subnormal)
    if hi >= pos_lo:
        parts.append(_positive_grid(pos_lo, hi, f))
    return np.concatenate(parts) if parts else np.zeros(0)


def _positive_grid(lo: float, hi: float, f: FloatFormat) -> NDArray[np.float64]:
    """Values of ``f`` in [lo, hi] for 0 < lo <= hi <= max: positive codes are monotone."""
    first = int(to_bits(float(next_up(float(next_down(lo, f)), f)), f))
    last = int(to_bits(float(next_down(float(next_up(hi, f)), f)), f))
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
