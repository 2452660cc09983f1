"""The format inspector's numeric core: one typed number, seen through every format.

A learner types a number; for each format of :data:`lensa.formats.FORMATS`
the inspector shows what the format stores. Everything here works from the
*exact* typed value (a rational), never from a float64 approximation of it,
so a decimal just above a midpoint rounds up even where float64 would first
land on the midpoint and then round to even (double rounding).

Public API
----------
``parse_number(text) -> Parsed``
    Parse what was typed, exactly; raises :class:`ParseError` (a ValueError
    with a short ``reason`` code) on anything else. ``try_parse`` returns
    None instead.
``Parsed``
    The exact value: ``value`` (Fraction, or None for inf/NaN), ``special``
    (``"inf"``, ``"-inf"``, ``"nan"`` or None), ``negative_zero``,
    ``out_of_range`` (``"huge"``, ``"tiny"`` or None) and the ``text``.
    ``Parsed.from_float(x)`` wraps a float exactly.
``round_exact(value, fmt) -> float``
    Round a Parsed, Fraction, int or float to ``fmt``: nearest, ties to even,
    overflow as :func:`lensa.formats.quantize` does it (±inf, or ±448 for
    FP8 E4M3). Agrees with ``quantize`` on every float64.
``inspect(parsed, fmt) -> FormatReport`` / ``inspect_all(parsed) -> list[FormatReport]``
    What one format (or every format, in FORMATS order) stores.
``flip_bit(source, fmt, bit_index) -> float``
    The value whose code is the stored code with one bit flipped.
``exact_decimal(x) -> str`` / ``canonical_text(x) -> str``
    A float's exact decimal expansion; a short text that parses back to
    exactly ``x`` (for a URL or the text box after a flip).

Parsing rules
-------------
Accepted, after stripping surrounding whitespace (at most 100 characters
remain): one optional leading sign (``+``, ``-`` or ``−`` U+2212), then

* a decimal ``12``, ``0.1``, ``.5``, ``1.``, optionally with an exponent
  ``e``/``E`` and an optionally signed integer (``6.1E-5``, ``-3.4e38``);
  ASCII digits only. A comma is the decimal mark when it is the only mark
  and appears once (``0,1`` is 0.1, so ``1,000`` is 1.000 = 1); a comma
  together with a dot, two commas, or spaces, underscores or apostrophes
  between digits are thousands separators and are rejected;
* a hex float as ``float.hex`` writes it, ``0x`` and at least one hex digit,
  an optional fraction and an optional binary exponent ``p``/``P``
  (``0x1p-24``, ``-0x1.8p+3``, ``0x.8p1``, ``0x1.8``);
* ``inf``, ``infinity`` or ``nan`` in any case (a sign on NaN is ignored).

A zero with a minus sign (``-0``, ``-0.0``, ``-0e5``, ``-0x0p0``) is negative
zero. Decimal and hex values are exact rationals.

Exponents are capped so that no input can make the rational arithmetic
explode (``1e1000000000`` has a billion digits): a nonzero magnitude above
10**400 is "huge" and one below 10**-400 is "tiny" (``Parsed.out_of_range``).
Their ``value`` is then a stand-in with the typed sign, exactly ±10**400 or
±10**-400. Every format's range lies far inside (FP32 spans about 1.4e-45 to
3.4e38), so the stand-in rounds exactly as the typed number does (overflow,
or ±0) and gives the same relative error as a float (inf or 1.0; for E4M3's
saturation 1 - 448/|x|, which is 1.0 in float64 either way).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

import numpy as np

from lensa.formats import FORMATS, BitFields, Category, FloatFormat, get_format

__all__ = [
    "MAX_CHARS",
    "FormatReport",
    "ParseError",
    "Parsed",
    "canonical_text",
    "exact_decimal",
    "flip_bit",
    "inspect",
    "inspect_all",
    "parse_number",
    "round_exact",
    "try_parse",
]

MAX_CHARS = 100  # longest accepted input, surrounding whitespace stripped
_LIMIT = 10**400  # magnitudes beyond this (or below its inverse) are out of range; see the module docstring
_LIMIT_BITS = 1330  # 2**1330 > 10**400: past it (or below 2**-1330) no exact comparison is needed

Special = Literal["inf", "-inf", "nan"]
Reason = Literal["empty", "too_long", "signs", "separators", "syntax"]

_DECIMAL = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?")
_HEX = re.compile(r"0[xX](?P<int>[0-9a-fA-F]*)(?:\.(?P<frac>[0-9a-fA-F]*))?(?:[pP](?P<exp>[+-]?[0-9]+))?")
# Characters people put between digit groups; inside a number they can only be separators.
_SEPARATORS = frozenset(" _'\u2019\u00a0\u202f\u2009")


class ParseError(ValueError):
    """Input that is not a number the inspector accepts.

    ``reason`` is a short code a page can translate: ``"empty"``,
    ``"too_long"`` (over :data:`MAX_CHARS`), ``"signs"`` (two signs),
    ``"separators"`` (thousands separators or mixed decimal marks) or
    ``"syntax"`` (anything else: letters, ``1e``, ``0x`` without digits).
    """

    def __init__(self, reason: Reason, text: str, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.text = text


@dataclass(frozen=True)
class Parsed:
    """A typed number, exactly.

    ``value`` is the exact rational (0 for both zeros), or None for inf and
    NaN, which ``special`` names. ``negative_zero`` marks ``-0``.
    ``out_of_range`` is ``"huge"`` (|x| > 10**400) or ``"tiny"``
    (0 < |x| < 10**-400); ``value`` is then the stand-in ±10**400 or
    ±10**-400, which every format rounds as it would round the typed number.
    ``text`` is the input with surrounding whitespace stripped.
    """

    text: str
    value: Fraction | None
    special: Special | None = None
    negative_zero: bool = False
    out_of_range: Literal["huge", "tiny"] | None = None

    @property
    def is_nan(self) -> bool:
        return self.special == "nan"

    @property
    def negative(self) -> bool:
        """Sign bit of the typed number: True for negatives, -inf and -0; False for NaN."""
        if self.special is not None:
            return self.special == "-inf"
        assert self.value is not None
        return self.negative_zero or self.value < 0

    def as_float(self) -> float:
        """The nearest float64 (ties to even): ±inf beyond float64's range, ±0 below it, NaN for NaN."""
        if self.special is not None:
            return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[self.special]
        assert self.value is not None
        sign = -1.0 if self.negative else 1.0
        try:
            # int / int true division is correctly rounded; it raises rather than return inf.
            return math.copysign(self.value.numerator / self.value.denominator, sign)
        except OverflowError:
            return math.copysign(math.inf, sign)

    @classmethod
    def from_float(cls, x: float) -> Parsed:
        """Wrap a float (any float64, NaN and ±inf included) exactly, with :func:`canonical_text` as text."""
        x = float(x)
        text = canonical_text(x)
        if math.isnan(x):
            return cls(text, None, "nan")
        if math.isinf(x):
            return cls(text, None, "inf" if x > 0 else "-inf")
        return cls(text, Fraction(x), negative_zero=(x == 0 and math.copysign(1.0, x) < 0))


