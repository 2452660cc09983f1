"""lensa.live.lowp: fake quantization against lensa.numerics.blockscale (bit for bit) and torchao's emulated MX,
stochastic rounding's bias at a stated power, the Hadamard rotation, NVFP4 against Transformer Engine's formula written
out, delayed scaling against lensa.numerics.blockscale.delayed_scales, and the quantized linear layer's three
products."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lensa.numerics import blockscale as B
from lensa.numerics import training_recipes as L

torch = pytest.importorskip("torch")
lowp = pytest.importorskip("lensa.live.lowp")

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

EVERY_OPERAND = sorted(L.OPERAND_RECIPES)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal value for value, NaN where the other is NaN, the sign of zero included."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


def spread(rng: np.random.Generator, shape: tuple[int, ...], decades: float = 12.0) -> np.ndarray:
    """Normal values times 10**U(-decades, decades), with exact zeros and a negative zero: flushes and saturations
    for every recipe."""
    x = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.uniform(-decades, decades, shape), dtype=np.float32)
    flat = x.reshape(-1)
    if flat.size > 3:
        flat[1], flat[2] = 0.0, -0.0
    return x


SHAPES = [(), (1,), (7,), (3, 5), (16, 16), (33, 50), (130, 300), (2, 3, 70), (4, 129), (0, 5), (129, 17)]


@pytest.mark.parametrize("key", EVERY_OPERAND)
def test_nearest_is_blockscale_quantize_bit_for_bit(key: str) -> None:
    """Every operand recipe (RECIPES, their square-block versions, E5M2 per tensor) on shapes that are and are
    not multiples of the block: the float64 values equal lensa.numerics.blockscale.quantize's, the float32 ones the same
    values rounded once to FP32."""
    r = L.OPERAND_RECIPES[key]
    rng = np.random.default_rng(abs(hash(key)) % 2**32)
    for shape in SHAPES:
        x = spread(rng, shape)
        ref = B.quantize(x, r)
        t = torch.from_numpy(x)
        wide = lowp.fake_quantize(t, r, dtype=torch.float64).numpy()
        narrow = lowp.fake_quantize(t, r).numpy()
        assert wide.dtype == np.float64 and narrow.dtype == np.float32 and wide.shape == x.shape
        assert same(wide, ref), (key, shape)
        assert same(narrow, ref.astype(np.float32)), (key, shape)


@pytest.mark.parametrize("key", ["fp8_tensor", "fp8_1x128", "mxfp8_e4m3", "mxfp4_e2m1_ceil", "nvfp4"])
def test_a_block_with_nan_or_inf_is_nan_as_in_blockscale(key: str) -> None:
    x = spread(np.random.default_rng(3), (5, 64), decades=3)
    x[1, 3], x[3, 40] = np.nan, -np.inf
    assert same(lowp.fake_quantize(torch.from_numpy(x), key, dtype=torch.float64).numpy(), B.quantize(x, key))


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(EVERY_OPERAND),
    rows=st.integers(0, 40),
    cols=st.integers(1, 200),
    lead=st.integers(1, 3),
    decades=st.floats(0, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_nearest_is_blockscale_on_any_shape(
    key: str, rows: int, cols: int, lead: int, decades: float, seed: int
) -> None:
    x = spread(np.random.default_rng(seed), (lead, rows, cols), decades)
    r = L.OPERAND_RECIPES[key]
    assert same(lowp.fake_quantize(torch.from_numpy(x), r, dtype=torch.float64).numpy(), B.quantize(x, r))


@pytest.mark.parametrize("key", ["fp8_tensor", "fp8_1x128", "fp8_128x128", "mxfp8_e4m3_ceil", "nvfp4", "nvfp4_16x16"])
def test_blocks_down_a_matrix_are_the_transposes(key: str) -> None:
    """Quantizing with blocks along the first axis (the dgrad weight, the wgrad inputs) gives the numbers the
    transposed copy would, without making it."""
    x = spread(np.random.default_rng(5), (150, 70), decades=6)
    r = L.OPERAND_RECIPES[key]
    down, _ = lowp._quantize(torch.from_numpy(x), r, down=True, wide=True)
    assert same(down.numpy(), B.quantize(np.ascontiguousarray(x.T), r).T)


def test_a_tensor_of_subnormals_is_blockscale_too() -> None:
    """Blocks so small that amax / the element's largest underflows FP32: the scale stops at 2**-149 (as
    lensa.numerics.blockscale's), and the values past the element's largest then saturate."""
    x = (np.random.default_rng(4).standard_normal((4, 48)) * 1e-44).astype(np.float32)
    for key in EVERY_OPERAND:
        r = L.OPERAND_RECIPES[key]
        assert same(lowp.fake_quantize(torch.from_numpy(x), r, dtype=torch.float64).numpy(), B.quantize(x, r)), key
        assert same(lowp.fake_quantize(torch.from_numpy(x), r).numpy(), B.quantize(x, r).astype(np.float32)), key


# --- the compiled kernel ------------------------------------------------------------------------------------------


def _both_paths(monkeypatch: pytest.MonkeyPatch, x: np.ndarray, r: B.Recipe, **kw: object) -> list[tuple]:
    """(values, amax, counts) from the compiled kernel and from torch's operations, the same call each."""
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("LENSA_NUMBA", flag)
        counts = lowp.Counts()
        g = torch.Generator().manual_seed(9)
        q, amax = lowp._quantize(torch.from_numpy(x), r, counts=counts, generator=g, **kw)  # type: ignore[arg-type]  # the keywords of _quantize
        out.append((q.numpy(), float(amax), counts))
    return out


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("key", EVERY_OPERAND)
def test_the_compiled_kernel_is_the_torch_path_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, key: str, rounding: str
) -> None:
    """Every operand recipe, both roundings, blocks along rows and down columns, a scale given from outside, NaN and
    infinities, subnormals, zeros: the same values (the sign of zero included), the same amax, the same counts."""
    pytest.importorskip("numba")
    r = L.OPERAND_RECIPES[key]
    rng = np.random.default_rng(abs(hash((key, rounding))) % 2**32)
    cases = [spread(rng, shape) for shape in [(7,), (3, 5), (33, 50), (130, 300), (2, 3, 70), (129, 17)]]
    bad = spread(rng, (5, 64), decades=3)
    bad[1, 3], bad[3, 40] = np.nan, -np.inf
    cases += [bad, (rng.standard_normal((4, 48)) * 1e-44).astype(np.float32), np.zeros((3, 32), np.float32)]
    for x in cases:
        options: list[dict[str, object]] = [{}]
        if x.ndim == 2:
            options.append({"down": True})
        if r.block is None:
            options.append({"scale": torch.tensor(3.5)})
        for kw in options:
            (q1, a1, c1), (q2, a2, c2) = _both_paths(monkeypatch, x, r, rounding=rounding, **kw)
            assert same(q1, q2) and same(np.float32(a1), np.float32(a2)) and c1 == c2, (key, x.shape, kw)


