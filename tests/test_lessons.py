"""Each step's view (lensa.lessons) against the seed's reference figures (SPEC, "Reference figures") and against
the core and an independent library (ml_dtypes, numpy's own float16) where the view derives something new."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from lensa.lessons import bf16, blocks, fp16_range, loss_scaling, master_weights, memory, speed
from lensa.lessons.common import CATEGORIES, log_histogram
from lensa.models.gradients import gradient_sample
from lensa.models.memory import SEVEN_B
from lensa.models.speed import DEFAULT_GPU, DEFAULT_MFU
from lensa.numerics import blockscale
from lensa.numerics.formats import FORMATS, category_shares, classify
from lensa.ui import figures, i18n
from lensa.ui.site import PAGES_BY_KEY

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

en = "en"


def stops(page: str, name: str) -> tuple[float, ...]:
    return PAGES_BY_KEY[page].control(name).stops  # type: ignore[union-attr]


# --- step 1 ---------------------------------------------------------------------------------------------------


def test_step1_reference_figures():
    v = memory.memory_view(memory.MemorySetup("mixed", SEVEN_B), 2048)
    assert i18n.number(v.memory.bytes_per_param, en) == "16"
    assert i18n.gigabytes(v.memory.model_states, en) == "107.8 GB"
    assert i18n.gigabytes(v.memory.activations, en) == "9.1 GB"
    assert i18n.gigabytes(v.memory.total, en) == "117.0 GB"
    parts = {p.component.key: i18n.gigabytes(p.n_bytes, en) for p in v.parts}
    assert parts == {
        "weights": "13.5 GB",
        "gradients": "13.5 GB",
        "master": "27.0 GB",
        "adam_m": "27.0 GB",
        "adam_v": "27.0 GB",
    }
    assert i18n.gigabytes(v.other.activations, en) == "18.3 GB"  # the FP32 run of the same tokens
    fp32 = memory.memory_view(memory.MemorySetup("fp32", SEVEN_B), 2048)
    assert i18n.gigabytes(fp32.memory.activations, en) == "18.3 GB"
    assert v.fit == "states_over" and v.activation_format == "fp16"


def test_step1_one_axis_for_every_stop_grows_to_the_tallest():
    views = [memory.memory_view(memory.MemorySetup("mixed", SEVEN_B), int(t)) for t in stops("memory", "tokens")]
    top = memory.axis_top_gb(views)
    tallest = max(v.total_gb for v in views)
    assert top >= tallest * 1.1 and top % 50 == 0 and top - 50 < tallest * 1.1
    assert memory.axis_top_gb(views[:3]) == 200  # a short column keeps the seed's 0-200 GB
    # ZeRO divides a group over the GPUs: the divisor each part says is the one the bytes show
    zero3 = memory.memory_view(memory.MemorySetup("mixed", SEVEN_B, zero=3, gpus=8), 2048)
    assert {p.divisor for p in zero3.parts} == {8}
    assert all(p.n_bytes == SEVEN_B.params * p.component.bytes_per_param / 8 for p in zero3.parts)


# --- steps 2 and 3 --------------------------------------------------------------------------------------------


def test_step2_reference_figures_and_the_histogram_counts_every_gradient_once():
    v = fp16_range.fp16_range_view(1e-6)
    shown = {k: i18n.percent(v.shares[k], en) for k in ("zero", "subnormal", "normal")}
    assert shown == {"zero": "4.3%", "subnormal": "91%", "normal": "4.8%"}
    assert i18n.sci(v.largest, en) == "1.6e-3" and v.regime == "subnormal" and not v.overflows
    h = v.histogram
    assert h.total == 400 and sum(sum(c) for c in h.counts.values()) == 400
    cats = classify(v.sample, "fp16")
    for cat in CATEGORIES:
        assert sum(h.counts[cat]) == np.count_nonzero(cats == cat)
    # each value is in the bin whose edges hold its log10 (numpy's own histogram, independently)
    logs = np.log10(v.sample)
    expected, _ = np.histogram(logs, bins=np.asarray(h.edges))
    assert [sum(col) for col in zip(*h.counts.values(), strict=True)] == expected.tolist()


@pytest.mark.parametrize("grad", stops("fp16_range", "grad"))
def test_step2_view_at_every_stop_is_the_core_on_that_sample(grad):
    v = fp16_range.fp16_range_view(grad, ("fp8_e4m3",))
    sample = gradient_sample(grad)
    assert v.shares == category_shares(sample, "fp16")
    assert v.also[0].shares == category_shares(sample, "fp8_e4m3")
    assert v.largest == float(np.abs(sample).max())


def test_histogram_axis_is_fixed_over_the_stops_and_leaves_room_for_the_marks():
    views = [fp16_range.fp16_range_view(g) for g in stops("fp16_range", "grad")]
    top = figures.count_axis_top([v.histogram for v in views])
    assert top == max(v.histogram.tallest for v in views) * figures.MARK_HEADROOM


def test_step3_reference_figures_and_overflow_within_the_slider():
    v = loss_scaling.loss_scaling_view(0)
    assert i18n.percent(v.shares["zero"], en) == "4.3%" and v.shares["overflow"] == 0
    assert v.run.first_k == 16 and v.regime == "none"
    ks = stops("loss_scaling", "scale")
    over = [k for k in ks if loss_scaling.loss_scaling_view(int(k)).shares["overflow"] > 0]
    assert over, "the slider reaches a scale that overflows the illustration"
    # the first k that overflows is where the largest gradient times 2^k passes FP16's rounding to inf
    largest = float(np.max(v.sample))
    with np.errstate(over="ignore"):  # numpy's float16 cast, independently: inf past 65504 (and its half ulp)
        first = next(k for k in range(64) if np.isinf(np.float16(largest * 2.0**k)))
        overflowing = float(np.mean(np.isinf((v.sample * 2.0 ** ks[-1]).astype(np.float16))))
    assert over[0] == first and over == [k for k in ks if k >= first]
    top = loss_scaling.loss_scaling_view(int(ks[-1]))
    assert top.regime == "over" and top.shares["overflow"] == pytest.approx(overflowing)


def test_step3_extra_formats_at_their_own_scale():
    v = loss_scaling.loss_scaling_view(0, ("fp8_e4m3", "fp4_e2m1"))
    fp8 = v.scale_exp("fp8_e4m3")
    assert v.amax * 2.0**fp8 <= FORMATS["fp8_e4m3"].max < v.amax * 2.0 ** (fp8 + 1)
    assert v.fp4_at_scale == category_shares(v.sample * 2.0 ** v.scale_exp("fp4_e2m1"), "fp4_e2m1")


# --- step 4 ---------------------------------------------------------------------------------------------------


def test_step4_reference_figures():
    v = master_weights.master_weights_view(1e-6, 1.0)
    e = v.example
    assert i18n.sci(e.spacing, en, 3) == "9.77e-4" and i18n.sci(e.ratio, en) == "1.0e-3"
    assert e.low_change == 0 and i18n.sci(e.fp32_change, en, 3) == "9.54e-4"
    assert i18n.sci(e.exact_change, en, 3) == "1.00e-3" and v.fp16_lost


@pytest.mark.parametrize("w", stops("master_weights", "w"))
def test_step4_spacing_below_w_is_numpys_float16_gap_below_it(w):
    v = master_weights.master_weights_view(1e-6, w)
    w16 = np.float16(w)
    below = float(w16) - float(np.nextafter(w16, np.float16(0)))
    above = float(np.nextafter(w16, np.float16(np.inf))) - float(w16)
    assert v.spacing_below == below and v.example.spacing == above
    assert v.spacing_changes_at_w == (math.log2(float(w16)).is_integer())


def test_step4_notes_numbers():
    n = master_weights.notes_numbers()
    assert n.fp16_at_1 == 2**-10 and n.fp16_needed == 2**-11 and n.fp32_at_1 == 2**-23
    assert n.extra_bits == 13 and n.update == pytest.approx(1e-7) and n.noticeable_pct == pytest.approx(1.0)


# --- step 5 ---------------------------------------------------------------------------------------------------


def test_step5_reference_figures():
    v = bf16.bf16_view(1e-8)
    assert i18n.percent(v.fp16_zero, en) == "68%" and i18n.percent(v.bf16_zero, en) == "0%"
    assert i18n.percent(v.errors["fp16"], en) == "74%" and i18n.percent(v.errors["bf16"], en) == "0.14%"
    assert v.verdict == "fp16_loses"
    assert [r.key for r in v.ranges] == ["fp32", "bf16", "fp16"]
    bf = next(r for r in v.ranges if r.key == "bf16")
    info = ml_dtypes.finfo(ml_dtypes.bfloat16)
    assert bf.max == float(info.max) and bf.smallest_normal == float(info.smallest_normal)
    assert sum(v.counts.counts) == 400


# --- step 6 ---------------------------------------------------------------------------------------------------


def test_step6_reference_figures_and_axes_that_hold_every_stop():
    hw = speed.Hardware(DEFAULT_GPU, DEFAULT_MFU, 2e12, 1024)
    v = speed.speed_view(hw, 4096)
    assert i18n.seconds(v.fp32_s, en) == "21 s" and i18n.seconds(v.timing.of("tf32"), en) == "2.7 s"
    assert i18n.seconds(v.mixed_s, en) == "1.3 s" and i18n.ratio(v.speedup, en) == "16×"
    assert i18n.gigabytes(v.memories["fp32"].total, en) == "144.3 GB"
    assert i18n.gigabytes(v.memories["bf16"].total, en) == "126.1 GB"
    assert i18n.gigabytes(v.memories["fp32"].activations, en) == "36.5 GB"
    views = [speed.speed_view(hw, int(t)) for t in stops("speed", "tokens")]
    assert speed.time_axis_top_s(views) == pytest.approx(views[-1].fp32_s * 1.2)
    assert speed.memory_axis_top_gb(views) == pytest.approx(views[-1].memories["fp32"].total / 1e9 * 1.2)
    # the time bars grow with the tokens on that one axis: twice the tokens, twice the seconds
    assert views[-1].fp32_s / views[0].fp32_s == pytest.approx(views[-1].tokens / views[0].tokens)


# --- block scaling --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outlier", [0.0, 4.0, 9.0, 16.0])
def test_blocks_view_is_the_recipes_on_the_block(outlier):
    v = blocks.blocks_view(32, 1e-6, outlier)
    assert v.positions == tuple(range(1, 33)) and v.outlier_position == 6 and v.times == 2.0**outlier
    others = np.abs(np.delete(v.values, 5)).max()
    assert v.values[5] == np.float32(float(others) * 2.0**outlier)
    for key, r in v.recipes.items():
        assert r.outcomes == tuple(str(o) for o in blockscale.outcomes(v.values, blockscale.encode(v.values, key)))
        assert r.lost == blockscale.lost(v.values, key)
        if not r.recipe.two_level:
            assert [2.0**k for k in r.scale_exps] == [float(s) for s in r.encoded.block_scales]
    mx4, nv4 = v.recipes["mxfp4_e2m1"].lost, v.recipes["nvfp4"].lost
    expected = "flush" if mx4.flushed > nv4.flushed else ("both_flush" if mx4.flushed > 0 else "nothing_flushed")
    assert v.flush_regime == expected
    assert v.floor_regime == blockscale.floor_regime(v.values)
    assert (v.floor_regime == "saturates") == (v.recipes["mxfp8_e4m3"].lost.saturated > 0)


def test_log_histogram_puts_values_past_the_axis_in_its_end_bins():
    h = log_histogram([1e-20, 1e-3, 1e30], ["zero", "normal", "overflow"], lo=-12, hi=8)
    assert h.counts["zero"][0] == 1 and h.counts["overflow"][-1] == 1 and h.total == 3
