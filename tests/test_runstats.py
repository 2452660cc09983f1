"""lensa.runstats against torch's casts and direct computations on the raw tensor; its file format against bad files."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import zipfile
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.runstats_speed import values as bench_values
from lensa import runstats as R
from lensa.numerics import formats as F
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

TORCH_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def random_bits(n: int, seed: int) -> np.ndarray:
    """Random float32 bit patterns: every binade, subnormals, ±0, ±inf and NaN all turn up."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    return np.concatenate([x, specials, np.float32(2.0**-149) * np.arange(1, 300, dtype=np.float32)])


def boundary_values() -> np.ndarray:
    """Every class boundary of the four formats, with the float32 values one ulp either side, both signs.

    The boundaries: half the smallest subnormal (ties to 0), the midpoints between neighbouring values
    of each format (every one for the FP8 formats, the ones around the smallest normal and the largest
    finite for FP16 and BF16), the overflow threshold and E4M3's saturation point 464.
    """
    parts = []
    for name in R.SUMMARY_FORMATS:
        f = F.FORMATS[name]
        if f.bits == 8:
            v = F.from_bits(np.arange(256), name)
        else:
            near = [f.smallest_subnormal * k for k in range(1, 5)]
            near += [f.smallest_normal - f.smallest_subnormal * k for k in range(0, 4)]
            near += [f.max - k * np.ldexp(1.0, f.emax - f.significand_bits) for k in range(0, 4)]
            v = np.array(near)
        v = np.abs(v[np.isfinite(v)])
        nxt = F.next_up(v, name)
        ok = np.isfinite(nxt)
        mids = (v[ok] + nxt[ok]) / 2
        pts = np.concatenate(
            [mids, [f.smallest_subnormal / 2, f.overflow_threshold, f.max, f.smallest_normal, 464.0]]
        ).astype(np.float32)
        parts += [pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))]
    x = np.concatenate(parts)
    assert np.all(x.astype(np.float64) == np.concatenate(parts).astype(np.float64))
    return np.concatenate([x, -x])


def torch_counts(x: np.ndarray, name: str) -> dict[str, int]:
    """The class counts read off torch's own cast of the float32 values x."""
    import torch

    f = F.FORMATS[name]
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaNs among random bits
        x64 = x.astype(np.float64)
    stored = np.abs(torch.from_numpy(x).to(getattr(torch, TORCH_DTYPE_NAMES[name])).to(torch.float64).numpy())
    nan = np.isnan(x)
    exact_zero = x == 0
    rest = ~nan & ~exact_zero
    # E4M3 saturates: torch stores ±448 for all of them; the class is "beyond 448 after rounding" (> 464).
    overflow = rest & (np.isinf(stored) if f.overflow == "inf" else np.abs(x64) > 464)
    zero = rest & (stored == 0)
    subnormal = rest & (stored > 0) & (stored < f.smallest_normal)
    normal = rest & ~overflow & ~zero & ~subnormal
    out = {"exact_zero": exact_zero, "zero": zero, "subnormal": subnormal, "normal": normal}
    out |= {"overflow": overflow, "nan": nan}
    return {k: int(np.count_nonzero(v)) for k, v in out.items()}


def classify_counts(x64: np.ndarray, name: str) -> dict[str, int]:
    """The class counts of exact (float64) values by lensa.numerics.formats.classify."""
    cats = F.classify(x64, name)
    nonzero = x64 != 0
    out = {"exact_zero": int(np.count_nonzero(x64 == 0))}
    for c in ("zero", "subnormal", "normal", "overflow", "nan"):
        out[c] = int(np.count_nonzero((cats == c) & nonzero))
    return out


def relative_errors(x: np.ndarray, name: str) -> np.ndarray:
    """|stored - x| / |x| of every finite non-zero value, straight from lensa.numerics.formats."""
    x = np.asarray(x, np.float32)
    keep = np.isfinite(x) & (x != 0)
    with np.errstate(over="ignore"):
        return F.relative_error(x[keep], name)


# --- class counts ---------------------------------------------------------------------------------------------


@requires_torch
@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_counts_match_torch_on_random_bit_patterns(name):
    with np.errstate(invalid="ignore"):
        x = random_bits(300_000, seed=1)
    counts = R.summarize(x).counts(name)
    assert counts == torch_counts(x, name)
    assert list(counts) == list(R.CLASS_KEYS) and sum(counts.values()) == x.size
    assert min(counts.values()) > 0  # every class turns up, so every one is checked


@requires_torch
@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_counts_match_torch_one_ulp_either_side_of_every_boundary(name):
    x = boundary_values()
    assert R.summarize(x).counts(name) == torch_counts(x, name)
    # and one value at a time, so a boundary value cannot hide behind a compensating error elsewhere
    for v in x[:: max(1, x.size // 400)]:
        assert R.summarize(np.array([v])).counts(name) == torch_counts(np.array([v]), name), v


def test_documented_ties_and_special_values():
    x = np.array([2.0**-25, np.nextafter(np.float32(2.0**-25), np.float32(1)), 65520.0, 65519.99], np.float32)
    assert R.summarize(x[:1]).counts("fp16")["zero"] == 1
    assert R.summarize(x[1:2]).counts("fp16")["subnormal"] == 1
    assert R.summarize(x[2:3]).counts("fp16")["overflow"] == 1
    assert R.summarize(x[3:4]).counts("fp16")["normal"] == 1
    e4m3 = R.summarize(np.array([464.0, np.nextafter(np.float32(464), np.float32(1e9))], np.float32))
    assert e4m3.counts("fp8_e4m3")["normal"] == 1 and e4m3.counts("fp8_e4m3")["overflow"] == 1
    s = R.summarize(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], np.float32))
    assert (s.size, s.exact_zero, s.inf, s.nan, s.finite_nonzero, s.nonzero) == (6, 2, 2, 1, 1, 4)
    for name in R.SUMMARY_FORMATS:
        assert s.counts(name) == {"exact_zero": 2, "zero": 0, "subnormal": 0, "normal": 1, "overflow": 2, "nan": 1}
        assert s.counts(name, scale_exp=-300)["zero"] == 1 and s.counts(name, scale_exp=300)["overflow"] == 3