def parse_number(text: str) -> Parsed:
    """Parse a typed number exactly; see the module docstring for what is accepted.

    Raises :class:`ParseError` with a ``reason`` code for anything else.
    """
    s = text.strip()
    if not s:
        raise ParseError("empty", text, "nothing typed")
    if len(s) > MAX_CHARS:
        raise ParseError("too_long", text, f"longer than {MAX_CHARS} characters")
    body = s.replace("\u2212", "-")
    negative = body[0] == "-"
    if body[0] in "+-":
        body = body[1:]
    if body[:1] in ("+", "-"):
        raise ParseError("signs", text, "more than one sign")
    if not body:
        raise ParseError("syntax", text, "a sign without a number")

    word = body.lower()
    if word in ("inf", "infinity"):
        return Parsed(s, None, "-inf" if negative else "inf")
    if word == "nan":
        return Parsed(s, None, "nan")  # NaN's sign bit means nothing to the learner: ignore it

    if any(c in _SEPARATORS for c in body):
        raise ParseError("separators", text, "digit group separators are not accepted")
    if word.startswith("0x"):
        m = _HEX.fullmatch(body)
        if m is None or not (m["int"] or m["frac"]):
            raise ParseError("syntax", text, "not a hex float like 0x1.8p-3")
        frac = m["frac"] or ""
        coef = int((m["int"] or "") + frac, 16)
        magnitude = _bounded(coef, 2, int(m["exp"] or 0) - 4 * len(frac))
    else:
        if "," in body:
            # A lone comma is a decimal comma (0,1); with a dot or a second comma it groups thousands.
            if "." in body or body.count(",") > 1:
                raise ParseError("separators", text, "use one decimal mark and no thousands separators")
            body = body.replace(",", ".")
        m = _DECIMAL.fullmatch(body)
        if m is None or not (m["int"] or m["frac"]):
            raise ParseError("syntax", text, "not a number like 0.1, -2.5e-3 or 0x1p-24")
        frac = m["frac"] or ""
        coef = int((m["int"] or "") + frac)
        magnitude = _bounded(coef, 10, int(m["exp"] or 0) - len(frac))

    value, out_of_range = magnitude
    if value == 0:
        return Parsed(s, Fraction(0), negative_zero=negative)
    return Parsed(s, -value if negative else value, out_of_range=out_of_range)


