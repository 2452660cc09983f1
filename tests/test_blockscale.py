"""lensa.numerics.blockscale against gfloat (MX, every block of a property test) and NVFP4's formulas written out."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from gfloat import RoundMode, quantize_block
from gfloat.block import compute_scale_amax
from gfloat.formats import (
    format_info_mxfp4_e2m1,
    format_info_mxfp6_e2m3,
    format_info_mxfp6_e3m2,
    format_info_mxfp8_e4m3,
    format_info_mxfp8_e5m2,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lensa.numerics import blockscale as B
from lensa.numerics import formats as F

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

GFLOAT_MX = {
    "mxfp8_e4m3": format_info_mxfp8_e4m3,
    "mxfp8_e5m2": format_info_mxfp8_e5m2,
    "mxfp6_e3m2": format_info_mxfp6_e3m2,
    "mxfp6_e2m3": format_info_mxfp6_e2m3,
    "mxfp4_e2m1": format_info_mxfp4_e2m1,
}


def round_up_scale(emax: float, vals: np.ndarray, elem_max: float) -> float:
    """arXiv:2506.08027's rule for gfloat: the E8M0 scale 2**ceil(log2(amax / max)), clipped as OCP's."""
    amax = float(np.max(np.abs(vals)))
    if amax == 0:
        return 2.0**-127
    e = math.ceil(math.log2(amax / elem_max))
    e += amax > elem_max * 2.0**e  # the log's rounding, corrected exactly
    e -= amax <= elem_max * 2.0 ** (e - 1)
    return 2.0 ** min(max(e, -127), 127)


def gfloat_blocks(x: np.ndarray, key: str, rule: str = "mx_floor") -> np.ndarray:
    fi = GFLOAT_MX[key]
    if rule == "mx_floor":
        scale = compute_scale_amax
    else:
        elem_max = fi.etype.max

        def scale(emax: float, vals: np.ndarray) -> float:
            return round_up_scale(emax, vals, elem_max)

    blocks = x.astype(np.float64).reshape(-1, 32)
    return np.concatenate([quantize_block(fi, b, scale, RoundMode.TiesToEven) for b in blocks])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


# Blocks of float32 values spread over many decades (gradients), with zeros, ties and exact powers of two.
magnitudes = st.floats(min_value=float(np.float32(1e-30)), max_value=float(np.float32(1e30)), width=32)
block_values = st.one_of(
    magnitudes,
    magnitudes.map(lambda v: -v),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 1.75, 1.875, 3.0, 448.0, 464.0, 6.0, 7.0, 2.0**-126, 2.0**-149]),
)
blocks_of_32 = hnp.arrays(np.float32, st.integers(1, 4).map(lambda n: (n * 32,)), elements=block_values)


@settings(max_examples=150, deadline=None)
@given(x=blocks_of_32, key=st.sampled_from(list(GFLOAT_MX)))
def test_mx_equals_gfloat_on_every_block(x, key):
    assert same(B.quantize(x, key), gfloat_blocks(x, key))


@settings(max_examples=100, deadline=None)
@given(x=blocks_of_32, key=st.sampled_from(["mxfp8_e4m3", "mxfp4_e2m1"]))
def test_round_up_rule_equals_gfloat_with_that_scale(x, key):
    ours = B.quantize(x, f"{key}_ceil")
    assert same(ours, gfloat_blocks(x, key, rule="mx_ceil"))
    assert B.lost(x, f"{key}_ceil").saturated == 0.0  # the point of rounding the scale up


def test_mx_scale_is_ocp_and_saturates_the_largest_value():
    # amax 1.9 * 2**3: OCP's scale is 2**(3 - 8); 1.9 * 2**8 = 486.4 is past 448, so it saturates.
    x = np.full(32, 0.01, np.float32)
    x[5] = 1.9 * 8
    enc = B.encode(x, "mxfp8_e4m3")
    assert enc.block_scales.tolist() == [2.0**-5] and enc.saturated.sum() == 1
    assert enc.stored[5] == 448 * 2.0**-5 == 14.0
    up = B.encode(x, "mxfp8_e4m3_ceil")  # the rule rounded up: 2**ceil(log2(15.2 / 448)) = 2**-4
    # 15.2 / 2**-4 = 243.2, which E4M3 (spacing 16 there) rounds to 240: 15.0, not clamped
    assert up.block_scales.tolist() == [2.0**-4] and not up.saturated.any() and up.stored[5] == 15.0
    assert B.lost(x, "mxfp8_e4m3").saturated == 1 / 32


def test_an_outlier_flushes_an_mxfp4_block_and_nvfp4_keeps_more():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(32) * 1e-6).astype(np.float32)
    x[3] = np.float32(np.max(np.abs(x)) * 2.0**8)
    mx, nv = B.lost(x, "mxfp4_e2m1"), B.lost(x, "nvfp4")
    assert mx.flushed > 0.9  # the other 31 values fall below FP4's 0.5 after the outlier's scale
    assert nv.flushed < 0.6  # the second block of 16 has its own scale
    assert nv.sqnr_db > mx.sqnr_db


def test_zero_blocks_and_non_finite_blocks():
    z = np.zeros(64, np.float32)
    for key in B.RECIPES:
        assert same(B.quantize(z, key), z)
        assert B.lost(z, key) == B.Lost(0.0, 0.0, math.inf) or math.isnan(B.lost(z, key).sqnr_db)
    x = np.ones(64, np.float32)
    x[40] = np.inf
    q = B.quantize(x, "mxfp8_e4m3")
    assert (q[:32] == 1).all() and np.isnan(q[32:]).all()  # OCP: a NaN scale makes the block NaN


def test_a_scale_that_would_underflow_stops_at_fp32s_smallest_number():
    """A tensor of the tiniest float32 subnormals: its FP32 scale (amax / 448, NVFP4's amax / 2688 and the
    block's product with it) would be 0, and 0 / 0 made every zero NaN and the flushed share negative (seen as
    -1.0 for ``[0, 2**-149]``). The scale stops at 2**-149 instead, the values land within the element's range,
    and what is stored is what FP32 arithmetic stores."""
    tiny = np.float32(2.0**-149)
    cases = {
        "one subnormal": np.array([0, tiny], np.float32),
        "a row of them": np.concatenate([np.full(64, tiny), np.zeros(64)]).astype(np.float32),
        "mixed": np.concatenate([[0, np.float32(3e-42)], np.full(100, tiny)]).astype(np.float32),
    }
    for name, x in cases.items():
        for key in B.RECIPES:
            q = B.quantize(x, key)
            assert np.isfinite(q).all(), (name, key)
            assert (q[x == 0] == 0).all(), (name, key)  # a zero stays 0, never 0 / 0
            got = B.lost(x, key)
            assert 0.0 <= got.flushed <= 1.0 and 0.0 <= got.saturated <= 1.0, (name, key, got)
            assert not math.isnan(got.sqnr_db), (name, key)
    # Divided by 2**-149, one subnormal is 1: E4M3 keeps it exactly, per tensor and in NVFP4 (1 is an E2M1 value).
    x = cases["one subnormal"]
    for key in ("fp8_tensor", "nvfp4"):
        assert same(B.quantize(x, key), x.astype(np.float64)), key
        assert B.lost(x, key) == B.Lost(0.0, 0.0, math.inf), key
    assert B.encode(x, "nvfp4").tensor_scale == float(tiny)


# --- NVFP4, from its formulas ---------------------------------------------------------------------


def nvfp4_by_formula(x: np.ndarray) -> np.ndarray:
    """The module docstring's formulas, one block at a time in plain float32 arithmetic."""
    x = x.astype(np.float32)
    tensor_scale = np.float32(np.max(np.abs(x))) / np.float32(2688.0)
    out = []
    for block in x.reshape(-1, 16):
        s = np.float32(np.max(np.abs(block))) / np.float32(6.0) / tensor_scale
        s = np.float32(min(max(s, np.float32(2.0**-6)), np.float32(448.0)))
        s = np.float32(s.astype(ml_dtypes.float8_e4m3fn))
        total = np.float32(tensor_scale * s)
        for v in block:
            e = np.float32(min(max(np.float32(v / total), np.float32(-6.0)), np.float32(6.0)))
            out.append(float(e.astype(ml_dtypes.float4_e2m1fn)) * float(total))
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(1, 4).map(lambda n: (n * 16,)), elements=block_values))
def test_nvfp4_is_its_formula(x):
    if not np.any(x):
        return
    assert same(B.quantize(x, "nvfp4"), nvfp4_by_formula(x))