def test_empty_and_any_shape_and_dtype():
    assert R.summarize(np.zeros(0, np.float32)).counts("fp16") == dict.fromkeys(R.CLASS_KEYS, 0)
    x = np.random.default_rng(3).standard_normal((7, 11, 13))
    s64 = R.summarize(x)  # float64 is read as float32
    assert s64 == R.summarize(x.astype(np.float32)) == R.summarize(x.astype(np.float32).T)
    assert R.summarize(x.astype(np.float16)) == R.summarize(x.astype(np.float16).astype(np.float32))
    with pytest.raises(TypeError):
        R.summarize(np.array(["a"]))


def test_binade_histogram_matches_frexp():
    with np.errstate(invalid="ignore"):
        x = random_bits(200_000, seed=5)
    exps, counts = R.summarize(x).binade_histogram()
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
    a = a[np.isfinite(a) & (a != 0)]
    _, e = np.frexp(a)
    direct = np.bincount(e - 1 - R.BINADE_MIN, minlength=R.N_BINADES)
    assert exps[0] == -149 and exps[-1] == 127
    assert np.array_equal(counts, direct)
    assert counts[0] > 0 and counts[-1] > 0


def test_record_is_small_and_immutable():
    s = R.summarize(np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32))
    assert s.table.nbytes <= R.N_BINADES * len(R.significand_edges()) * 8
    with pytest.raises(ValueError):
        s.table[0, 0] = 1
    with pytest.raises(AttributeError):
        s.size = 3  # type: ignore[misc]


# --- after scaling by 2**k ------------------------------------------------------------------------------------


@requires_torch
@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_scaled_counts_match_torch_for_every_power_of_two(name):
    rng = np.random.default_rng(7)
    x = np.concatenate([random_bits(20_000, seed=8), boundary_values()])
    with np.errstate(invalid="ignore"):
        x = x[np.isnan(x) | (rng.random(x.size) < 0.5) | (np.abs(x) < 1e30)]
    s = R.summarize(x)
    with np.errstate(invalid="ignore"):
        x64 = x.astype(np.float64)
    inexact_seen = 0
    for k in range(-40, 41):
        exact = x64 * 2.0**k  # exact in float64
        with np.errstate(over="ignore", under="ignore"):
            as32 = exact.astype(np.float32)
        # torch can only see x * 2**k where float32 holds it exactly; elsewhere classify the exact product.
        fits = (as32.astype(np.float64) == exact) | np.isnan(exact) | np.isinf(x64)
        inexact_seen += int(np.count_nonzero(~fits))
        expected = torch_counts(as32[fits], name)
        for key, v in classify_counts(exact[~fits], name).items():
            expected[key] += v
        assert s.counts(name, scale_exp=k) == expected, k
    assert inexact_seen > 0  # float32's own limits were met, and handled


def test_scaled_counts_are_exact_far_out():
    x = np.float32(2.0**-149) * np.array([1, 3, 255], np.float32)
    s = R.summarize(x)
    for name in R.SUMMARY_FORMATS:
        for k in (-200, -60, 0, 60, 130, 160, 300):
            assert s.counts(name, scale_exp=k) == classify_counts(x.astype(np.float64) * 2.0**k, name), (name, k)


# --- mean relative error --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_mean_relative_error_is_within_the_documented_bound(name):
    rng = np.random.default_rng(11)
    x = (np.exp2(rng.uniform(-30, 8, 400_000)) * rng.choice([-1.0, 1.0], 400_000)).astype(np.float32)
    if name == "bf16":
        x = (np.exp2(rng.uniform(-140, 100, 400_000))).astype(np.float32)
    elif F.FORMATS[name].overflow == "inf":
        x = x[np.abs(x) < F.FORMATS[name].max]  # an overflow would make both means inf
    x = np.concatenate([x, np.zeros(1000, np.float32)])
    direct = relative_errors(x, name).mean()
    ours = R.summarize(x).mean_relative_error(name)
    assert 0 < direct < 1
    assert abs(ours - direct) <= 2.0**-11 * direct


def test_mean_relative_error_exact_cases():
    rng = np.random.default_rng(12)
    on_grid = F.cast(rng.standard_normal(100_000).astype(np.float32), "fp16").astype(np.float32)
    s = R.summarize(on_grid)
    assert s.mean_relative_error("fp16") == 0.0
    assert s.mean_relative_error("bf16") == pytest.approx(relative_errors(on_grid, "bf16").mean(), rel=2.0**-11)
    tiny = np.float32(2.0**-30) * rng.random(10_000).astype(np.float32)
    assert R.summarize(tiny).mean_relative_error("fp16") == 1.0  # all rounded to 0: 100% each
    assert R.summarize(np.array([1e6], np.float32)).mean_relative_error("fp16") == np.inf
    assert R.summarize(np.array([1e6], np.float32)).mean_relative_error("fp8_e4m3") == pytest.approx(1 - 448 / 1e6)
    assert np.isnan(R.summarize(np.array([0.0, np.inf], np.float32)).mean_relative_error("fp16"))


# --- updates --------------------------------------------------------------------------------------------------


def update_pair(n: int = 200_000, seed: int = 13) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(n) * 0.05).astype(np.float32)
    u = np.exp2(rng.uniform(-36, -4, n)) * rng.choice([-1.0, 1.0], n)
    u[rng.random(n) < 0.05] = 0.0
    w_after = (w + u.astype(np.float32)).astype(np.float32)
    w[:4] = [0.0, -0.0, 1e6, 3.0]
    w_after[:4] = [1e-9, 2e-9, 1e6 + 0.0625, 3.0]
    return w, w_after