def test_the_torch_path_is_used_where_numba_is_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LENSA_NUMBA", "0")
    assert lowp._kernels() is None
    q, amax = lowp._quantize(torch.ones(4, 16), B.RECIPES["nvfp4"])
    assert isinstance(amax, torch.Tensor) and torch.equal(q, torch.ones(4, 16))


def _mix(x: int) -> int:
    """lowbias32 with lensa.numerics.training_recipes.DRAW_HASH, in Python's integers (the documented formula, written
    out)."""
    a, b = L.DRAW_HASH
    x ^= x >> 16
    x = (x * a) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * b) & 0xFFFFFFFF
    return x ^ (x >> 15)


def test_the_draws_are_the_documented_hash() -> None:
    """The torch path's draws (and so the kernel's, equal to them above) are the top 24 bits of mix(mix(i ^ k0) ^
    k1) over 2**24, for indices past 2**32 too (taken modulo 2**32)."""
    keys = (0x9E3779B9, 12345)
    index = torch.tensor([0, 1, 2, 1000, 2**31, 2**32 - 1, 2**32 + 5], dtype=torch.int64)
    got = lowp._draws(index, keys).tolist()
    want = [(_mix(_mix((i % 2**32) ^ keys[0]) ^ keys[1]) >> 8) / 2**24 for i in index.tolist()]
    assert got == want
    assert _mix(0) == 0 and _mix(1) != 1  # a bijection that fixes 0 alone here: the keys keep i = 0 from it


def test_the_draws_are_uniform() -> None:
    """2**20 draws in 256 bins: a chi-square statistic below the 0.999 quantile of 255 degrees of freedom (342.3,
    Wilson-Hilferty), and the top bit of the draws of two keys independent of each other."""
    index = torch.arange(2**20, dtype=torch.int64)
    u = lowp._draws(index, (7, 11)).numpy()
    counts = np.bincount((u * 256).astype(np.int64), minlength=256)
    expected = u.size / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = 255
    z = 3.0902  # the 0.999 quantile of the standard normal
    limit = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < limit, (chi2, limit)
    v = lowp._draws(index, (8, 11)).numpy()
    agree = float(np.mean((u < 0.5) == (v < 0.5)))
    assert abs(agree - 0.5) < 5 * 0.5 / math.sqrt(u.size)


def test_the_generator_moves_on_by_one_draw_a_quantization() -> None:
    """Stochastic rounding takes two 32-bit keys from the generator per quantization, whatever the tensor's size."""
    g, h = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    lowp.fake_quantize(torch.randn(300, 70), "nvfp4", rounding="stochastic", generator=g)
    torch.randint(0, 2**32, (2,), generator=h, dtype=torch.int64)
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=h))


