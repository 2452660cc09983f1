"""lensa.numerics.formats against ml_dtypes, numpy and torch: every code point, every midpoint."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lensa.numerics import formats as F
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

LIBRARY_DTYPES = {
    "fp32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
SMALL = ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def all_codes(name: str) -> np.ndarray:
    return np.arange(1 << F.FORMATS[name].bits, dtype=np.int64)


def library_values(name: str, codes: np.ndarray) -> np.ndarray:
    bits = F.FORMATS[name].bits
    with np.errstate(invalid="ignore"):  # signalling NaN codes
        return codes.astype(UINT[bits]).view(LIBRARY_DTYPES[name]).astype(np.float64)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as stored floats: NaN equals NaN, and -0 differs from +0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    equal = (a == b) & (np.signbit(a) == np.signbit(b))
    return bool(np.all(both_nan | equal))


# --- the records ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(LIBRARY_DTYPES))
def test_format_constants_match_finfo(name):
    f = F.FORMATS[name]
    fi = ml_dtypes.finfo(LIBRARY_DTYPES[name])
    assert f.max == float(fi.max)
    assert f.smallest_normal == float(fi.smallest_normal)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    assert f.eps == float(fi.eps)
    assert f.exponent_bits == fi.nexp
    assert f.significand_bits == fi.nmant
    assert f.emin == fi.minexp
    assert f.bits == fi.bits
    assert (f.dtype == np.dtype(LIBRARY_DTYPES[name])) if f.dtype is not None else False


def test_tf32_is_fp32_range_with_ten_bits():
    t, s = F.FORMATS["tf32"], F.FORMATS["fp32"]
    assert (t.exponent_bits, t.significand_bits, t.bias, t.bits) == (8, 10, 127, 19)
    assert t.smallest_normal == s.smallest_normal
    assert t.max == (2 - 2**-10) * 2.0**127
    assert t.eps == F.FORMATS["fp16"].eps
    assert t.dtype is None


def test_seed_quoted_limits():
    fp16, bf16 = F.FORMATS["fp16"], F.FORMATS["bf16"]
    assert fp16.max == 65504
    assert fp16.smallest_normal == 2.0**-14 and f"{fp16.smallest_normal:.1e}" == "6.1e-05"
    assert fp16.smallest_subnormal == 2.0**-24 and f"{fp16.smallest_subnormal:.1e}" == "6.0e-08"
    assert bf16.eps == 2.0**-7 and fp16.eps == 2.0**-10
    assert F.FORMATS["fp8_e4m3"].max == 448 and F.FORMATS["fp8_e5m2"].max == 57344


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown format"):
        F.quantize(1.0, "fp12")


# --- every code point -------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_every_code_point_decodes_like_the_library_and_round_trips(name):
    codes = all_codes(name)
    ours = F.from_bits(codes, name)
    assert same(ours, library_values(name, codes))
    finite = ~np.isnan(ours)
    assert same(F.quantize(ours[finite], name), ours[finite])
    assert np.array_equal(F.to_bits(ours[finite], name), codes[finite])
    # and through the library's own storage type, as the fast path sees them
    stored = codes.astype(UINT[F.FORMATS[name].bits]).view(LIBRARY_DTYPES[name])
    assert same(F.quantize(stored, name), ours)


@pytest.mark.parametrize("name", SMALL)
def test_midpoints_round_to_even_and_nudges_to_nearest(name):
    f = F.FORMATS[name]
    codes = all_codes(name)
    values = F.from_bits(codes, name)
    positive = codes[(values > 0) & np.isfinite(values)]
    lo, hi = F.from_bits(positive[:-1], name), F.from_bits(positive[1:], name)
    mid = (lo + hi) / 2  # exact in float64 for these narrow formats
    even_is_hi = (positive[1:] % 2) == 0
    expected = np.where(even_is_hi, hi, lo)
    assert same(F.quantize(mid, name), expected)
    assert same(F.quantize(-mid, name), -expected)
    nudge = (hi - lo) * 2.0**-20
    assert same(F.quantize(mid - nudge, name), lo)
    assert same(F.quantize(mid + nudge, name), hi)
    # above the largest value: the tie at the threshold, then overflow
    top = np.inf if f.overflow == "inf" else f.max
    t = f.overflow_threshold
    expected_at_tie = top if (int(F.to_bits(f.max, name)) % 2 == 1) else f.max
    assert same(F.quantize([t, np.nextafter(t, 0), np.nextafter(t, np.inf)], name), [expected_at_tie, f.max, top])


def test_halfway_below_smallest_subnormal_goes_to_zero():
    s = F.FORMATS["fp16"].smallest_subnormal
    assert same(F.quantize([s / 2, -s / 2, np.nextafter(s / 2, 1)], "fp16"), [0.0, -0.0, s])


def test_acceptance_example():
    assert F.quantize([65519.0, 65520.0, 1.00048828125], "fp16").tolist() == [65504.0, math.inf, 1.0]


# --- against torch --------------------------------------------------------------------


def hard_float32_inputs(n_random: int = 400_000) -> np.ndarray:
    """Random bit patterns (every class: NaN, inf, subnormal) plus the tricky spots."""
    rng = np.random.default_rng(2024)
    parts = [rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    parts.append(rng.standard_normal(n_random).astype(np.float32) * np.float32(1e-3))
    for name in SMALL:
        codes = all_codes(name) if F.FORMATS[name].bits == 8 else rng.integers(0, 1 << 16, 50_000)
        v = F.from_bits(codes, name)
        v = v[np.isfinite(v)]
        nxt = F.next_up(v, name)
        ok = np.isfinite(nxt)
        mids = ((v[ok] + nxt[ok]) / 2).astype(np.float32)  # exact: 16 significand bits at most
        parts += [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)), -mids]
        t = np.float32(F.FORMATS[name].overflow_threshold)
        parts.append(np.array([t, np.nextafter(t, np.float32(0)), np.nextafter(t, np.float32(np.inf))], np.float32))
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 464.0, 464.01, -470, 1e30], np.float32))
    return np.concatenate(parts).astype(np.float32)


@requires_torch
@pytest.mark.parametrize("name", SMALL)
def test_quantize_matches_torch_bit_for_bit_on_float32(name):
    import torch

    tdtype = getattr(torch, TORCH_DTYPE_NAMES[name])
    x = hard_float32_inputs()
    theirs = torch.from_numpy(x).to(tdtype).to(torch.float64).numpy()
    ours = F.quantize(x, name)
    assert same(ours, theirs)
    # and the direct path (used for float64 inputs) agrees with the fast one
    with np.errstate(invalid="ignore"):  # signalling NaNs among the random bits
        x64 = x.astype(np.float64)
    assert same(F.quantize(x64, name), theirs)


@requires_torch
def test_e4m3_choice_is_torchs_saturation_not_ml_dtypes_nan():
    import torch

    x = np.array([464.0, 464.5, 1e6, np.inf, -np.inf], np.float32)
    ours = F.quantize(x, "fp8_e4m3")
    assert ours.tolist() == [448.0, 448.0, 448.0, 448.0, -448.0]
    assert ours.tolist() == torch.from_numpy(x).to(torch.float8_e4m3fn).float().tolist()
    assert np.isnan(x[1:2].astype(ml_dtypes.float8_e4m3fn).astype(np.float32)).all()  # the library differs
    assert F.classify(x, "fp8_e4m3").tolist() == ["normal", "overflow", "overflow", "overflow", "overflow"]


def test_float64_inputs_are_rounded_once():
    # torch and ml_dtypes both round this through float32 first and get 1.0
    x = 1 + 2**-8 + 2**-40
    assert F.quantize([x], "bf16").tolist() == [1.0078125]
    assert F.quantize([1 + 2**-11 + 2**-40], "fp16").tolist() == [1 + 2**-10]
    assert F.quantize([1 + 2**-11 + 2**-40], "tf32").tolist() == [1 + 2**-10]
    assert F.quantize([448 + 16 + 2**-30], "fp8_e4m3").tolist() == [448.0]  # saturates


def test_scalar_inputs_give_scalars_in_every_format():
    for name in F.FORMATS:
        for x in (np.float32(0.1), 0.1, np.float16(0.1)):
            q = F.quantize(x, name)
            assert q.shape == () and float(q) == float(F.quantize([x], name)[0])


def test_tf32_bit_path_matches_direct_rounding():
    x = hard_float32_inputs(200_000)
    with np.errstate(invalid="ignore"):  # signalling NaNs among the random bits
        x64 = x.astype(np.float64)
    assert same(F.quantize(x, "tf32"), F.quantize(x64, "tf32"))
    assert F.quantize(np.float32(1 + 2**-11), "tf32") == 1.0  # tie to even
    assert F.quantize(np.float32(1 + 3 * 2**-11), "tf32") == 1 + 2**-9  # tie to even, upward


# --- classification, spacing, neighbours -----------------------------------------------


def test_classify_fp16_boundaries():
    s = 2.0**-24
    x = [0.0, -0.0, s / 2, np.nextafter(s / 2, 1), 2**-14 - s / 2, 2**-14 - s / 2 - 1e-12, 1.0, 65519.0, 65520.0]
    x += [np.inf, -np.inf, np.nan]
    expected = ["zero", "zero", "zero", "subnormal", "normal", "subnormal", "normal", "normal", "overflow"]
    expected += ["overflow", "overflow", "nan"]
    assert F.classify(x, "fp16").tolist() == expected


@requires_torch
@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e5m2", "fp8_e4m3"])
def test_classify_agrees_with_what_torch_stores(name):
    import torch

    tdtype = getattr(torch, TORCH_DTYPE_NAMES[name])
    f = F.FORMATS[name]
    x = hard_float32_inputs(100_000)
    x = x[np.isfinite(x)]
    stored = np.abs(torch.from_numpy(x).to(tdtype).to(torch.float64).numpy())
    cats = F.classify(x, name)
    assert np.all((cats == "zero") == (stored == 0))
    assert np.all((cats == "subnormal") == ((stored > 0) & (stored < f.smallest_normal)))
    if f.overflow == "inf":
        assert np.all((cats == "overflow") == np.isinf(stored))
    else:
        assert np.all((cats == "overflow") == (np.abs(x) > f.overflow_threshold))


def test_category_shares_sum_to_one():
    shares = F.category_shares(np.geomspace(1e-12, 1e8, 1000), "fp16")
    assert math.isclose(sum(shares.values()), 1.0)
    assert shares["zero"] > 0 and shares["overflow"] > 0


@pytest.mark.parametrize("name", list(F.FORMATS))
def test_spacing_is_the_gap_to_the_next_value(name):
    rng = np.random.default_rng(1)
    f = F.FORMATS[name]
    x = F.quantize(np.exp(rng.uniform(np.log(f.smallest_subnormal), np.log(f.max / 4), 5000)), name)
    x = x[x > 0]
    assert np.array_equal(F.spacing(x, name), F.next_up(x, name) - x)
    assert F.spacing(0.0, name) == f.smallest_subnormal
    assert F.spacing(1.0, name) == f.eps
    assert np.isinf(F.spacing(f.max * 2, name)) and np.isnan(F.spacing(np.nan, name))


def test_neighbours():
    assert F.next_up(1.0, "fp16") == 1 + 2**-10 and F.next_down(1.0, "fp16") == 1 - 2**-11
    assert F.next_up(0.0, "fp16") == 2**-24 and F.next_down(0.0, "fp16") == -(2**-24)
    assert F.next_up(-(2**-24), "fp16") == 0.0
    assert np.isinf(F.next_up(65504, "fp16")) and F.next_down(np.inf, "fp16") == 65504
    assert F.next_down(-65504, "fp16") == -np.inf


def test_representable_between():
    assert F.representable_between(1, 1.0625, "bf16").tolist() == [1 + i / 128 for i in range(9)]
    assert len(F.representable_between(1, 1.0625, "fp16")) == 65
    grid = F.representable_between(-0.01, 0.01, "fp8_e4m3")
    assert grid.tolist() == sorted(grid.tolist()) and 0.0 in grid and len(grid) == 11
    with pytest.raises(ValueError):
        F.representable_between(0, 1, "fp32")


# --- bit fields --------------------------------------------------------------------------


def test_fields_of_familiar_values():
    b = F.fields(0.1, "fp16")
    assert (b.sign, b.exponent, b.significand) == (0, 11, 0b1001100110)
    assert b.bit_string() == "0 01011 1001100110" and b.unbiased_exponent == -4
    assert F.fields(-2.0, "bf16").code == 0xC000
    assert F.fields(np.float32(1.0), "fp32").code == 0x3F800000
    assert F.fields(2**-24, "fp16").unbiased_exponent == -14  # subnormal: emin
    assert F.fields(np.inf, "fp8_e5m2").code == 0x7C and F.fields(np.nan, "fp8_e4m3").code == 0x7F


@pytest.mark.parametrize("name", list(F.FORMATS))
def test_bits_round_trip(name):
    rng = np.random.default_rng(5)
    f = F.FORMATS[name]
    codes = rng.integers(0, 1 << f.bits, 20_000)
    values = F.from_bits(codes, name)
    ok = ~np.isnan(values)
    assert np.array_equal(F.to_bits(values[ok], name), codes[ok])
    assert same(F.from_bits(F.to_bits(values, name), name), values)


@pytest.mark.parametrize("name", SMALL)
def test_one_value_codes_agree_with_the_array_ones_at_every_code_point(name):
    codes = all_codes(name)
    values = F.from_bits(codes, name)
    assert same(np.array([F.value_of(int(c), name) for c in codes]), values)
    assert F.value_of(1 + (1 << F.FORMATS[name].bits), name) == values[1]  # modulo 2**bits, as from_bits
    expected = F.to_bits(values, name)  # NaN codes collapse to the canonical NaN in both
    assert [F.code_of(float(v), name) for v in values] == expected.tolist()


@pytest.mark.parametrize("name", list(F.FORMATS))
def test_scalar_rounder_is_quantize(name):
    rng = np.random.default_rng(11)
    f = F.FORMATS[name]
    grid = F.from_bits(rng.integers(0, 1 << f.bits, 5_000), name)
    grid = grid[np.isfinite(grid)]
    # The neighbours' midpoints (ties to even), a hair either side, random float64s, and the specials.
    mids = (grid[:-1] + grid[1:]) / 2
    xs = np.concatenate(
        [grid, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), rng.standard_normal(5_000) * 1e3]
    )
    xs = np.concatenate([xs, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 5e-324, f.max * 1.5]])
    rnd = F.scalar_rounder(name)
    assert same(np.array([rnd(float(x)) for x in xs]), F.quantize(xs, name))


def test_fp32_bits_match_numpy():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**32, 10_000, dtype=np.uint64).astype(np.uint32)
    values = codes.view(np.float32)
    ok = ~np.isnan(values)
    assert np.array_equal(F.to_bits(values[ok], "fp32"), codes[ok].astype(np.int64))


# --- properties --------------------------------------------------------------------------

finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(x=finite_floats, y=finite_floats, name=st.sampled_from(list(F.FORMATS)))
def test_rounding_is_monotone_idempotent_and_within_half_a_spacing(x, y, name):
    f = F.FORMATS[name]
    if not f.signed:  # E8M0 holds positive values only (the rest is NaN: tests/test_formats_mx.py)
        x, y = abs(x) or 1.0, abs(y) or 1.0
    qx, qy = float(F.quantize(x, name)), float(F.quantize(y, name))
    if x <= y:
        assert qx <= qy
    assert float(F.quantize(qx, name)) == qx or math.isnan(qx)
    if abs(x) <= f.max and (f.has_zero or abs(x) >= f.smallest_normal):  # E8M0 lifts what is below 2**-127
        assert abs(qx - x) <= float(F.spacing(x, name)) / 2


@requires_torch
@pytest.mark.parametrize("name", SMALL)
def test_cast_is_torchs_to_bit_for_bit_also_in_parallel_chunks(name):  # NaN payloads aside
    import torch

    tdtype = getattr(torch, TORCH_DTYPE_NAMES[name])
    bits = np.uint8 if F.FORMATS[name].bits == 8 else np.uint16
    tbits = torch.uint8 if F.FORMATS[name].bits == 8 else torch.int16
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(3 << 20) * rng.choice([1e-6, 1.0, 1e3], 3 << 20)).astype(np.float32)  # > 2 chunks
    x[::1001] = np.inf
    x[::1003] = np.nan
    ours = F.cast(x, name, workers=4)  # threads over 3 chunks; the benchmark's path
    assert ours.dtype == F.FORMATS[name].dtype and ours.shape == x.shape
    assert np.array_equal(ours.view(bits), F.cast(x, name).view(bits))  # one thread: bit for bit the same
    theirs = torch.from_numpy(x).to(tdtype).view(tbits).numpy().view(bits)
    nan = np.isnan(x)
    # NaN stays NaN in both; the libraries pick different NaN payloads (ml_dtypes 0x7E, torch 0x7F in E5M2).
    assert np.array_equal(ours.view(bits)[~nan], theirs[~nan])
    assert np.isnan(ours.astype(np.float32)[nan]).all()
    assert same(F.quantize(x, name, workers=4), ours.astype(np.float64))
    assert same(F.quantize(x, name), ours.astype(np.float64))
    assert F.cast(x.reshape(3, -1), name, workers=4).shape == (3, 1 << 20)


def test_cast_tf32_is_float32_holding_tf32_values():
    out = F.cast(np.float32([1 + 2**-11 + 2**-13, 3.0]), "tf32")
    assert out.dtype == np.float32 and out.tolist() == [1 + 2**-10, 3.0]


@pytest.mark.parametrize("name", SMALL)
def test_threads_round_exactly_as_one_thread(name):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2 << 20) + 77) * 10.0 ** rng.integers(-9, 6, (2 << 20) + 77)).astype(np.float32)
    for workers in (2, 5):
        assert same(F.quantize(x, name, workers=workers), F.quantize(x, name))
        assert same(F.cast(x, name, workers=workers).astype(np.float64), F.cast(x, name).astype(np.float64))


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp4_e2m1", "e8m0", "tf32", "fp32"])
def test_quantize_into_out_writes_what_it_would_return(name):
    """``out=``: the same values as a fresh result, in the caller's array, on one or more threads; float64
    inputs (the direct path) included. What ``out`` held before plays no part."""
    rng = np.random.default_rng(21)
    x32 = (rng.standard_normal((3, (1 << 20) + 5)) * 10.0 ** rng.integers(-9, 6, (3, 1))).astype(np.float32)
    x32[0, ::997] = -0.0
    x32[1, ::1001] = np.nan
    for x in (x32, x32[:, :1000].astype(np.float64) * (1 + 2.0**-30)):
        for workers in (1, 3):
            out = np.full(x.shape, 12345.0)
            got = F.quantize(x, name, workers=workers, out=out)
            assert got is out
            assert same(out, F.quantize(x, name))


def test_quantize_out_of_the_wrong_kind_is_a_clear_error():
    x = np.ones((4, 5), np.float32)
    for bad in (np.empty((5, 4)), np.empty((4, 5), np.float32), np.empty((5, 4)).T, np.empty(20)):
        with pytest.raises(ValueError, match="out must be a writable C-contiguous float64 array of shape"):
            F.quantize(x, "fp16", out=bad)