def edge_arrays() -> dict[str, np.ndarray]:
    """Small arrays of every kind a record tells apart: empty, zeros, specials, subnormals, every binade, and the
    class boundaries of the four formats one ulp either side (tests/test_capture.py compares the torch path on them
    too)."""
    tiny = np.float32(2.0**-149)
    return {
        "empty": np.zeros(0, np.float32),
        "zeros": np.array([0.0, -0.0, 0.0], np.float32),
        "specials": np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -2.0], np.float32),
        "only inf and nan": np.array([np.inf, np.nan, -np.inf], np.float32),
        "subnormals": np.concatenate([tiny * np.arange(-300, 300, dtype=np.float32), [np.float32(2.0**-126)]]),
        "powers of two": np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32),
        "boundaries ± 1 ulp": boundary_values(),
    }


def _small_arrays() -> dict[str, np.ndarray]:
    """Arrays of at most 2**16 values (what the sorting path counts), of every kind a record tells apart."""
    rng = np.random.default_rng(11)
    with np.errstate(invalid="ignore"):
        rand = random_bits(60_000, seed=12)
    exact = np.ldexp(np.float32(1 + 6815744 / 2**23), rng.integers(-140, 120, 3000)).astype(np.float32)
    return {
        **edge_arrays(),
        "one value": np.array([0.75], np.float32),
        "random bit patterns": rand,
        "exact fractions and repeats": np.concatenate([exact, np.ones(500, np.float32), -exact[:7]]),
        "a weight": (rng.standard_normal((64, 192)) * 0.02).astype(np.float32),
        "2**16 values": (rng.standard_normal(2**16) * 1e-3).astype(np.float32),
    }


@pytest.mark.parametrize("label", list(_small_arrays()))
def test_a_small_array_sorted_gives_the_record_its_fine_bins_give(label, monkeypatch):
    """Up to 2**16 values are counted by sorting their keys (the summary of a small tensor took 0.35 ms for 64
    values through the 2,048 bins of each binade, and 0.1 ms this way); the record must be the binning path's."""
    from lensa.runstats import counting

    x = _small_arrays()[label]
    assert x.size <= counting._SMALL
    with np.errstate(invalid="ignore"):
        got = R.summarize(x)
        monkeypatch.setattr(counting, "_SMALL", -1)  # every array through the fine bins
        want = R.summarize(x)
    assert got == want, label


@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_stored_float32_is_the_library_cast_and_back(name):
    """The lost-update counts round in float32 arithmetic (:func:`lensa.numerics.formats.stored_float32`) where the
    library cast and back took 7 ns a value each way for FP8; every value must come back as the cast gives it, NaN as
    NaN. (All 2**32 float32 patterns were compared once, for the four formats: 0 differ; here a sample.)"""
    with np.errstate(invalid="ignore"):
        x = np.concatenate([random_bits(200_000, seed=13), boundary_values()])
    x = np.concatenate([x, -x])
    with np.errstate(invalid="ignore", over="ignore"):
        got = F.stored_float32(x, name)
        want = F.cast(x, name).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == x.shape
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


@requires_torch
@pytest.mark.parametrize("name", R.SUMMARY_FORMATS)
def test_lost_updates_match_torch(name):
    import torch

    w, w_after = update_pair()
    s = R.summarize_update(w, w_after)
    tw, twa = torch.from_numpy(w), torch.from_numpy(w_after)
    u = twa - tw
    dtype = getattr(torch, TORCH_DTYPE_NAMES[name])
    stored = tw.to(dtype)
    again = (stored.float() + u).to(dtype)
    lost = int(((u != 0) & (again.float() == stored.float())).sum())
    assert s.lost(name) == lost
    assert 0 < lost < s.nonzero
    plain = R.summarize(u.numpy())  # the same record as for any tensor, plus the lost counts
    assert np.array_equal(plain.table, s.table) and plain.counts(name) == s.counts(name)


def test_lost_orders_the_formats():
    w, w_after = update_pair(seed=14)
    s = R.summarize_update(w, w_after)
    assert s.lost("fp16") < s.lost("bf16") < s.lost("fp8_e4m3") <= s.lost("fp8_e5m2")
    with pytest.raises(ValueError, match="summarize_update"):
        R.summarize(w).lost("fp16")
    with pytest.raises(ValueError, match="shape"):
        R.summarize_update(w, w_after[:-1])


def same_counts(a: R.TensorStats, b: R.TensorStats) -> bool:
    """Equal counts; relative error sums equal within twice the documented bound (each is within 2**-11 of exact)."""
    scalars = ("size", "exact_zero", "inf", "nan", "binade_lo", "lost_counts")
    return (
        all(getattr(a, f) == getattr(b, f) for f in scalars)
        and np.array_equal(a.table, b.table)
        and np.allclose(a.rel_error_sum, b.rel_error_sum, rtol=2.0**-10, atol=0)
    )


def test_combine_is_the_summary_of_the_concatenation():
    rng = np.random.default_rng(15)
    parts = [(np.exp2(rng.uniform(lo, lo + 20, 5000))).astype(np.float32) for lo in (-100, -10, 30)]
    parts[1][:10] = 0
    assert same_counts(R.combine(R.summarize(p) for p in parts), R.summarize(np.concatenate(parts)))
    w, w_after = update_pair(10_000)
    half = 5000
    both = R.combine([R.summarize_update(w[:half], w_after[:half]), R.summarize_update(w[half:], w_after[half:])])
    assert same_counts(both, R.summarize_update(w, w_after))
    assert R.combine([]).size == 0


# --- a run ----------------------------------------------------------------------------------------------------