def test_float64_input_is_rounded_to_float32_first() -> None:
    x = np.random.default_rng(1).standard_normal((4, 32)) * 1e3
    assert same(
        lowp.fake_quantize(torch.from_numpy(x), "mxfp8_e4m3", dtype=torch.float64).numpy(), B.quantize(x, "mxfp8_e4m3")
    )


def test_bad_arguments_say_so() -> None:
    t = torch.ones(4)
    with pytest.raises(ValueError, match="unknown recipe"):
        lowp.fake_quantize(t, "fp3")
    with pytest.raises(ValueError, match="rounding"):
        lowp.fake_quantize(t, "nvfp4", rounding="up")  # type: ignore[arg-type]  # a wrong value on purpose
    with pytest.raises(ValueError, match="dtype"):
        lowp.fake_quantize(t, "nvfp4", dtype=torch.float16)


# --- torchao's emulated MX ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "elem", "mode"),
    [
        ("mxfp8_e4m3", "float8_e4m3fn", "FLOOR"),
        ("mxfp8_e4m3_ceil", "float8_e4m3fn", "RCEIL"),
        ("mxfp8_e5m2", "float8_e5m2", "FLOOR"),
        ("mxfp4_e2m1", "float4_e2m1fn_x2", "FLOOR"),
        ("mxfp4_e2m1_ceil", "float4_e2m1fn_x2", "RCEIL"),
    ],
)
def test_mx_equals_torchaos_to_mx(key: str, elem: str, mode: str) -> None:
    """torchao's ``to_mx`` then ``to_dtype`` on the CPU: FLOOR is OCP's scale, RCEIL the rounded-up one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
        config = pytest.importorskip("torchao.prototype.mx_formats.config")
    g = torch.Generator().manual_seed(11)
    x = torch.randn(96, 256, generator=g) * torch.exp(torch.randn(96, 1, generator=g) * 8)
    dtype = getattr(torch, elem)
    scale, data = mx.to_mx(x, dtype, 32, getattr(config.ScaleCalculationMode, mode))
    theirs = mx.to_dtype(data, scale, dtype, 32, torch.float32)
    assert torch.equal(lowp.fake_quantize(x, key), theirs)


def test_below_e8m0s_second_smallest_scale_lensa_keeps_ocps_value_and_torchao_does_not() -> None:
    """A block whose scale is E8M0's smallest, 2**-127 (code 0): OCP's value is the element times 2**-127, which
    lensa keeps (computed here with torch's own E4M3 cast); torchao's ``to_dtype`` gives half of it under FLOOR
    and 0 under RCEIL (as the README says). One scale up, 2**-126, the two agree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
        config = pytest.importorskip("torchao.prototype.mx_formats.config")
    x = torch.linspace(0.5, 1.5, 32).reshape(1, 32)
    for exponent, agree in ((-118, True), (-120, False)):
        block = x * 2.0**exponent
        scale = 2.0 ** max(math.floor(math.log2(float(block.abs().max()))) - 8, -127)  # OCP's rule, E4M3's emax 8
        ocp = (block.double() / scale).float().to(torch.float8_e4m3fn).double() * scale
        assert torch.equal(lowp.fake_quantize(block, "mxfp8_e4m3", dtype=torch.float64), ocp)
        for mode, factor in (("FLOOR", 0.5), ("RCEIL", 0.0)):
            key = "mxfp8_e4m3" if mode == "FLOOR" else "mxfp8_e4m3_ceil"
            s, d = mx.to_mx(block, torch.float8_e4m3fn, 32, getattr(config.ScaleCalculationMode, mode))
            theirs = mx.to_dtype(d, s, torch.float8_e4m3fn, 32, torch.float32)
            ours = lowp.fake_quantize(block, key)
            assert torch.equal(theirs, ours) if agree else torch.equal(theirs, ours * factor)


# --- stochastic rounding ----------------------------------------------------------------------------------------

# The bias test: N draws of one value; the mean's error is compared with z_(1 - ALPHA/2) standard errors. A step
# of the grid is 1 unit; a draw's standard deviation is sqrt(p (1 - p)) <= 1/2 unit, so the standard error is at
# most 0.5 / sqrt(N) = 0.0016 units and the test rejects past 3.29 of them (0.0052 units). A bias of
# DETECTABLE = 0.01 units is 3.04 standard errors past that line: it is caught with probability Phi(3.04) = 0.9988
# or more (the power), and an unbiased rounding fails with probability ALPHA. Round-to-nearest's bias is p or
# 1 - p units, so the same test must reject it (checked below: the test can fail).
ALPHA = 1e-3
Z = 3.2905  # z_(1 - ALPHA/2)
N_DRAWS = 100_000
DETECTABLE = 0.01
POWER = 0.998


def test_the_bias_tests_stated_power() -> None:
    se = 0.5 / math.sqrt(N_DRAWS)
    power = 0.5 * (1 + math.erf((DETECTABLE - Z * se) / se / math.sqrt(2)))
    assert power >= POWER
    assert abs(0.5 * math.erfc(Z / math.sqrt(2)) * 2 - ALPHA) < 1e-6


def _fraction(value: float, step: float) -> float:
    """Where ``value`` lies between its grid neighbours, 0..1 (a value within 1e-9 steps of one counts as on it)."""
    low = math.floor(value / step + 1e-9)
    return max(0.0, value / step - low)


def _biased(draws: np.ndarray, value: float, step: float) -> bool:
    p = _fraction(value, step)
    se = math.sqrt(max(p * (1 - p), 1e-12) / draws.size) * step
    return bool(abs(draws.mean() - value) > Z * se)


@pytest.mark.parametrize(("path", "dtype"), [("compiled", "float32"), ("torch", "float64")])
@pytest.mark.parametrize("key", ["nvfp4", "mxfp4_e2m1", "mxfp8_e4m3", "fp8_tensor"])
def test_stochastic_rounding_is_unbiased(monkeypatch: pytest.MonkeyPatch, key: str, path: str, dtype: str) -> None:
    """Values between two grid points of a block, each drawn N times: the mean is within Z standard errors of the
    value, only the two neighbours occur, and round-to-nearest fails the same test. Both paths: the compiled kernel
    (float32 values) and torch's operations (float64 values, which only torch's path gives)."""
    if path == "compiled":
        pytest.importorskip("numba")
    monkeypatch.setenv("LENSA_NUMBA", "1" if path == "compiled" else "0")
    r = B.RECIPES[key]
    block = r.block_size or 16
    g = torch.Generator().manual_seed(2)
    # One block: its amax fixes the scale; the other values sit between grid points at many fractions.
    row = np.linspace(0.3, 0.9, block, dtype=np.float32)
    row[0] = 1.0
    x = np.tile(row, (N_DRAWS, 1)) if r.block is not None else np.tile(row, (N_DRAWS // 16, 1))
    t = torch.from_numpy(x)
    draws = lowp.fake_quantize(t, r, rounding="stochastic", generator=g, dtype=getattr(torch, dtype)).numpy()
    draws = draws.astype(np.float64)
    nearest = lowp.fake_quantize(t[:1], r, dtype=torch.float64).numpy()[0]
    enc = B.encode(row[None, :] if r.block is not None else x[:1], r)
    tested = 0
    for j in range(1, block):
        scale = float(enc.scale.reshape(-1)[j])
        scaled = float(row[j]) / scale
        f = r.element_format
        e = max(math.floor(math.log2(scaled)), f.emin)
        step = 2.0 ** (e - f.significand_bits) * scale
        column = draws[:, j]
        assert len(np.unique(column)) <= 2
        assert np.ptp(column) <= step * (1 + 1e-6)
        p = _fraction(float(row[j]), step)
        if not 0.02 < p < 0.98:  # on the grid (or next to it): nothing to test
            continue
        tested += 1
        assert not _biased(column, float(row[j]), step), (key, j)
        assert _biased(np.full(N_DRAWS, nearest[j]), float(row[j]), step), "the test must catch nearest's bias"
    assert tested >= block // 2


def test_stochastic_rounding_follows_its_seed() -> None:
    x = torch.randn(64, 64)
    a = lowp.fake_quantize(x, "nvfp4", rounding="stochastic", generator=torch.Generator().manual_seed(5))
    b = lowp.fake_quantize(x, "nvfp4", rounding="stochastic", generator=torch.Generator().manual_seed(5))
    c = lowp.fake_quantize(x, "nvfp4", rounding="stochastic", generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_stochastic_rounding_saturates_past_the_top() -> None:
    """A value past the element's largest (after scaling) is clamped to it, never rounded beyond."""
    x = torch.tensor([[6.5, 1.0]])  # E2M1's largest is 6; a per-tensor scale of 1 keeps 6.5 past it
    r = B.Recipe("t", "t", "fp4_e2m1", None, "fp32", "amax")
    got = lowp._quantize(x, r, "stochastic", torch.Generator().manual_seed(0), scale=torch.tensor(1.0))[0]
    assert got.tolist() == [[6.0, 1.0]]


# --- the rotation -----------------------------------------------------------------------------------------------


def test_the_rotation_is_transformer_engines_and_orthogonal() -> None:
    r = L.hadamard_matrix()
    walsh = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)], np.float64)
    assert np.array_equal(r, np.diag(L.HADAMARD_SIGNS) @ walsh / 4)
    assert L.HADAMARD_SIGNS == (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)
    assert np.array_equal(r @ r.T, np.eye(16))  # exact: entries are ±1/4
    assert np.array_equal(np.abs(r.astype(np.float32)), np.full((16, 16), 0.25, np.float32))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 20), cols=st.integers(1, 70), decades=st.floats(0, 30), seed=st.integers(0, 2**32 - 1))
