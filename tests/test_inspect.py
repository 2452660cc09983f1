"""lensa.numerics.exact and lensa.numerics.inspector: exact parsing, rounding against quantize/torch/ml_dtypes, the
report, bit flips."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time
from decimal import Decimal
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lensa.numerics import exact as E
from lensa.numerics import formats as F
from lensa.numerics import inspector as I
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

NAMES = list(F.FORMATS)
# Formats with a sign and a zero; E8M0 (unsigned, no zero) has its own tests below.
SIGNED = [n for n in NAMES if F.FORMATS[n].signed and F.FORMATS[n].has_zero]
SMALL = ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
ML_DTYPES = {
    "fp32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def same(a: float | None, b: float | None) -> bool:
    """Equal as stored values: NaN equals NaN, -0 differs from +0, None only equals None."""
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def p(text: str) -> E.Parsed:
    return E.parse_exact(text)


# --- parsing -------------------------------------------------------------------------------------

ACCEPTED = [
    ("0.1", Fraction(1, 10)),
    ("-2.5", Fraction(-5, 2)),
    (".5", Fraction(1, 2)),
    ("1.", Fraction(1)),
    ("007", Fraction(7)),
    ("1e-8", Fraction(1, 10**8)),
    ("6.1E-5", Fraction(61, 10**6)),
    ("-3.4e38", Fraction(-34 * 10**37)),
    ("1e+5", Fraction(10**5)),
    ("+7", Fraction(7)),
    ("  42  ", Fraction(42)),
    ("\t-1.25\n", Fraction(-5, 4)),
    ("−3", Fraction(-3)),  # U+2212 minus
    ("0,1", Fraction(1, 10)),
    ("−0,5", Fraction(-1, 2)),
    ("1,5e3", Fraction(1500)),
    ("1,000", Fraction(1)),  # a lone comma is a decimal comma
    ("1.00048828125000000001", Fraction(100048828125000000001, 10**20)),
    ("0." + "0" * 97 + "1", Fraction(1, 10**98)),  # exactly 100 characters
    ("0x1p-24", Fraction(1, 2**24)),
    ("-0x1.8p+3", Fraction(-12)),
    ("0x.8p1", Fraction(1)),
    ("0X1P-24", Fraction(1, 2**24)),
    ("0x1.8", Fraction(3, 2)),
    ("0xAp0", Fraction(10)),
    ("0x1e5p1", Fraction(970)),  # "e" is a hex digit here
    ("0x1.fffffep127", Fraction(float.fromhex("0x1.fffffep127"))),
    ("0x1.00000000000000000001p0", 1 + Fraction(1, 2**80)),  # beyond float64: kept exactly
    ("1e400", Fraction(10**400)),  # the limit itself is in range
    ("1e-400", Fraction(1, 10**400)),
]


@pytest.mark.parametrize(("text", "value"), ACCEPTED)
def test_accepts_numbers_exactly(text, value):
    r = p(text)
    assert r.value == value and isinstance(r.value, Fraction)
    assert (r.special, r.negative_zero, r.out_of_range) == (None, False, None)
    assert r.text == text.strip()
    assert r.negative == (value < 0)


@pytest.mark.parametrize(
    ("text", "special"),
    [
        *[("inf", "inf"), ("-inf", "-inf"), ("+inf", "inf"), ("Infinity", "inf"), ("-INFINITY", "-inf")],
        *[("−inf", "-inf"), ("nan", "nan"), ("NaN", "nan"), ("-nan", "nan"), (" NAN ", "nan")],
    ],
)
def test_accepts_specials(text, special):
    r = p(text)
    assert (r.special, r.value, r.negative_zero) == (special, None, False)
    assert same(r.as_float(), float(special))


@pytest.mark.parametrize("text", ["-0", "-0.0", "-0e5", "-.0", "-0x0p0", "−0", "-0,0", " -000 "])
def test_negative_zero(text):
    r = p(text)
    assert r.value == 0 and r.negative_zero and r.negative
    assert same(r.as_float(), -0.0)
    for name in SIGNED:
        rep = I.inspect(r, name)
        assert same(rep.stored, -0.0) and rep.code == 1 << (F.FORMATS[name].bits - 1)
        assert rep.category == "zero" and rep.relative_error == 0.0 and rep.is_exact


@pytest.mark.parametrize("text", ["0", "+0", "0.000", "0e999999999", "0x0p0", "0e-99999999999999"])
def test_positive_zero(text):
    r = p(text)
    assert r.value == 0 and not r.negative_zero and not r.negative and same(r.as_float(), 0.0)


REJECTED = [
    ("", "empty"),
    ("   ", "empty"),
    ("1" * 101, "too_long"),
    ("--1", "signs"),
    ("+-1", "signs"),
    ("-−1", "signs"),
    ("1,000,000", "separators"),
    ("1,000.5", "separators"),
    ("1.000,5", "separators"),
    ("1 000", "separators"),
    ("1_000", "separators"),
    ("1'000", "separators"),
    ("1\u202f000", "separators"),
    ("abc", "syntax"),
    ("-", "syntax"),
    (".", "syntax"),
    ("e5", "syntax"),
    ("1e", "syntax"),
    ("1e+", "syntax"),
    ("1e5.5", "syntax"),
    ("1e5e5", "syntax"),
    ("1.2.3", "syntax"),
    ("1-", "syntax"),
    ("0x", "syntax"),
    ("-0x", "syntax"),
    ("0xp1", "syntax"),
    ("0x.p1", "syntax"),
    ("0x1p", "syntax"),
    ("0x1.g", "syntax"),
    ("0x1,8p1", "syntax"),
    ("1p3", "syntax"),
    ("0b101", "syntax"),
    ("1/3", "syntax"),
    ("inf5", "syntax"),
    ("infinit", "syntax"),
    ("nan1", "syntax"),
    ("١٢", "syntax"),  # Arabic-Indic digits
    ("１２", "syntax"),  # full-width digits
    ("1e٣", "syntax"),
]


@pytest.mark.parametrize(("text", "reason"), REJECTED)
def test_rejects_with_a_reason(text, reason):
    with pytest.raises(E.ParseError) as info:
        E.parse_exact(text)
    assert info.value.reason == reason and str(info.value)
    assert isinstance(info.value, ValueError)
    assert E.try_parse_exact(text) is None


@settings(max_examples=300, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False))
def test_hex_repr_and_canonical_text_parse_back_exactly(x):
    assert p(x.hex()).value == Fraction(x)
    assert p(repr(x)).value == Fraction(Decimal(repr(x)))  # the decimal as written, not the float
    text = E.canonical_text(x)
    r = p(text)
    assert r.value == Fraction(x) and r.negative_zero == (x == 0 and math.copysign(1, x) < 0)
    assert same(r.as_float(), x) and len(text) <= E.MAX_CHARS
    assert Decimal(E.exact_decimal(x)) == Decimal(x)


def test_canonical_text_examples():
    cases = [
        (448.0, "448"),
        (-3.0, "-3"),
        (0.0999755859375, "0.0999755859375"),
        (2.0**-24, "5.9604644775390625e-8"),
        (float(np.float32(0.1)), "0.100000001490116119384765625"),
        (2.0**-149, "0x1p-149"),  # its exact decimal has 105 significant digits
        (0.0, "0"),
        (-0.0, "-0"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "nan"),
    ]
    for x, text in cases:
        assert E.canonical_text(x) == text
        assert same(p(text).as_float(), x)


def test_huge_and_tiny_exponents_are_capped_quickly():
    start = time.perf_counter()
    huge = ["1e1000000000", "-1e1000000000", "1.0000000001e400", "0x1p99999999999", "9" * 30 + "e" + "9" * 60]
    tiny = ["1e-1000000000", "-1e-1000000000", "9.9999999e-401", "0x1p-99999999999", "0." + "0" * 90 + "1e-320"]
    for text in huge:
        r = p(text)
        assert r.out_of_range == "huge" and abs(r.value) == 10**400 and r.negative == text.startswith("-")
        assert r.as_float() == (-math.inf if r.negative else math.inf)
    for text in tiny:
        r = p(text)
        assert r.out_of_range == "tiny" and abs(r.value) == Fraction(1, 10**400) and r.negative == text.startswith("-")
        assert same(r.as_float(), -0.0 if r.negative else 0.0)
    assert time.perf_counter() - start < 1.0
    # every format: huge overflows as the format does, tiny is lost to a signed zero
    for name in SIGNED:
        f = F.FORMATS[name]
        top = math.inf if f.overflow == "inf" else f.max
        for sign in (1, -1):
            h, t = I.inspect(p(f"{'-' if sign < 0 else ''}1e1000000000"), name), I.inspect(p(f"{sign}e-999999"), name)
            assert same(h.stored, sign * top) and h.category == "overflow"
            assert h.relative_error == (math.inf if f.overflow == "inf" else 1.0)
            assert same(t.stored, math.copysign(0.0, sign)) and t.category == "zero" and t.relative_error == 1.0
    assert p("1e-400").out_of_range is None and p("1e400").out_of_range is None


def test_as_float_rounds_the_exact_value_once():
    assert p("0.1").as_float() == 0.1
    assert p("1e309").as_float() == math.inf and p("-1e309").as_float() == -math.inf
    assert same(p("-1e-330").as_float(), -0.0)
    assert p("0x1.00000000000008p0").as_float() == 1.0  # tie to even in float64
    assert p("0x1.000000000000080000001p0").as_float() == 1 + 2**-52


# --- exact rounding ----------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(x=st.floats(), name=st.sampled_from(NAMES))
def test_round_exact_is_quantize_on_every_float64(x, name):
    expected = float(F.quantize(x, name))
    assert same(E.round_exact(x, name), expected)
    assert same(E.round_exact(E.Parsed.from_float(x), name), expected)
    report = I.inspect(E.Parsed.from_float(x), name)
    with np.errstate(over="ignore"):  # classify scales huge float64s past the top on the way
        assert same(report.stored, expected) and report.category == str(F.classify(x, name))


@settings(max_examples=200, deadline=None)
@given(x=st.floats(width=32), name=st.sampled_from(NAMES))
def test_round_exact_is_quantize_on_float32(x, name):
    x32 = np.float32(x)
    # (a 1-element array: quantize gives TF32 of a float32 scalar back as shape (1,))
    assert same(E.round_exact(x32, name), float(F.quantize(np.array([x32]), name)[0]))


def code_midpoints(name: str, n_random: int = 4000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, mid, hi) for consecutive positive finite values: every code of 8- and 16-bit formats."""
    f = F.FORMATS[name]
    small = f.bits <= 16
    codes = np.arange(1 << f.bits) if small else np.random.default_rng(7).integers(0, 1 << (f.bits - 1), n_random)
    lo = F.from_bits(codes, name)
    lo = lo[np.isfinite(lo) & (lo >= 0)]
    hi = F.next_up(lo, name)
    ok = np.isfinite(hi) & (hi <= f.max)
    lo, hi = lo[ok], hi[ok]
    return lo, (lo + hi) / 2, hi  # midpoints are exact in float64 for every format here