def small_run(n_steps: int = 3) -> R.RunStats:
    rng = np.random.default_rng(16)
    run = R.RunStats({"arm": "fp16", "model": "tiny"})
    names = ["blocks.0.attn.weight", "blocks.0.mlp.weight", "head.weight"]
    for step in range(1, n_steps + 1):
        for name in names:
            w = rng.standard_normal(500).astype(np.float32)
            run.add("weight_grad", name, step, R.summarize((w * np.float32(1e-4)).reshape(20, 25), recipes=True))
            run.record_amax("weight_grad", name, step, float(np.max(np.abs(w * np.float32(1e-4)))))
            run.add("update", name, step, R.summarize_update(w, w - np.float32(1e-5) * np.sign(w)))
        run.add("activation", "blocks.0.mlp", step, R.summarize(np.maximum(rng.standard_normal(300), 0)))
        run.record_step(step, loss=4.0 / step, loss_scale=2.0**16 / (2 if step == 2 else 1), skipped=step == 2)
    return run


def test_run_queries():
    run = small_run()
    assert run.kinds() == ["weight_grad", "activation", "update"]
    assert run.names("weight_grad") == ["blocks.0.attn.weight", "blocks.0.mlp.weight", "head.weight"]
    assert run.names("activation") == ["blocks.0.mlp"] and run.names("weight") == []
    assert run.steps("update") == [1, 2, 3] and len(run) == 21
    assert run.get("update", "head.weight", 2).lost("fp16") >= 0
    assert run.losses() == {1: 4.0, 2: 2.0, 3: 4.0 / 3}
    assert run.loss_scales() == {1: 65536.0, 2: 32768.0, 3: 65536.0} and run.skipped_steps() == [2]
    with pytest.raises(KeyError):
        run.get("update", "head.weight", 4)
    with pytest.raises(ValueError, match="already"):
        run.add("update", "head.weight", 1, run.get("update", "head.weight", 1))
    with pytest.raises(ValueError, match="steps count from 1"):
        run.add("weight", "x", 0, run.get("update", "head.weight", 1))
    with pytest.raises(ValueError, match="unknown kind"):
        run.add("gradient", "x", 1, run.get("update", "head.weight", 1))
    with pytest.raises(ValueError, match="200"):
        run.add("weight", "x" * 201, 1, run.get("update", "head.weight", 1))


@pytest.mark.parametrize("how", ["path", "bytes", "file"])
def test_save_load_round_trip(tmp_path, how):
    run = small_run()
    path = tmp_path / "run.npz"
    run.save(path)
    source = {"path": path, "bytes": path.read_bytes(), "file": io.BytesIO(path.read_bytes())}[how]
    back = R.load(source)
    assert back == run and back is not run
    assert back.meta == {"arm": "fp16", "model": "tiny"}
    assert back.get("update", "head.weight", 3).lost_counts == run.get("update", "head.weight", 3).lost_counts
    # the file is plain: numpy reads every array without pickles, and the header is JSON
    with np.load(path, allow_pickle=False) as npz:
        assert json.loads(str(npz["header"][()]))["version"] == R.FILE_VERSION
        assert npz["table"].dtype == np.int64


# --- bad files ------------------------------------------------------------------------------------------------


def arrays_of(run: R.RunStats) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(run.to_bytes()), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # allow_pickle is on here, so object arrays go in as pickles
    return buf.getvalue()


def with_header(arrays: dict[str, np.ndarray], **changes) -> dict[str, np.ndarray]:
    header = json.loads(str(arrays["header"][()]))
    for k, v in changes.items():
        if v is None:
            header.pop(k)
        else:
            header[k] = v
    return {**arrays, "header": np.array(json.dumps(header))}


def empty_tensors(n: int) -> dict[str, np.ndarray]:
    a = arrays_of(R.RunStats())
    cols = len(R.significand_edges())
    a |= {
        "tensor_kind": np.zeros(n, np.int64),
        "tensor_name": np.zeros(n, np.int64),
        "tensor_step": np.arange(1, n + 1, dtype=np.int64),
        "tensor_counts": np.zeros((n, 4), np.int64),
        "tensor_binade_lo": np.full(n, -149, np.int64),
        "tensor_rows": np.zeros(n, np.int64),
        "table": np.zeros((0, cols), np.int64),
        "rel_error_sum": np.zeros((n, 4)),
        "has_lost": np.zeros(n, bool),
        "lost": np.zeros((n, 4), np.int64),
        "has_recipes": np.zeros(n, bool),
        "recipe_lost": np.zeros((n, len(R.RECIPE_KEYS), 3)),
        "tensor_dtype": np.full(n, -1, np.int64),
        "lost_fp32": np.full(n, -1, np.int64),
    }
    return with_header(a, names=["w"])


