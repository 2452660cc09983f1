"""The sentences issue 29's second fact-check corrected, each against an independent source and the text that says it;
and the lab's words, which name no module or script (item 5).

Every test reads both catalogues, so a sentence that drifts back to the old claim, in either language, fails here.
The sources: ml_dtypes' and numpy's casts, torch's own autocast tables and casts, gfloat's MX block formats, and
Lensa's core where the claim is about what the lesson computes.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from lensa.facts import PROSE_NUMBERS
from lensa.numerics import blockscale as B
from lensa.numerics import formats as F
from lensa.ui import i18n
from tests.conftest import requires_torch
from tests.pagetools import open_page

pytestmark = [pytest.mark.numpy_kernels, pytest.mark.torch_kernels]  # rerun by make test-kernels

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LANGS = i18n.LANGUAGES


def raw(key: str, lang: str) -> str:
    """The catalogue's text for ``key``, placeholders unfilled."""
    return i18n.catalogue(lang)[key]


def num(x: float, lang: str, places: int) -> str:
    return i18n.number(x, lang, places)


def paragraphs(key: str, lang: str) -> list[str]:
    return [p for p in raw(key, lang).strip().split("\n\n") if p]


# --- 1. OCP's floor rule: past 448 above a significand of 1.75, clamped only above 1.8125 --------------------------

E4M3 = F.get_format("fp8_e4m3")
TOP_SIGNIFICAND = E4M3.max / 2.0**E4M3.emax  # 1.75
CLAMP_SIGNIFICAND = E4M3.overflow_threshold / 2.0**E4M3.emax  # 1.8125 = 29/16


def one_block(significand: float) -> np.ndarray:
    """32 values: 31 small ones and one whose significand is ``significand`` (times 2**3)."""
    x = np.full(32, 0.01, np.float32)
    x[5] = np.float32(significand * 8)
    return x


def test_the_two_significands_are_e4m3s():
    assert (TOP_SIGNIFICAND, CLAMP_SIGNIFICAND) == (1.75, 29 / 16)
    # ml_dtypes' own cast, independent of lensa: 256 × 1.8125 = 464 still rounds to 448 (a tie, to the even 448);
    # just past it rounds beyond 448, where ml_dtypes, not saturating, gives NaN
    cast = [float(np.float32(v).astype(ml_dtypes.float8_e4m3fn)) for v in (256 * 1.76, 464.0, 256 * 1.82)]
    assert cast[:2] == [448.0, 448.0] and math.isnan(cast[2])


@pytest.mark.parametrize(
    ("significand", "saturated", "regime"),
    [
        (1.5, 0, "fits"),
        (1.75, 0, "fits"),
        (1.76, 0, "rounds_back"),
        (1.78, 0, "rounds_back"),
        (1.8, 0, "rounds_back"),
        (1.8125, 0, "rounds_back"),
        (1.82, 1 / 32, "saturates"),
        (1.9, 1 / 32, "saturates"),
    ],
)
def test_ocp_floor_rule_by_the_blocks_largest_significand(significand, saturated, regime):
    x = one_block(significand)
    floor, up = B.encode(x, "mxfp8_e4m3"), B.encode(x, "mxfp8_e4m3_ceil")
    assert B.lost(x, "mxfp8_e4m3").saturated == saturated
    assert B.floor_regime(x) == regime
    # the two rules part exactly where the significand passes 1.75
    assert (floor.block_scales[0] != up.block_scales[0]) == (significand > TOP_SIGNIFICAND)
    if regime == "rounds_back":  # past 448 once scaled, and stored as 448 × the scale: rounded back, not clamped
        assert x[5] / floor.block_scales[0] > E4M3.max and floor.stored[5] == E4M3.max * floor.block_scales[0]


def test_floor_regime_of_a_tensor_is_its_worst_block_and_needs_a_floor_recipe():
    blocks = np.concatenate([one_block(1.5), one_block(1.78)])
    assert B.floor_regime(blocks) == "rounds_back"
    assert B.floor_regime(np.concatenate([blocks, one_block(1.9)])) == "saturates"
    assert B.floor_regime(np.zeros(64, np.float32)) == "fits"
    with pytest.raises(ValueError, match="floor rule"):
        B.floor_regime(blocks, "mxfp8_e4m3_ceil")