@pytest.mark.parametrize("name", NAMES)
def test_every_code_points_midpoints_agree_with_quantize(name):
    sign = -1 if F.FORMATS[name].signed else 1  # E8M0: no negatives, so the mirror image is itself
    lo, mid, hi = code_midpoints(name)
    ours = np.array([E.round_exact(float(m), name) for m in mid])
    assert np.array_equal(ours, F.quantize(mid, name))
    assert np.array_equal(np.array([E.round_exact(sign * float(m), name) for m in mid]), sign * ours)
    # ties go to the even code; with no significand bit (E8M0) that is the even significand 2: up
    even_hi = ((F.to_bits(hi, name) % 2) == 0) | (F.FORMATS[name].significand_bits == 0)
    assert np.array_equal(ours, np.where(even_hi, hi, lo))


@pytest.mark.parametrize("name", NAMES)
def test_just_off_a_midpoint_rounds_to_the_nearer_side(name):
    # 10**-60 is far below float64's resolution at any midpoint: float64 would land on the midpoint itself
    lo, mid, hi = code_midpoints(name)
    pick = np.random.default_rng(3).choice(len(mid), min(len(mid), 3000), replace=False)
    nudge = Fraction(1, 10**60)
    for i in pick:
        m = Fraction(float(mid[i]))
        assert E.round_exact(m + nudge, name) == hi[i]
        assert E.round_exact(m - nudge, name) == lo[i]
        if F.FORMATS[name].signed:
            assert same(E.round_exact(-m - nudge, name), -hi[i])