def try_parse(text: str) -> Parsed | None:
    """:func:`parse_number`, but None instead of a ParseError."""
    try:
        return parse_number(text)
    except ParseError:
        return None


def _bounded(coef: int, base: int, exp: int) -> tuple[Fraction, Literal["huge", "tiny"] | None]:
    """``coef * base**exp`` (coef >= 0) exactly, or the stand-in when out of range.

    The exponent can have ~100 digits, so the range is decided from the
    coefficient's size before any power is built.
    """
    if coef == 0:
        return Fraction(0), None  # 0e999999999 is simply zero
    # coef * base**exp lies in [2**lo, 2**hi); for base 10 use 2**3 < 10 < 2**4 on the safe side.
    bits = coef.bit_length()
    if base == 2:
        lo, hi = bits - 1 + exp, bits + exp
    elif exp >= 0:
        lo, hi = bits - 1 + 3 * exp, bits + 4 * exp
    else:
        lo, hi = bits - 1 + 4 * exp, bits + 3 * exp
    if lo > _LIMIT_BITS:
        return Fraction(_LIMIT), "huge"
    if hi < -_LIMIT_BITS:
        return Fraction(1, _LIMIT), "tiny"
    value = Fraction(coef) * Fraction(base) ** exp  # |exp| is now at most a few thousand: cheap
    if value > _LIMIT:
        return Fraction(_LIMIT), "huge"
    if value < Fraction(1, _LIMIT):
        return Fraction(1, _LIMIT), "tiny"
    return value, None


# --- exact rounding ----------------------------------------------------------------------------


def _round_magnitude(num: int, den: int, f: FloatFormat) -> tuple[int, int, bool]:
    """Round ``num / den > 0`` to ``f``'s grid: ``(q, shift, overflow)`` with result ``q * 2**-shift``.

    Nearest, ties to even. ``overflow`` is True when the rounded value is
    beyond ``f.max`` (the tie at the overflow threshold included when it
    rounds up, as ``quantize`` does); q and shift are then meaningless.
    """
    p = f.significand_bits
    # e = floor(log2(num / den)): the bit lengths give it to within one.
    e = num.bit_length() - den.bit_length()
    if (num << max(-e, 0)) < (den << max(e, 0)):
        e -= 1
    if e > f.emax:
        return 0, 0, True  # at least 2**(emax+1), past max whatever the rounding
    if e < f.emin - p - 1:
        return 0, 0, False  # below half the smallest subnormal: rounds to zero
    binade = max(e, f.emin)  # subnormals share the lowest binade's spacing
    shift = p - binade
    if shift >= 0:
        q, r = divmod(num << shift, den)
        d = den
    else:
        d = den << -shift
        q, r = divmod(num, d)
    if 2 * r > d or (2 * r == d and q & 1):
        q += 1
    # Only the top binade can pass max: q may carry to 2**(p+1), or be E4M3's NaN significand.
    top_q = (1 << (p + 1)) - (1 if f.nan_style == "ieee" else 2)
    return q, shift, binade == f.emax and q > top_q


def _overflowed(negative: bool, f: FloatFormat) -> float:
    top = math.inf if f.overflow == "inf" else f.max
    return -top if negative else top