def bad_files() -> dict[str, tuple[bytes, str]]:
    good = small_run().to_bytes()
    a = arrays_of(small_run())
    negative = a["table"].copy()
    negative[0, 0] = -1
    more = a["tensor_counts"].copy()
    more[0, 0] += 1
    return {
        "not a zip": (b"size,exact_zero\n1,0\n", "not a .npz"),
        "truncated": (good[: len(good) // 2], "truncated or damaged"),
        "object array": (npz_bytes({**a, "table": a["table"].astype(object)}), "pickle"),
        "pickled array": (npz_bytes({**a, "header": np.array([{"version": 1}], dtype=object)}), "pickle"),
        "a pickle": (pickle.dumps({"version": 1}), "not a .npz"),
        "wrong version": (npz_bytes(with_header(a, version=4)), "version 4"),
        "version 1 with version 3 arrays": (npz_bytes(with_header(a, version=1)), "another version"),
        "version 2 with version 3 arrays": (npz_bytes(with_header(a, version=2)), "another version"),
        "dtype index out of range": (npz_bytes({**a, "tensor_dtype": a["tensor_dtype"] + 9}), "dtype index"),
        "a dtype that is no name": (
            npz_bytes(with_header({**a, "tensor_dtype": a["tensor_dtype"] * 0}, dtypes=["float 32"])),
            "dtype",
        ),
        "FP32 lost count past the updates": (npz_bytes({**a, "lost_fp32": a["lost_fp32"] * 0 + 10**9}), "FP32 lost"),
        "a share past 1": (npz_bytes({**a, "recipe_lost": a["recipe_lost"] + 2}), "0 ... 1"),
        "recipe counts disagree": (npz_bytes({**a, "recipe_lost": a["recipe_lost"][:, :3]}), "recipe_lost"),
        "missing version": (npz_bytes(with_header(a, version=None)), "no version"),
        "no header": (npz_bytes({k: v for k, v in a.items() if k != "header"}), "no header"),
        "negative count": (npz_bytes({**a, "table": negative}), "negative"),
        "non-integer count": (npz_bytes({**a, "table": a["table"] + 0.5}), "integers"),
        "totals disagree": (npz_bytes({**a, "tensor_counts": more}), "add up to"),
        "10,001 tensors": (npz_bytes(empty_tensors(10_001)), "10,001 tensors"),
        "201-character name": (npz_bytes(with_header(a, names=["x" * 201, "b", "c", "d"])), "201 characters"),
        "25 MB + 1 byte": (good + b"\0" * (R.MAX_FILE_BYTES + 1 - len(good)), "over 25 MB"),
    }


@pytest.mark.parametrize("case", list(bad_files()))
def test_load_refuses_bad_files_with_a_message(case, tmp_path):
    data, message = bad_files()[case]
    with pytest.raises(R.RunStatsError, match=message):
        R.load(data)
    path = tmp_path / "bad.npz"
    path.write_bytes(data)
    with pytest.raises(R.RunStatsError, match=message):
        R.load(path)
    assert issubclass(R.RunStatsError, ValueError)


def test_the_limits_themselves_load():
    a = empty_tensors(10_000)
    assert len(R.load(npz_bytes(a))) == 10_000
    ok_name = with_header(arrays_of(small_run()), names=["x" * 200, "b", "c", "d"])
    assert "x" * 200 in R.load(npz_bytes(ok_name)).names("weight_grad")


_GOOD = small_run(2).to_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.builds(lambda cut: _GOOD[:cut], st.integers(0, len(_GOOD))),
        st.builds(
            lambda pos, bit: bytes(b ^ (1 << bit) if i == pos else b for i, b in enumerate(_GOOD)),
            st.integers(0, len(_GOOD) - 1),
            st.integers(0, 7),
        ),
    )
)
def test_damaged_bytes_only_ever_raise_runstats_error(data):
    try:
        run = R.load(data)
    except R.RunStatsError:
        return
    assert isinstance(run, R.RunStats)  # a flip in a spot zip does not check (a timestamp) may still load


@st.composite
def runs(draw) -> R.RunStats:
    run = R.RunStats({"arm": draw(st.sampled_from(["fp16", "bf16"]))})
    labels = draw(
        st.lists(
            st.tuples(st.sampled_from(R.KINDS), st.text(min_size=1, max_size=20), st.integers(1, 50)),
            max_size=6,
            unique=True,
        )
    )
    for kind, name, step in labels:
        bits = draw(st.lists(st.integers(0, 2**32 - 1), max_size=40))
        with np.errstate(invalid="ignore"):
            x = np.array(bits, np.uint64).astype(np.uint32).view(np.float32)
        stats = R.summarize_update(x, x[::-1]) if kind == "update" else R.summarize(x)
        run.add(kind, name, step, stats)
    for step in draw(st.lists(st.integers(1, 50), max_size=5, unique=True)):
        scale = draw(st.one_of(st.none(), st.floats(1e-3, 1e30)))
        run.record_step(step, draw(st.floats(allow_nan=True)), scale, draw(st.booleans()))
    return run


@settings(max_examples=60, deadline=None)
@given(runs())
def test_save_load_round_trips(run):
    assert R.load(run.to_bytes()) == run


def test_the_zip_holds_npy_arrays_only():
    with zipfile.ZipFile(io.BytesIO(small_run().to_bytes())) as zf:
        assert all(n.endswith(".npy") for n in zf.namelist())


@requires_torch
def test_counts_across_chunks_and_threads_match_torch():
    with np.errstate(invalid="ignore"):
        x = random_bits(2 * R._MIN_PART + 12_345, seed=17)  # big enough for the threaded path
    x[::7] = 0.0
    s = R.summarize(x, workers=3)  # the benchmark's path: parts on threads, added up
    for name in ("fp16", "fp8_e4m3"):
        assert s.counts(name) == torch_counts(x, name)
    serial = R.summarize(x)
    assert np.array_equal(s.table, serial.table) and s.rel_error_sum == serial.rel_error_sum
    assert np.array_equal(s.table, R.combine([R.summarize(x[:1000]), R.summarize(x[1000:])]).table)


def test_threads_give_the_same_record_as_one_thread():
    # Counts are exact integers and the parts' sums are added in a fixed order: any split gives the same record.
    with np.errstate(invalid="ignore"):
        x = random_bits(2 * R._MIN_PART + 999, seed=5)
    one = R.summarize(x)
    for workers in (2, 3, 8):
        many = R.summarize(x, workers=workers)
        assert np.array_equal(many.table, one.table) and many.rel_error_sum == one.rel_error_sum
        assert (many.size, many.exact_zero, many.inf, many.nan) == (one.size, one.exact_zero, one.inf, one.nan)


