"""A way in: the glossary's terms are linked where the lesson first uses them, in the reader's language; their
definitions say what the core and the libraries say; step 2 shows how a float is stored, bit by bit."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from streamlit.testing.v1.element_tree import Block

from lensa.models.scaling import TORCH_GROWTH_INTERVAL, TORCH_INIT_SCALE
from lensa.models.speed import GPUS, TERA
from lensa.numerics.formats import FORMATS, spacing
from lensa.ui import glossary, i18n, layout
from lensa.ui.site import PAGES_BY_KEY
from tests.pagetools import notices, open_page

pytestmark = [pytest.mark.numpy_kernels, pytest.mark.torch_kernels]  # rerun by make test-kernels

_URL = re.compile(r"\]\(glossary\?lang=(\w+)&term=(\w+)\)")


def _all_texts(node) -> list[str]:
    """Every text the main area holds, the closed sections' too (what a learner reads after opening them)."""
    out: list[str] = []
    if isinstance(node, Block):
        for child in node.children.values():
            out += _all_texts(child)
        return out
    if node.type in ("markdown", "caption", "info", "success", "warning", "title", "subheader"):
        out.append(str(node.value))
    if node.type == "radio":
        out += [node.proto.label, *node.proto.options]
    return out


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_glossary_link_names_a_term_in_its_own_language(lang):
    found = [(key, m.groups()) for key, text in i18n.catalogue(lang).items() for m in _URL.finditer(text)]
    assert len(found) > len(glossary.TERMS)  # the texts really link
    assert {link_lang for _, (link_lang, _) in found} == {lang}
    assert {term for _, (_, term) in found} <= set(glossary.TERM_KEYS)
    assert "(glossary:" not in " ".join(i18n.catalogue(lang).values())  # every marker became a link


def test_a_link_marker_for_an_unknown_term_would_be_found():
    text = "[spacing](glossary?lang=en&term=spaceing)"
    assert {t for _, t in _URL.findall(text)} - set(glossary.TERM_KEYS) == {"spaceing"}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("first", sorted({t.first for t in glossary.TERMS}))
def test_each_term_is_linked_on_the_page_that_first_uses_it(first, lang):
    at = open_page(first, lang=lang)
    assert not at.exception
    linked = {term for text in _all_texts(at.main) for link_lang, term in _URL.findall(text) if link_lang == lang}
    wanted = {t.key for t in glossary.TERMS if t.first == first}
    assert wanted <= linked, wanted - linked


def test_terms_are_listed_in_lesson_order_and_their_first_pages_exist():
    assert len(set(glossary.TERM_KEYS)) == len(glossary.TERM_KEYS)
    assert all(t.first in PAGES_BY_KEY for t in glossary.TERMS)
    order = list(PAGES_BY_KEY)
    firsts = [order.index(t.first) for t in glossary.TERMS]
    assert firsts == sorted(firsts)


# --- the definitions say what the core and the libraries say ---------------------------------------------------