def test_nvfp4_tensor_scale_and_largest_block():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(64) * 3e-3).astype(np.float32)
    enc = B.encode(x, "nvfp4")
    amax = np.float32(np.max(np.abs(x)))
    assert enc.tensor_scale == float(amax / np.float32(448 * 6))
    block_with_amax = int(np.argmax(np.abs(x))) // 16
    assert enc.block_scales[block_with_amax] == 448.0
    assert np.isclose(np.max(np.abs(enc.stored)), amax, rtol=1e-6)  # amax maps to 6 × the total scale


@pytest.mark.parametrize("key", ["fp8_tensor", "fp8_row", "fp8_1x128", "fp8_128x128"])
def test_fp8_amax_recipes_map_each_blocks_amax_to_448(key):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((256, 384)) * 10.0 ** rng.integers(-6, 0, (256, 1))).astype(np.float32)
    enc = B.encode(x, key)
    r = B.RECIPES[key]
    br, bc = (256, 384) if r.block is None else (r.block[0] or 256, r.block[1] or 384)
    blocks = np.abs(x).reshape(256 // br, br, 384 // bc, bc).max(axis=(1, 3))
    assert enc.block_scales.tolist() == (blocks.astype(np.float32) / np.float32(448)).reshape(-1).tolist()
    assert same(enc.stored, F.quantize(np.float32(x / enc.scale.astype(np.float32)), "fp8_e4m3") * enc.scale)
    assert not enc.saturated.any()


def test_blocks_run_over_the_last_axis_and_partial_blocks_are_padded():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 70)) * 1e-4).astype(np.float32)
    q = B.quantize(x, "mxfp4_e2m1")
    assert q.shape == x.shape
    for row in range(3):
        padded = np.concatenate([x[row], np.zeros(26, np.float32)])
        assert same(q[row], gfloat_blocks(padded, "mxfp4_e2m1")[:70])


