"""What a URL parameter may say, and what a control makes of it (pure; no streamlit).

A control has a fixed set of positions (a slider's stops or a choice's
options). A URL value is read the way a person would type it (``1e-3``,
``0.001``, ``1.0E-3``, `` 2048 ``), snapped to the nearest position, and when
it cannot be used it falls back to the default or the nearest end, with a
reason the page shows as a short notice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Literal

Problem = Literal["not_a_number", "out_of_range", "not_an_option"]

MAX_URL_VALUE_CHARS = 64  # nothing we accept is longer; longer text is junk
_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(e[+-]?[0-9]+)?$")  # ASCII digits only


@dataclass(frozen=True)
class Reading:
    """What a URL value gave: the control's value, and the problem if there was one."""

    value: object
    problem: Problem | None = None


def parse_url_number(raw: str) -> float | None:
    """A URL parameter's number as a float, as typed by a person, or None.

    For snapping a control to its stops, so a float is enough; the format
    inspector reads a number exactly, with more spellings, through
    :func:`lensa.numerics.exact.parse_exact`.

    Accepts plain and e-notation, any case, surrounding spaces, a comma as the
    decimal mark when it is the only mark (``0,001``). Rejects the words nan
    and inf, hex, thousands separators and anything longer than 64
    characters. A numeral beyond float range (``1e999``) gives ±inf.
    """
    if not isinstance(raw, str) or len(raw) > MAX_URL_VALUE_CHARS:
        return None
    text = raw.strip().lower().replace("−", "-")
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    if not _NUMBER.match(text):
        return None
    try:
        return float(text)  # a numeral too large for a float gives ±inf: out of range, not junk
    except ValueError:
        return None


# Words and letters a count may end with, and the power of ten each stands for. English short scale
# (k, M, B, T and the words) and Indonesian (ribu, juta, miliar, triliun, and their usual
# abbreviations); both languages are read on every page, so a link means the same to everyone. "M" is
# always a million: Indonesian writes a billion as "miliar", never as a bare letter here.
COUNT_SCALES: dict[str, int] = {
    "": 0,
    "k": 3, "thousand": 3, "ribu": 3, "rb": 3,
    "m": 6, "mn": 6, "million": 6, "juta": 6, "jt": 6,
    "b": 9, "bn": 9, "billion": 9, "miliar": 9, "milyar": 9,
    "t": 12, "tn": 12, "trillion": 12, "triliun": 12,
}  # fmt: skip
_COUNT = re.compile(r"^(?P<digits>[0-9]+(\.[0-9]*)?|\.[0-9]+)(e(?P<exp>[+-]?[0-9]+))?\s*(?P<scale>[a-z]*)$")
# 7,500,000,000 or 7.500.000.000 or 7 500 000 000: two or more groups of three behind the same mark.
_GROUPED = re.compile(r"^[0-9]{1,3}(?P<mark>[,. _'\u00a0\u202f])[0-9]{3}((?P=mark)[0-9]{3})+(?![0-9])")
_COUNT_EXPONENT_LIMIT = 30  # beyond 10**30 any count is out of every range we draw; spares Decimal huge exponents


def parse_count(raw: str) -> float | None:
    """A count as a person types it (``7.5B``, ``175e9``, ``1.3e9``, ``7,5 miliar``), or None.

    The number is read exactly (decimal, not binary) and rounded to the nearest
    whole count, so ``7.5B`` is 7 500 000 000 and nothing else. Accepted: plain
    or e-notation digits with one optional sign; a comma as the decimal mark
    when it is the only mark (``7,5B``); digit groups of three behind the same
    mark used at least twice (``7,500,000,000``, ``7.500.000.000``); then an
    optional scale from :data:`COUNT_SCALES`, with or without a space, in any
    case. Rejected (None): nan, inf, hex, a lone ambiguous group (``1,300`` is
    read as 1.3), anything else, and text over 64 characters. A magnitude past
    10**30 gives ±inf, one below 10**-30 gives 0: out of range, not junk.
    """
    if not isinstance(raw, str) or len(raw) > MAX_URL_VALUE_CHARS:
        return None
    text = raw.strip().lower().replace("−", "-")
    sign = -1 if text.startswith("-") else 1
    text = text[1:] if text[:1] in "+-" else text
    grouped = _GROUPED.match(text)
    if grouped:
        text = text[: grouped.end()].replace(grouped["mark"], "") + text[grouped.end() :]
    elif text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    match = _COUNT.match(text)
    if not match or match["scale"] not in COUNT_SCALES:
        return None
    digits = Decimal(match["digits"])
    exponent = int(match["exp"] or 0) + COUNT_SCALES[match["scale"]]
    if digits == 0:
        return 0.0
    if digits.adjusted() + exponent > _COUNT_EXPONENT_LIMIT:
        return sign * math.inf
    if digits.adjusted() + exponent < -_COUNT_EXPONENT_LIMIT:
        return 0.0
    return float(sign * digits.scaleb(exponent).to_integral_value(ROUND_HALF_EVEN))