def test_double_rounding_example():
    text = "1.00048828125000000001"  # just above 1 + 2**-11, the midpoint between 1 and 1 + 2**-10
    assert float(text) == 1 + 2**-11  # float64 lands on the midpoint...
    assert float(F.quantize(float(text), "fp16")) == 1.0  # ...and then rounds to even
    assert E.round_exact(p(text), "fp16") == 1.0009765625  # the exact value is above it
    assert I.inspect(text, "fp16").stored_exact == "1.0009765625"
    assert I.inspect("1.00048828124999999999", "fp16").stored == 1.0
    assert I.inspect("1.00048828125", "fp16").stored == 1.0  # the tie itself: to even
    assert I.inspect("1.00390625000000000001", "bf16").stored == 1.0078125
    assert I.inspect("1.00048828125000000001", "tf32").stored == 1.0009765625


def test_overflow_and_saturation():
    cases = {
        "fp16": [("65504", 65504.0), ("65519", 65504.0), ("65519.999999999999999", 65504.0), ("65520", math.inf)],
        "fp8_e4m3": [("448", 448.0), ("464", 448.0), ("464.000000000000000001", 448.0), ("465", 448.0)],
        "fp8_e5m2": [("57344", 57344.0), ("61439.9999999999999", 57344.0), ("61440", math.inf)],
        "bf16": [("3.39e38", 3.3895313892515355e38), ("3.4e38", math.inf)],  # threshold ~3.3961e38
    }
    cases["fp16"] += [("1e5", math.inf), ("-1e5", -math.inf)]
    cases["fp8_e4m3"] += [("-465", -448.0), ("inf", 448.0), ("-inf", -448.0), ("1e5", 448.0)]
    for name, pairs in cases.items():
        for text, expected in pairs:
            assert E.round_exact(p(text), name) == expected, (name, text)
    assert I.inspect("464", "fp8_e4m3").category == "normal"  # the tie rounds to max: no overflow
    assert I.inspect("464.000000000000000001", "fp8_e4m3").category == "overflow"
    assert I.inspect("65519.999999999999999", "fp16").category == "normal"


