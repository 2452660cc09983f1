"""Exact parsing, rounding and text of one typed number (the format inspector's arithmetic).

Everything here works from the *exact* typed value (a rational), never from
a float64 approximation of it, so a decimal just above a midpoint rounds up
even where float64 would first land on the midpoint and then round to even
(double rounding). :mod:`lensa.numerics.inspector` builds its report on it.

Public API
----------
``parse_exact(text) -> Parsed``
    Parse what was typed, exactly; raises :class:`ParseError` (a ValueError
    with a short ``reason`` code) on anything else. ``try_parse_exact``
    returns None instead. (Not :func:`lensa.ui.controls.parse_url_number`,
    which reads a URL parameter as a float and takes fewer spellings.)
``Parsed``
    The exact value: ``value`` (Fraction, or None for inf/NaN), ``special``
    (``"inf"``, ``"-inf"``, ``"nan"`` or None), ``negative_zero``,
    ``out_of_range`` (``"huge"``, ``"tiny"`` or None) and the ``text``.
    ``Parsed.from_float(x)`` wraps a float exactly.
``round_exact(value, fmt) -> float``
    Round a Parsed, Fraction, int or float to ``fmt``: nearest, ties to even,
    overflow as :func:`lensa.numerics.formats.quantize` does it (±inf, or ±448 for
    FP8 E4M3). Agrees with ``quantize`` on every float64.
    ``round_exact_overflow`` also says whether rounding went past ``max``.
``parse_local(text, lang) -> LocalReading`` / ``local_text(text, lang) -> str``
    Read what a learner typed the way the page's language writes numbers
    (``"65.504"`` is 65504 in Indonesian, 65.504 in English), giving the
    language-independent spelling a link keeps; and the reverse, a link's
    spelling as the box shows it in that language.
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

from lensa.numerics.formats import FloatFormat, get_format

__all__ = [
    "MAX_CHARS",
    "LocalReading",
    "ParseError",
    "Parsed",
    "canonical_text",
    "exact_decimal",
    "local_text",
    "parse_exact",
    "parse_local",
    "round_exact",
    "round_exact_overflow",
    "try_parse_exact",
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


def parse_exact(text: str) -> Parsed:
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


# --- typed the way a language writes numbers ---------------------------------------------------------

# The decimal mark and the thousands separator of each language (as lensa.ui.i18n writes numbers).
_LOCAL_MARKS = {"en": (".", ","), "id": (",", ".")}
_POSITIONAL_MAX = 40  # an e-notation entry is spelled out positionally up to this many characters

Note = Literal["grouping", "decimal", "exponent"]


@dataclass(frozen=True)
class LocalReading:
    """A number typed in a language, read: ``parsed`` (its ``text`` what was typed), ``canonical`` (the spelling
    :func:`parse_exact` reads the same in every language: a dot for the decimal point, no grouping, what a link
    keeps) and, where the learner should see how the entry was read, ``note`` with ``reading`` (the number
    written in the language without grouping, positional where short).

    ``note`` is ``"grouping"`` (the language's thousands separator was read as one: Indonesian ``65.504`` is
    65504), ``"decimal"`` (the other language's decimal mark, where it cannot be grouping: Indonesian ``0.1``)
    or ``"exponent"`` (e-notation: ``1,5e-3`` is 0,0015).
    """

    parsed: Parsed
    canonical: str
    note: Note | None = None
    reading: str = ""


def parse_local(text: str, lang: str) -> LocalReading:
    """Read ``text`` as a number written in ``lang``; raises :class:`ParseError` as :func:`parse_exact` does.

    In ``lang``'s decimal notation the decimal mark is the decimal point and the thousands separator groups
    digits only in groups of three after the first (``1.234.567,5`` in Indonesian, ``1,234,567.5`` in English).
    A lone thousands separator that cannot be grouping (``0.1``, ``1,5`` in English) is the other languages'
    decimal point. Hex floats, ``inf``, ``nan`` and the exponent are read as :func:`parse_exact` reads them.
    """
    decimal_mark, group_mark = _LOCAL_MARKS[lang]
    s = text.strip()
    body = s.replace("\u2212", "-")
    sign, rest = (body[0], body[1:]) if body[:1] in ("+", "-") else ("", body)
    if rest.lower().startswith("0x") or not any(c.isdigit() for c in rest):
        parsed = parse_exact(s)  # hex, inf, nan and junk: no marks of a language to read
        return LocalReading(parsed, parsed.text)
    mantissa, e, exponent = re.split("([eE])", rest, maxsplit=1) if re.search("[eE]", rest) else (rest, "", "")
    note: Note | None = None
    if group_mark in mantissa:
        grouped = rf"[0-9]{{1,3}}(?:{re.escape(group_mark)}[0-9]{{3}})+(?:{re.escape(decimal_mark)}[0-9]*)?"
        if re.fullmatch(grouped, mantissa):
            mantissa, note = mantissa.replace(group_mark, "").replace(decimal_mark, "."), "grouping"
        elif decimal_mark not in mantissa and mantissa.count(group_mark) == 1:
            mantissa, note = mantissa.replace(group_mark, "."), "decimal"
        else:
            raise ParseError("separators", text, "digit groups of three, and one decimal mark")
    else:
        mantissa = mantissa.replace(decimal_mark, ".")  # a second one is left for parse_exact to refuse
    canonical = sign + mantissa + e + exponent
    parsed = parse_exact(canonical)
    parsed = Parsed(s, parsed.value, parsed.special, parsed.negative_zero, parsed.out_of_range)
    if note is None and e:
        note = "exponent"
    if note is None:
        return LocalReading(parsed, canonical)
    reading = canonical
    if e and parsed.out_of_range is None:
        positional = format(Decimal(canonical), "f")
        if len(positional) <= _POSITIONAL_MAX:
            reading = positional
        elif note == "exponent":
            return LocalReading(parsed, canonical)  # a long e-notation number reads best as typed
    return LocalReading(parsed, canonical, note, reading.replace(".", decimal_mark))


def local_text(text: str, lang: str) -> str:
    """A number as :func:`parse_exact` reads it (a link's spelling), written so that :func:`parse_local` reads
    the same number in ``lang``: ``"0.1"`` is ``"0,1"`` in Indonesian. Hex floats, ``inf``, ``nan`` and text
    that is no number come back as they are."""
    parsed = try_parse_exact(text)
    s = text.strip()
    if parsed is None or parsed.special is not None or s.lower().lstrip("+-\u2212").startswith("0x"):
        return s
    dotted = s.replace(",", ".")  # parse_exact took a lone comma as the decimal point; nothing else has one
    return dotted.replace(".", _LOCAL_MARKS[lang][0])


def try_parse_exact(text: str) -> Parsed | None:
    """:func:`parse_exact`, but None instead of a ParseError."""
    try:
        return parse_exact(text)
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
    if e < f.emin - p - 1:  # below half the smallest subnormal: rounds to zero (E8M0, without zero: its smallest)
        return (0, 0, False) if f.has_zero else (1, -f.emin, False)
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
    if not f.has_zero and binade == f.emin:
        q = max(q, 1 << p)  # no zero and no subnormals (E8M0): the smallest value is the nearest
    # Only the top binade can pass max: q may carry to 2**(p+1), or land on a NaN code (E4M3, FP4's 6 + 1).
    top_q = (1 << p) | (f.max_code & ((1 << p) - 1))
    return q, shift, binade == f.emax and q > top_q


def _overflowed(negative: bool, f: FloatFormat) -> float:
    top = math.inf if f.has_inf else f.max
    return -top if negative else top


def round_exact_overflow(value: Parsed | Fraction | int | float, fmt: str | FloatFormat) -> tuple[float, bool]:
    """``(stored, overflow)``: :func:`round_exact`, and whether rounding went past ``max`` (±inf included).

    The flag is what tells E4M3's saturation to 448 from a typed 448. A value
    the format has no code for (a negative or zero in unsigned E8M0) gives NaN.
    """
    f = get_format(fmt)
    stored, overflow = _round_signed(value, f)
    if (not f.signed and math.copysign(1.0, stored) < 0) or (not f.has_zero and stored == 0):
        return math.nan, False
    return stored, overflow


def _round_signed(value: Parsed | Fraction | int | float, f: FloatFormat) -> tuple[float, bool]:
    """:func:`round_exact_overflow` as if every format had a sign and a zero."""
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
    this is ``lensa.numerics.formats.quantize``.
    """
    return round_exact_overflow(value, fmt)[0]


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
    """A short text for ``x`` that :func:`parse_exact` reads back as exactly ``x``.

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