def _clamp_words(lang: str) -> re.Pattern[str]:
    return re.compile(r"clamp" if lang == "en" else r"\b(?:ditahan|menahan)")


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("regime", ["fits", "rounds_back", "saturates"])
def test_each_regimes_sentence_says_where_rounding_stops_bringing_the_value_back(lang, regime):
    text = raw(f"blocks.explain_floor_{regime}", lang)
    top, clamp = num(TOP_SIGNIFICAND, lang, 2), num(CLAMP_SIGNIFICAND, lang, 4)
    assert top in text and clamp in text and "464" in text
    # whatever is said to be clamped is said so only once the text has reached 1.8125, never at 1.75
    first_clamp = _clamp_words(lang).search(text)
    assert first_clamp is not None and text.index(clamp) < first_clamp.start()


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(("outlier", "regime"), [("0", "fits"), ("0.75", "saturates")])
def test_the_block_page_says_the_regime_the_core_finds(lang, outlier, regime):
    x = (np.random.default_rng(21).standard_normal(32) * 1e-6).astype(np.float32)  # the page's block at its defaults
    x[5] = np.float32(float(np.abs(np.delete(x, 5)).max()) * 2.0 ** float(outlier))
    assert B.floor_regime(x) == regime
    at = open_page("blocks", lang=lang, outlier=outlier)
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(m.value for m in at.markdown)
    others = {"fits", "rounds_back", "saturates"} - {regime}
    start = lambda key: raw(f"blocks.explain_floor_{key}", lang).split("{")[0]  # noqa: E731
    assert start(regime) in shown and not any(start(o) in shown for o in others)


def test_the_readmes_block_scaling_bullet_names_both_significands():
    readme = README.read_text()
    bullet = readme[readme.index("- **Block scaling**") :].split("\n- ")[0]
    assert "1.75" in bullet and "1.8125" in bullet and "464" in bullet
    assert "above 1.75, MXFP8's OCP scale saturates it" not in " ".join(bullet.split())


# --- 2. autocast keeps more than softmax, normalisation and losses in FP32 --------------------------------------------

FP32_POINTWISE = ("exp", "log", "pow", "rsqrt", "reciprocal", "softplus")
FP32_REDUCTIONS = ("sum", "prod", "cumsum", "cumprod")
WIDEST = ("addcmul", "addcdiv", "atan2", "dot")


def _autocast_lists() -> dict[str, set[str]]:
    """The op lists of the installed torch's ATen/autocast_mode.h, from which CUDA autocast registers its kernels
    (autocast_mode.cpp: AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE as fp32, AT_FORALL_PROMOTE as promote)."""
    import torch

    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    text = header.read_text()
    lists = {}
    for name in ("AT_FORALL_FP32", "AT_FORALL_FP32_SET_OPT_DTYPE", "AT_FORALL_PROMOTE"):
        body = re.search(rf"#define {name}\(_\)(.*?)\n\n", text, re.S)
        assert body is not None, name
        lists[name] = set(re.findall(r"_\((\w+)", body.group(1)))
    return lists


@requires_torch
@pytest.mark.parametrize("lang", LANGS)
def test_autocast_runs_pointwise_functions_and_reductions_in_fp32_and_some_ops_in_the_widest_type(lang):
    import torch

    lists = _autocast_lists()
    fp32 = lists["AT_FORALL_FP32"] | lists["AT_FORALL_FP32_SET_OPT_DTYPE"]
    assert set(FP32_POINTWISE) | set(FP32_REDUCTIONS) <= fp32
    assert {"softmax", "layer_norm", "mse_loss"} <= fp32 and not {"gelu", "add", "mm"} & fp32
    assert set(WIDEST) <= lists["AT_FORALL_PROMOTE"]
    for op in (*FP32_POINTWISE, *FP32_REDUCTIONS, *WIDEST):  # and this torch registers a CUDA autocast kernel for it
        overload = "aten::pow.Tensor_Scalar" if op == "pow" else f"aten::{op}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(overload, "AutocastCUDA"), op
    autocast = paragraphs("speed.notes", lang)[1]
    named = set(re.findall(r"\b[a-z0-9]+\b", autocast))
    assert set(FP32_POINTWISE) | set(FP32_REDUCTIONS) | set(WIDEST) <= named
    assert "FP32" in autocast and "softmax" in autocast


# --- 3. E4M3 for weights and activations, E5M2 for gradients, is the per-tensor HYBRID default only ------------------


E4M3_FOR_ALL_ID = ("E4M3 untuk setiap tensor", "E4M3 untuk gradient juga")


