"""Every number written in the catalogues is computed or sourced.

A number in either catalogue must be one of: a placeholder (filled by a page from the core); a citation's year or
identifier (the ``refs`` keys); a figure of the GPU table (``speed.source_*``, :data:`lensa.models.speed.GPUS`) or of
the model table (``memory.model_*``, :data:`lensa.models.configs.PRESETS`); or a value listed with its source in
:data:`lensa.facts.PROSE_NUMBERS`. A number typed into the prose without a source fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import pytest

from lensa.facts import PROSE_NUMBERS
from lensa.models.configs import PRESETS
from lensa.models.speed import GPUS
from lensa.ui import i18n

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

# A number: a hex code or hex float, or digits with grouping and decimal marks and an optional e-exponent. Not
# inside a word (FP16, binary32, Llama3) nor right after a mark (the bit pattern S.1111.111, a version's tail).
_NUMBER = re.compile(r"(?<![\w.,])(0x[0-9A-Fa-f]+(?:p[-−]?\d+)?|\d+(?:[.,]\d+)*(?:e[-−]?\d+)?)(?![\w])")
_PLACEHOLDER = re.compile(r"\{\w+\}")
_LINK = re.compile(r"\]\([^)]*\)|https?://\S+")
# Citation identifiers: arXiv numbers, years in parentheses or after a venue, and the standard's number.
_CITATION = re.compile(
    r"arXiv:\d{4}\.\d{4,5}(?:v\d+)?|\((?:19|20)\d\d\)|\b(?:ICLR|ICML|NeurIPS) (?:19|20)\d\d|IEEE 754-\d{4}"
    r"|\b(?:Figures?|Tables?|Gambar|Tabel|section|bagian|appendix|lampiran) (?:[A-Z]\.)?\d+(?:\.\d+)?(?:\(\w\))?"
    r"(?: (?:and|dan) \d+)?"
)
_VERSION = re.compile(r"(?:version|versi) (\d+\.\d+)")


def _value(written: str, lang: str) -> tuple[float, int, int]:
    """(mantissa, decimal places of the mantissa, power of ten) of a written number in ``lang``."""
    if written.lower().startswith("0x"):
        return (float.fromhex(written) if "p" in written.lower() else float(int(written, 16))), 0, 0
    text = written.replace("−", "-")
    mantissa, _, exponent = text.partition("e")
    decimal, group = (",", ".") if lang == "id" else (".", ",")
    mantissa = mantissa.replace(group, "").replace(decimal, ".")
    places = len(mantissa.partition(".")[2])
    return float(mantissa), places, int(exponent or 0)


def _matches(value: float, mantissa: float, places: int, power: int) -> bool:
    """``value`` written to ``places`` decimals at 10**power is the written mantissa (signs aside)."""
    shown = round(abs(value) / 10.0**power, places)
    return abs(shown - mantissa) <= 10.0 ** -(places + 6) * max(1.0, mantissa)


def numbers_in(text: str, lang: str) -> list[str]:
    """The numbers written in ``text``, placeholders, links and citation identifiers left out; versions as 1.12."""
    text = _LINK.sub(" ", _PLACEHOLDER.sub(" ", text))
    text = _CITATION.sub(" ", text)
    versions = _VERSION.findall(text)
    text = _VERSION.sub(" ", text)
    return [m.group(1) for m in _NUMBER.finditer(text)] + [f"version:{v}" for v in versions]


def _allowed_values(key: str) -> list[float]:
    """The values a number in ``key`` may have: the facts table, plus the GPU or model table for their keys."""
    allowed = [p.value for p in PROSE_NUMBERS]
    if key.startswith("speed.source_"):
        gpu = GPUS[key.removeprefix("speed.source_")]
        allowed = [_value(w, "en")[0] * 10.0 ** _value(w, "en")[2] for w in numbers_in(gpu.source, "en")]
    elif key.startswith("memory.model_") and key != "memory.model_custom":
        preset = PRESETS[key.removeprefix("memory.model_").replace("_", "-")]
        words = " ".join((preset.name, preset.config_source, preset.count_source))
        allowed += [_value(w, "en")[0] * 10.0 ** _value(w, "en")[2] for w in numbers_in(words, "en")]
        allowed += [preset.published_params / 1e9, preset.published_params / 1e6]
    return allowed


def unsourced(catalogue: Mapping[str, str], lang: str) -> list[tuple[str, str]]:
    """(key, written number) for every number in ``catalogue`` that is neither a placeholder, a citation's
    identifier, nor a value the core's tables list."""
    found = []
    for key, text in catalogue.items():
        allowed = _allowed_values(key)
        for written in numbers_in(text, lang):
            if written.startswith("version:"):
                mantissa, places, power = _value(written.removeprefix("version:"), "en")
            else:
                mantissa, places, power = _value(written, lang)
            if not any(_matches(v, mantissa, places, power) for v in allowed):
                found.append((key, written))
    return found


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_number_in_the_catalogue_is_computed_or_sourced(lang):
    catalogue = i18n.catalogue(lang)
    assert unsourced(catalogue, lang) == []
    # the scan reads the numbers that are there
    counted = sum(len(numbers_in(text, lang)) for text in catalogue.values())
    assert counted > 300