def reference_summary(x: np.ndarray) -> R.TensorStats:
    """summarize(x) the slow, obvious way: each value's binade and F straight from its bits, one bincount each.

    The whole array at once, no chunks, windows, packing or threads. The table counts the values per binade and
    significand interval directly; only the relative error sums come from the module (_relative_error_sums), fed
    with fine bins built here, since they are defined by the fine bins and their order of summation.
    """
    bits = np.ascontiguousarray(x, np.float32).reshape(-1).view(np.uint32)
    mag = (bits & 0x7FFFFFFF).astype(np.int64)
    exp, frac = mag >> 23, mag & 0x7FFFFF
    keep = (mag != 0) & (exp != 255)
    exp, frac = exp[keep], frac[keep]
    binade, f = exp - 127, frac.copy()
    sub = exp == 0  # float32 subnormal frac * 2**-149: binade from frac's top bit, F the bits below it
    top = np.frexp(frac[sub].astype(np.float64))[1].astype(np.int64) - 1
    binade[sub] = top - 149
    f[sub] = (frac[sub] << (23 - top)) & 0x7FFFFF
    row = binade - R.BINADE_MIN
    grid = row * 2048 + (f >> 12)
    count = np.bincount(grid, minlength=R.N_BINADES * 2048)
    low = np.bincount(grid, weights=f & 4095, minlength=R.N_BINADES * 2048)
    bins = np.flatnonzero(count)
    edges = np.array(R.significand_edges())
    n_cols = edges.size
    lo, hi = (int(row.min()), int(row.max()) + 1) if row.size else (0, 0)
    cell = (row - lo) * n_cols + np.searchsorted(edges, f, side="right") - 1
    table = np.bincount(cell, minlength=(hi - lo) * n_cols).reshape(hi - lo, n_cols)
    return R.TensorStats(
        size=bits.size,
        exact_zero=int(np.count_nonzero(mag == 0)),
        inf=int(np.count_nonzero(mag == 0x7F800000)),
        nan=int(np.count_nonzero(mag > 0x7F800000)),
        binade_lo=R.BINADE_MIN + lo,
        table=table,
        rel_error_sum=R._relative_error_sums(bins, count[bins], low[bins]),
    )


def edge_bit_patterns() -> np.ndarray:
    """Every significand edge in every normal binade, exactly and one ulp either side, both signs (bit patterns)."""
    at = ((np.arange(1, 255, dtype=np.uint32)[:, None] << 23) | np.array(R.significand_edges(), np.uint32)).ravel()
    return np.concatenate([at, at - 1, at + 1]) | np.array([0, 1 << 31], np.uint32)[:, None]


def tiny_subnormals() -> np.ndarray:
    """Subnormals below 2**-137 (their bits below 2**12: in fine bin 0 with the zeros), and zeros."""
    x = np.float32(2.0**-149) * np.random.default_rng(11).integers(1, 2**12, 2_300_001).astype(np.float32)
    x[::5] = 0.0
    return x


def subnormals_nan_payloads_and_specials() -> np.ndarray:
    rng = np.random.default_rng(12)
    nan_payloads = rng.integers(0x7F800001, 0x7F801000, 1_000_000).astype(np.uint32)  # in inf's fine bin
    specials = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x1, 0x807FFFFF], np.uint32)
    subnormals = rng.integers(0, 2**23, 1_500_000).astype(np.uint32)
    return np.concatenate([subnormals, nan_payloads, np.tile(specials, 99)]).view(np.float32)


def powers_of_two_and_the_other_unaligned_edge() -> np.ndarray:
    """Values with F == 0 (exact powers of two) and F == 0x680000 (1.8125 * 2**e): the fractions counted exactly."""
    rng = np.random.default_rng(13)
    x = bench_values(3 * R._MIN_PART + 7, seed=2)
    x[::3] = np.float32(2.0) ** rng.integers(-149, 128, x[::3].size).astype(np.float32)
    x[1::7] = np.float32(1.8125) * np.float32(2.0) ** rng.integers(-126, 127, x[1::7].size).astype(np.float32)
    return x


SUMMARY_CASES = {
    "bench": lambda: bench_values(10_000_000),
    "empty": lambda: np.zeros(0, np.float32),
    "one value": lambda: np.array([-3.0], np.float32),
    "one zero": lambda: np.array([-0.0], np.float32),
    "specials": lambda: np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 2.0**-149, 1.0], np.float32),
    "edges": lambda: edge_bit_patterns().view(np.float32),
    "edges, many times": lambda: np.tile(edge_bit_patterns(), 300).view(np.float32),
    "10**7 copies of one value": lambda: np.full(10_000_000, 1.2345, np.float32),
    "one fine bin past a window": lambda: np.full(R._WINDOW + 5, -3.3, np.float32),
    "random bit patterns": lambda: random_bits(3_000_001, seed=14),
    "zeros and tiny subnormals": tiny_subnormals,
    "subnormals, NaN payloads, specials": subnormals_nan_payloads_and_specials,
    "zeros only": lambda: np.zeros(2 * R._MIN_PART + 1, np.float32),
    "powers of two and 1.8125": powers_of_two_and_the_other_unaligned_edge,
}


@pytest.mark.parametrize("case", list(SUMMARY_CASES))
def test_summarize_equals_the_whole_array_reference_for_any_workers(case):
    # Chunks, windows, the packing of counts with low bits, threads: none of it may change a bit of the record.
    with np.errstate(invalid="ignore", over="ignore"):
        x = SUMMARY_CASES[case]()
        want = reference_summary(x)
        for workers in (1, 2, 3):
            got = R.summarize(x, workers=workers)
            assert got == want, (case, workers)
            assert [v.hex() for v in got.rel_error_sum] == [v.hex() for v in want.rel_error_sum]