def _rounded(value: Parsed | Fraction | int | float, f: FloatFormat) -> tuple[float, bool]:
    """``(stored, overflow)``: the rounded value and whether rounding went past ``max`` (±inf included)."""
    if isinstance(value, Parsed):
        if value.special == "nan":
            return math.nan, False
        if value.special is not None:
            return _overflowed(value.special == "-inf", f), True
        assert value.value is not None
        if value.value == 0:
            return (-0.0 if value.negative_zero else 0.0), False
        num, den = value.value.numerator, value.value.denominator
    elif isinstance(value, Fraction):
        num, den = value.numerator, value.denominator
    elif isinstance(value, int | np.integer):
        num, den = int(value), 1
    else:
        x = float(value)  # float32 and float16 scalars convert exactly
        if math.isnan(x):
            return math.nan, False
        if math.isinf(x):
            return _overflowed(x < 0, f), True
        if x == 0:
            return x, False  # keeps the sign of zero
        num, den = x.as_integer_ratio()
    if num == 0:
        return 0.0, False
    negative = num < 0
    q, shift, overflow = _round_magnitude(abs(num), den, f)
    if overflow:
        return _overflowed(negative, f), True
    stored = math.ldexp(q, -shift)  # exact: q has at most p + 2 bits, and the result is in float64's range
    return (-stored if negative else stored), False  # a negative that rounds to 0 gives -0.0


def round_exact(value: Parsed | Fraction | int | float, fmt: str | FloatFormat) -> float:
    """Round the exact value to ``fmt``: nearest, ties to even, returned as a float64.

    Floats (numpy float scalars included) and ints are taken exactly, as are
    Fractions and :class:`Parsed` values. 0 and -0 are kept, and a negative
    value that rounds to zero gives -0.0 (a Fraction has no -0: pass a
    Parsed or a float for that). NaN gives NaN. Overflow, and ±inf, give
    ±inf, except in FP8 E4M3, which saturates to ±448: magnitudes above 464
    do, and 464 itself rounds to 448 as a tie to even. For every float64
    this is ``lensa.formats.quantize``.
    """
    return _rounded(value, get_format(fmt))[0]


# --- exact text of a float ------------------------------------------------------------------------


def exact_decimal(x: float) -> str:
    """The exact decimal expansion of a float, positional (every binary float has a finite one).

    ``0.0999755859375`` for FP16's 0.1; ``"0"`` and ``"-0"`` for the zeros;
    ``"inf"``, ``"-inf"`` and ``"nan"`` for the rest. Float64 values far from
    1 give long strings (2**-149 has 105 significant digits).
    """
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(Decimal(x), "f")  # Decimal(float) is exact; "f" writes every digit without an exponent


def canonical_text(x: float) -> str:
    """A short text for ``x`` that :func:`parse_number` reads back as exactly ``x``.

    ``"nan"``, ``"inf"``, ``"-inf"``, ``"0"``, ``"-0"``; otherwise the shorter
    of the exact positional decimal (``"448"``, ``"0.0999755859375"``) and the
    exact scientific one (``"5.9604644775390625e-8"``), positional on a tie,
    or the hex float (``"0x1p-1074"``) when both are over :data:`MAX_CHARS`.
    Not the shortest *round-trip* decimal: ``repr(0.1)`` is ``"0.1"``, which
    is not exactly the float 0.1.
    """
    x = float(x)
    if math.isnan(x) or math.isinf(x) or x == 0:
        return exact_decimal(x)
    sign, digits_t, exp = Decimal(x).as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digits_t)).rstrip("0")
    exp += len(digits_t) - len(digits)  # the stripped zeros move into the exponent
    minus = "-" if sign else ""
    if exp >= 0:
        positional = digits + "0" * exp
    elif -exp < len(digits):
        positional = digits[:exp] + "." + digits[exp:]
    else:
        positional = "0." + "0" * (-exp - len(digits)) + digits
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    scientific = f"{mantissa}e{exp + len(digits) - 1}"
    best = min(positional, scientific, key=len)
    if len(minus + best) <= MAX_CHARS:
        return minus + best
    head, _, tail = x.hex().partition("p")  # e.g. 0x1.0000000000000p-1074: drop the padding zeros
    return f"{head.rstrip('0').rstrip('.')}p{tail}"