def test_the_rotation_is_undone_within_its_stated_error(rows: int, cols: int, decades: float, seed: int) -> None:
    x = torch.from_numpy(spread(np.random.default_rng(seed), (rows, cols), decades))
    back = lowp.rotate(lowp.rotate(x), inverse=True)[:, :cols]
    padded = torch.nn.functional.pad(x, (0, (-cols) % 16)).reshape(rows, -1, 16)
    bound = padded.abs().amax(-1, keepdim=True).expand(-1, -1, 16).reshape(rows, -1)[:, :cols] * lowp.ROTATION_ERROR
    assert bool(((back - x).abs() <= bound).all())
    down = lowp.rotate(lowp.rotate(x.T.contiguous(), down=True), inverse=True, down=True)[: x.shape[1]]
    assert torch.equal(down, torch.zeros_like(down) + down)  # runs; the same arithmetic down the columns:
    assert torch.allclose(down, x.T, rtol=0, atol=float(x.abs().max()) * lowp.ROTATION_ERROR * 4)


def test_rotated_operands_give_the_same_product() -> None:
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(8, 48, generator=g), torch.randn(5, 48, generator=g)
    assert torch.allclose(lowp.rotate(a) @ lowp.rotate(b).T, a @ b.T, rtol=1e-5, atol=1e-5)