@pytest.mark.parametrize("lang", LANGS)
def test_the_fp8_formats_are_said_per_recipe(lang):
    # Lensa's own block recipes, DeepSeek-V3's tiles and blocks and MXFP8, store every tensor as E4M3
    assert {B.RECIPES[k].element for k in ("fp8_1x128", "fp8_128x128", "mxfp8_e4m3", "mxfp8_e4m3_ceil")} == {"fp8_e4m3"}
    fp8 = paragraphs("speed.notes", lang)[2]
    assert "HYBRID" in fp8 and "Float8BlockScaling" in fp8 and "MXFP8BlockScaling" in fp8
    assert "DeepSeek-V3" in fp8 and "(/blocks)" in fp8
    # step 5 says the same: the E5M2-for-gradients rule is the per-tensor recipes'
    step5 = raw("bf16.fp8_explain", lang)
    assert "(/blocks)" in step5
    every, too = {"en": ("E4M3 for every tensor", "E4M3 for the gradients too"), "id": E4M3_FOR_ALL_ID}[lang]
    assert every in fp8 and too in step5


# --- 4. FP16: 65,504 < x < 65,520 rounds to 65,504; only 65,520 and above become inf -------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_fp16_overflows_only_from_65520(lang):
    fp16 = F.get_format("fp16")
    below, at = np.float32(65519.99), np.float32(65520.0)
    with np.errstate(over="ignore"):
        assert float(below.astype(np.float16)) == 65504.0 and math.isinf(float(at.astype(np.float16)))  # numpy
    assert float(F.quantize(float(below), "fp16")) == fp16.max and math.isinf(float(F.quantize(65520.0, "fp16")))
    assert fp16.overflow_threshold == 65520.0
    faq = raw("overview.faq_a5", lang)
    first = faq.split("inf")[0]  # what the answer says becomes inf
    assert num(fp16.overflow_threshold, lang, 0) in first and num(fp16.max, lang, 0) in faq


@requires_torch
def test_torchs_fp16_cast_agrees():
    import torch

    x = torch.tensor([65505.0, 65519.0, 65520.0, 65521.0])
    assert x.half().float().tolist() == [65504.0, 65504.0, math.inf, math.inf]


# --- 5. NVFP4: the block of 16 without the outlier keeps nearly all its values, not all -----------------------------