def test_round_exact_keeps_signs_and_takes_ints_exactly():
    assert same(E.round_exact(Fraction(-1, 10**30), "fp16"), -0.0)
    assert same(E.round_exact(-1e-30, "fp16"), -0.0)
    assert same(E.round_exact(Fraction(1, 2**25), "fp16"), 0.0)  # half the smallest subnormal: tie to 0
    assert E.round_exact(Fraction(1, 2**25) + Fraction(1, 10**40), "fp16") == 2**-24
    assert E.round_exact(2**24 + 1, "fp32") == 2**24  # as an int: exact, then a tie to even
    assert E.round_exact(2**24 + 3, "fp32") == 2**24 + 4
    assert E.round_exact(10**1000, "fp32") == math.inf and E.round_exact(-(10**1000), "fp8_e4m3") == -448.0
    assert same(E.round_exact(Fraction(-1, 10**1000), "bf16"), -0.0)
    assert E.round_exact(np.int64(-3), "fp8_e5m2") == -3.0
    assert math.isnan(E.round_exact(p("nan"), "fp8_e4m3"))


# --- against torch and ml_dtypes ---------------------------------------------------------------

# fmt: off
TEXTS = [
    "0.1", "-2.5", "1e-8", "6.1E-5", "-3.4e38", "3.5e38", "65504", "65519", "65520", "65519.99999", "1e5", "-1e5",
    "464", "465", "-464.0001", "448", "57344", "61440", "61439", "-61440", "1e-9", "-1e-9", "6e-8", "1e-45",
    "1.4e-45", "7e-46", "0x1p-149", "0x1p-150", "0x1.000002p-150", "-0", "0", "inf", "-inf", "nan", "1e1000000000",
    "-1e-1000000000", "0.00048828125", "1.00048828125", "1.00146484375", "3.140625", "0x1.8p-140", "1.1754942e-38",
    "1.17549435e-38", "0.001953125", "0.0009765625", "0.0009765626", "0.0000000298023223876953125",
    "0.0000000298023223876953126", "5.960464477539063e-8", "3.0517578125e-05", "2.288818359375e-05", "0,3",
    "1.00048828125000000001", "-1.00048828125000000001",  # float64 lands on an FP16 midpoint; x is above it
]
# fmt: on


def torch_inputs() -> list[str]:
    """The fixed list, random decimals of every size, exact float32 values, and exact midpoints."""
    rng = random.Random(42)
    texts = list(TEXTS)
    for _ in range(400):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        sign = rng.choice(["", "-"])
        texts.append(f"{sign}{digits[0]}.{digits[1:]}e{rng.randint(-50, 40)}")
    bits = np.random.default_rng(42).integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32).view(np.float32)
    texts += [E.canonical_text(float(x)) for x in bits if np.isfinite(x)]
    for name in SMALL:
        _, mid, _ = code_midpoints(name)
        texts += [E.canonical_text(float(m)) for m in np.random.default_rng(1).choice(mid, 60)]
    return texts