def test_hadamard_spreads_an_outlier_and_shrinks_the_block_scale() -> None:
    """An outlier's 16 rotated copies carry a quarter of it each: the block's amax, and so its scale, comes down
    to at most (|outlier| + the others' sum) / 4."""
    x = torch.full((1, 16), 0.01)
    x[0, 3] = 8.0
    rotated = lowp.rotate(x)
    assert float(rotated.abs().amax()) <= (8.0 + 15 * 0.01) / 4 + 1e-6
    assert torch.allclose(rotated.abs(), torch.full((1, 16), 2.0), atol=0.04)
    plain_scale = B.encode(x.numpy(), "nvfp4").block_scales[0]
    assert B.encode(rotated.numpy(), "nvfp4").block_scales[0] == plain_scale  # one block: the tensor scale follows


# --- NVFP4 against Transformer Engine's reference formula ---------------------------------------------------------


def te_nvfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TE's NVFP4QuantizerRef._quantize_blockwise_reference (1×16, E4M3 scales), written out: the E2M1 codes it
    stores, and the values they stand for, dequantized as TE does (code × block scale × decode scale)."""
    m, n = x.shape
    vec_max = x.abs().view(m, n // 16, 16).amax(-1, keepdim=True)
    global_amax = x.abs().amax()
    fmax = torch.tensor(torch.finfo(torch.float32).max)
    encode = torch.minimum(torch.tensor(448.0 * 6.0) / global_amax, fmax)
    if encode == 0:
        encode = torch.tensor(1.0)
    decode = 1.0 / encode
    block = torch.minimum(vec_max * (encode * (1.0 / torch.tensor(6.0))), fmax)
    block = torch.clamp(block, -448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
    enc_block = torch.minimum(1.0 / (block * decode), fmax)
    scaled = torch.clamp(x.view(m, n // 16, 16) * enc_block, -6.0, 6.0)
    e2m1 = lowp._to_grid(scaled.abs().contiguous(), B.FORMATS["fp4_e2m1"], None).copysign(scaled)
    return e2m1.view(m, n), (e2m1 * block * decode).view(m, n)


def _outlier_blocks(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scales = torch.exp(torch.randn(256, 16, 1, generator=g) * 3).repeat(1, 1, 16).view(256, 256)
    return torch.randn(256, 256, generator=g) * scales


@pytest.mark.parametrize(
    ("data", "some_clamped"),
    [
        (lambda: _outlier_blocks(9), True),
        (lambda: torch.randn(512, 512, generator=torch.Generator().manual_seed(1)), False),
    ],
    ids=["blocks-far-apart", "normal"],
)
def test_nvfp4_differs_from_transformer_engines_formula_only_where_the_docs_say(
    data: Callable[[], torch.Tensor], some_clamped: bool
) -> None:
    """The module's docstring: the codes stored differ only in blocks whose E4M3 scale lensa clamps at 2**-6
    (TE's goes subnormal or 0); elsewhere the values they stand for differ by at most two units in the last place
    of FP32 (lensa's value is code × tensor scale × block scale rounded once; TE's multiplies by its decode scale,
    the reciprocal of 2688 / amax, and rounds twice)."""
    x = data()
    m, n = x.shape
    enc = B.encode(x.numpy(), "nvfp4")
    codes = torch.from_numpy(enc.stored / enc.scale).float()
    their_codes, theirs = te_nvfp4(x)
    ours = lowp.fake_quantize(x, "nvfp4")
    amax = x.abs().view(m, n // 16, 16).amax(-1)
    clamped = (amax / 6 / (x.abs().amax() / 2688)) < B.FORMATS["fp8_e4m3"].smallest_normal
    clamped = clamped.repeat_interleave(16, dim=1)
    assert bool(clamped.any()) == some_clamped
    if some_clamped:
        assert bool((codes != their_codes)[clamped].any())  # the clamp shows
    assert torch.equal(codes[~clamped], their_codes[~clamped])
    ulp = torch.nextafter(ours.abs(), torch.tensor(math.inf)) - ours.abs()
    assert bool(((ours - theirs).abs() <= 2 * ulp)[~clamped].all())
    if not some_clamped:  # the dequantization's rounding shows in most values of a plain tensor
        assert float((ours != theirs).float().mean()) > 0.5


# --- delayed scaling --------------------------------------------------------------------------------------------


def test_delayed_scale_is_blockscales_delayed_scales() -> None:
    amax = np.abs(np.random.default_rng(0).standard_normal(40) * 10.0 ** np.linspace(-3, 3, 40)).astype(np.float32)
    amax[7] = 0.0
    amax[20:22] = np.finfo(np.float32).smallest_subnormal  # max / amax overflows: TE's FLT_MAX, with history 1
    for history, margin in ((1024, 0), (4, 1), (1, 0)):
        d = lowp.DelayedScale(B.FORMATS["fp8_e4m3"], history, margin)
        used = []
        for a in amax:
            used.append(float(d.current(torch.device("cpu"))))
            d.record(torch.tensor(a))
        assert used == B.delayed_scales(amax, history, margin).tolist()
        assert (float(np.finfo(np.float32).max) in used) == (history == 1)


# --- the quantized linear layer -----------------------------------------------------------------------------------


def _layer(recipe: L.TrainingRecipe, k: int = 48, n: int = 24) -> torch.nn.Linear:
    torch.manual_seed(0)
    layer = torch.nn.Linear(k, n)
    return lowp.quantize_model(layer, recipe)  # type: ignore[return-value]  # the same module, now a LowpLinear


def test_an_fp32_recipe_is_nn_linear_exactly() -> None:
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 3))
    q = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 3))
    q.load_state_dict(plain.state_dict())
    lowp.quantize_model(q, L.TrainingRecipe("fp32", "FP32", None, None, None))
    x = torch.randn(17, 20)
    for model in (plain, q):
        model(x).pow(2).sum().backward()
    assert torch.equal(plain(x), q(x))
    for a, b in zip(plain.parameters(), q.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("key", ["fp8_current", "fp8_blockwise", "mxfp8", "nvfp4", "nvfp4_2d", "nvfp4_rht"])
def test_the_three_products_read_the_operands_each_recipe_stores(key: str) -> None:
    """fprop, dgrad and wgrad against fake_quantize of each operand along the axis summed over (transposed copies,
    rotated with the recipe's rotation), products in float64: equal within FP32 summation."""
    recipe = L.TRAINING_RECIPES[key]
    layer = _layer(recipe)
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(40, 48, generator=g) * 3).requires_grad_()
    dy = torch.randn(40, 24, generator=g) * 1e-3
    y = layer(x)
    y.backward(dy)
    w = layer.weight.detach()

    def q(t: torch.Tensor, role: L.Role, rotated: bool = False) -> torch.Tensor:
        r = recipe.operand(role)
        assert r is not None
        if rotated:
            return lowp._quantize(lowp.rotate(t), r)[0].double()
        return lowp.fake_quantize(t, r).double()

    assert torch.allclose(
        y.double(), q(x.detach(), "input") @ q(w, "weight").T + layer.bias.double(), rtol=1e-5, atol=1e-5
    )
    dx = q(dy, "grad") @ q(w.T.contiguous(), "weight").T
    assert torch.allclose(x.grad.double(), dx, rtol=1e-5, atol=1e-8)
    rot = recipe.hadamard
    dw = q(dy.T.contiguous(), "grad", rot) @ q(x.detach().T.contiguous(), "input", rot).T
    assert torch.allclose(layer.weight.grad.double(), dw, rtol=1e-5, atol=1e-8)
    assert torch.allclose(layer.bias.grad, dy.sum(0))


def test_passes_quantize_once_where_both_copies_agree() -> None:
    p = {(x.role, x.products): x for x in L.passes(L.TRAINING_RECIPES["fp8_current"], 8, 16, 4)}
    assert set(p) == {("input", ("fprop", "wgrad")), ("weight", ("fprop", "dgrad")), ("grad", ("dgrad", "wgrad"))}
    nv = L.passes(L.TRAINING_RECIPES["nvfp4_recipe"], 8, 16, 4, dgrad=False)
    assert [(x.role, x.products, x.rotated, x.rounding) for x in nv] == [
        ("input", ("fprop",), False, "nearest"),
        ("input", ("wgrad",), True, "nearest"),
        ("weight", ("fprop",), False, "nearest"),
        ("grad", ("wgrad",), True, "stochastic"),
    ]
    assert L.TRAINING_RECIPES["nvfp4_2d"].operand("weight") == L.OPERAND_RECIPES["nvfp4_16x16"]


def test_a_recipe_of_ones_own_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown operand recipe"):
        L.TrainingRecipe("x", "x", "fp3", None, None)
    with pytest.raises(ValueError, match="per-tensor"):
        L.TrainingRecipe("x", "x", "nvfp4", None, None, scaling="delayed")
    with pytest.raises(ValueError, match="rounding"):
        L.TrainingRecipe("x", "x", None, None, None, grad_rounding="up")  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError, match="unknown option"):
        lowp.training_recipe("nvfp4", gradient_rounding="stochastic")


