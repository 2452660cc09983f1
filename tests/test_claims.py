"""Each claim issue 19 corrected, computed from an independent source and checked against the text that states it.

The text is read from both catalogues, so a sentence that drifts back to the old claim fails here.
"""

from __future__ import annotations

import math
import string

import ml_dtypes
import numpy as np
import pytest

from lensa.models.master import NOTICEABLE_ROUNDING, accumulate, update_outcome
from lensa.models.scaling import per_tensor_scale_exp
from lensa.numerics import formats as F
from lensa.runstats import measured
from lensa.ui import i18n
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


def text(key: str, lang: str = "en", **values: object) -> str:
    return i18n.text(lang, key, **values)


# --- 1. FP16 subnormals keep 1 to 10 significant bits, normal numbers 11 ------------------------------------


def _significant_bits(code: int, f: F.FloatFormat) -> int:
    """Significant bits of a positive code: the implicit 1 and the fraction for normals, the fraction's length for
    subnormals (their leading zeros are not significant)."""
    fraction = code & ((1 << f.significand_bits) - 1)
    exponent = code >> f.significand_bits
    return f.significand_bits + 1 if exponent else fraction.bit_length()


def test_fp16_subnormals_keep_1_to_10_significant_bits():
    f = F.get_format("fp16")
    subnormal = range(1, 1 << f.significand_bits)
    normal = range(1 << f.significand_bits, F.code_of(f.max, f) + 1)
    assert all(F.classify(F.value_of(c, f), f) == "subnormal" for c in (subnormal[0], subnormal[-1]))
    bits = {_significant_bits(c, f) for c in subnormal}
    lo, hi, full = min(bits), max(bits), {_significant_bits(c, f) for c in normal}
    assert (lo, hi, full) == (1, 10, {11})
    # the smallest subnormal, 2^-24, holds one bit; every halving above 2^-14 costs one
    assert _significant_bits(F.code_of(f.smallest_subnormal, f), f) == 1
    for key in ("fp16_range.explain_subnormal", "fp16_range_data.explain_subnormal"):
        assert f"{lo} to {hi} significant bits" in i18n.catalogue("en")[key]
        assert f"number's {next(iter(full))}" in i18n.catalogue("en")[key]
        assert f"{lo} sampai {hi} bit signifikan" in i18n.catalogue("id")[key]
        assert "fewer than" not in i18n.catalogue("en")[key]


# --- 3. autocast: ops on neither list run in their inputs' dtype -------------------------------------------


@requires_torch
def test_elementwise_ops_after_a_16_bit_matmul_stay_16_bit_under_autocast():
    import torch

    a, b, residual = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = a @ b
        after = {
            "gelu": torch.nn.functional.gelu(y),
            "dropout": torch.nn.functional.dropout(y, 0.1, training=True),
            "add 16 + 16": y + y,
            "add 16 + 32": y + residual,
        }
    assert y.dtype == torch.bfloat16
    assert {k: v.dtype for k, v in after.items()} == {
        "gelu": torch.bfloat16,
        "dropout": torch.bfloat16,
        "add 16 + 16": torch.bfloat16,
        "add 16 + 32": torch.float32,  # type promotion: a residual stream kept in FP32 keeps the add in FP32
    }
    notes = text("speed.notes")
    assert "only matrix multiplies and convolutions" not in notes
    assert "GELU and dropout after a 16-bit matrix multiply run in 16 bits" in notes
    assert "in FP32 when one of them is FP32" in notes


def _cuda() -> bool:
    try:
        import torch
    except ModuleNotFoundError:
        return False
    return bool(torch.cuda.is_available())


