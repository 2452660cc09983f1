"""Every number the catalogues write as a literal, with where it comes from.

The lesson's numbers are of three kinds. Those that follow the controls are
placeholders, filled by the pages from the core. Citations carry their own
years and identifiers (the ``refs`` keys), the GPU datasheet lines carry the
figures of :data:`lensa.models.speed.GPUS` and the model names those of
:data:`lensa.models.configs.PRESETS`. The rest are written into the text, and each is
listed here: its value (computed from the core wherever the core has it) and
its source. ``tests/test_prose_numbers.py`` reads every number in both
catalogues and fails on one that is none of these, so a number typed into
the prose must be sourced here first.

A written number matches a listed value when the value, rounded to as many
significant digits as the text writes, is the written number (so ``9.77e-4``
and ``9,77e-4`` match 2**-10). Signs are not compared: the text writes
exponents such as 2^−14 with a typographic minus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lensa.lessons.low_bits import FP4_ALL_THE_WAY_RUN, NVIDIA_NVFP4_RUN, ROUNDING_LOW
from lensa.models.gradients import SAMPLE_SIZE, SPREAD_DECADES
from lensa.models.master import accumulate
from lensa.models.memory import ACTIVATION_BYTES_PER_TOKEN_PER_D_MODEL
from lensa.models.scaling import TORCH_GROWTH_INTERVAL, SpikeModel
from lensa.models.speed import DEFAULT_MFU, FLOPS_PER_PARAM_PER_TOKEN, GPUS, TERA
from lensa.numerics.blockscale import RECIPES
from lensa.numerics.formats import FORMATS, quantize, spacing
from lensa.numerics.training_recipes import HADAMARD_SIZE, hadamard_matrix
from lensa.runstats import MAX_FILE_BYTES
from lensa.runstats.measured import KEEP_SHARE


@dataclass(frozen=True)
class ProseNumber:
    """A number the catalogues write: its value and where it comes from."""

    value: float
    source: str


_FP16, _BF16, _FP32 = FORMATS["fp16"], FORMATS["bf16"], FORMATS["fp32"]
_E4M3, _E5M2 = FORMATS["fp8_e4m3"], FORMATS["fp8_e5m2"]
_A100 = GPUS["a100"]
_E3M2, _E2M3, _E2M1 = FORMATS["fp6_e3m2"], FORMATS["fp6_e2m3"], FORMATS["fp4_e2m1"]
_MX_BLOCK = RECIPES["mxfp4_e2m1"].block_size or 0
_TILE = RECIPES["fp8_1x128"].block_size or 0
# blocks_q2's worked example: a block maximum of 1.9 × 2^3 in MXFP8 E4M3, scaled by OCP's 2^(3 − 8)
# and by the rounded-up 2^(3 − 7).
_Q2_SIGNIFICAND = 1.9
_Q2_FLOOR_SCALED = _Q2_SIGNIFICAND * 2.0 ** (_E4M3.emax)
_Q2_CEIL_SCALED = _Q2_SIGNIFICAND * 2.0 ** (_E4M3.emax - 1)
_STEP_MODEL = SpikeModel()
# quiz.low_bits_q1: 1.25 rounded 1,000 times between E2M1's 1 and 1.5 (a step of 0.5, so one draw's spread is 0.25)
_ROUNDING_LOW = ROUNDING_LOW
_ROTATION_QUARTER = float(abs(hadamard_matrix()[0, 0]))
_Q_VALUE = _ROUNDING_LOW + _E2M1.smallest_subnormal / 2
_Q_STEPS = 1000
_Q_SPREAD_STEP = _E2M1.smallest_subnormal / 2


def _a100_tflops(mode: str) -> float:
    peak = _A100.peak(mode)
    if peak is None:
        raise ValueError(f"the A100 has no {mode} rate")
    return peak / TERA


PROSE_NUMBERS: tuple[ProseNumber, ...] = (
    # --- counts and small integers, each with the uses the text makes of it
    ProseNumber(0, "zero: values rounded to 0, exact zeros, ZeRO stage 0, 0 × inf"),
    ProseNumber(1, "one: the sign bit, a subnormal's last significant bit, one GPU, one step, 1 + update, 100% = 1"),
    ProseNumber(
        2,
        "two: the base of every binary format, 2 bytes per 16-bit value (memory.bytes_per_param), "
        "E5M2's 2 significand bits, 2 forward-pass FLOPs of the 6 (Kaplan et al.), ZeRO stage 2, Llama 2",
    ),
    ProseNumber(
        3, "FP16's 3 more significand bits than BF16 (10 − 7), E4M3's 3 significand bits, ZeRO stage 3, Llama 3"
    ),
    ProseNumber(4, "4 bytes per FP32 value, E4M3's 4 exponent bits, 4 backward-pass FLOPs of the 6 (Kaplan et al.)"),
    ProseNumber(
        _FP16.exponent_bits, "FP16's and E5M2's exponent bits (lensa.numerics.formats); 5 × heads (Korthikanti et al.)"
    ),
    ProseNumber(FLOPS_PER_PARAM_PER_TOKEN, "lensa.models.speed.FLOPS_PER_PARAM_PER_TOKEN (Kaplan et al. 2020)"),
    ProseNumber(
        _BF16.significand_bits, "BF16's stored significand bits (lensa.numerics.formats); Llama 2 7B, Mistral 7B"
    ),
    ProseNumber(
        _FP32.exponent_bits, "FP32's and BF16's exponent bits (lensa.numerics.formats); 8 GPUs in the ZeRO examples"
    ),
    ProseNumber(9, "10^9 bytes in a GB (SI prefix giga); 2^−9, FP8 E4M3's smallest subnormal"),
    ProseNumber(
        _FP16.significand_bits, "FP16's stored significand bits (lensa.numerics.formats); w = 10; the 10-to-1,000 spike"
    ),
    ProseNumber(_FP16.significand_bits + 1, "FP16 normal numbers' significant bits, the implicit 1 included"),
    ProseNumber(12, "K = 12 bytes of mixed-precision Adam state per parameter (ZeRO paper; lensa.models.memory)"),
    ProseNumber(_FP32.significand_bits - _FP16.significand_bits, "FP32's significand bits beyond FP16's (23 − 10)"),
    ProseNumber(
        -_FP16.emin, "FP16's smallest normal exponent, 2^−14 (lensa.numerics.formats); 2 + 14 ÷ N bytes (ZeRO-2)"
    ),
    ProseNumber(_FP16.bias, "FP16's exponent bias (lensa.numerics.formats)"),
    ProseNumber(16, "16 bits; 16 bytes per parameter with Adam (lensa.models.memory); 2^16, GradScaler's first scale"),
    ProseNumber(
        18, "DeepSpeed's ZeRO estimators: 18 bytes a parameter with an FP32 gradient copy (lensa.models.estimators)"
    ),
    ProseNumber(
        1 + _FP32.exponent_bits + _FP16.significand_bits, "TF32's bits in all: sign, FP32's exponent, FP16's fraction"
    ),
    ProseNumber(_FP32.significand_bits, "FP32's stored significand bits (lensa.numerics.formats), 2^−23"),
    ProseNumber(
        -(_FP16.emin - _FP16.significand_bits), "FP16's smallest subnormal exponent, 2^−24 (lensa.numerics.formats)"
    ),
    ProseNumber(MAX_FILE_BYTES // (1024 * 1024), "lensa.runstats.MAX_FILE_BYTES in MB, the upload limit"),
    ProseNumber(
        -(_FP16.emin - _FP16.significand_bits - 1), "2^−25, half of FP16's smallest subnormal (lensa.numerics.formats)"
    ),
    ProseNumber(30, "the low end of typical model FLOPs utilisation (speed.mfu_help); 2^30 bytes in a GiB (IEC)"),
    ProseNumber(_FP32.bits, "FP32's width in bits (lensa.numerics.formats)"),
    ProseNumber(100 / 3, "a subnormal with 2 significant bits: relative error up to 1/3 (quiz.fp16_range_q2_why)"),
    ProseNumber(ACTIVATION_BYTES_PER_TOKEN_PER_D_MODEL, "lensa.models.memory, Korthikanti et al. 2022"),
    ProseNumber(DEFAULT_MFU * 100, "lensa.models.speed.DEFAULT_MFU, the utilisation step 6 assumes"),
    ProseNumber(50, "the high end of typical model FLOPs utilisation for large models (speed.mfu_help)"),
    ProseNumber(64, "2^64, the largest loss scale step 3's data sweep tries"),
    ProseNumber(65, "the T4's FP16 tensor rate in TFLOP/s (lensa.models.speed.GPUS)"),
    ProseNumber(67, "cuBLAS's working buffers in MB, left out of the lab's peak estimate (lensa.models.lab_memory)"),
    ProseNumber(70, "Llama 2 70B (lensa.models.configs.PRESETS)"),
    ProseNumber(100, "100%; w = 100, a stop of step 4's weight control"),
    ProseNumber(124, "GPT-2 small's 124M parameters (lensa.models.configs.PRESETS)"),
    ProseNumber(_a100_tflops("tf32"), "the A100's dense TF32 rate in TFLOP/s (lensa.models.speed.GPUS)"),
    ProseNumber(_a100_tflops("bf16"), "the A100's dense BF16 and FP16 rates in TFLOP/s (lensa.models.speed.GPUS)"),
    ProseNumber(
        SAMPLE_SIZE, "lensa.models.gradients.SAMPLE_SIZE; 10^400, the inspector's limit (lensa.numerics.exact)"
    ),
    ProseNumber(_E4M3.max, "FP8 E4M3's largest value (lensa.numerics.formats)"),
    ProseNumber(_E4M3.overflow_threshold, "FP8 E4M3's saturation threshold (lensa.numerics.formats)"),
    ProseNumber(512, "the CUDA caching allocator's rounding, 512 bytes (lensa.models.lab_memory)"),
    ProseNumber(1000, "1,000: step 4's updates; 10 to 1,000, step 3's spikes (lensa.models.scaling.SpikeModel)"),
    ProseNumber(TORCH_GROWTH_INTERVAL, "lensa.models.scaling.TORCH_GROWTH_INTERVAL, torch.amp.GradScaler's default"),
    ProseNumber(8192, "a stop of the tokens control (lensa.ui.site)"),
    ProseNumber(_E5M2.max, "FP8 E5M2's largest value (lensa.numerics.formats)"),
    ProseNumber(_FP16.max, "FP16's largest value (lensa.numerics.formats)"),
    ProseNumber(
        _FP16.overflow_threshold,
        "FP16's overflow threshold: from 65,520 up a value rounds to inf (lensa.numerics.formats)",
    ),
    ProseNumber(_FP16.overflow_threshold - 1, "an inspector example just under FP16's overflow threshold, 65,520"),
    ProseNumber(0x7F, "FP8 E4M3's NaN code S.1111.111 with the sign clear (ml_dtypes.float8_e4m3fn)"),
    ProseNumber(0xFF, "FP8 E4M3's NaN code S.1111.111 with the sign set (ml_dtypes.float8_e4m3fn)"),
    # --- values of the formats
    ProseNumber(_FP16.smallest_normal, "FP16's smallest normal, 2^−14 (lensa.numerics.formats)"),
    ProseNumber(_FP16.smallest_subnormal, "FP16's smallest subnormal, 2^−24 (lensa.numerics.formats)"),
    ProseNumber(_FP16.smallest_subnormal / 2, "half of FP16's smallest subnormal, 2^−25 (lensa.numerics.formats)"),
    ProseNumber(_E5M2.smallest_subnormal, "FP8 E5M2's smallest subnormal, 2^−16 (lensa.numerics.formats)"),
    ProseNumber(_E4M3.smallest_subnormal, "FP8 E4M3's smallest subnormal, 2^−9 ≈ 2e-3 (lensa.numerics.formats)"),
    ProseNumber(_BF16.max, "BF16's largest value (lensa.numerics.formats, ml_dtypes)"),
    ProseNumber(_BF16.smallest_subnormal, "BF16's smallest subnormal (lensa.numerics.formats, ml_dtypes)"),
    ProseNumber(_FP32.smallest_subnormal, "FP32's smallest subnormal (lensa.numerics.formats)"),
    ProseNumber(_FP32.smallest_normal, "FP32's smallest normal, 2^−126 ≈ 1.2e-38 (lensa.numerics.formats)"),
    ProseNumber(_FP32.max, "FP32's largest value, ≈ 3.4e38 (lensa.numerics.formats)"),
    ProseNumber(_FP16.overflow_threshold, "FP16's overflow threshold: from 65,520 up, a value rounds to inf"),
    ProseNumber(float(spacing(1.0, "bf16")), "BF16's spacing at 1, 2^−7 (lensa.numerics.formats.spacing)"),
    ProseNumber(float(spacing(1.0, "fp16")), "FP16's spacing at 1, 2^−10 (lensa.numerics.formats.spacing)"),
    ProseNumber(float(spacing(1.0, "fp16")) / 2, "half of FP16's spacing at 1 (lensa.numerics.formats.spacing)"),
    ProseNumber(1 + float(spacing(1.0, "fp16")), "1 plus one FP16 spacing: 6e-4 added to 1 in FP16"),
    ProseNumber(float(spacing(1.0, "fp32")), "FP32's spacing at 1, 2^−23 (lensa.numerics.formats.spacing)"),
    ProseNumber(
        accumulate(1.0, 1e-7, 1000, "fp32") - 1.0,
        "1,000 updates of 1e-7 to w = 1 in FP32 (lensa.models.master.accumulate)",
    ),
    ProseNumber(
        (float(spacing(1.0, "fp32")) / 1e-7 - 1) * 100,
        "an update of 1e-7 stored as 2^−23 at w = 1: +19% (lensa.models.master)",
    ),
    ProseNumber(0.0999755859375, "FP16's 0.1, exactly (lensa.numerics.exact)"),
    ProseNumber(1.0625, "1 + 2^−4, the top of step 5's precision figure (pages/bf16.py)"),
    # --- examples and settings: slider stops, typed examples, worked examples
    ProseNumber(1e-12, "the lowest stop of step 5's gradient control (lensa.ui.site)"),
    ProseNumber(1e-9, "the lowest stop of step 2's gradient control (lensa.ui.site)"),
    ProseNumber(1e-8, "an inspector example; 1e-4 squared (quiz.master_weights_q2_why)"),
    ProseNumber(2e-8, "quiz.fp16_range_q1's gradient, below 2^−25"),
    ProseNumber(
        1e-7, "a learning rate of 1e-4 times a gradient of 1e-3 (lensa.models.master.EXAMPLE_LR × EXAMPLE_GRAD)"
    ),
    ProseNumber(
        1e-4, "lensa.models.master.EXAMPLE_LR; a gradient in quiz.master_weights_q2_why; quiz.master_weights_q1_a"
    ),
    ProseNumber(3e-4, "quiz.master_weights_q1_b, a stop of step 4's update control: under half of FP16's spacing at 1"),
    ProseNumber(5e-4, "quiz.master_weights_q1_c, a stop of step 4's update control: over half of FP16's spacing at 1"),
    ProseNumber(1e-10, "quiz.bf16_q1, a stop of step 5's gradient control (lensa.ui.site)"),
    ProseNumber(2.5e-3, "an example the inspector reads (formats.parse_error)"),
    ProseNumber(0.01, "the highest stop of step 5's gradient control (lensa.ui.site)"),
    ProseNumber(0.1, "an inspector example; the top stop of step 2's gradient control; 0.1% = 1 − KEEP_SHARE"),
    ProseNumber(_STEP_MODEL.noise_decades, "lensa.models.scaling.SpikeModel.noise_decades"),
    ProseNumber(KEEP_SHARE * 100, "lensa.runstats.measured.KEEP_SHARE"),
    ProseNumber(SPREAD_DECADES, "lensa.models.gradients.SPREAD_DECADES: one decade"),
    ProseNumber(_a100_tflops("fp32"), "the A100's FP32 rate in TFLOP/s (lensa.models.speed.GPUS)"),
    ProseNumber(1.12, "PyTorch 1.12, which turned TF32 off for matrix multiplies by default (its release notes)"),
    ProseNumber(
        2.12,
        "PyTorch 2.12, the first whose eager casts to float8_e4m3fn saturate at 448 instead of giving NaN "
        "(pytorch/pytorch#178817; torchao's to_fp8_saturated says 2.11 and older did not)",
    ),
    ProseNumber(7.5, "7.5B, an example of a typed parameter count (memory.params_help)"),
    ProseNumber(1.3e9, "1.3e9 and 1,300,000,000, examples of a typed parameter count (memory.params_help)"),
    ProseNumber(175e9, "175e9, an example of a typed parameter count (GPT-3's size)"),
    # --- the narrow formats and block scaling (lensa.numerics.formats, lensa.numerics.blockscale)
    ProseNumber(_E3M2.max, "FP6 E3M2's largest value (lensa.numerics.formats)"),
    ProseNumber(_E3M2.smallest_subnormal, "FP6 E3M2's smallest subnormal, 2^−4 (lensa.numerics.formats)"),
    ProseNumber(_E2M3.smallest_subnormal, "FP6 E2M3's smallest subnormal, 2^−3 (lensa.numerics.formats)"),
    ProseNumber(_E2M1.smallest_subnormal, "FP4 E2M1's smallest non-zero value (lensa.numerics.formats)"),
    ProseNumber(_E2M1.smallest_subnormal / 2, "half of FP4 E2M1's smallest non-zero value: below it, 0"),
    ProseNumber(1 + _E2M1.smallest_subnormal, "FP4 E2M1's value 1.5, 1 + 2^−1 (lensa.numerics.formats)"),
    ProseNumber(
        _E2M1.max / (_E2M1.smallest_subnormal / 2),
        "24 = 6 ÷ 0.25: an NVFP4 block's values below about 1/24 of its largest round to 0 (quiz.blocks_q1_why)",
    ),
    ProseNumber(
        _E4M3.max / 2.0**_E4M3.emax, "FP8 E4M3's largest significand, 448 = 1.75 × 2^8 (lensa.numerics.formats)"
    ),
    ProseNumber(
        _E4M3.overflow_threshold / 2.0**_E4M3.emax,
        "464 = 1.8125 × 2^8: past it OCP's MXFP8 scale clamps a block's largest value"
        " (lensa.numerics.blockscale.floor_regime)",
    ),
    ProseNumber(2.0**_E4M3.emax, "2^8: FP8 E4M3's largest exponent; the outlier 2^8 above its block in quiz.blocks_q1"),
    ProseNumber(
        _MX_BLOCK - 1, "the other values of a 32-value MX block beside its outlier (lensa.numerics.blockscale.RECIPES)"
    ),
    ProseNumber(8 / 2.0**_E4M3.emax, "8 ÷ 2^8: the others' bound when the outlier is scaled below 8 (quiz.blocks_q1)"),
    ProseNumber(
        _TILE, "DeepSeek-V3's 1×128 tiles and 128×128 blocks (lensa.numerics.blockscale.RECIPES; arXiv:2412.19437)"
    ),
    ProseNumber(_Q2_SIGNIFICAND, "quiz.blocks_q2's worked example: a block maximum of 1.9 × 2^3"),
    ProseNumber(_Q2_FLOOR_SCALED, "1.9 × 2^8, quiz.blocks_q2's value under OCP's scale"),
    ProseNumber(_Q2_CEIL_SCALED, "1.9 × 2^7, quiz.blocks_q2's value under the rounded-up scale"),
    ProseNumber(
        float(quantize(_Q2_CEIL_SCALED, "fp8_e4m3")), "1.9 × 2^7 rounded to FP8 E4M3 (lensa.numerics.formats.quantize)"
    ),
    # --- training below 16 bits (lensa.numerics.training_recipes, lensa.lessons.low_bits)
    ProseNumber(
        HADAMARD_SIZE, "the rotation's 16 points and NVFP4's 16×16 weight blocks (lensa.numerics.training_recipes)"
    ),
    ProseNumber(
        _ROUNDING_LOW, "E2M1's 1, the lower neighbour of the stochastic-rounding part (lensa.lessons.low_bits)"
    ),
    ProseNumber(
        _ROTATION_QUARTER,
        "1/4: the rotation's entries are ±1/4 (lensa.numerics.training_recipes.hadamard_matrix), a quarter",
    ),
    ProseNumber(
        NVIDIA_NVFP4_RUN[0] / 1e9,
        "NVIDIA's NVFP4 model: 12 billion parameters (arXiv:2509.25149, abstract and Figure 2)",
    ),
    ProseNumber(
        NVIDIA_NVFP4_RUN[1] / 1e12, "NVIDIA's NVFP4 run: 10 trillion tokens (arXiv:2509.25149, abstract, Figure 2)"
    ),
    ProseNumber(
        FP4_ALL_THE_WAY_RUN[0] / 1e9, "FP4 All the Way's model: 7 billion parameters (arXiv:2505.19115, abstract)"
    ),
    ProseNumber(
        FP4_ALL_THE_WAY_RUN[1] / 1e9,
        "FP4 All the Way: trained on up to 200 billion tokens (arXiv:2505.19115, abstract)",
    ),
    ProseNumber(
        2.15,
        "Transformer Engine version 2.15, the last whose NVFP4QuantizerRef is in custom_recipes/quantization_nvfp4.py "
        "(refs.te_nvfp4; the tag's tree)",
    ),
    ProseNumber(
        2.16,
        "Transformer Engine version 2.16, which renamed it quantization_ref_nvfp4.py (refs.te_nvfp4; the tag's tree)",
    ),
    ProseNumber(3, "√3: FP4 All the Way's threshold, gradient norm over quantization noise (arXiv:2505.19115)"),
    ProseNumber(_Q_VALUE, "quiz.low_bits_q1: the gradient 1.25, halfway between E2M1's 1 and 1.5"),
    ProseNumber(_Q_STEPS, "quiz.low_bits_q1: 1,000 steps"),
    ProseNumber(_Q_STEPS * _Q_VALUE, "quiz.low_bits_q1: the exact sum, 1,000 × 1.25"),
    ProseNumber(_Q_STEPS * _Q_VALUE - _Q_STEPS * 1.0, "quiz.low_bits_q1: round to nearest's shortfall, 1,250 − 1,000"),
    ProseNumber(_Q_SPREAD_STEP, "quiz.low_bits_q1: a draw's spread, 0.25 (p = 1/2, a step of 0.5)"),
    ProseNumber(_Q_SPREAD_STEP * math.sqrt(_Q_STEPS), "quiz.low_bits_q1: the sum's spread, 0.25 × √1000"),
    ProseNumber(2, "the reference transformer's two blocks (lensa.live.reference.Recipe.n_layers)"),
)


def sourced_values() -> tuple[float, ...]:
    """The listed values."""
    return tuple(p.value for p in PROSE_NUMBERS)
