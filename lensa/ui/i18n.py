"""Languages: the text catalogues, language choice, and numbers written the local way.

Every word the app shows lives in ``lensa/text/<lang>.toml``, looked up by a
dotted key (``"memory.title"``). Placeholders are named (``{gb}``) and filled
with numbers already formatted for the language by the functions below, so a
translator never touches a number format.

This module has no streamlit import: the choice of language is a pure
function of what the URL, the session and the browser say.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path
from typing import Any

LANGUAGES: tuple[str, ...] = ("id", "en")
DEFAULT_LANGUAGE = "id"
TEXT_DIR = Path(__file__).resolve().parent.parent / "text"

# decimal mark, thousands separator
_MARKS = {"en": (".", ","), "id": (",", ".")}


# --- catalogues ---------------------------------------------------------------


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, full + "."))
        elif isinstance(value, str):
            flat[full] = value
        else:
            raise TypeError(f"{full}: catalogue values must be text, got {type(value).__name__}")
    return flat


GLOSSARY_PAGE = "glossary"  # the glossary's URL path (pages/glossary.py)
# A catalogue text links a glossary term as [word](glossary:<term>) (lensa.ui.glossary.TERMS).
_GLOSSARY_LINK = re.compile(r"\]\(glossary:([a-z0-9_]+)\)")


def glossary_url(term: str, lang: str) -> str:
    """The link to ``term``'s entry in the glossary, in ``lang`` (relative: every page sits one level down)."""
    return f"{GLOSSARY_PAGE}?lang={lang}&term={term}"


@cache
def catalogue(lang: str) -> dict[str, str]:
    """All texts of one language, by dotted key (read once per process); glossary links point into the
    glossary in the same language."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}")
    with open(TEXT_DIR / f"{lang}.toml", "rb") as fh:
        flat = _flatten(tomllib.load(fh))
    return {k: _GLOSSARY_LINK.sub(lambda m: f"]({glossary_url(m.group(1), lang)})", v) for k, v in flat.items()}


def text(lang: str, key: str, **values: object) -> str:
    """The text for ``key`` in ``lang`` with its placeholders filled.

    Without values the template comes back as it is, placeholders and all (for
    figures that fill it per bar). A missing key raises KeyError: the
    catalogue test makes sure none is.
    """
    template = catalogue(lang)[key]
    return template.format(**values) if values else template


@cache
def answers() -> dict[str, str]:
    """The right letter of each check-yourself question (``"memory_q1": "a"``), the same in every language."""
    with open(TEXT_DIR / "answers.toml", "rb") as fh:
        return dict(tomllib.load(fh))


# --- choosing the language ---------------------------------------------------------


def parse_language(raw: str | None) -> str | None:
    """``"id"``/``"en"`` from a URL value (any case, surrounding space ignored), else None."""
    if raw is None:
        return None
    value = raw.strip().lower()
    return value if value in LANGUAGES else None


def language_from_locale(locale: str | None) -> str | None:
    """The browser's locale to our language: ``id*`` gives id, any other known tag en."""
    if not locale or not isinstance(locale, str):
        return None
    return "id" if locale.strip().lower().startswith("id") else "en"


def choose_language(url: str | None, session: str | None, locale: str | None) -> str:
    """``?lang=`` first, then the learner's choice this session, then the locale, then Indonesian."""
    return parse_language(url) or parse_language(session) or language_from_locale(locale) or DEFAULT_LANGUAGE


# --- numbers -------------------------------------------------------------------------


def _localise(plain: str, lang: str) -> str:
    """Swap '.' and ',' of an English-formatted number into the language's marks."""
    dec, group = _MARKS[lang]
    marks: dict[str, str | int | None] = {".": dec, ",": group}
    return plain.translate(str.maketrans(marks))


def _round_significant(x: float, digits: int) -> Decimal:
    """x rounded to ``digits`` significant digits, halves away from zero (as people round)."""
    d = Decimal(f"{x:.15g}")  # drop binary noise such as 4.2499999999999996
    if d == 0:
        return Decimal(0)
    quantum = Decimal(1).scaleb(d.adjusted() - digits + 1)
    return d.quantize(quantum, rounding=ROUND_HALF_UP)


def _round_places(x: float, places: int) -> Decimal:
    return Decimal(f"{x:.15g}").quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def number(x: float, lang: str, places: int = 0) -> str:
    """A plain number with grouping: ``8,192`` (en) / ``8.192`` (id); ``places`` decimals."""
    if not math.isfinite(x):
        return _non_finite(x)
    return _localise(f"{_round_places(x, places):,.{places}f}", lang)