def engineering_text(count: float) -> str:
    """A whole count with a power-of-ten exponent that is a multiple of 3: ``7.5e9``, ``175e9``, ``124e6``.

    Exact (every digit kept, so it parses back to ``count``), language-neutral,
    and it reads as the B, M or T a person said. Below 1000 it is the plain
    number. Not for negative, fractional or non-finite values (ValueError).
    """
    if not (math.isfinite(count) and count >= 0 and float(count).is_integer()):
        raise ValueError(f"not a whole, finite, non-negative count: {count!r}")
    whole = int(count)
    exponent = 3 * ((len(str(whole)) - 1) // 3)
    if exponent == 0:
        return str(whole)
    mantissa = Decimal(whole).scaleb(-exponent).normalize()
    return f"{mantissa:f}e{exponent}"


@dataclass(frozen=True)
class CountControl:
    """A count typed as text and kept exactly (no stops); outside ``lo`` … ``hi`` it is clamped to the end."""

    name: str
    default: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not 0 <= self.lo <= self.default <= self.hi:
            raise ValueError(f"{self.name}: need 0 <= lo <= default <= hi")

    def read(self, raw: str) -> Reading:
        value = parse_count(raw)
        if value is None:
            return Reading(self.default, "not_a_number")
        if value < self.lo:
            return Reading(self.lo, "out_of_range")
        if value > self.hi:
            return Reading(self.hi, "out_of_range")
        return Reading(value)

    def to_url(self, value: float) -> str:
        return engineering_text(value)


@dataclass(frozen=True)
class NumberControl:
    """A slider over fixed numeric stops; ``log=True`` snaps by ratio rather than difference."""

    name: str
    stops: tuple[float, ...]
    default: float
    log: bool = False
    integer: bool = False

    def __post_init__(self) -> None:
        if list(self.stops) != sorted(self.stops) or self.default not in self.stops:
            raise ValueError(f"{self.name}: stops must be sorted and hold the default")
        if self.log and self.stops[0] <= 0:
            raise ValueError(f"{self.name}: log stops must be positive")

    def snap(self, value: float) -> float:
        """The stop nearest to ``value`` (in log distance when ``log``)."""
        if self.log:
            key: Callable[[float], float] = lambda s: abs(math.log(s) - math.log(value))  # noqa: E731
        else:
            key = lambda s: abs(s - value)  # noqa: E731
        return min(self.stops, key=key)

    def read(self, raw: str) -> Reading:
        value = parse_url_number(raw)
        if value is None:
            return Reading(self.default, "not_a_number")
        if value < self.lo or (self.log and value <= 0):
            return Reading(self.lo, "out_of_range")
        if value > self.hi:
            return Reading(self.hi, "out_of_range")
        return Reading(self.snap(value))

    def to_url(self, value: float) -> str:
        """The canonical URL spelling: integers plainly, others as short e-notation."""
        if self.integer or (float(value).is_integer() and abs(value) < 1e6):
            return str(int(value))
        return f"{value:.3g}".replace("e-0", "e-").replace("e+0", "e")

    @property
    def lo(self) -> float:
        return self.stops[0]

    @property
    def hi(self) -> float:
        return self.stops[-1]


@dataclass(frozen=True)
class ChoiceControl:
    """A choice between named options (``mixed`` / ``fp32``); matched without regard to case."""

    name: str
    options: tuple[str, ...]
    default: str

    def __post_init__(self) -> None:
        if self.default not in self.options:
            raise ValueError(f"{self.name}: the default must be an option")

    def read(self, raw: str) -> Reading:
        text = raw.strip().lower() if isinstance(raw, str) and len(raw) <= MAX_URL_VALUE_CHARS else None
        for option in self.options:
            if text == option.lower():
                return Reading(option)
        return Reading(self.default, "not_an_option")

    def to_url(self, value: str) -> str:
        return value


@dataclass(frozen=True)
class TextControl:
    """Free text that must pass ``accepts`` (the inspector's number); junk falls back to the default."""

    name: str
    default: str
    accepts: Callable[[str], bool]
    max_chars: int = 100

    def read(self, raw: str) -> Reading:
        text = raw.strip() if isinstance(raw, str) else ""
        if len(text) > self.max_chars or not self.accepts(text):
            return Reading(self.default, "not_a_number")
        return Reading(text)

    def to_url(self, value: str) -> str:
        return value


Control = NumberControl | ChoiceControl | TextControl | CountControl


def log_stops(lo_exp: int, hi_exp: int, mantissas: Sequence[float] = (1, 1.5, 2, 3, 5, 7)) -> tuple[float, ...]:
    """Stops from 10**lo_exp to 10**hi_exp, each decade split at ``mantissas``.

    Values are the float nearest to the decimal (``float("1.5e-06")``), so they
    print and parse back exactly.
    """
    stops = [float(f"{m}e{e}") for e in range(lo_exp, hi_exp) for m in mantissas]
    stops.append(float(f"1e{hi_exp}"))
    return tuple(stops)


def power_of_two_stops(lo: int, hi: int, with_halves: bool = True) -> tuple[int, ...]:
    """512, 768, 1024, 1536, … up to ``hi``: powers of two and, if asked, 1.5 times them."""
    stops = []
    p = lo
    while p <= hi:
        stops.append(p)
        if with_halves and p * 3 // 2 < hi:
            stops.append(p * 3 // 2)
        p *= 2
    return tuple(stops)