@requires_torch
@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA: the lists the notes name are CUDA autocast's")
def test_cuda_autocast_keeps_softmax_normalisation_and_losses_in_fp32():
    import torch

    x = torch.randn(8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        y = x @ x
        kept = {
            "softmax": torch.softmax(y, -1),
            "layer_norm": torch.nn.functional.layer_norm(y, (8,)),
            "loss": torch.nn.functional.mse_loss(y, x),
            "exp": torch.exp(y),  # pointwise functions and reductions too (issue 29)
            "rsqrt": torch.rsqrt(y.abs() + 1),
            "sum": y.sum(),
            "cumsum": y.cumsum(0),
        }
        conv = torch.nn.functional.conv1d(x[None], torch.randn(8, 8, 1, device="cuda"))
        gelu = torch.nn.functional.gelu(y)
        widest = torch.addcmul(y, y, x)  # the widest input type: FP32 here, with one FP32 input
        narrow = torch.addcmul(y, y, y)
    assert (y.dtype, conv.dtype, gelu.dtype, narrow.dtype) == (torch.float16,) * 4
    assert {k: v.dtype for k, v in kept.items()} == dict.fromkeys(kept, torch.float32)
    assert widest.dtype == torch.float32


# --- 4. TF32 is off for matrix multiplies by default, on for cuDNN convolutions ---------------------------------


@requires_torch
def test_tf32_needs_one_switch_for_matrix_multiplies():
    import torch

    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "highest"
    try:  # the other spelling of the same switch
        torch.set_float32_matmul_precision("high")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.set_float32_matmul_precision("highest")
    assert torch.backends.cuda.matmul.allow_tf32 is False
    for lang in i18n.LANGUAGES:
        faq = text("overview.faq_a6", lang)
        assert "torch.backends.cuda.matmul.allow_tf32 = True" in faq
        assert 'torch.set_float32_matmul_precision("high")' in faq
    assert "no other change" not in text("overview.faq_a6")


# --- 5. power-of-two scales are MX's; Transformer Engine's delayed scaling does not round -----------------------


def test_per_tensor_power_of_two_scale_is_not_transformer_engines():
    amax, fmt = 3.0, F.get_format("fp8_e4m3")
    k = per_tensor_scale_exp([amax], fmt)
    te_scale = fmt.max / amax / 2**0  # Transformer Engine's delayed scaling, margin 0
    assert 2.0**k <= te_scale < 2.0 ** (k + 1) and 2.0**k != te_scale  # the power of two is only a bound
    assert amax * te_scale == pytest.approx(fmt.max)  # TE lands amax on the format's top exactly
    for key in ("loss_scaling_data.fp8_explain", "loss_scaling.fp8_explain"):
        assert "MX" in text(key) and "fp8_max ÷ amax" in text(key)
        assert "MX" in text(key, "id") and "fp8_max ÷ amax" in text(key, "id")
    assert "the per-tensor scale an FP8 recipe would pick" not in text("loss_scaling_data.fp8_explain")
    assert "MX" in (per_tensor_scale_exp.__doc__ or "")


# --- 6. FP8 E4M3 has two NaN codes ------------------------------------------------------------------------


def test_e4m3_has_two_nan_codes():
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    nans = [int(c) for c in codes[np.isnan(values)]]
    assert nans == [0x7F, 0xFF]
    e4m3 = F.get_format("fp8_e4m3")
    assert e4m3.nan_code == 0x7F and e4m3.nan_codes == 1 and e4m3.signed  # one code a sign: 0x7F and 0xFF
    assert all(math.isnan(F.value_of(c, "fp8_e4m3")) for c in nans)
    notes = text("formats.notes")
    assert "two NaN codes, S.1111.111 (0x7F and 0xFF)" in notes and "single NaN" not in notes
    assert "dua kode NaN, S.1111.111 (0x7F dan 0xFF)" in text("formats.notes", "id")


# --- 7. FP32 to BF16 rounds; BF16's largest value and smallest subnormal ------------------------------------------


def test_bf16_rounds_to_nearest_even_and_its_limits():
    bf16 = F.get_format("bf16")
    info = ml_dtypes.finfo(ml_dtypes.bfloat16)
    assert bf16.max == float(info.max) == pytest.approx(3.3895e38, rel=1e-4)
    assert bf16.smallest_subnormal == float(info.smallest_subnormal) == pytest.approx(9.18e-41, rel=1e-3)
    assert float(np.finfo(np.float32).smallest_subnormal) == pytest.approx(1.4e-45, rel=1e-2)
    # rounding, not truncation: dropping the low bits of 1 + 3·2^-9 would give 1; it rounds up to 1 + 2^-7
    x = np.float32(1 + 3 * 2.0**-9)
    assert float(x.astype(ml_dtypes.bfloat16)) == 1 + 2.0**-7
    assert float(np.float32(1 + 2.0**-8).astype(ml_dtypes.bfloat16)) == 1.0  # a tie goes to the even neighbour
    # past the midpoint above the largest value, FP32 numbers round to inf; below it, to the largest value
    top = np.float32(bf16.overflow_threshold)
    assert math.isinf(float(top.astype(ml_dtypes.bfloat16)))
    below = np.nextafter(top, np.float32(0))
    assert float(below.astype(ml_dtypes.bfloat16)) == bf16.max and math.isfinite(float(np.finfo(np.float32).max))
    for lang in i18n.LANGUAGES:
        shown = {
            "bf16_max": i18n.sci(bf16.max, lang, 5),
            "bf16_tiny": i18n.sci(bf16.smallest_subnormal, lang, 3),
            "bf16_overflow": i18n.sci(bf16.overflow_threshold, lang, 5),
        }
        notes = i18n.text(lang, "bf16.notes", fp32_max="", fp32_tiny="", **shown)
        assert all(v in notes for v in shown.values())
        why = text("quiz.bf16_q1_why", lang)
        assert i18n.sci(bf16.smallest_subnormal, lang) in why
        dynamic_range = text("glossary.def_dynamic_range", lang)
        assert i18n.sci(bf16.smallest_subnormal, lang) in dynamic_range
        assert i18n.sci(bf16.max, lang, 3) in dynamic_range
        fp32 = text("glossary.def_fp32", lang)
        tiny, top = float(np.finfo(np.float32).smallest_normal), float(np.finfo(np.float32).max)
        assert i18n.sci(tiny, lang) in fp32 and i18n.sci(top, lang) in fp32
    assert "only drops the low significand bits" not in text("bf16.notes")


# --- 8. the depth rule, against the recorded reference run ---------------------------------------------------


def test_depth_sentence_is_what_the_reference_run_shows():
    from lensa.runstats.reference_run import load_reference

    fp32, _ = load_reference()
    step = fp32.steps("activation_grad")[-1]
    near, far = fp32.get("activation_grad", "head", step), fp32.get("activation_grad", "tok", step)
    zero = {name: s.counts("fp16")["zero"] / s.nonzero for name, s in (("head", near), ("tok", far))}
    found = measured.depth_finding(fp32)
    assert found is not None
    assert (found.step, found.nearest, found.furthest) == (step, "head", "tok")  # backward order: loss first
    assert (found.nearest_zero, found.furthest_zero) == (zero["head"], zero["tok"])
    # the shipped run is the counter-example: the tensor next to the loss loses most
    assert not found.furthest_smallest and zero["head"] > 100 * zero["tok"]
    assert "the layers furthest from the loss see the smallest values" not in text("fp16_range.notes", depth="")


def test_depth_finding_needs_activation_gradients():
    from lensa.runstats import RunStats

    assert measured.depth_finding(RunStats()) is None


# --- faq_a5: GradScaler skips and halves on an inf from the forward pass ---------------------------------------


@requires_torch
def test_gradscaler_skips_and_halves_on_an_inf_from_the_forward_pass():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    out = model(torch.randn(3, 4)) * torch.tensor(float("inf"))  # an activation that overflowed
    scaler.scale(out.sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**15
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    faq = text("overview.faq_a5")
    assert "not in the forward pass" not in faq and "skips that step and halves S" in faq


# --- 1 (step 4). FP32 rounds small updates too ----------------------------------------------------------------


@pytest.mark.parametrize(("w", "update", "error"), [(1.0, 1e-7, +0.192), (1.0, 1e-6, -0.0463)])
def test_fp32_rounds_an_update_by_whole_spacings(w, update, error):
    # numpy's own float32 arithmetic, independent of lensa's rounding
    moved = float(np.float32(w) + np.float32(update)) - w
    assert moved / update - 1 == pytest.approx(error, abs=5e-4)
    outcome = update_outcome(w, update, "fp32")
    assert outcome.applied == moved and outcome.noticeable and abs(outcome.error) > NOTICEABLE_ROUNDING
    assert outcome.direction == ("up" if error > 0 else "down")
    total = accumulate(w, update, 1000, "fp32") - w
    assert total == pytest.approx(1000 * moved)
    assert "fraction of a percent" not in text("master_weights.notes", **dict.fromkeys(_NOTES_FIELDS, ""))


_NOTES_FIELDS = {f for _, f, _, _ in string.Formatter().parse(i18n.catalogue("en")["master_weights.notes"]) if f}


def test_step4_question_on_fp32s_limit_states_what_fp32_does():
    spacing_1, spacing_10 = float(F.spacing(1.0, "fp32")), float(F.spacing(10.0, "fp32"))
    moved = accumulate(1.0, 1e-7, 1000, "fp32") - 1.0
    ratio = round(spacing_10 / spacing_1)
    assert (spacing_1, ratio) == (2.0**-23, 8) and update_outcome(10.0, 1e-7, "fp32").kind == "lost"
    for lang in i18n.LANGUAGES:
        right = i18n.text(lang, f"quiz.master_weights_q3_{i18n.answers()['master_weights_q3']}")
        assert right.startswith(i18n.sci(moved, lang, 3))
        assert i18n.percent(update_outcome(1.0, 1e-7, "fp32").error, lang) in right
        why = i18n.text(lang, "quiz.master_weights_q3_why")
        assert i18n.sci(spacing_1, lang, 3) in why and f"{ratio} " in why


def test_update_outcomes_cover_lost_exact_and_both_roundings():
    assert update_outcome(10.0, 1e-7, "fp32").kind == "lost"
    exact = update_outcome(0.5, 2.0**-20, "fp32")
    assert exact.kind == exact.direction == exact.regime == "exact" and exact.error == 0
    close = update_outcome(1.0, 1e-3, "fp32")
    assert close.regime == "close" and 0 < close.error < NOTICEABLE_ROUNDING
    assert update_outcome(1.0, 6e-4, "fp16").regime == "up"  # 6e-4 becomes one FP16 spacing, 9.77e-4
    for bad in (0.0, -1e-6, math.inf, math.nan):
        with pytest.raises(ValueError):
            update_outcome(1.0, bad, "fp32")
