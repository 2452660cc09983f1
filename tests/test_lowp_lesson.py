"""lensa.lessons.low_bits, the "Training below 16 bits" page's numbers, against their definitions: E2M1's grid and
rounding (lensa.numerics.formats), a binomial mean, the Hadamard rotation as a matrix product, MXFP4
(lensa.numerics.blockscale), and the shipped comparison's file (its seed, command, arms and what
lensa.numerics.training_recipes says of their losses)."""

from __future__ import annotations

import inspect
import math
import re
from typing import get_args

import numpy as np
import pytest

from lensa.lessons import low_bits as LL
from lensa.numerics import blockscale, training_recipes
from lensa.numerics.formats import quantize
from lensa.runstats import reference_run
from lensa.ui import i18n
from tests.pagetools import open_page

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


@pytest.mark.parametrize("position", [0.0, 0.05, 0.25, 0.5, 0.7, 1.0])
def test_rounding_view_against_its_definition(position: float) -> None:
    v = LL.rounding_view(position)
    assert (v.low, v.high, v.step) == (1.0, 1.5, 0.5)  # E2M1's neighbours around 1
    assert v.value == 1.0 + 0.5 * position
    assert v.nearest == float(quantize(np.array([v.value]), "fp4_e2m1")[0])
    assert v.nearest_error == abs(v.nearest - v.value)
    assert v.p_up == pytest.approx(position)
    draws = np.random.default_rng(LL.ROUNDING_SEED).random(v.draws) < v.p_up
    assert v.ups == int(draws.sum())
    assert v.means[-1] == pytest.approx(float(np.where(draws, 1.5, 1.0).mean()))
    assert v.mean_error <= 4 * v.standard_error + 1e-12  # the seeded draws stay within 4 standard errors
    assert v.standard_error == pytest.approx(0.5 * math.sqrt(position * (1 - position) / v.draws))


def test_rounding_at_a_tie_goes_to_even_and_stochastic_rounding_keeps_the_mean() -> None:
    v = LL.rounding_view(0.5)
    assert v.nearest == 1.0 and v.nearest_error == 0.25  # 1.25: halfway, to the even neighbour
    assert abs(v.mean - 1.25) < abs(v.nearest - 1.25)
    with pytest.raises(ValueError, match="position"):
        LL.rounding_view(1.5)


@pytest.mark.parametrize("k", [0.0, 2.0, 5.0, 10.0])
def test_rotation_view_against_its_definition(k: float) -> None:
    v = LL.rotation_view(k)
    x = LL.outlier_block(k)
    assert np.array_equal(v.values, x.astype(np.float64))
    r = training_recipes.hadamard_matrix()
    assert np.array_equal(v.rotated, (x.astype(np.float64) @ r).astype(np.float32).astype(np.float64))
    others = np.abs(np.delete(x, LL.OUTLIER_AT))
    assert x[LL.OUTLIER_AT] == np.float32(others.max() * 2.0**k)
    enc = blockscale.encode(x, "mxfp4_e2m1")
    assert v.scale == enc.block_scales[0] == 2.0**v.scale_exponent
    rot = blockscale.encode(v.rotated.astype(np.float32), "mxfp4_e2m1")
    assert v.rotated_scale == rot.block_scales[0] == 2.0**v.rotated_scale_exponent
    assert np.allclose(v.restored, rot.stored @ r.T)
    assert v.flushed == int(np.sum((x != 0) & (enc.stored == 0)))
    assert v.sqnr_db == blockscale.sqnr_db(x, enc.stored)


def test_a_large_outlier_lowers_the_scale_by_a_quarter_and_nothing_is_flushed() -> None:
    """Rotated, every value carries a quarter of the outlier: the amax drops about fourfold, two powers of two."""
    v = LL.rotation_view(8.0)
    assert v.rotated_amax <= v.amax / 4 * 1.1
    assert v.rotated_scale_exponent == v.scale_exponent - 2
    assert v.flushed == LL.ROTATION_SIZE - 1 and v.rotated_flushed == 0


