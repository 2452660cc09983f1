"""The OCP MX formats (FP6 E3M2, FP6 E2M3, FP4 E2M1, the E8M0 scale) against ml_dtypes, code by code.

ml_dtypes >= 0.5.1 is the independent reference (0.5.1 fixed the sign bit of
FP4 and FP6). Where lensa deliberately differs, :func:`expected_from_ml_dtypes`
applies the documented rule, and a test pins each difference down:

- formats without infinity saturate at ±max; ml_dtypes gives NaN past the
  top of E4M3 and E8M0 (FP6 and FP4 it saturates too);
- NaN stays NaN in :func:`lensa.numerics.formats.quantize`; ml_dtypes stores FP6 and
  FP4, which have no NaN code, as -0;
- ml_dtypes rounds float32 *subnormals* in (2**-127, 1.5 * 2**-127) up to
  2**-126 in E8M0, where 2**-127 is the nearer value; lensa gives 2**-127.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from lensa.numerics import formats as F

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

# Every format of the registry of 8 bits or fewer, with the ml_dtypes type of the same name: a format added to
# lensa.numerics.formats.FORMATS is checked here code by code without editing this file (a wrong dtype_name fails too,
# as the library's values then differ from the format's defining numbers).
MX = {
    key: getattr(ml_dtypes, f.dtype_name)
    for key, f in F.FORMATS.items()
    if f.bits <= 8 and f.dtype_name is not None and hasattr(ml_dtypes, f.dtype_name)
}
NARROW = list(MX)


def test_every_narrow_format_of_the_registry_is_checked_against_its_ml_dtypes_type():
    narrow = {k for k, f in F.FORMATS.items() if f.bits <= 8}
    assert set(MX) == narrow and {"fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "e8m0"} <= narrow


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


def codes_of(name: str) -> np.ndarray:
    return np.arange(1 << F.FORMATS[name].bits, dtype=np.int64)


def library_decode(name: str, codes: np.ndarray) -> np.ndarray:
    return codes.astype(np.uint8).view(MX[name]).astype(np.float64)


def library_encode(name: str, x32: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return x32.astype(MX[name]).view(np.uint8).astype(np.int64)


def expected_from_ml_dtypes(name: str, x32: np.ndarray) -> np.ndarray:
    """ml_dtypes' stored value, with lensa's three documented rules applied (module docstring)."""
    f = F.FORMATS[name]
    with np.errstate(invalid="ignore", over="ignore"):
        lib = x32.astype(MX[name]).astype(np.float64)
        x = x32.astype(np.float64)
    beyond = np.abs(x) > f.max  # what ml_dtypes does not saturate rounds to max or gives NaN past the threshold
    if not f.has_inf:
        top = np.where(x < 0, -f.max if f.signed else np.nan, f.max)
        lib = np.where(beyond & np.isnan(lib) & ~np.isnan(x), top, lib)
    lib = np.where(np.isnan(x), np.nan, lib)
    if not f.has_subnormals:
        quirk = (x > f.smallest_normal) & (x < 1.5 * f.smallest_normal) & (np.abs(x32) < np.finfo(np.float32).tiny)
        lib = np.where(quirk, f.smallest_normal, lib)
    return lib


def random_float32(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def boundary_inputs(name: str) -> np.ndarray:
    """Every code point, every midpoint between neighbours, one float32 ulp either side, both signs."""
    f = F.FORMATS[name]
    v = F.from_bits(codes_of(name), name)
    v = np.unique(v[np.isfinite(v) & (v > 0)])
    mids = (v[:-1] + v[1:]) / 2  # exact in float32: a few significand bits
    below_smallest = np.array([f.smallest_subnormal / 2, f.smallest_subnormal * 0.75])
    top = np.array([f.overflow_threshold, f.max * 2, f.max * 1e30 if f.max < 1e8 else f.max])
    with np.errstate(over="ignore"):  # E8M0's 2 * max is past float32: inf, as wanted
        pts = np.concatenate([v, mids, below_smallest, top]).astype(np.float32)
    up, down = np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))
    both = np.concatenate([pts, up, down])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    return np.concatenate([both, -both, specials])


# --- the records -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NARROW)
def test_defining_numbers_give_finfo(name):
    f, fi = F.FORMATS[name], ml_dtypes.finfo(MX[name])
    assert f.max == float(fi.max) and f.smallest_normal == float(fi.tiny)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    assert (f.exponent_bits, f.significand_bits, f.emin, f.eps) == (fi.nexp, fi.nmant, fi.minexp, float(fi.eps))
    assert f.dtype == np.dtype(MX[name])


def test_ocp_mx_limits():
    # OCP Microscaling Formats (MX) v1.0, table 1 (element formats) and 5.4.1 (E8M0)
    assert [F.FORMATS[k].max for k in ("fp6_e3m2", "fp6_e2m3", "fp4_e2m1")] == [28.0, 7.5, 6.0]
    assert [F.FORMATS[k].emax for k in ("fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")] == [8, 15, 4, 2, 2]
    e8 = F.FORMATS["e8m0"]
    assert (e8.bits, e8.max, e8.smallest_normal, e8.has_zero, e8.signed) == (8, 2.0**127, 2.0**-127, False, False)
    assert F.from_bits(np.arange(8), "fp4_e2m1").tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_no_format_is_told_by_its_name():
    """The number code decides from a format's numbers: no comparison with a format's key or ``.name``."""
    import pathlib
    import re

    keys = "|".join(F.FORMATS)
    literal = re.compile(rf"(==|!=)\s*[\"']({keys})[\"']|[\"']({keys})[\"']\s*(==|!=)")
    by_name = re.compile(r"\b(f|fmt|self)\.name\s*(==|!=)")
    root = pathlib.Path(F.__file__).parent
    for module in ("formats.py", "exact.py", "inspector.py", "blockscale.py"):
        path = root / module
        assert path.is_file(), path  # the list names the number code's files: a move must not skip one silently
        text = path.read_text(encoding="utf-8")
        assert not literal.search(text) and not by_name.search(text), module


def test_groups_come_from_width_and_sign():
    assert F.formats_in("16bit") == ("fp16", "bf16")
    assert F.formats_in("fp8") == ("fp8_e4m3", "fp8_e5m2")
    assert F.formats_in("narrow") == ("fp6_e3m2", "fp6_e2m3", "fp4_e2m1")
    assert F.formats_in("scale") == ("e8m0",)


# --- every code point, every boundary ------------------------------------------------------


@pytest.mark.parametrize("name", NARROW)
def test_every_code_decodes_like_ml_dtypes_and_encodes_back(name):
    codes = codes_of(name)
    ours = F.from_bits(codes, name)
    assert same(ours, library_decode(name, codes))
    assert same(np.array([F.value_of(int(c), name) for c in codes]), ours)
    ok = ~np.isnan(ours)
    assert np.array_equal(F.to_bits(ours[ok], name), codes[ok])
    assert [F.code_of(float(v), name) for v in ours[ok]] == codes[ok].tolist()
    assert same(F.quantize(ours[ok], name), ours[ok])
    stored = codes.astype(np.uint8).view(MX[name])
    assert same(F.quantize(stored.astype(np.float32), name), ours)


@pytest.mark.parametrize("name", NARROW)
def test_quantize_and_codes_equal_ml_dtypes_at_every_boundary(name):
    x32 = boundary_inputs(name)
    expected = expected_from_ml_dtypes(name, x32)
    assert same(F.quantize(x32, name), expected)  # the fast path (ml_dtypes' cast) where it is exact
    assert same(F.quantize(x32.astype(np.float64), name), expected)  # the direct rounding
    assert same(np.array([F.scalar_rounder(name)(float(v)) for v in x32]), expected)
    f = F.FORMATS[name]
    has_code = ~np.isnan(expected)
    lib_codes = library_encode(name, x32)
    with np.errstate(invalid="ignore", over="ignore"):
        lib_values = x32.astype(MX[name]).astype(np.float64)
    agree = has_code & (lib_values == expected)  # where the module docstring's rules change nothing
    assert np.array_equal(F.to_bits(x32, name)[agree], lib_codes[agree])
    if f.nan_codes == 0:  # ml_dtypes stores NaN as -0: so does to_bits, though quantize says NaN
        assert np.all(F.to_bits(x32[np.isnan(x32)], name) == lib_codes[np.isnan(x32)])


@pytest.mark.parametrize("name", NARROW)
def test_millions_of_random_float32_patterns(name):
    x32 = random_float32(1 << 21, seed=hash(name) % 1000)
    x32 = np.concatenate([x32, (np.random.default_rng(1).standard_normal(1 << 20) * 3).astype(np.float32)])
    expected = expected_from_ml_dtypes(name, x32)
    assert same(F.quantize(x32, name), expected)
    with np.errstate(invalid="ignore"):
        x64 = x32.astype(np.float64)
    assert same(F.quantize(x64, name), expected)
    # classify says what happened to each value, read off what ml_dtypes stores
    f = F.FORMATS[name]
    cats = F.classify(x32, name)
    stored = np.abs(expected)
    assert np.array_equal(cats == "nan", np.isnan(expected))
    finite_in = np.isfinite(x64) & ~np.isnan(expected)
    off_tie = finite_in & (np.abs(x64) != f.overflow_threshold)  # the tie itself: the boundary test
    assert np.array_equal((cats == "overflow")[off_tie], (np.abs(x64) > f.overflow_threshold)[off_tie])
    assert np.array_equal((cats == "zero")[finite_in], (stored == 0)[finite_in])
    sub = (stored > 0) & (stored < f.smallest_normal)
    assert np.array_equal((cats == "subnormal")[finite_in], sub[finite_in])


@pytest.mark.parametrize("name", NARROW)
def test_spacing_and_neighbours_follow_ml_dtypes_codes(name):
    f = F.FORMATS[name]
    codes = codes_of(name)
    values = library_decode(name, codes)
    pos = (values > 0) & np.isfinite(values) & (~np.isnan(values))
    pos_codes = codes[pos]
    v = values[pos]
    nxt = library_decode(name, pos_codes + 1)
    below = library_decode(name, np.maximum(pos_codes - 1, 0))
    at_top = v == f.max
    assert same(F.next_up(v, name)[~at_top], nxt[~at_top]) and np.isinf(F.next_up(f.max, name))
    assert same(F.spacing(v, name)[~at_top], (nxt - v)[~at_top])
    lowest = pos_codes == pos_codes.min()
    if f.has_zero:
        assert same(F.next_down(v, name)[~lowest], below[~lowest])
        assert float(F.next_down(v[lowest], name)[0]) == 0.0
        assert float(F.next_up(-v[lowest], name)[0]) == 0.0
    else:
        assert same(F.next_down(v, name)[1:], below[1:]) and F.next_down(v[0], name) == -np.inf
    assert same(F.representable_between(-f.max, f.max, name), np.unique(values[np.isfinite(values)] + 0.0))


def test_what_each_new_format_does_with_the_awkward_values():
    x = np.array([0.0, -0.0, -1.0, 3.0, 5.0, 7.0, 1e6, np.inf, -np.inf, np.nan, 0.25, 0.2], np.float32)
    assert same(F.quantize(x, "fp4_e2m1"), [0, -0.0, -1, 3, 4, 6, 6, 6, -6, np.nan, 0, 0])
    assert same(F.quantize(x, "e8m0"), [np.nan, np.nan, np.nan, 4, 4, 8, 2.0**20, 2.0**127, np.nan, np.nan, 0.25, 0.25])
    assert F.classify(x, "e8m0").tolist()[:3] == ["nan", "nan", "nan"]
    assert F.classify([6.0, 7.0, 1e9, 0.24], "fp4_e2m1").tolist() == ["normal", "overflow", "overflow", "zero"]
    assert F.fields(6.0, "fp4_e2m1").bit_string() == "0 11 1" and F.fields(1.0, "e8m0").bit_string() == "01111111"


def test_e8m0_ties_round_up_as_ml_dtypes():
    # With no significand bit, the tie 1.5 * 2**e is between 2**e and 2**(e+1): rint's tie to even picks the
    # even significand 2, so ties go up; ml_dtypes does the same.
    x = np.array([1.5, 3.0, 6.0, 0.75, 1.4999, 2.0**127 * 1.25], np.float32)
    assert same(F.quantize(x, "e8m0"), expected_from_ml_dtypes("e8m0", x))
    assert F.quantize(x, "e8m0").tolist() == [2.0, 4.0, 8.0, 1.0, 1.0, 2.0**127]


def test_documented_differences_from_ml_dtypes_are_real():
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.isnan(np.float32(2.0**128).astype(ml_dtypes.float8_e8m0fnu).astype(np.float32))
        assert np.float32(np.nan).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) == 0x8  # -0
        sub = np.float32(2.0**-127 * 1.25)
        assert sub.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64) == 2.0**-126
    assert F.quantize(np.float32(2.0**-127 * 1.25), "e8m0") == 2.0**-127
    assert F.quantize(np.float32(2.0**127 * 1.75), "e8m0") == 2.0**127


def test_ml_dtypes_is_new_enough():
    version = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:3])
    assert version >= (0, 5, 1)
    assert np.float32(-0.5).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) == 0x9  # the sign bit 0.5.1 fixed