def test_quantize_model_keeps_the_model_and_its_last_layers_in_bf16() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)
    )
    params = [id(p) for p in model.parameters()]
    out = lowp.quantize_model(model, "nvfp4_recipe", skip=("2",))
    assert out is model and [id(p) for p in model.parameters()] == params
    layers = {m.lowp.name: m.lowp.recipe for m in lowp.lowp_layers(model)}
    assert set(layers) == {"0", "3"} and type(model[2]) is torch.nn.Linear
    assert layers["0"].key == "nvfp4_recipe" and layers["3"].input == L.BF16
    lowp.restore_model(model)
    assert not lowp.lowp_layers(model) and all(type(m) is torch.nn.Linear for m in (model[0], model[3]))


def _gpt2(layers: int = 2) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize("key", ["nvfp4", "fp8_delayed", "mxfp8"])
def test_a_conv1d_quantizes_as_the_nn_linear_with_its_weight_transposed(key: str) -> None:
    """GPT-2's layers are transformers' Conv1D (weight (in, out)): each must compute, forward and backward, exactly
    what an nn.Linear holding the transposed weight computes under the same recipe."""
    conv = _gpt2().transformer.h[0].mlp.c_fc
    linear = torch.nn.Linear(conv.nx, conv.nf)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.T)
        linear.bias.copy_(conv.bias)
    lowp.quantize_model(conv, key)
    lowp.quantize_model(linear, key)
    assert type(conv).__name__ == "LowpConv1D" and "recipe=" in repr(conv)
    x = torch.randn(3, 5, conv.nx) * 10.0 ** torch.randint(-3, 3, (3, 5, 1))
    for _ in range(2):  # the second step reads the first one's delayed scales
        outs = [layer(x) for layer in (conv, linear)]
        assert torch.equal(outs[0], outs[1])
        for out in outs:
            out.pow(2).sum().backward()
    assert torch.equal(conv.weight.grad.T, linear.weight.grad) and torch.equal(conv.bias.grad, linear.bias.grad)