def _nvfp4_by_hand(x: np.ndarray) -> np.ndarray:
    """NVFP4 of ``x`` (a multiple of 16 values) with ml_dtypes' casts: FP32 tensor scale amax / (448 × 6), E4M3 block
    scale amax_block / 6 / tensor scale, E2M1 elements."""
    blocks = x.reshape(-1, 16).astype(np.float32)
    ts = np.float32(np.abs(x).max()) / np.float32(448.0 * 6.0)
    bs = (np.abs(blocks).max(axis=1) / np.float32(6.0) / ts).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    scale = (ts * bs)[:, None]
    elements = np.clip(blocks / scale, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    return (elements.astype(np.float64) * scale.astype(np.float64)).reshape(x.shape)  # stored = element × scale


@pytest.mark.parametrize("lang", LANGS)
def test_nvfp4_flushes_the_smallest_values_of_the_block_without_the_outlier(lang):
    # quiz.blocks_q1's block: 32 values, one of them 2^8 times the largest of the others (the page's, at outlier=8)
    x = (np.random.default_rng(21).standard_normal(32) * 1e-6).astype(np.float32)
    x[5] = np.float32(float(np.abs(np.delete(x, 5)).max()) * 2.0**8)
    stored = B.quantize(x, "nvfp4")
    np.testing.assert_array_equal(stored, _nvfp4_by_hand(x))
    second = slice(16, 32)  # the block without the outlier
    flushed = (stored[second] == 0) & (x[second] != 0)
    small = np.abs(x[second]) < np.abs(x[second]).max() / 24
    assert flushed.any() and not flushed.all() and np.array_equal(flushed, small)
    why = raw("quiz.blocks_q1_why", lang)
    assert "1/24" in why and num(0.25, lang, 2) in why
    assert "keeps its values." not in why and "tetap menyimpan nilainya." not in why
    assert any(p.value == 24 and "NVFP4" in p.source for p in PROSE_NUMBERS)


# --- 6. Transformer Engine ships block scaling too: Float8BlockScaling ------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_block_notes_name_transformer_engines_float8_block_scaling(lang):
    tiles, blocks = B.RECIPES["fp8_1x128"], B.RECIPES["fp8_128x128"]
    assert (tiles.block, blocks.block, tiles.rule, blocks.rule) == ((1, 128), (128, 128), "amax", "amax")
    x = np.random.default_rng(6).standard_normal((4, 256)).astype(np.float32)
    scales = B.encode(x, tiles).block_scales
    assert not np.all(np.log2(scales) == np.round(np.log2(scales)))  # Lensa's tile scales are not rounded
    third = paragraphs("blocks.notes", lang)[2]
    assert "Float8BlockScaling" in third and "1×128" in third and "128×128" in third
    assert {"en": "powers of two", "id": "pangkat dua"}[lang] in third
    assert "per tensor (Transformer Engine) or" not in third


# --- 7. FP6 and FP4 are among the MX element formats, beside FP8 and INT8 ---------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_fp6_and_fp4_are_among_the_mx_element_formats(lang):
    from gfloat.formats import all_block_formats

    elements = {b.etype.name for b in all_block_formats if b.name.startswith("mx")}
    assert elements == {"ocp_e5m2", "ocp_e4m3", "ocp_e3m2", "ocp_e2m3", "ocp_e2m1", "ocp_int8"}
    text = raw("formats_mx.notes", lang)
    assert all(name.removeprefix("ocp_").upper() in text for name in elements)
    # The "also show" help names no MX element formats any more; should it again, it names them all.
    help_text = raw("also.help", lang)
    if "Microscaling" in help_text:
        assert all(name.removeprefix("ocp_").upper() in help_text for name in elements)
    among = {"en": "are among the element formats", "id": "termasuk format elemen"}[lang]
    assert among in raw("formats_mx.notes", lang)


# --- 8. E4M3 saturates at 448 as torch's cast does, from version 2.12 ------------------------------------------------


@requires_torch
def test_the_pinned_torch_saturates_e4m3_casts():
    import torch

    pinned = next(
        line.split("==")[1].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    assert torch.__version__.split("+")[0] == pinned
    got = torch.tensor([448.0, 464.0, 465.0, 500.0, 1e4, -500.0]).to(torch.float8_e4m3fn).float().tolist()
    assert got == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0]
    assert math.isnan(float(np.float32(465.0).astype(ml_dtypes.float8_e4m3fn)))  # ml_dtypes does not saturate
    assert tuple(int(p) for p in pinned.split(".")[:2]) >= (2, 12)


@pytest.mark.parametrize("lang", LANGS)
def test_the_legend_names_the_version_that_saturates(lang):
    legend = raw("formats.legend", lang)
    assert {"en": "from version 2.12", "id": "sejak versi 2.12"}[lang] in legend
    assert "NaN" in legend and any(p.value == 2.12 for p in PROSE_NUMBERS)


# --- 9. arXiv:2506.08027 has four authors in its current version ----------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_the_mxfp8_recipe_is_cited_as_its_current_version(lang):
    three = re.compile(r"Mishra, Stosic,? (?:and|dan) Layton")
    catalogue = i18n.catalogue(lang)
    assert not [k for k, v in catalogue.items() if three.search(v)]
    assert "Micikevicius" in paragraphs("blocks.notes", lang)[0]
    cited = ("Mishra, Stosic, Layton and Micikevicius", "Mishra, Stosic, Layton, dan Micikevicius", "Mishra et al.")
    cited += ("Mishra dkk.",)
    for key, v in catalogue.items():  # every mention of the paper names all four authors or says "et al."
        assert v.count("Mishra") == sum(v.count(c) for c in cited), key
    assert "Micikevicius" in (B.__doc__ or "")


# --- the lab speaks to learners: no module path or script in what the lab page shows (item 5) ------------------------

CODE_WORDS = re.compile(r"lensa\.[a-z_]|\w\.py\b|scripts/")


def lab_keys() -> set[str]:
    """The keys the lab page can show: its own and the live parts' sections, and every key pages/lab.py and
    lensa/ui/live_view.py name (read from their calls, tests/catalogue_keys.py)."""
    from tests import catalogue_keys

    usage = catalogue_keys.scan(ROOT, {k.split(".")[0] for k in i18n.catalogue("en")})
    named = {k for k, where in usage.exact.items() if any(w.startswith(LAB_FILES) for w in where)}
    return named | {k for k in i18n.catalogue("en") if k.startswith(("lab.", "live."))}


LAB_FILES = ("pages/lab.py", "lensa/ui/live_view.py")


@pytest.mark.parametrize("lang", LANGS)
def test_no_lab_sentence_names_a_module_or_a_script(lang):
    keys = lab_keys()
    assert {"lab.memory_caption", "lab.intro", "live.error_crashed", "limits.recordings_busy"} <= keys
    assert not notes_keys(keys)  # the lab page has no notes: everything it says is visible
    named = {k: CODE_WORDS.findall(raw(k, lang)) for k in sorted(keys)}
    assert {k: v for k, v in named.items() if v} == {}


def notes_keys(keys: set[str]) -> set[str]:
    return {k for k in keys if k.split(".")[-1].startswith("notes")}


def test_the_code_words_are_found():
    found = CODE_WORDS.findall("(lensa.models.lab_memory.lab_mlp_memory) and scripts/gpu_check.py")
    assert found == ["lensa.m", "scripts/", "k.py"]
    assert not CODE_WORDS.findall("Lensa's prediction, in Lensa. A 16-bit copy.")