def lost_from_encode(x: np.ndarray, key: str) -> tuple[float, float, float]:
    """A recipe's shares and SQNR counted from :func:`encode`'s stored values, one array op each."""
    x64 = x.astype(np.float64)
    enc = B.encode(x, key)
    nonzero = x64 != 0
    flushed = np.count_nonzero(nonzero & (enc.stored == 0)) / max(np.count_nonzero(nonzero), 1)
    signal, noise = np.sum(x64**2), np.sum((x64 - enc.stored) ** 2)
    sqnr = math.inf if noise == 0 else 10 * math.log10(signal / noise)
    return flushed, np.count_nonzero(enc.saturated) / x.size, sqnr


# Gradient-like rows over many decades, widths that tile no block (1000: MX's 32 and 1x128 pad, 16 does not),
# more rows than a 128x128 block, a 3-D stack, tiny and huge magnitudes, and the bench's log-uniform values.
LOST_ALL_CASES = {
    "rows 300 x 1000": lambda rng: rng.standard_normal((300, 1000)) * 10.0 ** rng.uniform(-8, 2, (300, 1)),
    "stack 3 x 130 x 70": lambda rng: rng.standard_normal((3, 130, 70)) * 1e-3,
    "log-uniform 40 x 257": lambda rng: np.exp2(rng.uniform(-40, 10, (40, 257))) * rng.choice([-1.0, 1.0], (40, 257)),
    "tiny": lambda rng: rng.standard_normal((20, 64)) * 1e-41,
    "huge": lambda rng: rng.standard_normal((20, 64)) * 1e36,
    "one row": lambda rng: rng.standard_normal(5000) * 1e-5,
    # at the top of FP32's range a rounded-up MX scale stores element * scale = 2**128, which only float64 holds
    "float32's largest": lambda rng: rng.choice([3.4028235e38, -3.4028235e38, 1e38, 1.0], (80, 64)),
    # each MX element's overflow threshold (E4M3 464 = 1.8125 * 2**8, E5M2 1.875 * 2**15, E3M2 1.875 * 2**4,
    # E2M3 1.9375 * 2**2, E2M1 1.75 * 2**2) as a block's largest value: the tie that saturates or not
    "ties at the top": lambda rng: (
        rng.choice([1.75, 1.8125, 1.875, 1.9375, 1.0, 0.01], (64, 96)) * np.exp2(rng.integers(-5, 5, (64, 1)))
    ),
}