def _definition(term: str, lang: str) -> str:
    return i18n.text(lang, f"glossary.def_{term}")


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_definitions_carry_the_formats_own_numbers(lang):
    fp16, bf16, fp32 = FORMATS["fp16"], FORMATS["bf16"], FORMATS["fp32"]
    e4m3, e5m2 = FORMATS["fp8_e4m3"], FORMATS["fp8_e5m2"]
    sci = lambda x, digits=2: i18n.sci(x, lang, digits)  # noqa: E731
    num = lambda x: i18n.number(x, lang)  # noqa: E731
    assert float(np.finfo(np.float16).smallest_normal) == fp16.smallest_normal  # the core against numpy
    assert float(np.finfo(np.float16).max) == fp16.max and float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) == bf16.max
    d = _definition("fp16", lang)
    assert all(s in d for s in (sci(fp16.smallest_normal), num(fp16.max), sci(fp16.smallest_subnormal)))
    assert f"{fp16.exponent_bits} " in d and f"{fp16.significand_bits} " in d
    d = _definition("fp32", lang)
    assert f"{fp32.exponent_bits} " in d and f"{fp32.significand_bits} " in d and f"{fp32.significand_bits + 1} " in d
    d = _definition("significand", lang)
    for f in (fp16, bf16, fp32):
        assert f"{f.significand_bits} " in d and f"{f.significand_bits + 1}" in d
    d = _definition("subnormal", lang)
    assert sci(fp16.smallest_subnormal) in d and sci(fp16.smallest_normal) in d
    assert sci(fp16.smallest_subnormal / 2) in _definition("underflow", lang)
    d = _definition("overflow", lang)
    assert num(fp16.max) in d and num(fp16.overflow_threshold) in d and not e4m3.has_inf
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(fp16.overflow_threshold).astype(np.float16))  # 65,520 rounds to inf, ties to even
    assert np.float32(fp16.overflow_threshold - 1).astype(np.float16) == fp16.max
    d = _definition("spacing", lang)
    for fmt in ("fp16", "bf16", "fp32"):
        assert sci(float(spacing(1.0, fmt)), 3) in d
    d = _definition("fp8", lang)
    assert num(e4m3.max) in d and num(e5m2.max) in d and e5m2.exponent_bits == fp16.exponent_bits
    d = _definition("dynamic_range", lang)
    assert sci(bf16.smallest_subnormal) in d and sci(bf16.max, 3) in d
    d = _definition("exponent", lang)
    assert f"{fp16.bias}" in d and f"2^{fp16.emin}".replace("-", "−") in d
    d = _definition("bf16", lang)
    assert f"{bf16.exponent_bits} " in d and f"{bf16.significand_bits} " in d
    assert float(spacing(1.0, "bf16")) / float(spacing(1.0, "fp16")) == 8 and "8 " in d


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_definitions_of_tools_and_hardware_match_their_sources(lang):
    import inspect

    d = _definition("gradscaler", lang)
    assert TORCH_INIT_SCALE == 2.0**16 and "2^16" in d and i18n.number(TORCH_GROWTH_INTERVAL, lang) in d
    try:
        import torch
    except ModuleNotFoundError:
        torch = None
    if torch is not None:  # the real GradScaler's defaults, where torch is installed
        defaults = inspect.signature(torch.amp.GradScaler).parameters
        assert defaults["init_scale"].default == TORCH_INIT_SCALE
        assert defaults["growth_interval"].default == TORCH_GROWTH_INTERVAL
        assert defaults["backoff_factor"].default == 0.5 and defaults["growth_factor"].default == 2.0
    a100 = GPUS["a100"]
    d = _definition("tensor_core", lang)
    assert i18n.number(a100.peak("bf16") / TERA, lang) in d
    assert i18n.number(a100.peak("fp32") / TERA, lang, 1) in d


# --- the glossary page -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_glossary_opens_at_the_linked_term_and_lists_every_term(lang):
    at = open_page("glossary", lang=lang, term="subnormal")
    assert not at.exception and notices(at) == []
    first = at.markdown[1].value  # after the headline: the entry the link asked for, in its box
    assert first.startswith(f"**{i18n.text(lang, 'glossary.term_subnormal')}**")
    assert i18n.text(lang, "glossary.def_subnormal") in first
    names = [m.value.split("**")[1] for m in at.markdown[2:] if m.value.startswith("**")]
    expected = sorted((i18n.text(lang, f"glossary.term_{k}") for k in glossary.TERM_KEYS), key=str.casefold)
    assert names == expected
    links = [e.proto for e in at.main.get("page_link")]
    assert any(p.page == "fp16_range" and f"lang={lang}" in p.query_string for p in links)


def test_an_unknown_term_in_the_link_gets_a_notice_and_the_whole_list():
    at = open_page("glossary", lang="en", term="mantissa_bits")
    assert not at.exception and len(notices(at)) == 1
    assert not at.markdown[1].value.startswith(f"**{i18n.text('en', 'glossary.term_subnormal')}**")


# --- how a float is stored ---------------------------------------------------------------------------------------


def test_how_a_float_is_stored_shows_fp16s_bits_as_numpy_stores_them():
    at = open_page("fp16_range", lang="en")
    title = i18n.text("en", "glossary.primer_title")
    primer = next(e for e in at.expander if e.label == title)
    table = next(m.value for m in primer.markdown if m.value.startswith("|"))
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert len(rows) == len(layout.PRIMER_EXAMPLES)
    for text, row in zip(layout.PRIMER_EXAMPLES, rows, strict=True):
        code = int(np.float16(float(text)).view(np.uint16))
        bits = f"{code:016b}"
        shown = [re.sub(r"[^01]", "", cell.split("[", 1)[1]) for cell in row[1:4]]
        assert shown == [bits[0], bits[1:6], bits[6:]], text
    body = primer.markdown[0].value
    fp16 = FORMATS["fp16"]
    assert f"{fp16.exponent_bits} exponent bits" in body and f"{fp16.significand_bits} significand bits" in body
    assert f"bias of {fp16.bias}" in body and f"{fp16.significand_bits + 1} significant bits" in body
    assert "2^−14" in body


def test_the_account_of_a_float_is_on_its_page_only():
    title = i18n.text("en", "glossary.primer_title")
    assert glossary.first_page(glossary.PRIMER_TERM) == "fp16_range"
    assert title not in [e.label for e in open_page("loss_scaling", lang="en").expander]