@requires_torch
def test_inspector_agrees_with_torch_casts():
    """Torch casts a float32 tensor correctly; the typed value reaches it as float32(float64(x)).

    Those two roundings can only land *on* a midpoint of the target format,
    never across one (every midpoint is a float32 and a float64), so where
    torch and the inspector differ the float32 must be exactly the midpoint
    between the two answers, and the inspector must be on the typed value's
    side of it.
    """
    import torch

    tdtypes = {
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp8_e4m3": torch.float8_e4m3fn,
        "fp8_e5m2": torch.float8_e5m2,
    }
    parsed = [p(t) for t in torch_inputs()]
    with np.errstate(over="ignore"):
        y = np.array([q.as_float() for q in parsed], np.float64).astype(np.float32)
    references = {name: torch.from_numpy(y).to(t).to(torch.float64).numpy() for name, t in tdtypes.items()}
    references["tf32"] = F.quantize(y, "tf32")
    double_rounded = 0
    for name in references:
        f = F.FORMATS[name]
        for q, yi, ref in zip(parsed, y, references[name], strict=True):
            ours, ref = I.inspect(q, name).stored, float(ref)
            if same(ours, ref):
                continue
            # Only a double-rounding tie may differ: float32(x) is the boundary between the two answers
            # (their midpoint, or the overflow threshold when one is inf), and x is off it, on our side.
            assert q.value is not None, (name, q.text)
            if math.isinf(ours) or math.isinf(ref):
                boundary = Fraction(math.copysign(f.overflow_threshold, ref))
            else:
                boundary = (Fraction(ours) + Fraction(ref)) / 2
            assert Fraction(float(yi)) == boundary, (name, q.text, ours, ref)
            assert q.value != boundary and (q.value > boundary) == (ours > ref), (name, q.text)
            double_rounded += 1
    assert 1 <= double_rounded < len(parsed) // 20  # the two typed cases at least; rare otherwise


@requires_torch
def test_fixed_cases_against_torch_from_float32_and_ml_dtypes():
    import torch

    # every one of these is exactly a float32, so torch's cast is the correctly rounded answer
    texts = ["65519", "65520", "1e5", "464", "465", "1e6", "57344", "61440", "-0", "nan", "inf", "-inf", "0.5"]
    texts += ["0.0000000298023223876953125", "0.0000000596046447753906250", "0x1p-25", "0x1.8p-24", "1.00048828125"]
    texts += ["0x1.004p0", "0x1.00cp0", "0x1.01p0", "0x1.03p0", "0x1p-10", "0x1.8p-10", "0x1p-17", "0x1.8p-17"]
    x = np.array([p(t).as_float() for t in texts], np.float32)
    assert all(Fraction(float(v)) == p(t).value for v, t in zip(x, texts, strict=True) if math.isfinite(v))
    for name, tdtype in [
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
        ("fp8_e4m3", torch.float8_e4m3fn),
        ("fp8_e5m2", torch.float8_e5m2),
    ]:
        theirs = torch.from_numpy(x).to(tdtype).to(torch.float64).numpy()
        with np.errstate(invalid="ignore", over="ignore"):
            lib = x.astype(ML_DTYPES[name]).astype(np.float64)
        for t, v, th, li in zip(texts, x, theirs, lib, strict=True):
            ours = I.inspect(t, name).stored
            assert same(ours, float(th)), (name, t)  # NaN-ness only: NaN bits differ between libraries
            if name == "fp8_e4m3" and (math.isinf(v) or abs(v) > 464):
                assert math.isnan(li) and abs(ours) == 448  # ml_dtypes gives NaN, torch (and we) saturate
            else:
                assert same(ours, float(li)), (name, t)


# --- the report -----------------------------------------------------------------------------


