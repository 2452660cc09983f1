"""What step 1 derives from a memory breakdown, moved out of its page: each checked against the ZeRO paper
or an independent sum, in the core's units (bytes)."""

from __future__ import annotations

import pytest

from lensa.models.configs import COMPARISON_GPUS, PRESETS, others_comparison, shape_for_params
from lensa.models.estimators import how_others_count
from lensa.models.memory import (
    OPTIMIZERS,
    SEVEN_B,
    MemoryBreakdown,
    activation_bytes,
    activation_format,
    fit_on_gpu,
    model_state_bytes,
    other_precision,
    split_bytes_per_param,
    state_components,
    training_memory,
)
from lensa.numerics.formats import FORMATS
from lensa.ui import figures, i18n

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

# ZeRO paper, Figure 1, mixed-precision Adam (K = 12): bytes a parameter kept whole, and split over N.
PAPER_SPLIT = {0: (16, 0), 1: (4, 12), 2: (2, 14), 3: (0, 16)}


@pytest.mark.parametrize("stage", sorted(PAPER_SPLIT))
def test_split_follows_the_zero_paper(stage):
    assert split_bytes_per_param("mixed", "adam", stage, 64) == PAPER_SPLIT[stage]
    assert split_bytes_per_param("mixed", "adam", stage, 1) == (16, 0)  # one GPU has nobody to share with


@pytest.mark.parametrize("precision", ["mixed", "fp32"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize(("stage", "gpus"), [(0, 8), (1, 8), (2, 64), (3, 3), (3, 1)])
def test_whole_plus_split_over_n_is_what_one_gpu_holds(precision, optimizer, stage, gpus):
    whole, split = split_bytes_per_param(precision, optimizer, stage, gpus)
    assert whole + split == sum(c.bytes_per_param for c in state_components(precision, optimizer))
    params = 7.5e9
    per_gpu = model_state_bytes(params, precision, optimizer, stage, gpus)
    assert params * (whole + split / gpus) == pytest.approx(per_gpu, rel=1e-12)


def test_states_formula_reads_as_the_sum_it_names():
    # Evaluate the sentence the page prints: it must give the per-GPU bytes the metric shows.
    for stage, gpus in [(0, 1), (1, 8), (2, 8), (3, 64)]:
        text = i18n.states_formula(7.5e9, *split_bytes_per_param("mixed", "adam", stage, gpus), gpus, "en")
        assert text.startswith("7.5B × ")
        expression = text.removeprefix("7.5B × ").replace(" B", "").replace("÷", "/")
        assert set(expression) <= set("0123456789+/() ")
        bytes_each = eval(expression, {})  # only digits and operators, checked above
        assert 7.5e9 * bytes_each == model_state_bytes(7.5e9, "mixed", "adam", stage, gpus), text
    assert i18n.states_formula(7.5e9, 4, 12, 8, "id") == "7,5 miliar × (4 + 12 ÷ 8) B"


def test_activations_are_stored_in_the_format_named():
    # FP32 activations take twice the bytes because the format is twice as wide.
    ratio = activation_bytes(SEVEN_B, 2048, "fp32") / activation_bytes(SEVEN_B, 2048, "mixed")
    assert ratio == FORMATS[activation_format("fp32")].bits / FORMATS[activation_format("mixed")].bits == 2
    assert other_precision(other_precision("mixed")) == "mixed" != other_precision("mixed")


def test_fit_at_the_lessons_defaults():
    memory = training_memory(SEVEN_B, 2048)  # 107.8 GB of states, 117.0 GB in all (SPEC, reference figures)
    assert fit_on_gpu(memory, 80) == "states_over"
    assert fit_on_gpu(memory, 108) == "total_over"
    assert fit_on_gpu(memory, 141) == "fits"


def test_a_gpu_exactly_full_still_fits():
    (weights, _), *_ = training_memory(SEVEN_B, 0).states
    full = MemoryBreakdown(states=((weights, 60e9),), activations=20e9)
    assert fit_on_gpu(full, 80) == "fits" and fit_on_gpu(full, 79.999) == "total_over"
    assert fit_on_gpu(full, 59.999) == "states_over"


def test_others_comparison_uses_eight_gpus_for_one_and_the_presets_own_layers():
    preset = PRESETS["llama2-7b"]
    one = others_comparison("llama2-7b", preset.shape(), 1)
    assert one.gpus == COMPARISON_GPUS == 8 and one == preset.how_others_count(8)
    assert others_comparison("llama2-7b", preset.shape(), 64).gpus == 64
    custom = shape_for_params(7.5e9)
    assert others_comparison("custom", custom, 64) == how_others_count(custom, 64)
    # ZeRO-3 in this lesson's own row: 16 bytes a parameter over N GPUs
    assert others_comparison("custom", custom, 64).row("lensa_zero3").bytes == pytest.approx(16 * 7.5e9 / 64)


def test_bar_parts_are_given_in_bytes_and_drawn_in_decimal_gigabytes():
    assert figures.BarPart("weights", 13.48e9, "#000").gb == pytest.approx(13.48)