def _with(catalogue: Mapping[str, str], key: str, extra: str) -> dict[str, str]:
    return {**catalogue, key: catalogue[key] + extra}


@pytest.mark.parametrize(
    ("lang", "typed"),
    [
        ("en", " Most runs use 37 layers."),  # a number nobody sourced
        ("en", " Its spacing at 1 is 9.78e-4."),  # close to 2^-10 = 9.77e-4, but not it at the written precision
        ("id", " Jaraknya di 1 adalah 9,78e-4."),
        ("en", " TF32 arrived in version 1.11."),
        ("en", " FP32 keeps it to within 0.3%."),  # the old kind of claim, with a made-up figure
    ],
)
def test_a_number_typed_into_the_prose_fails(lang, typed):
    catalogue = i18n.catalogue(lang)
    key = "master_weights.notes"
    assert unsourced(catalogue, lang) == []
    found = unsourced(_with(catalogue, key, typed), lang)
    assert found and all(k == key for k, _ in found)


@pytest.mark.parametrize(
    ("lang", "typed"),
    [
        ("en", " The spacing at 1 is {spacing}."),  # a placeholder
        ("en", " FP16's largest value is 65,504."),  # listed: lensa.numerics.formats
        ("id", " Nilai terbesar FP16 adalah 65.504, jaraknya di 1 adalah 9,77e-4."),
    ],
)
def test_placeholders_and_sourced_values_pass(lang, typed):
    catalogue = i18n.catalogue(lang)
    assert unsourced(_with(catalogue, "master_weights.notes", typed), lang) == []


def test_numbers_are_read_the_languages_way():
    assert numbers_in("9.77e-4 and 65,504 in S.1111.111 (0x7F), FP16, 2^−14", "en") == [
        "9.77e-4",
        "65,504",
        "0x7F",
        "2",
        "14",
    ]
    assert _value("65.504", "id")[0] == 65504 and _value("9,77e-4", "id") == (9.77, 2, -4)
    assert numbers_in("Micikevicius et al. (2017), ICLR 2018 — [arXiv:1710.03740](https://arxiv.org/x)", "en") == []
    assert numbers_in("since version 1.12", "en") == ["version:1.12"]


def test_a_gpu_source_line_may_carry_only_its_own_table_row():
    catalogue: dict[str, str] = dict(i18n.catalogue("en"))
    catalogue["speed.source_t4"] += " (FP16 130 TFLOPS with sparsity)"
    assert unsourced(catalogue, "en") == [("speed.source_t4", "130")]


def test_every_listed_value_is_a_finite_number_with_a_source():
    values: Iterable[float] = [p.value for p in PROSE_NUMBERS]
    assert all(isinstance(v, (int, float)) and v == v and abs(v) != float("inf") for v in values)
    assert all(len(p.source) > 10 for p in PROSE_NUMBERS)