def _non_finite(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "∞" if x > 0 else "−∞"


def decimal(x: float, lang: str) -> str:
    """The shortest plain spelling of a number, with grouping: ``0.5``, ``1``, ``1,000``."""
    if not math.isfinite(x):
        return _non_finite(x)
    text = f"{x:,.12f}".rstrip("0").rstrip(".")
    return _localise(text, lang)


def significant(x: float, lang: str, digits: int = 2) -> str:
    """A number to ``digits`` significant digits in plain notation: ``0.14``, ``91``, ``4.3``."""
    if not math.isfinite(x):
        return _non_finite(x)
    r = _round_significant(x, digits)
    return _localise(f"{r:,f}", lang)


# Counts up to twelve as a heading says them ("Six ideas in six steps", "Enam gagasan dalam enam langkah").
_COUNT_WORDS = {
    "en": ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"),
    "id": (
        "nol", "satu", "dua", "tiga", "empat", "lima", "enam", "tujuh", "delapan", "sembilan", "sepuluh", "sebelas",
        "dua belas",
    ),
}  # fmt: skip


def count_in_words(n: int, lang: str, capital: bool = False) -> str:
    """A small count as a word (0 to 12: ``six``, ``enam``; ``Six`` with ``capital``), else in digits."""
    words = _COUNT_WORDS.get(lang, _COUNT_WORDS["en"])
    text = words[n] if 0 <= n < len(words) else number(n, lang)
    return text[:1].upper() + text[1:] if capital else text


def percent(share: float, lang: str, digits: int = 2) -> str:
    """A share (0..1) as a percentage to 2 significant digits: ``4.3%``, ``91%``, ``0%``."""
    return significant(share * 100, lang, digits) + "%"


def percents(shares: Mapping[str, float], lang: str, digits: int = 2) -> dict[str, str]:
    """Shares shown together (the parts of one whole, 0..1 each) as percentages that add up to 100% as written.

    :func:`percent` rounds each on its own, and 67.5% and 32.5% then read 68% and 33%. Here each share keeps at
    least the ``digits`` significant digits :func:`percent` gives it, all at one number of decimals: the fewest
    from there, up to two more, at which the shares rounded half up add up to 100 (4.25%, 91% and 4.75% of 400
    values read 4.25%, 91% and 4.75%, exact; 67.5% and 32.5% read 67.5% and 32.5%). Where none does (a recorded
    run's shares of millions of values), they are rounded together at the first of those, largest remainder
    first (Hamilton's method; between equal remainders the larger share, then the order given). Decimals that
    are all 0 are left off (``91%``). A share of 0 reads 0%, and so does every one when none is above 0; one
    above 0 never does. The shares are taken as parts of their sum, so ``shares`` holds the whole (a share no
    card shows still counts).
    """
    total = math.fsum(shares.values())
    if not total > 0:
        return {key: "0%" for key in shares}
    parts = {key: Decimal(f"{share / total * 100:.15g}") for key, share in shares.items()}
    first = min(15, max(0, *(digits - 1 - p.adjusted() for p in parts.values() if p > 0)))
    for places in range(first, first + 3):
        units = {key: p.scaleb(places).to_integral_value(ROUND_HALF_UP) for key, p in parts.items()}
        if sum(units.values()) == 100 * 10**places:
            return {key: _percent_of_units(int(n), places, lang) for key, n in units.items()}
    units = {key: p.scaleb(first) for key, p in parts.items()}
    floors = {key: int(u) for key, u in units.items()}
    left = 100 * 10**first - sum(floors.values())
    order = sorted(units, key=lambda k: (units[k] - floors[k], units[k]), reverse=True)
    for key in order[: max(0, left)]:
        floors[key] += 1
    return {key: _percent_of_units(n, first, lang) for key, n in floors.items()}


def _percent_of_units(n: int, places: int, lang: str) -> str:
    """``n`` units of 10^-places percent, written without the decimals that are all 0: ``91%``, ``4.25%``."""
    while places and n % 10 == 0:
        n, places = n // 10, places - 1
    return number(n / 10**places, lang, places) + "%"


def signed_percent(share: float, lang: str, digits: int = 2) -> str:
    """A share as a signed percentage, as a chart of gaps writes its bars: ``+4.3%``, ``−0.52%`` (a typographic
    minus), ``+0%``."""
    return ("+" if share >= 0 else "−") + percent(abs(share), lang, digits)


def sci(x: float, lang: str, digits: int = 2) -> str:
    """e-notation as the lesson writes it: ``1.0e-6``, ``9.77e-4`` (3 digits), ``6.1e-5``.

    From 1 to 9,999 the plain spelling is used instead (``9.74``, ``16``).
    0 is written ``0``; inf and NaN as ``∞`` / ``NaN``.
    """
    if not math.isfinite(x):
        return _non_finite(x)
    if x == 0:
        return "0"
    r = _round_significant(x, digits)
    if 1 <= abs(r) < 10_000:  # 9.74 reads better than 9.74e0
        return ("−" if r < 0 else "") + significant(abs(float(r)), lang, digits)
    mantissa, exponent = f"{r:.{digits - 1}e}".split("e")
    sign = "−" if mantissa.startswith("-") else ""
    return f"{sign}{_localise(mantissa.lstrip('-'), lang)}e{int(exponent)}"


def exact_or_sci(x: float, lang: str, digits: int = 5) -> str:
    """``x`` written exactly where that is short, else in e-notation: a format's range ends, say.

    Exactly (with grouping) when ``x`` is below a million and its exact decimal value has at most
    ``digits`` significant digits: ``7.5``, ``0.0625``, ``65,504``. Else :func:`sci` with 2 digits:
    ``6.0e-8`` (2^-24), ``3.4e38``. 0 is ``0``; inf and NaN as ``∞`` / ``NaN``.
    """
    if not math.isfinite(x):
        return _non_finite(x)
    if abs(x) < 1e6 and len(Decimal(x).normalize().as_tuple().digits) <= digits:
        return ("−" if x < 0 else "") + decimal(abs(x), lang)
    return sci(x, lang)


def full_precision(x: float, lang: str) -> str:
    """A value to full float precision, written the local way (for hover text)."""
    if not math.isfinite(x):
        return sci(x, lang)
    text = f"{x:.17g}"
    if "e" in text:
        m, e = text.split("e")
        return f"{m.replace('.', ',') if lang == 'id' else m}e{int(e)}"
    return text.replace(".", ",") if lang == "id" else text


def gigabytes(n_bytes: float, lang: str) -> str:
    """Decimal gigabytes (1 GB = 1e9 bytes) with one decimal: ``107.8 GB`` / ``107,8 GB``."""
    return f"{number(n_bytes / 1e9, lang, 1)} GB"


def seconds(s: float, lang: str) -> str:
    """A duration: whole seconds from 10 s up (``21 s``), else 2 significant digits (``1.3 s``)."""
    if not math.isfinite(s):
        return _non_finite(s)
    return f"{number(s, lang) if s >= 10 else significant(s, lang, 2)} s"


def ratio(r: float, lang: str) -> str:
    """A speed-up or ratio: ``16×`` from 10 up, one decimal down to where that still reads 1.0 (``2.5×``), and
    below it two significant digits (``0.50×``, ``0.018×``): a CPU's emulated BF16 can run at a fiftieth of FP32's
    speed, which one decimal would write as ``0.0×``."""
    if not math.isfinite(r):
        return _non_finite(r)
    if r >= 10:
        return f"{number(r, lang)}×"
    if r >= 0.95 or r <= 0:
        return f"{number(r, lang, 1)}×"
    return f"{significant(r, lang, 2)}×"


def power_of_two(k: int) -> str:
    """``2^16``; the same in every language."""
    return f"2^{k}"


_SCALE_WORDS = {
    "en": ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")),
    "id": ((1e12, " triliun"), (1e9, " miliar"), (1e6, " juta"), (1e3, " ribu")),
}


def compact(x: float, lang: str) -> str:
    """A large count in short form, 4 significant digits without trailing zeros: ``6.74B`` / ``6,74 miliar``."""
    for size, suffix in _SCALE_WORDS[lang]:
        if abs(x) >= size:
            text = f"{_round_significant(x / size, 4):f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text
            return _localise(text, lang) + suffix
    return number(x, lang)


def compact_exact(count: float, lang: str) -> str:
    """A whole count in short form with every digit kept: ``7.5B`` / ``7,5 miliar``, ``1.234567891B``.

    Unlike :func:`compact` nothing is rounded, so the text reads back as the
    same count (:func:`lensa.ui.controls.parse_count` reads both languages).
    Below a thousand it is the plain number.
    """
    if not math.isfinite(count):
        return _non_finite(count)
    for size, suffix in _SCALE_WORDS[lang]:
        if abs(count) >= size:
            mantissa = (Decimal(int(count)) / Decimal(int(size))).normalize()
            return _localise(f"{mantissa:f}", lang) + suffix
    return number(count, lang)


def states_formula(params: float, whole_bytes: float, split_bytes: float, gpus: int, lang: str) -> str:
    """Step 1's model-state sum per GPU: ``6.74B × 16 B``, ``70B × 16 B ÷ 8`` or ``7B × (4 + 12 ÷ 8) B``.

    ``whole_bytes`` and ``split_bytes`` are bytes a parameter that every GPU
    keeps and that ZeRO splits over ``gpus`` (:func:`lensa.models.memory.split_bytes_per_param`).
    """
    count = compact(params, lang)
    whole, split, n = number(whole_bytes, lang), number(split_bytes, lang), number(gpus, lang)
    if split_bytes == 0:
        return f"{count} × {whole} B"
    if whole_bytes == 0:
        return f"{count} × {split} B ÷ {n}"
    return f"{count} × ({whole} + {split} ÷ {n}) B"


def teraflops(flops_per_s: float, lang: str, digits: int = 4) -> str:
    """A rate in FLOP/s written in TFLOP/s (10**12) to ``digits`` significant digits: ``312``, ``19,5``."""
    return significant(flops_per_s / 1e12, lang, digits)