def _synthetic() -> LL.RecordedRecipes:
    steps = 40
    t = np.arange(steps, dtype=np.float32)
    arms = ("fp32", "bf16", "fp8_current", "mxfp4", "nvfp4", "nvfp4_recipe")
    losses = np.stack(
        [
            5 * np.exp(-t / 10) + 1.0,
            5 * np.exp(-t / 10) + 1.002,
            5 * np.exp(-t / 10) + 1.005,
            5 * np.exp(-t / 12) + 1.3,
            np.concatenate([5 * np.exp(-t[:20] / 10) + 1.2, np.full(20, np.nan, np.float32)]),
            5 * np.exp(-t / 10) + 1.05,
        ]
    ).astype(np.float32)
    counts = np.zeros((len(arms), 2, 3, 4), np.int64)
    counts[2] = [[[100, 90, 9, 1], [10, 10, 0, 0], [50, 40, 4, 0]], [[100, 100, 0, 0], [10, 10, 1, 0], [50, 50, 0, 5]]]
    meta = {
        "seed": 7,
        "command": "python -m lensa.live.lowp_reference",
        "recipe": {"steps": steps},
        "counted_steps": [1, 5],
    }
    return LL.RecordedRecipes(arms, ("a", "b"), ("input", "weight", "grad"), losses, counts, meta)


def test_comparison_view_from_a_file_of_ones_own() -> None:
    data = _synthetic()
    view = LL.comparison_view("fp8_current", data)
    by = {s.arm: s for s in view.summaries}
    bf16 = training_recipes.final_loss(data.losses_of("bf16"))
    assert by["fp8_current"].gap_bf16_pct == pytest.approx(
        (training_recipes.final_loss(data.losses_of("fp8_current")) - bf16) / bf16 * 100
    )
    assert by["bf16"].gap_bf16_pct == 0.0 and by["fp32"].flushed == 0.0 and by["fp32"].flushed_at is None
    assert by["nvfp4"].diverged and math.isnan(by["nvfp4"].gap_bf16_pct)
    assert view.diverged == ("nvfp4",) and view.close == ("fp8_current",)
    assert by["fp8_current"].flushed == pytest.approx(0.1) and by["fp8_current"].flushed_at == ("a", "input")
    assert by["fp8_current"].saturated == pytest.approx(0.1) and by["fp8_current"].saturated_at == ("b", "grad")
    assert set(view.curves) == {"fp32", "bf16", "fp8_current"}
    assert view.layer_rows[0] == ("a", "input", 100, pytest.approx(0.1), pytest.approx(0.01))
    assert (view.steps, view.seed, view.command) == (40, 7, "python -m lensa.live.lowp_reference")
    assert set(view.ablation) == {"nvfp4", "nvfp4_recipe"}
    with pytest.raises(ValueError, match="no recipe"):
        LL.comparison_view("bf16", data)


def test_the_shipped_comparison_is_what_its_command_made() -> None:
    """The file the page shows: every arm of lensa.live.lowp_reference, the reference run's steps, its seed and
    command; FP32 and BF16 train, and a recipe's counts are consistent (flushed <= not 0 <= values)."""
    data = LL.recorded()
    assert data.arms[:2] == ("fp32", "bf16") and set(data.arms[2:]) == set(training_recipes.TRAINING_RECIPES)
    recipe = data.meta["recipe"]
    assert isinstance(recipe, dict) and data.losses.shape == (len(data.arms), recipe["steps"])
    assert data.meta["command"].startswith("python -m lensa.live.lowp_reference")
    assert data.meta["seed"] == recipe["seed"]
    for base in ("fp32", "bf16"):
        assert not training_recipes.diverged(data.losses_of(base))
    c = data.counts
    assert (c[..., 2] <= c[..., 1]).all() and (c[..., 1] <= c[..., 0]).all() and (c[..., 3] <= c[..., 0]).all()
    assert not c[:2].any() and all(c[i].any() for i in range(2, len(data.arms)))
    assert LL.RECORDED.stat().st_size < 200_000