def test_a_gpt2_from_a_config_has_every_linear_layer_quantized() -> None:
    from transformers.pytorch_utils import Conv1D

    base = _gpt2()
    ids = torch.randint(0, 64, (4, 12))

    def losses(model: torch.nn.Module) -> list[float]:
        opt = torch.optim.Adam(model.parameters(), 1e-3)
        out = []
        for _ in range(3):
            opt.zero_grad()
            loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            out.append(float(loss.detach()))
        return out

    model = lowp.quantize_model(copy.deepcopy(base), "nvfp4_recipe")
    layers = {m.lowp.name: m for m in lowp.lowp_layers(model)}
    # Four Conv1D per block (attention in and out, MLP in and out) and the head; the head, last, stays in BF16.
    assert len(layers) == 4 * 2 + 1 and all(isinstance(m, Conv1D) for n, m in layers.items() if n != "lm_head")
    assert layers["lm_head"].lowp.recipe.input == L.BF16
    assert layers["transformer.h.1.mlp.c_proj"].lowp.recipe.key == "nvfp4_recipe"
    lowp.set_counting(model, True)
    quantized, plain = losses(model), losses(copy.deepcopy(base))
    assert all(math.isfinite(v) for v in quantized) and quantized != plain
    assert abs(quantized[-1] - plain[-1]) < 0.05 * plain[-1]
    assert {s.layer for s in lowp.layer_shares(model)} >= {"transformer.h.0.attn.c_attn", "lm_head"}
    copy.deepcopy(lowp.restore_model(model))
    assert type(model.transformer.h[0].attn.c_attn) is Conv1D and not lowp.lowp_layers(model)
    with lowp.full_precision(lowp.quantize_model(model, "nvfp4")):  # the base's own forward when switched off
        assert torch.equal(model(ids).logits, lowp.restore_model(copy.deepcopy(model))(ids).logits)