# --- file version 2: block recipes and amax at every step ------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (7,), (300,), (40, 50), (3, 130, 33), (2, 2, 5, 70)])
def test_recipe_records_equal_blockscale_lost(shape):
    from lensa.numerics import blockscale as B

    rng = np.random.default_rng(22)
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-12, 6, shape))).astype(np.float32)
    if x.size > 3:
        x.reshape(-1)[:3] = 0
    rec = R.summarize(x, recipes=True)
    for key in B.RECIPES:
        assert rec.recipe(key) == B.lost(x, key), key
    assert R.summarize(x, workers=3, recipes=True) == rec  # the recipes on three threads: the same record


def test_recipe_records_with_nan_and_inf_and_in_a_file():
    from lensa.numerics import blockscale as B

    x = np.random.default_rng(3).standard_normal((64, 96)).astype(np.float32)
    x[5, 7], x[40, 90] = np.nan, np.inf
    run = R.RunStats()
    run.add("activation", "fc", 1, R.summarize(x, recipes=True))
    run.add("update", "fc.weight", 1, R.summarize_update(x, x * np.float32(0.999), recipes=True))
    back = R.load(run.to_bytes())
    assert back == run and back.version == R.FILE_VERSION == 3 and back.has_recipes
    with np.errstate(invalid="ignore"):  # inf - inf: the update is NaN there, as summarize_update has it
        u = (x * np.float32(0.999)) - x
    for key in B.RECIPES:
        for kind, name, values in (("activation", "fc", x), ("update", "fc.weight", u)):
            got, want = back.get(kind, name, 1).recipe(key), B.lost(values, key)
            assert got.flushed == want.flushed and got.saturated == want.saturated
            assert got.sqnr_db == want.sqnr_db or (math.isnan(got.sqnr_db) and math.isnan(want.sqnr_db))


def test_a_version_1_file_still_loads_and_says_it_predates_recipes():
    a = arrays_of(small_run())
    v1 = {k: v for k, v in a.items() if k in R._ARRAYS}
    run = R.load(npz_bytes(with_header(v1, version=1)))
    assert run.version == 1 and not run.has_recipes and len(run) == len(small_run())
    with pytest.raises(ValueError, match=r"predates block recipes \(file version 1\)"):
        run.get("weight_grad", "head.weight", 1).recipe("nvfp4")
    assert run.amax_names("weight_grad") == []
    back = pickle.loads(pickle.dumps(run))  # pickled as the current version, it still came from a version-1 file
    assert back.version == 1 and back == run
    with pytest.raises(ValueError, match="predates block recipes"):
        back.get("weight_grad", "head.weight", 1).recipe("nvfp4")


def test_a_version_2_record_made_without_recipes_says_how_it_was_made_and_how_to_keep_them():
    # issue 29: it used to say "predates block recipes (file version 1)" of a record that did not
    x = np.random.default_rng(29).standard_normal((8, 64)).astype(np.float32)
    plain = R.summarize(x)
    run = R.RunStats()
    run.add("activation", "fc", 1, plain)
    run.add("weight", "fc.weight", 1, R.summarize(x, recipes=True))
    back = R.load(run.to_bytes())
    assert back.version == R.FILE_VERSION >= 2 and not back.has_recipes
    for record in (plain, back.get("activation", "fc", 1), pickle.loads(pickle.dumps(back)).get("activation", "fc", 1)):
        with pytest.raises(ValueError) as err:
            record.recipe("mxfp8_e4m3")
        said = str(err.value)
        assert "predates" not in said and "version 1" not in said
        assert "made without block recipes" in said and "Recorder(..., recipes=True)" in said
        assert "LensaCallback(..., recipes=True)" in said
    assert back.get("weight", "fc.weight", 1).recipe("mxfp8_e4m3") == plain.with_recipes(x).recipe("mxfp8_e4m3")
    with pytest.raises(ValueError, match="several tensors together"):
        R.combine([back.get("weight", "fc.weight", 1), plain]).recipe("nvfp4")


def test_a_records_origin_is_checked_and_not_compared():
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    plain = R.summarize(x)
    from dataclasses import replace

    assert replace(plain, origin="version_1") == plain
    with pytest.raises(ValueError, match="origin"):
        replace(plain, origin="elsewhere")
    with pytest.raises(ValueError, match="holds no block recipes"):
        replace(R.summarize(x, recipes=True), origin="version_1")
    assert replace(plain, origin="version_1").with_recipes(x).has_recipes  # recomputed from the values: a summary


def test_a_version_2_file_still_loads_without_dtypes():
    a = arrays_of(small_run())
    v2 = {k: v for k, v in a.items() if k in R._ARRAYS_V2}
    run = R.load(npz_bytes(with_header(v2, version=2)))
    assert run.version == 2 and len(run) == len(small_run())
    assert all(s.dtype is None and s.lost_fp32 is None for _, s in run.items())
    assert run.amax_names("weight_grad") == small_run().amax_names("weight_grad")


def test_version_3_keeps_each_tensors_dtype_and_the_intended_updates_fp32_losses():
    """A BF16 weight of 1 with an SGD update of -1e-4: BF16 (and FP16) round it away, FP32 keeps it; one of 2**-30
    is lost in FP32 too (under half of FP32's spacing at 1, 2**-23). Counted by hand."""
    w = np.ones(8, np.float32)
    u = np.array([-1e-4] * 4 + [2.0**-30] * 2 + [0.0, 0.5], np.float32)
    rec = R.summarize_intended(w, u)
    assert rec.intended and rec.nonzero == 7
    assert rec.lost("bf16") == 6 and rec.lost("fp16") == 6 and rec.lost_fp32 == 2
    assert rec == R.summarize_intended(w, u) and rec != R.summarize_update(w, w + u)  # the FP32 count differs
    assert not R.summarize_update(w, w + u).intended
    run = R.RunStats()
    run.add("update", "w", 1, replace(rec, dtype="bfloat16"))
    run.add("activation", "a", 1, replace(R.summarize(u), dtype="float16"))
    run.add("activation", "b", 1, R.summarize(u))  # no dtype known
    back = R.load(run.to_bytes())
    assert back == run and back.version == 3
    assert back.get("update", "w", 1).dtype == "bfloat16" and back.get("update", "w", 1).lost_fp32 == 2
    assert back.get("activation", "a", 1).dtypes == ("float16",) and back.get("activation", "b", 1).dtype is None
    together = R.combine([replace(R.summarize(u), dtype="float16"), replace(R.summarize(w), dtype="bfloat16")])
    assert together.dtype == "bfloat16+float16" and together.dtypes == ("bfloat16", "float16")
    assert R.combine([rec, rec]).lost_fp32 == 4
    with pytest.raises(ValueError, match="dtype"):
        replace(rec, dtype="torch.float32")
    with pytest.raises(ValueError, match="FP32 lost count"):
        replace(R.summarize(u), lost_fp32=1)