def test_acceptance_example_point_one():
    reports = {r.name: r for r in I.inspect_all("0.1")}
    assert list(reports) == NAMES
    assert reports["fp16"].stored_exact == "0.0999755859375"
    assert reports["bf16"].stored_exact == "0.10009765625"
    assert reports["fp32"].stored_exact == "0.100000001490116119384765625"
    assert reports["tf32"].stored_exact == "0.0999755859375"
    h = reports["fp16"]
    assert (h.code, h.code_hex, h.bit_string) == (0x2E66, "0x2E66", "0 01011 1001100110")
    assert (h.sign, h.exponent_field, h.significand_field, h.exponent) == (0, 11, 0b1001100110, -4)
    assert h.significand * 2.0**h.exponent == h.stored and h.fields == F.fields(0.1, "fp16")
    assert h.category == "normal" and not h.is_exact and h.label == "FP16"
    assert h.relative_error == float(abs(Fraction(h.stored) - Fraction(1, 10)) * 10) == 0.000244140625
    assert reports["fp32"].relative_error == float(abs(Fraction(float(np.float32(0.1))) - Fraction(1, 10)) * 10)
    assert reports["fp8_e4m3"].bit_string == "0 0011 101" and reports["fp8_e4m3"].code_hex == "0x1D"
    assert reports["tf32"].code_hex == "0x1EE66"
    assert h.parsed == p("0.1")


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        ("1e-9", "fp16", 1.0),  # lost to zero: 100%
        ("1e5", "fp16", math.inf),  # overflow to inf
        ("0.5", "fp16", 0.0),
        ("0", "fp8_e4m3", 0.0),
        ("-0", "fp16", 0.0),
        ("inf", "fp16", 0.0),  # inf stored as inf
        ("inf", "fp8_e4m3", 1.0),  # saturated: the limit of 448 / x
        ("464", "fp8_e4m3", 16 / 464),
        ("465", "fp8_e4m3", 17 / 465),
        ("1e1000000000", "fp8_e4m3", 1.0),
        ("3e-8", "fp16", float(abs(Fraction(2**-24) - Fraction(3, 10**8)) / Fraction(3, 10**8))),
    ],
)
def test_relative_error(text, name, expected):
    r = I.inspect(text, name)
    assert r.relative_error == expected
    assert r.is_exact == (expected == 0.0)


def test_nan_report():
    for r in I.inspect_all("nan"):
        assert math.isnan(r.stored) and r.category == "nan" and r.stored_exact == "nan"
        assert math.isnan(r.relative_error) and math.isnan(r.abs_error) and not r.is_exact
        assert r.code == int(F.to_bits(np.nan, r.name)) and r.exponent is None and r.significand is None
        assert r.below is r.above is r.gap_below is r.gap_above is None


def test_neighbours_and_gaps():
    one = I.inspect("1", "fp16")
    assert (one.below, one.above, one.gap_below, one.gap_above) == (1 - 2**-11, 1 + 2**-10, 2**-11, 2**-10)
    top = I.inspect("65504", "fp16")
    assert (top.above, top.gap_above, top.below) == (math.inf, math.inf, 65472.0)
    assert I.inspect("448", "fp8_e4m3").above is None and I.inspect("-448", "fp8_e4m3").below is None
    assert I.inspect("-65504", "fp16").below == -math.inf
    inf = I.inspect("inf", "fp16")
    assert (inf.above, inf.below, inf.gap_below, inf.exponent) == (None, 65504.0, None, None)
    assert I.inspect("-inf", "fp16").above == -65504.0 and I.inspect("-inf", "fp16").below is None
    for text in ("0", "-0"):
        z = I.inspect(text, "fp16")
        assert (z.below, z.above, z.exponent, z.significand) == (-(2**-24), 2**-24, -14, 0.0)
    assert same(I.inspect(str(-(2**-24)), "fp16").above, 0.0)  # the next value up is 0, not -0
    sub = I.inspect("0x1p-20", "fp16")
    assert sub.category == "subnormal" and sub.exponent == -14 and sub.gap_above == sub.gap_below == 2**-24


VALUES = [0.1, -2.5, 1.0, 3.0e-8, 6.0e-5, 65519.0, 463.0, 1e30, -1e-40, 2.0**-149, 0.0, -0.0, np.inf, -np.inf]


@pytest.mark.parametrize("name", NAMES)
def test_report_matches_lensa_formats_on_float64_inputs(name):
    f = F.FORMATS[name]
    rng = np.random.default_rng(9)
    xs = VALUES + list(rng.standard_normal(150) * np.exp(rng.uniform(-40, 40, 150)))
    for x in xs:
        r = I.inspect(E.Parsed.from_float(x), name)
        q = float(F.quantize(x, name))
        assert same(r.stored, q) and r.category == str(F.classify(x, name))
        assert r.code == int(F.to_bits(x, name)) and r.fields == F.fields(x, name)
        assert r.bit_string == F.fields(x, name).bit_string()
        if math.isfinite(r.stored):
            assert r.exponent == F.fields(x, name).unbiased_exponent
            assert math.copysign(r.significand * 2.0**r.exponent, r.stored) == r.stored
            assert Decimal(r.stored_exact) == Decimal(r.stored)
        if r.category == "overflow" and not f.has_inf and math.isfinite(x):
            # saturated: 1 - max/|x| exactly here, where formats subtracts in float64 first (one ulp apart)
            assert math.isclose(r.relative_error, float(F.relative_error(x, name)), rel_tol=4e-16)
        elif f.overflow == "inf" or not math.isinf(x):  # formats says NaN for ±inf saturated to 448; we say 1.0
            assert same(r.relative_error, float(F.relative_error(x, name)))
        if abs(r.stored) < f.max:
            assert same(r.above, float(F.next_up(r.stored, name)) + 0.0)
            down = float(F.next_down(r.stored, name)) + 0.0
            assert same(r.below, down) if down != -math.inf else r.below is None  # E8M0's bottom: none
        if math.isfinite(r.stored) and 0 <= r.stored < f.max:
            assert r.gap_above == float(F.spacing(r.stored, name))