def test_the_step_by_step_gap_is_a_ratio_of_trailing_means() -> None:
    a = np.array([2.0, 4.0, 6.0, 8.0])
    b = np.array([1.0, 2.0, 3.0, 4.0])
    got = LL.relative_to_bf16(a, b, window=2)
    assert np.allclose(got, 100.0)  # twice BF16's everywhere
    c = np.array([1.0, 3.0, 3.0, 3.0])
    assert np.allclose(LL.relative_to_bf16(c, np.full(4, 2.0), window=2), [-50.0, 0.0, 50.0, 50.0])
    view = LL.comparison_view("nvfp4_recipe")
    data = LL.recorded()
    assert np.allclose(view.relative["fp32"], LL.relative_to_bf16(data.losses_of("fp32"), data.losses_of("bf16")))


@pytest.mark.parametrize("k", [0.0, 0.5, 2.0, 5.0, 8.0, 10.0])
def test_the_rotation_verdict_is_what_the_view_shows(k: float) -> None:
    v = LL.rotation_view(k)
    if v.scale_exponent == v.rotated_scale_exponent:
        assert v.verdict == "same_scale"
        # the same scale: the largest value, rotated or not, has the same power of two at or below it (OCP's rule)
        assert math.floor(math.log2(v.amax)) == math.floor(math.log2(v.rotated_amax))
    elif v.restored_others_sqnr_db - v.others_sqnr_db > LL.RECOVERED_DB:
        assert v.verdict == "recovers"
    else:
        assert v.verdict == "spreads"
    assert LL.outlier_times(k) == 2.0**k and LL.OUTLIER_POSITION == LL.OUTLIER_AT + 1


def _outlier_stops() -> tuple[float, ...]:
    from lensa.ui.site import PAGES_BY_KEY

    return PAGES_BY_KEY["low_bits"].control("outlier").stops  # type: ignore[union-attr]


def _explanation(v: LL.RotationView, lang: str) -> str:
    """The rotation's explanation as pages/low_bits.py fills it."""
    from lensa.ui import i18n

    def db(x: float) -> str:
        return "∞" if x == math.inf else "−∞" if not math.isfinite(x) else f"{i18n.number(x, lang, 1)} dB"

    return i18n.text(
        lang,
        f"low_bits.explain_rotation_{v.verdict}",
        before=str(v.scale_exponent),
        after=str(v.rotated_scale_exponent),
        flushed=i18n.number(v.flushed, lang),
        rotated_flushed=i18n.number(v.rotated_flushed, lang),
        others=db(v.others_sqnr_db),
        restored_others=db(v.restored_others_sqnr_db),
        sqnr=db(v.sqnr_db),
        restored=db(v.restored_sqnr_db),
    )


# "from 2^-8 to 2^-8", "dari 2^-8 ke 2^-8": a change that is none; "1 values ... instead of 1", "1, bukan 1" likewise
_NO_CHANGE = re.compile(
    r"2\^(\S+?) (?:to|ke) 2\^\1(?![\d])|(\d+) (?:values are flushed instead of|nilai menjadi 0, bukan) \2\b"
)
_DROPS = {"en": "scale drops from", "id": "scale blok turun dari"}


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_rotation_explanation_says_what_the_scale_did_at_every_stop(lang: str) -> None:
    """At every stop of the page's outlier slider: no sentence says the scale drops (or changes) from 2^X to the same
    2^X; a sentence that says it drops is shown only where the rotated scale is lower; and every explanation the
    code can choose is shown at some stop (none is dead text)."""
    stops = _outlier_stops()
    assert len(stops) > 10
    shown = set()
    for k in stops:
        v = LL.rotation_view(k)
        assert v.rotated_scale_exponent <= v.scale_exponent, k  # the rotation never raises this block's scale
        text = _explanation(v, lang)
        assert not _NO_CHANGE.search(text), (k, text)
        says_drop = _DROPS[lang] in text
        assert says_drop == (v.rotated_scale_exponent < v.scale_exponent), (k, text)
        if not says_drop:
            assert f"2^{v.scale_exponent}" in text  # the kept scale is named
        shown.add(v.verdict)
    assert shown == set(get_args(LL.RotationVerdict))
    assert {LL.rotation_view(k).verdict for k in stops[:2]} == {"same_scale"}  # 2^0 and 2^0.5: the scale stays