# --- the report ---------------------------------------------------------------------------------------


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

    ``category`` is as :func:`lensa.formats.classify`, decided from the exact
    value (E4M3's saturation to 448 is ``"overflow"``). ``relative_error``
    is |stored - x| / |x| computed exactly, then rounded to float64: 0 when
    exact and for x = ±0 and ±inf stored as ±inf; 1.0 when a nonzero x
    rounds to 0 and for ±inf saturated to ±448 (the limit; 448 is nothing
    next to infinity, where ``lensa.formats.relative_error`` says NaN); inf
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
        """The bits as ``"s eeeee mmmmmmmmmm"`` groups."""
        return f"{self.sign_str} {self.exponent_str} {self.significand_str}"

    @property
    def code_hex(self) -> str:
        """The code in hex, zero-padded to the format's width (``0x2E66``)."""
        return f"0x{self.code:0{(self.fmt.bits + 3) // 4}X}"

    @property
    def fields(self) -> BitFields:
        return BitFields(self.sign, self.exponent_field, self.significand_field, self.fmt)


def _errors(parsed: Parsed, stored: float) -> tuple[float, float]:
    """(relative, absolute) error of ``stored`` against the exact typed value; see FormatReport."""
    if parsed.is_nan:
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
    return (0.0 if x == 0 else float(diff / abs(x))), absolute


def _encode(stored: float, f: FloatFormat) -> int:
    """The code of a value already in ``f``, as ``lensa.formats.to_bits`` gives it.

    Plain Python, because for one value that is far cheaper than numpy. NaN
    gives the canonical quiet NaN with the sign bit clear; -0 has the sign bit.
    """
    m, eb = f.significand_bits, f.exponent_bits
    top = (1 << eb) - 1
    if math.isnan(stored):
        return (1 << (eb + m)) - 1 if f.nan_style == "fn" else (top << m) | (1 << (m - 1))
    sign = (1 << (eb + m)) if math.copysign(1.0, stored) < 0 else 0
    a = abs(stored)
    if math.isinf(a):
        return sign | (top << m)
    if a < f.smallest_normal:  # subnormals and zero: exponent field 0, no implicit bit
        return sign | int(math.ldexp(a, m - f.emin))
    e = math.frexp(a)[1] - 1  # a = 1.f * 2**e
    return sign | ((e + f.bias) << m) | (int(math.ldexp(a, m - e)) - (1 << m))


def _decode(code: int, f: FloatFormat) -> float:
    """The value of a code in ``f`` (as ``lensa.formats.from_bits``, in plain Python)."""
    m, eb = f.significand_bits, f.exponent_bits
    top = (1 << eb) - 1
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


def _above(stored: float, f: FloatFormat) -> float | None:
    """The next value up by code (-0 skipped); None past +inf, past E4M3's 448 and for NaN."""
    if math.isnan(stored) or stored == math.inf:
        return None
    if stored == 0:
        return f.smallest_subnormal
    if stored > 0:
        # Positive codes grow with the value; the code after max is inf (IEEE) or NaN (E4M3: nothing).
        nxt = _decode(_encode(stored, f) + 1, f)
        return None if math.isnan(nxt) else nxt
    if stored == -math.inf:
        return -f.max
    # Negative: one code less is one step smaller in magnitude; the step after -smallest is 0, not -0.
    return -_decode(_encode(-stored, f) - 1, f) + 0.0


def _below(stored: float, f: FloatFormat) -> float | None:
    """The next value down: the mirror image of :func:`_above`."""
    up = _above(-stored, f)
    return None if up is None else -up + 0.0


def inspect(parsed: Parsed | str, fmt: str | FloatFormat) -> FormatReport:
    """What ``fmt`` stores for the typed number; a string is parsed first (ParseError if it is not a number)."""
    if isinstance(parsed, str):
        parsed = parse_number(parsed)
    f = get_format(fmt)
    stored, overflow = _rounded(parsed, f)
    code = _encode(stored, f)
    m, eb = f.significand_bits, f.exponent_bits
    sign = (code >> (eb + m)) & 1
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
        lead = 0 if exponent_field == 0 else 1 << m
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
        sign_str=str(sign),
        exponent_str=format(exponent_field, f"0{eb}b"),
        significand_str=format(significand_field, f"0{m}b"),
        exponent=exponent,
        significand=significand,
        below=below,
        above=above,
        gap_below=stored - below if finite and below is not None else None,
        gap_above=above - stored if finite and above is not None else None,
    )


def inspect_all(parsed: Parsed | str) -> list[FormatReport]:
    """:func:`inspect` for every format, in the order of ``lensa.formats.FORMATS``."""
    if isinstance(parsed, str):
        parsed = parse_number(parsed)
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
    if not 0 <= bit_index < f.bits:
        raise ValueError(f"bit {bit_index} is outside {f.label}'s {f.bits} bits")
    return _decode(code ^ (1 << bit_index), f)