@pytest.mark.parametrize("case", list(LOST_ALL_CASES))
def test_lost_all_counts_what_encode_stores_on_any_number_of_threads(case):
    rng = np.random.default_rng(11)
    x = LOST_ALL_CASES[case](rng).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = 0.0
    one = B.lost_all(x)
    for workers in (2, 3):
        assert B.lost_all(x, workers=workers) == one  # the same numbers, bit for bit
    for key in B.RECIPES:
        flushed, saturated, sqnr = lost_from_encode(x, key)
        got = one[key]
        assert (got.flushed, got.saturated) == (flushed, saturated), key
        assert got.sqnr_db == pytest.approx(sqnr, rel=1e-12), key  # the same squared errors, summed in another order
        assert B.lost(x, key) == got  # one recipe alone: the same pass


@pytest.mark.parametrize("case", list(LOST_ALL_CASES))
def test_quantize_in_pieces_stores_what_encode_stores(case):
    """quantize's cache-sized pieces against encode's whole-array arithmetic, signs of zero included."""
    rng = np.random.default_rng(12)
    x = LOST_ALL_CASES[case](rng).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = -0.0
    for key in B.RECIPES:
        assert same(B.quantize(x, key), B.encode(x, key).stored), key


def test_outcomes_name_what_happened():
    x = np.array([1.0, 0.3, 1e-9, 7.5] + [0.5] * 12, np.float32)
    enc = B.encode(x, "nvfp4")
    marks = B.outcomes(x, enc)
    assert marks[2] == "flushed" and set(marks) <= set(B.OUTCOMES)
    assert (marks == "kept").sum() >= 1


def test_unknown_recipe_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown recipe"):
        B.quantize([1.0], "mxfp3")


def test_nvfp4_matches_torchaos_reference_where_it_installs():
    """torchao's NVFP4 reference (optional: skipped where torchao is not installed)."""
    pytest.importorskip("torch")
    nv = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    kernels = pytest.importorskip("torchao.prototype.mx_formats.kernels")
    import torch

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((8, 64)) * 10.0 ** rng.integers(-8, -2, (8, 4)).repeat(16, axis=1)).astype(np.float32)
    tx = torch.from_numpy(x)
    tensor_scale = nv.per_tensor_amax_to_scale(torch.max(torch.abs(tx)))
    scales, packed = nv.nvfp4_quantize(tx, 16, tensor_scale)
    elements = kernels.f4_unpacked_to_f32(kernels.unpack_uint4(packed.view(torch.uint8))).numpy().reshape(8, 64)
    enc = B.encode(x, "nvfp4")
    assert enc.tensor_scale == float(tensor_scale)
    assert enc.block_scales.tolist() == scales.to(torch.float32).numpy().reshape(-1).tolist()
    assert same(enc.stored / enc.scale, elements)


# --- delayed scaling replayed ----------------------------------------------------------------------------------


def _naive_delayed(amax, history, margin, fmax):
    """Transformer Engine's DelayedScaling, written out directly: scale_t from the max of the last
    ``history`` amaxes before t (kept when that max is not finite and > 0; 1.0 at the start; FP32's largest
    finite value where the quotient overflows, as transformer_engine/common/recipe/delayed_scaling.cu sets it)."""
    scale, out, seen = 1.0, [], []
    for a in amax:
        out.append(scale)
        if math.isnan(a):
            continue
        seen.append(a)
        top = max(seen[-history:])
        if math.isfinite(top) and top > 0:
            with np.errstate(over="ignore"):
                scale = float(np.float32(np.float32(fmax * 2.0**-margin) / np.float32(top)))
            if math.isinf(scale):
                scale = float(np.finfo(np.float32).max)
    return out