def test_inspect_rejects_text_that_is_not_a_number():
    with pytest.raises(E.ParseError):
        I.inspect("1e", "fp16")
    with pytest.raises(E.ParseError):
        I.inspect_all("")
    with pytest.raises(ValueError, match="unknown format"):
        I.inspect("1", "fp12")


# --- bit flips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_bit_flip_round_trips(name):
    f = F.FORMATS[name]
    values = [0.1, -2.5, 0.0, -0.0, f.smallest_subnormal, f.smallest_normal, f.max, -f.max, 1.0, 1e-3]
    values += [math.inf] if f.has_inf else []
    sign_bit = f.bits - 1
    for v in values:
        r = I.inspect(E.Parsed.from_float(v), name)
        for i in range(f.bits):
            flipped_code = r.code ^ (1 << i)
            v1 = I.flip_bit(r, None, i)
            assert same(v1, float(F.from_bits(flipped_code, name)))
            assert same(I.flip_bit(r.code, name, i), v1)
            if i == sign_bit and f.signed:
                assert same(v1, -r.stored)
            if math.isnan(v1):
                continue  # a NaN code's payload is not kept
            # the text put back in the box parses to exactly that value, whose code is the flipped one
            r1 = I.inspect(E.canonical_text(v1), name)
            assert same(r1.stored, v1) and r1.code == flipped_code
            assert same(I.flip_bit(r1, name, i), r.stored)


def test_flip_bit_examples_and_errors():
    one = I.inspect("1", "fp16")
    assert I.flip_bit(one, "fp16", 15) == -1.0
    assert I.flip_bit(one, "fp16", 0) == 1 + 2**-10
    assert I.flip_bit(one, "fp16", 14) == math.inf  # 0 11111 0000000000
    assert math.isnan(I.flip_bit(I.inspect("448", "fp8_e4m3"), None, 0))  # S.1111.111 is E4M3's NaN
    assert same(I.flip_bit(0, "bf16", 15), -0.0)
    for bad in (-1, 16):
        with pytest.raises(ValueError):
            I.flip_bit(one, None, bad)
    with pytest.raises(ValueError):
        I.flip_bit(one, "bf16", 0)  # not the report's format
    with pytest.raises(ValueError):
        I.flip_bit(0x10000, "fp16", 0)
    with pytest.raises(ValueError):
        I.flip_bit(0, None, 0)


def test_flip_bits_flips_them_in_one_code():
    one = I.inspect("1", "fp16")
    assert I.flip_bits(one, None, [9, 0]) == 1 + 2**-1 + 2**-10  # the pills of a field, as the page passes them
    assert I.flip_bits(one, None, []) == 1.0
    # 448 is 0.1111.110 in E4M3: flipping bit 0 alone lands on NaN, bits 0 and 1 together on 0.1111.101 = 416.
    assert I.flip_bits(I.inspect("448", "fp8_e4m3"), None, (0, 1)) == 416.0
    with pytest.raises(ValueError):
        I.flip_bits(one, None, [0, 16])