def test_the_old_wording_is_what_the_check_catches() -> None:
    assert _NO_CHANGE.search("Rotated, the block's scale drops from 2^-8 to 2^-8 and 1 values are flushed")
    assert _NO_CHANGE.search("scale blok turun dari 2^-8 ke 2^-8 dan 1 nilai menjadi 0, bukan 1.")
    assert _NO_CHANGE.search("and 1 values are flushed instead of 1.")
    assert not _NO_CHANGE.search("drops from 2^-8 to 2^-9 and 0 values are flushed instead of 1")


def test_the_comparisons_shares_are_its_percents() -> None:
    view = LL.comparison_view("nvfp4_recipe")
    assert view.close_share == view.close_pct / 100
    assert all(s.gap_bf16 == s.gap_bf16_pct / 100 for s in view.summaries)
    assert view.ablation_shares == {a: g / 100 for a, g in view.ablation.items()}


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_recorded_paragraph_sizes_the_model_against_the_papers(lang: str) -> None:
    """The recorded paragraph gives the reference model's parameter count (lensa.runstats.reference_run.parameters,
    which tests/test_reference.py checks against torch) and the NVFP4 papers' models as multiples of it, and says that
    the recipe arm keeps the output head in BF16: the head is the reference model's last linear layer, and the recorded
    nvfp4_recipe arm lost none of its values where plain NVFP4 did."""
    view = LL.comparison_view("nvfp4_recipe")
    count = reference_run.parameters(reference_run.reference_recipe())
    assert view.parameters == count
    text = _recorded_text(lang)
    assert i18n.number(count, lang) in text
    for size, _tokens in (LL.FP4_ALL_THE_WAY_RUN, LL.NVIDIA_NVFP4_RUN):
        assert f"{i18n.significant(size / count, lang, 2)}×" in text
    assert {"en": "output head in BF16", "id": "output head dalam BF16"}[lang] in text
    assert "thousands of times" not in text and "ribuan kali" not in text
    data = LL.recorded()
    assert data.layers[-1] == "head" and training_recipes.TRAINING_RECIPES["nvfp4_recipe"].keep_bf16 == 1

    def head_lost(arm: str) -> int:  # the head's values flushed or saturated over the counted steps
        return int(data.counts[data.arms.index(arm), data.layers.index("head"), :, 2:].sum())

    assert head_lost("nvfp4_recipe") == 0 < head_lost("nvfp4")  # in BF16 it lost nothing; in NVFP4 it did


def _recorded_text(lang: str) -> str:
    at = open_page("low_bits", lang=lang)
    assert not at.exception
    return next(m.value for m in at.markdown if "2509.25149" in m.value and "BF16" in m.value)


def test_the_notes_give_the_bf16_layers_to_the_framework_and_cite_te_by_version() -> None:
    """Transformer Engine's NVFP4BlockScaling does the weight blocks, stochastic rounding and the rotation; which
    layers stay in BF16 is Megatron-LM's setting. The reference quantizer's file moved after TE 2.15."""
    for lang in ("en", "id"):
        notes = i18n.text(lang, "low_bits.notes")
        assert "`num_layers_at_end_in_bf16`" in notes and "Megatron-LM" in notes
        ref_text = i18n.text(lang, "refs.te_nvfp4")
        assert re.search(r"quantization_nvfp4\.py` (in version|pada versi) 2\.15", ref_text), ref_text
    assert "quantization_nvfp4.py`` of TE v2.15" in inspect.getsource(training_recipes)  # HADAMARD_SIGNS' source