@pytest.mark.parametrize("history", [1, 2, 16, 1024])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_replay_delayed_matches_the_recipe_written_out(history, fmt):
    rng = np.random.default_rng(history)
    amax = np.exp(rng.normal(0, 1.5, 400)).astype(np.float32).astype(np.float64)
    amax[[50, 51, 300]] = [np.inf, np.nan, 0.0]
    amax[200:202] = 1e-40  # an FP32 subnormal: max / amax overflows FP32 where it is the history's largest
    fmax = F.FORMATS[fmt].max
    want_scales = _naive_delayed(amax.tolist(), history, 0, fmax)
    assert B.delayed_scales(amax, history, 0, fmt).tolist() == pytest.approx(want_scales, rel=0, abs=0)
    got = B.replay_delayed(amax, history, 0, fmt)
    threshold = F.FORMATS[fmt].overflow_threshold
    for t, (a, s) in enumerate(zip(amax, want_scales, strict=True)):
        with np.errstate(over="ignore"):
            product = float(np.float32(a) * np.float32(s)) if math.isfinite(a) else math.inf
        assert got[t] == (math.isinf(a) or (not math.isnan(a) and product >= threshold)), t
    # a growing amax overflows a stale scale; a shorter history forgets a spike sooner
    assert got.dtype == bool and got.shape == amax.shape


def test_delayed_scale_that_overflows_is_fp32s_largest():
    # TE's amax_and_scale_update: scale = max / amax, then `if (isinf(scale)) scale = FLT_MAX`.
    flt_max = float(np.finfo(np.float32).max)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    for fmt in ("fp8_e4m3", "fp8_e5m2"):
        assert F.FORMATS[fmt].max / tiny > flt_max  # the quotient does overflow FP32
        scales = B.delayed_scales([tiny, tiny, 1.0], history=1, fmt=fmt).tolist()
        assert scales == [1.0, flt_max, flt_max]
    assert B.replay_delayed([tiny, tiny], history=1).tolist() == [False, False]


def test_replay_delayed_simple_cases():
    assert B.replay_delayed([1.0, 1.0, 1.0]).tolist() == [False, False, False]
    assert B.replay_delayed([1.0, 2.0, 2.0]).tolist() == [False, True, False]  # 2 * 448 / 1 is past 448
    assert B.replay_delayed([500.0]).tolist() == [True]  # the first step's scale is 1.0
    spike = [1.0, 8.0] + [1.0] * 20 + [4.0]
    assert not B.replay_delayed(spike, history=1024)[-1]  # the spike still sets the scale: 4 fits
    assert B.replay_delayed(spike, history=16)[-1]  # forgotten after 16 steps: 4 overflows
    assert B.replay_delayed([1.0, 2.0], margin=1).tolist() == [False, False]  # a margin of 1 leaves room for 2×
    with pytest.raises(ValueError, match="at least 1"):
        B.replay_delayed([1.0], history=0)


@pytest.mark.parametrize("element", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
@pytest.mark.parametrize("rule", ["mx_floor", "mx_ceil"])
def test_the_e8m0_exponent_from_the_bits_equals_frexps(element, rule):
    """The scale exponent read from amax's bits against frexp's, on zeros, float32 subnormals, each element's own
    largest significand and one ulp either side, the top of FP32, and a million random finite magnitudes."""
    f = F.get_format(element)
    rng = np.random.default_rng(25)
    top = np.float32(f.max)
    edges = [0.0, 1e-45, 1e-40, 2.0**-127, 2.0**-126, 3.4028235e38, 1.0, top]
    with np.errstate(over="ignore"):  # what passes FP32's largest is inf, and dropped below
        edges += [top * np.float32(2.0**k) for k in range(-140, 120, 7)]
        edges = np.array(edges, np.float32)
        edges = np.concatenate([edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(0))])
    random = rng.integers(0, 0x7F800000, 10**6, dtype=np.uint32).view(np.float32)
    amax = np.concatenate([edges[np.isfinite(edges)], random])
    got = B._mx_exponent(amax, f, rule)
    want = B._mx_exponent_frexp(amax, f, rule)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(B._powers_of_two(got), np.ldexp(np.float32(1.0), got).astype(np.float32))