def test_records_of_each_ranks_part_combine_as_the_whole_would():
    """Two ranks' halves of an activation: counts and sums add as the concatenation's; the recipes' shares flushed
    and saturated are the counts over both halves; the SQNR is the lower of the two halves'."""
    from lensa.numerics import blockscale as B

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 64)) * np.exp(rng.uniform(-20, 2, (8, 64)))).astype(np.float32)
    x[0, :5] = 0
    halves = [R.summarize(x[:4], recipes=True), R.summarize(x[4:], recipes=True)]
    both = R.combine_over_ranks(halves)
    whole = R.summarize(x)
    assert (both.size, both.exact_zero, both.nonzero) == (whole.size, whole.exact_zero, whole.nonzero)
    assert np.array_equal(both.table, whole.table)
    for key in B.RECIPES:
        parts = [B.lost(x[:4], key), B.lost(x[4:], key)]
        got = both.recipe(key)
        flushed = sum(round(p.flushed * np.count_nonzero(h)) for p, h in zip(parts, (x[:4], x[4:]), strict=True))
        assert got.flushed == flushed / np.count_nonzero(x), key
        assert got.saturated == sum(p.saturated * 256 for p in parts) / 512, key
        assert got.sqnr_db == min(p.sqnr_db for p in parts), key
    assert R.combine_over_ranks([halves[0], R.summarize(x[4:])]).recipes is None  # one part without recipes


def test_merge_ranks_keeps_weights_once_combines_activations_and_averages_the_loss():
    rng = np.random.default_rng(6)
    w, a0, a1 = (rng.standard_normal(32).astype(np.float32) for _ in range(3))
    parts = []
    for rank, act in enumerate((a0, a1)):
        run = R.RunStats({"arm": "fp32"})
        if rank == 0:
            run.add("weight", "fc.weight", 1, R.summarize(w))
        run.add("activation", "fc", 1, R.summarize(act))
        run.record_step(1, 2.0 + rank, 1024.0, skipped=rank == 1)
        run.record_amax("activation", "fc", 1, float(np.abs(act).max()))
        parts.append(run)
    merged = R.merge_ranks(parts)
    assert merged.meta == {"arm": "fp32", "ranks": 2}
    assert merged.get("weight", "fc.weight", 1) == R.summarize(w)
    assert merged.get("activation", "fc", 1) == R.combine([R.summarize(a0), R.summarize(a1)])
    assert merged.losses() == {1: 2.5} and merged.loss_scales() == {1: 1024.0} and merged.skipped_steps() == [1]
    assert merged.amax("activation", "fc")[1].tolist() == [float(np.float32(max(np.abs(a0).max(), np.abs(a1).max())))]
    assert R.merge_ranks(parts[:1]).items() == parts[0].items()
    with pytest.raises(ValueError, match="at least one"):
        R.merge_ranks([])


def test_save_is_atomic_and_leaves_no_part_file(tmp_path, monkeypatch):
    run = small_run()
    path = tmp_path / "run.npz"
    path.write_bytes(b"an older file")
    real = os.replace

    def interrupted(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError, match="disk full"):
        run.save(path)
    assert path.read_bytes() == b"an older file" and sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]
    monkeypatch.setattr(os, "replace", real)
    run.save(path)
    assert R.load(path) == run and sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]


def test_amax_series_round_trip():
    run = small_run()
    run.record_amax("activation", "only.amax", 7, float("nan"))  # a name with no tensor record, a NaN amax
    back = R.load(run.to_bytes())
    assert back == run
    steps, amax = back.amax("weight_grad", "head.weight")
    assert steps.tolist() == [1, 2, 3] and np.all(amax > 0)
    assert back.amax("activation", "only.amax")[1].tolist() == [math.inf]
    with pytest.raises(ValueError, match="magnitude"):
        run.record_amax("weight", "w", 1, -1.0)


def test_amax_of_a_step_at_once_is_amax_one_by_one():
    labels = [("weight", "a"), ("activation", "b"), ("weight_grad", "a")]
    values = [1.0 + 2.0**-30, float("nan"), 1e39]  # rounded to float32; NaN kept as inf; past float32's range, inf
    together, apart = R.RunStats(), R.RunStats()
    together.record_amaxes(3, labels, values)
    for (kind, name), v in zip(labels, values, strict=True):
        with np.errstate(over="ignore"):
            apart.record_amax(kind, name, 3, v)
    assert together == apart
    assert [together.amax(k, n)[1].tolist() for k, n in labels] == [[1.0], [math.inf], [math.inf]]
    with pytest.raises(ValueError, match="unknown kind"):
        together.record_amaxes(4, [("weights", "a")], [1.0])
    with pytest.raises(ValueError, match="magnitude"):
        together.record_amaxes(4, labels, [1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="labels"):
        together.record_amaxes(4, labels, [1.0])