def test_a_model_quantize_model_would_not_change_is_told_so() -> None:
    with pytest.warns(UserWarning, match="found no layer to quantize in Sequential"):
        lowp.quantize_model(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1)), "nvfp4")
    with pytest.warns(UserWarning, match="none is quantized below BF16"):
        lowp.quantize_model(torch.nn.Linear(4, 4), "nvfp4_recipe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowp.quantize_model(torch.nn.Linear(4, 4), "nvfp4_recipe", keep_bf16=0)


def test_options_replace_the_recipes_fields() -> None:
    layer = _layer(lowp.training_recipe("nvfp4", grad_rounding="stochastic", keep_bf16=0))
    assert layer.lowp.recipe.grad_rounding == "stochastic"
    layer = lowp.quantize_model(torch.nn.Linear(4, 4), "mxfp8_e4m3")
    assert layer.lowp.recipe.input == B.RECIPES["mxfp8_e4m3"]


def test_counts_flushed_and_saturated_per_layer() -> None:
    layer = _layer(L.TRAINING_RECIPES["nvfp4"])
    lowp.set_counting(layer, True)
    x = torch.randn(32, 48)
    x[0, 0] = 1e6  # the tensor's amax: most of row 0's block-mates and far smaller blocks flush
    x[1:, :] *= 1e-9
    layer(x).sum().backward()
    shares = {s.role: s for s in lowp.layer_shares(layer)}
    assert set(shares) == {"input", "weight", "grad"}
    assert shares["input"].flushed > 0 and shares["input"].values == 2 * x.numel()
    lowp.reset(layer)
    assert lowp.layer_shares(layer) == ()


@pytest.mark.parametrize("key", list(L.TRAINING_RECIPES))
def test_every_recipe_trains_a_tiny_model(key: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    lowp.quantize_model(model, key, seed=1)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    x = torch.randn(64, 16)
    y = (x.sum(1, keepdim=True) > 0).float()
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]


def test_delayed_recipe_uses_the_previous_steps_amax() -> None:
    recipe = replace(L.TRAINING_RECIPES["fp8_delayed"], amax_history=3)
    layer = _layer(recipe)
    state = layer.lowp
    amaxes = []
    for scale in (1.0, 5.0, 0.5, 2.0, 0.1):
        x = torch.randn(8, 48) * scale
        amaxes.append(float(x.abs().amax()))
        layer(x).sum().backward()
    used = B.delayed_scales(np.array(amaxes, np.float32), 3, 0)
    assert float(state.delayed["input"].scale) == float(
        B.delayed_scales(np.array([*amaxes, np.nan], np.float32), 3, 0)[-1]
    )
    assert used[0] == 1.0


@pytest.mark.parametrize("numba", ["1", "0"])
@pytest.mark.parametrize("key", ["nvfp4", "fp8_delayed", "nvfp4_sr"])
def test_a_quantized_model_trains_the_same_under_torch_compile(
    monkeypatch: pytest.MonkeyPatch, key: str, numba: str
) -> None:
    """torch.compile (aot_eager) breaks its graph around each quantized layer, which runs as it is: the same losses
    bit for bit as without it, a delayed scale and stochastic rounding included, by the compiled kernel and by torch's
    operations (traced, the latter failed inside Dynamo: an intermediate tensor aliasing an input)."""
    import copy

    monkeypatch.setenv("LENSA_NUMBA", numba)

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x, y = torch.randn(128, 32), torch.randn(128, 1)

    def losses(compiled: bool) -> list[float]:
        model = lowp.quantize_model(copy.deepcopy(base), key)
        run = torch.compile(model, backend="aot_eager") if compiled else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        out = []
        for _ in range(3):
            opt.zero_grad()
            loss = ((run(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    torch._dynamo.reset()
    assert losses(True) == losses(False)


def test_recorder_records_a_quantized_model() -> None:
    from lensa.live.capture import Recorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    lowp.quantize_model(model, "nvfp4_recipe")
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(64, 16)
    with Recorder(model, opt, steps=(1, 2), background=False) as rec:
        for _ in range(2):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            rec.step(loss=loss)
    run = rec.stats()
    assert "0" in run.names("activation") and "2.weight" in run.names("weight_grad")
    assert run.steps("activation") == [1, 2]
    assert run.losses()[2] == pytest.approx(float(loss.detach()))


def test_the_shipped_comparison_is_what_its_command_makes():
    """lensa.live.lowp_reference's first steps, run again: the same losses as the shipped file's (bit for bit on
    the kernels it was made with, within a relative 1e-4 elsewhere, as the reference run's test allows), and the
    same numbers twice in a row (seeded, one thread, deterministic algorithms)."""
    from lensa.lessons import low_bits
    from lensa.live import lowp_reference
    from lensa.live.reference import Recipe

    shipped = low_bits.recorded()
    r = replace(Recipe(), steps=shipped.losses.shape[1], threads=lowp_reference.THREADS)
    for arm in ("fp32", "nvfp4_recipe"):
        losses = []
        for _ in range(2):
            got, _counts, _s = lowp_reference.run_arm(replace(r, steps=3), arm)
            losses.append(got)
        assert np.array_equal(losses[0], losses[1])
        # the first 3 of the 300 steps are in the warm-up, whose learning rate does not depend on the run's length
        expected = shipped.losses_of(arm)[:3]
        if shipped.meta.get("kernels") == str(torch.backends.cpu.get_cpu_capability()):
            assert np.array_equal(losses[0], expected)
        assert np.allclose(losses[0], expected, rtol=1e-4)
