"""The format inspector's report: one typed number, seen through every format.

A learner types a number; for each format of :data:`lensa.numerics.formats.FORMATS`
the inspector shows what the format stores, bit by bit. The typed number is
read and rounded exactly by :mod:`lensa.numerics.exact`; this module turns the stored
value into the report a page shows.

Public API
----------
``inspect(parsed, fmt) -> FormatReport`` / ``inspect_all(parsed) -> list[FormatReport]``
    What one format (or every format, in FORMATS order) stores.
``flip_bit(source, fmt, bit_index) -> float`` / ``flip_bits(source, fmt, bit_indices)``
    The value whose code is the stored code with one bit (or several) flipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from lensa.numerics.exact import Parsed, exact_decimal, parse_exact, round_exact_overflow
from lensa.numerics.formats import FORMATS, BitFields, Category, FloatFormat, code_of, get_format, value_of

__all__ = ["FieldBits", "FormatReport", "field_bits", "flip_bit", "flip_bits", "inspect", "inspect_all", "nan_cast"]


@dataclass(frozen=True)
class FormatReport:
    """What one format stores for one typed number.

    ``stored`` is the float64 holding the stored value and ``stored_exact``
    its exact decimal (:func:`exact_decimal`); ``is_exact`` says it equals
    the typed value (zeros, and ±inf stored as ±inf, included; NaN never).
    ``code`` is the bit pattern (NaN: the format's canonical quiet NaN, sign
    clear), split into ``sign``, ``exponent_field`` (biased) and
    ``significand_field`` (stored fraction bits), with the same as bit
    strings. ``exponent`` is the unbiased exponent (emin for subnormals and
    zeros) and ``significand`` the value with its leading bit (1.f for
    normals, 0.f for subnormals), so that
    ``stored == ±significand * 2**exponent``; both are None for inf and NaN.

    ``category`` is as :func:`lensa.numerics.formats.classify`, decided from the exact
    value (E4M3's saturation to 448 is ``"overflow"``). ``relative_error``
    is |stored - x| / |x| computed exactly, then rounded to float64: 0 when
    exact and for x = ±0 and ±inf stored as ±inf; 1.0 when a nonzero x
    rounds to 0 and for ±inf saturated to ±448 (the limit; 448 is nothing
    next to infinity, where ``lensa.numerics.formats.relative_error`` says NaN); inf
    when a finite x overflows to inf; NaN for NaN. ``abs_error`` is
    |stored - x| as a float64 (inf where it is beyond float64, NaN for NaN
    and 0 for ±inf stored as ±inf).

    ``below`` and ``above`` are the neighbouring values of the format (next
    code down / up, -0 skipped: both zeros have ±smallest subnormal as
    neighbours). Past the largest finite value the next code is ±inf where the
    format has one; where there is no next value (above +inf, below -inf,
    beyond E4M3's ±448, or for NaN) it is None. ``gap_below`` and
    ``gap_above`` are the distances to them, for a finite stored value only
    (None otherwise, or when that neighbour is None); they differ at a power
    of two, where the spacing changes.
    """

    name: str
    label: str
    parsed: Parsed
    stored: float
    stored_exact: str
    is_exact: bool
    category: Category
    relative_error: float
    abs_error: float
    code: int
    sign: int
    exponent_field: int
    significand_field: int
    sign_str: str
    exponent_str: str
    significand_str: str
    exponent: int | None
    significand: float | None
    below: float | None
    above: float | None
    gap_below: float | None
    gap_above: float | None

    @property
    def fmt(self) -> FloatFormat:
        return FORMATS[self.name]

    @property
    def bit_string(self) -> str:
        """The bits as ``"s eeeee mmmmmmmmmm"`` groups (E8M0's missing sign and significand left out)."""
        return " ".join(p for p in (self.sign_str, self.exponent_str, self.significand_str) if p)

    @property
    def code_hex(self) -> str:
        """The code in hex, zero-padded to the format's width (``0x2E66``)."""
        return f"0x{self.code:0{(self.fmt.bits + 3) // 4}X}"

    @property
    def fields(self) -> BitFields:
        return BitFields(self.sign, self.exponent_field, self.significand_field, self.fmt)

    @property
    def no_nan(self) -> bool:
        """NaN typed into a format that has no NaN code (FP6, FP4): nothing stores it, and ``code`` is only
        the stand-in :attr:`lensa.numerics.formats.FloatFormat.nan_code` (-0's), not a NaN a page may show as one."""
        return self.parsed.is_nan and self.fmt.nan_codes == 0


def nan_cast(fmt: str | FloatFormat) -> FormatReport:
    """What ml_dtypes's cast of a NaN (Python's, sign bit clear) gives in ``fmt``, as a report.

    The OCP MX spec (v1.0) gives FP6 and FP4 no NaN code and leaves converting a NaN to the implementation;
    ml_dtypes gives a zero there (-0 for this NaN), which is what a learner who casts one meets.
    """
    f = get_format(fmt)
    if f.dtype is None:
        raise ValueError(f"{f.label} has no ml_dtypes type")
    cast = float(np.array([math.nan]).astype(f.dtype)[0])
    return inspect(Parsed.from_float(cast), f)


def _errors(parsed: Parsed, stored: float) -> tuple[float, float]:
    """(relative, absolute) error of ``stored`` against the exact typed value; see FormatReport."""
    if parsed.is_nan or math.isnan(stored):  # NaN, or no code for it (a negative or zero in E8M0)
        return math.nan, math.nan
    if parsed.special is not None:  # ±inf: kept exactly, or saturated (E4M3)
        return (0.0, 0.0) if math.isinf(stored) else (1.0, math.inf)
    x = parsed.value
    assert x is not None
    if math.isinf(stored):
        return math.inf, math.inf
    diff = abs(Fraction(stored) - x)
    try:
        absolute = float(diff)
    except OverflowError:  # only the "huge" stand-in saturated in E4M3 gets here
        absolute = math.inf
    if x == 0:
        return 0.0, absolute
    try:
        relative = float(diff / abs(x))
    except OverflowError:  # E8M0 lifts a tiny value to 2**-127: far more than float64's largest times too big
        relative = math.inf
    return relative, absolute


def _above(stored: float, f: FloatFormat) -> float | None:
    """The next value up by code (-0 skipped); None past +inf, past E4M3's 448 and for NaN."""
    if math.isnan(stored) or stored == math.inf:
        return None
    if stored == 0:
        return f.smallest_subnormal
    if stored == f.max:  # the code after max is inf, or a NaN (E4M3), or FP4's and FP6's sign bit: nothing
        return math.inf if f.has_inf else None
    if stored > 0:
        # Positive codes grow with the value.
        nxt = value_of(code_of(stored, f) + 1, f)
        return None if math.isnan(nxt) else nxt
    if stored == -math.inf:
        return -f.max
    # Negative: one code less is one step smaller in magnitude; the step after -smallest is 0, not -0.
    return -value_of(code_of(-stored, f) - 1, f) + 0.0


def _below(stored: float, f: FloatFormat) -> float | None:
    """The next value down: the mirror image of :func:`_above`."""
    if not f.signed:  # E8M0: one code less, none below the smallest (nor for NaN)
        if math.isnan(stored) or code_of(stored, f) == 0:
            return None
        return value_of(code_of(stored, f) - 1, f)
    up = _above(-stored, f)
    return None if up is None else -up + 0.0


def inspect(parsed: Parsed | str, fmt: str | FloatFormat) -> FormatReport:
    """What ``fmt`` stores for the typed number; a string is parsed first (ParseError if it is not a number)."""
    if isinstance(parsed, str):
        parsed = parse_exact(parsed)
    f = get_format(fmt)
    stored, overflow = round_exact_overflow(parsed, f)
    code = code_of(stored, f)
    m, eb = f.significand_bits, f.exponent_bits
    sign = int(code & f.sign_bit != 0)
    exponent_field = (code >> m) & ((1 << eb) - 1)
    significand_field = code & ((1 << m) - 1)

    if math.isnan(stored):
        category: Category = "nan"
    elif overflow:
        category = "overflow"
    elif stored == 0:
        category = "zero"
    elif abs(stored) < f.smallest_normal:
        category = "subnormal"
    else:
        category = "normal"

    exponent: int | None = None
    significand: float | None = None
    if math.isfinite(stored):
        exponent = f.emin if exponent_field == 0 else exponent_field - f.bias
        lead = 0 if exponent_field == 0 and f.has_subnormals else 1 << m
        significand = math.ldexp(lead + significand_field, -m)

    relative, absolute = _errors(parsed, stored)
    below, above = _below(stored, f), _above(stored, f)
    finite = math.isfinite(stored)
    return FormatReport(
        name=f.name,
        label=f.label,
        parsed=parsed,
        stored=stored,
        stored_exact=exact_decimal(stored),
        is_exact=absolute == 0,  # ±inf stored as ±inf counts; NaN never does
        category=category,
        relative_error=relative,
        abs_error=absolute,
        code=code,
        sign=sign,
        exponent_field=exponent_field,
        significand_field=significand_field,
        sign_str=str(sign) if f.signed else "",  # E8M0 has no sign bit, nor significand bits
        exponent_str=format(exponent_field, f"0{eb}b"),
        significand_str=format(significand_field, f"0{m}b") if m else "",
        exponent=exponent,
        significand=significand,
        below=below,
        above=above,
        gap_below=stored - below if finite and below is not None else None,
        gap_above=above - stored if finite and above is not None else None,
    )


def inspect_all(parsed: Parsed | str) -> list[FormatReport]:
    """:func:`inspect` for every format, in the order of ``lensa.numerics.formats.FORMATS``."""
    if isinstance(parsed, str):
        parsed = parse_exact(parsed)
    return [inspect(parsed, f) for f in FORMATS.values()]


def flip_bit(source: FormatReport | int, fmt: str | FloatFormat | None, bit_index: int) -> float:
    """The value whose code is ``source``'s code with bit ``bit_index`` flipped (bit 0 = least significant).

    ``source`` is a report (``fmt`` may then be None; if given it must be the
    report's format) or a code in ``fmt``. The top bit is the sign: flipping
    it negates (0 becomes -0). Flipping the same bit twice gives back the
    code, so the value too, except where a flip lands on a NaN code: NaN
    comes back, and NaN's code is not kept. Raises ValueError for a bit
    index or code outside the format's width.
    """
    return flip_bits(source, fmt, (bit_index,))


@dataclass(frozen=True)
class FieldBits:
    """One field of a report's code as the inspector draws it: its bits, top first, and each one's bit number.

    Bit numbers count down from the sign bit (``bits - 1``) to the last significand bit (0), as in the code,
    so ``numbers[i]`` is the bit that character ``i`` of ``bits`` shows.
    """

    name: Literal["sign", "exponent", "significand"]
    bits: str
    numbers: tuple[int, ...]

    @property
    def set_positions(self) -> list[int]:
        """Positions (in ``bits``) of the bits that are 1."""
        return [i for i, b in enumerate(self.bits) if b == "1"]

    def bit_numbers(self, positions: Iterable[int]) -> list[int]:
        """The bit numbers of the given positions, for :func:`flip_bits`."""
        return [self.numbers[i] for i in positions]

    @property
    def labels(self) -> tuple[str, ...]:
        """Each bit as its switch shows it: its value, then its bit number in subscript (``0₁₅``), so that no two
        switches of a field share a label and the position is still there to read."""
        return tuple(b + str(n).translate(_SUBSCRIPT) for b, n in zip(self.bits, self.numbers, strict=True))


_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def field_bits(report: FormatReport) -> tuple[FieldBits, FieldBits, FieldBits]:
    """The sign, exponent and significand fields of ``report``'s code, each with its bit numbers."""
    top = report.fmt.bits - 1
    out = []
    fields: tuple[tuple[Literal["sign", "exponent", "significand"], str], ...] = (
        ("sign", report.sign_str),
        ("exponent", report.exponent_str),
        ("significand", report.significand_str),
    )
    for name, bits in fields:
        out.append(FieldBits(name, bits, tuple(range(top, top - len(bits), -1))))
        top -= len(bits)
    return out[0], out[1], out[2]


def flip_bits(source: FormatReport | int, fmt: str | FloatFormat | None, bit_indices: Iterable[int]) -> float:
    """:func:`flip_bit` for several bits at once, all flipped in the one code (none flips none).

    Flipping them one after another through values would lose the code at a
    NaN on the way; here only the final code is decoded.
    """
    if isinstance(source, FormatReport):
        if fmt is not None and get_format(fmt).name != source.name:
            raise ValueError(f"report is for {source.name}, not {get_format(fmt).name}")
        f, code = source.fmt, source.code
    else:
        if fmt is None:
            raise ValueError("a code needs its format")
        f, code = get_format(fmt), int(source)
    if not 0 <= code < (1 << f.bits):
        raise ValueError(f"code {code} is not a {f.bits}-bit pattern")
    for bit_index in bit_indices:
        if not 0 <= bit_index < f.bits:
            raise ValueError(f"bit {bit_index} is outside {f.label}'s {f.bits} bits")
        code ^= 1 << bit_index
    return value_of(code, f)