def test_importing_the_modules_pulls_in_no_torch_or_streamlit():
    code = (
        "import lensa.numerics.exact, lensa.numerics.inspector, sys;"
        " assert 'torch' not in sys.modules and 'streamlit' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_e8m0_has_no_sign_no_zero_and_no_significand_bits():
    one = I.inspect("1", "e8m0")
    assert (one.code, one.bit_string, one.exponent, one.significand) == (127, "01111111", 0, 1.0)
    assert (one.below, one.above, one.category) == (0.5, 2.0, "normal")
    assert [f.name for f in I.field_bits(one)] == ["sign", "exponent", "significand"]
    assert [len(f.bits) for f in I.field_bits(one)] == [0, 8, 0]
    for text in ("0", "-0", "-1", "nan", "-inf"):
        r = I.inspect(text, "e8m0")
        assert math.isnan(r.stored) and r.category == "nan" and r.code == 0xFF and math.isnan(r.relative_error)
    tiny = I.inspect("1e-999999", "e8m0")  # lifted to the smallest value, 2**-127: no zero to round to
    assert tiny.stored == 2.0**-127 and tiny.below is None and tiny.relative_error == math.inf
    huge = I.inspect("1e999", "e8m0")
    assert huge.stored == 2.0**127 and huge.category == "overflow" and huge.above is None
    assert I.inspect("3", "e8m0").stored == 4.0  # a tie goes up, as ml_dtypes
    assert I.flip_bit(one, None, 7) != I.flip_bit(one, None, 7)  # 0xFF: the NaN code
    assert I.flip_bit(one, None, 6) == 2.0**-64  # 0b00111111


def test_fp4_saturates_and_has_no_nan_code():
    r = I.inspect("7", "fp4_e2m1")
    assert (r.stored, r.category, r.bit_string, r.above) == (6.0, "overflow", "0 11 1", None)
    assert I.inspect("5", "fp4_e2m1").stored == 4.0 and I.inspect("0.25", "fp4_e2m1").stored == 0.0
    n = I.inspect("nan", "fp4_e2m1")
    assert math.isnan(n.stored) and n.code == 0b1000  # -0's code, as ml_dtypes stores a NaN


@pytest.mark.parametrize("name", [n for n, f in F.FORMATS.items() if f.dtype is not None])
def test_no_nan_and_nan_cast_follow_ml_dtypes(name):
    f = F.FORMATS[name]
    cast = np.array([math.nan]).astype(f.dtype)  # ml_dtypes: a format has a NaN iff a NaN stays one
    has_nan = bool(np.isnan(cast.astype(np.float64)[0]))
    assert I.inspect("nan", name).no_nan == (not has_nan)
    assert not any(r.no_nan for r in I.inspect_all("1"))
    r = I.nan_cast(name)
    assert r.code == int(cast.view(np.uint8 if f.bits <= 8 else f"u{f.dtype.itemsize}")[0])
    assert math.isnan(r.stored) == has_nan


@pytest.mark.parametrize(
    ("lang", "typed", "value", "canonical", "note"),
    [
        ("id", "65.504", Fraction(65504), "65504", "grouping"),
        ("id", "−1.234.567,5", Fraction(-2469135, 2), "-1234567.5", "grouping"),
        ("id", "65,504", Fraction(65504, 1000), "65.504", None),
        ("id", "0.1", Fraction(1, 10), "0.1", "decimal"),  # a dot that cannot group thousands
        ("id", "1,5e-3", Fraction(15, 10000), "1.5e-3", "exponent"),
        ("id", "0x1.8p1", Fraction(3), "0x1.8p1", None),  # a hex float's dot is its own
        ("en", "65,504", Fraction(65504), "65504", "grouping"),
        ("en", "1,234,567.5", Fraction(2469135, 2), "1234567.5", "grouping"),
        ("en", "65.504", Fraction(65504, 1000), "65.504", None),
        ("en", "0,1", Fraction(1, 10), "0.1", "decimal"),
        ("en", "1e-3", Fraction(1, 1000), "1e-3", "exponent"),
        ("en", "-0", Fraction(0), "-0", None),
    ],
)
def test_parse_local_reads_the_languages_marks(lang, typed, value, canonical, note):
    r = E.parse_local(typed, lang)
    assert (r.parsed.value, r.canonical, r.note, r.parsed.text) == (value, canonical, note, typed)
    assert E.parse_exact(canonical).value == value  # the link's spelling reads the same without a language


@pytest.mark.parametrize("lang", ["en", "id"])
@pytest.mark.parametrize("typed", ["1.2.3", "1,2,3", "12,34.5", "1.23,4", "12.3,4"])
def test_parse_local_refuses_mixed_or_broken_groups(lang, typed):
    with pytest.raises(E.ParseError):
        E.parse_local(typed, lang)


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["en", "id"]))
@settings(max_examples=300, deadline=None)
def test_local_text_reads_back_as_the_same_number(x, lang):
    link = E.canonical_text(x)
    r = E.parse_local(E.local_text(link, lang), lang)
    got = r.parsed.as_float()
    assert (math.isnan(got) and math.isnan(x)) or (got == x and math.copysign(1, got) == math.copysign(1, x))
    assert E.parse_exact(r.canonical).value == E.parse_exact(link).value
