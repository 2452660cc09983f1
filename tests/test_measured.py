"""lensa.runstats.measured against brute force on the raw tensors: zones, the two loss scales, lost updates, the
scaler."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lensa.numerics.formats import FORMATS, classify, quantize
from lensa.runstats import RunStats, measured, summarize, summarize_update
from tests.runfixtures import SKIPPED, reference_arms

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def _values(seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.choice([-1, 1], 5000) * 10 ** rng.normal(-6, 2.0, 5000)).astype(np.float32)
    x[:7] = 0
    x[7:10] = [2.0**-25, np.nextafter(np.float32(2.0**-25), np.float32(1)), 65520.0]  # FP16's tie points
    return x


def _brute_zones(x: np.ndarray, fmt: str, k: int) -> dict[str, int]:
    nz = x[x != 0].astype(np.float64) * 2.0**k
    cats = classify(nz, fmt)
    return {z: int(np.count_nonzero(cats == z)) for z in measured.ZONES}


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("k", [-3, 0, 7, 16, 24])
def test_zone_counts_and_histogram_match_classify_on_the_raw_values(fmt, k):
    x = _values()
    stats = summarize(x)
    expected = _brute_zones(x, fmt, k)
    counts = measured.zone_counts(stats, fmt, k)
    assert {z: counts[z] for z in measured.ZONES} == expected
    hist = measured.zone_histogram(stats, fmt, k)
    assert {z: int(hist.counts[z].sum()) for z in measured.ZONES} == expected
    # and binade by binade: the exponent of each scaled value
    nz = x[x != 0].astype(np.float64) * 2.0**k
    exps = np.floor(np.log2(np.abs(nz))).astype(int)
    cats = classify(nz, fmt)
    for zone in measured.ZONES:
        want = {int(e): int(np.count_nonzero((exps == e) & (cats == zone))) for e in np.unique(exps)}
        got = dict(zip(hist.exponents.tolist(), hist.counts[zone].tolist(), strict=True))
        assert {e: n for e, n in got.items() if n} == {e: n for e, n in want.items() if n}


def test_shares_are_of_the_non_zero_values():
    x = _values()
    shares = measured.zone_shares(summarize(x), "fp16")
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["zero"] == pytest.approx(_brute_zones(x, "fp16", 0)["zero"] / np.count_nonzero(x))
    assert all(math.isnan(v) for v in measured.zone_shares(summarize(np.zeros(4)), "fp16").values())


def test_scale_bounds_are_the_first_and_last_k_by_brute_force():
    x = _values()[10:]  # no value on a tie point: the bounds depend on the spread only
    stats = summarize(x)
    n = np.count_nonzero(x)
    keep = next(k for k in measured.SCALE_SEARCH if _brute_zones(x, "fp16", k)["zero"] <= 0.001 * n)
    safe = max(k for k in measured.SCALE_SEARCH if _brute_zones(x, "fp16", k)["overflow"] == 0)
    bounds = measured.scale_bounds(stats)
    assert (bounds.keep_k, bounds.safe_k) == (keep, safe)
    # 5,000 values spread over 2 decades (σ) either side of 1e-6: keeping 99.9% needs more room than FP16 has
    assert not bounds.window


def test_scale_bounds_of_a_narrow_tensor_leave_a_window():
    x = np.float32(1e-5) * np.linspace(1, 100, 1000, dtype=np.float32)
    bounds = measured.scale_bounds(summarize(x))
    assert bounds.window
    # Below S = 2^keep more than one value in a thousand (the smallest) falls under half the smallest subnormal.
    assert _brute_zones(x, "fp16", bounds.keep_k)["zero"] <= 1 < _brute_zones(x, "fp16", bounds.keep_k - 1)["zero"]
    # None overflows while 1e-3 * S stays at or below 65504 (S = 2^25 gives 33,554: the next, 67,109, overflows).
    assert bounds.safe_k == 25


def test_infinite_values_overflow_at_every_scale():
    bounds = measured.scale_bounds(summarize(np.array([1e-3, np.inf], np.float32)))
    assert bounds.safe_k is None and bounds.keep_k is not None
    assert measured.scale_bounds(summarize(np.zeros(3))) == measured.ScaleBounds(None, None)


def test_lost_shares_match_adding_in_the_format():
    rng = np.random.default_rng(5)
    w = rng.normal(0, 0.05, 4000).astype(np.float32)
    u = (rng.normal(0, 1, 4000) * 1e-4).astype(np.float32)
    stats = summarize_update(w, w + u)
    real_u = (w + u) - w
    for fmt in ("fp16", "bf16"):
        stored = quantize(w, fmt)
        lost = (real_u != 0) & (quantize((stored + real_u).astype(np.float32), fmt) == stored)
        assert measured.lost_share(stats, fmt) == pytest.approx(np.count_nonzero(lost) / np.count_nonzero(real_u))
    assert measured.lost_share(stats, "bf16") > measured.lost_share(stats, "fp16") > 0  # BF16: 3 bits fewer


def test_run_level_views_of_the_fixture():
    run = reference_arms()["fp32"]
    step = run.steps("weight_grad")[-1]
    every = measured.tensor_stats(run, "weight_grad", measured.ALL_LAYERS, step)
    assert every.size == sum(run.get("weight_grad", n, step).size for n in run.names("weight_grad"))
    rows = measured.layer_rows(run, "weight_grad", step)
    zeros = [r.shares["fp16"]["zero"] for r in rows]
    assert zeros == sorted(zeros, reverse=True) and len(rows) == len(run.names("weight_grad"))
    lost = measured.lost_by_layer(run, step, ("fp16", "bf16"))
    top = measured.most_lost(lost, "fp16", 3)
    assert [r.name for r in top] == [r.name for r in lost if r in top]  # model order kept
    assert min(r.lost["fp16"] for r in top) >= max(r.lost["fp16"] for r in lost if r not in top)
    steps, shares = measured.lost_over_training(run, measured.ALL_LAYERS, ("fp16",))
    assert steps == run.steps("update") and len(shares["fp16"]) == len(steps)


def test_scaler_history_replays_the_recorded_scale_and_skips():
    history = measured.scaler_history(reference_arms()["fp16"])
    assert history.log2_scales[0] == 16 and history.skipped_steps == SKIPPED
    # GradScaler halves the scale after each skipped step
    for s in SKIPPED:
        i = history.steps.index(s)
        assert history.log2_scales[i + 1] == history.log2_scales[i] - 1
    assert measured.scaler_history(RunStats()) is None


def test_fp16_limits_are_where_the_histogram_splits():
    # 65504 and the next float32 up (which rounds back to 65504) are normal; 65520 (the tie) overflows
    x = np.array([65504.0, 65519.0, 65520.0], np.float32)
    hist = measured.zone_histogram(summarize(x), "fp16")
    assert hist.counts["normal"].sum() == 2 and hist.counts["overflow"].sum() == 1
    assert FORMATS["fp16"].max == 65504


def _overflows(x: np.ndarray, fmt: str, k: int) -> bool:
    """Whether some value times 2**k leaves the format, by ml_dtypes' own cast (inf, or NaN where it has no inf)."""
    cast = (x.astype(np.float64) * 2.0**k).astype(FORMATS[fmt].dtype_name)
    return bool(np.any(~np.isfinite(cast.astype(np.float64))))


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_rescaled_formats_keep_the_scales_that_change_something(fmt):
    top = FORMATS[fmt].max
    # Largest magnitudes well inside a binade, so rounding at the top cannot decide the answer: amax at 0.7 of the
    # format's top (safe k = 0), far below it (k > 0), above it (k < 0); then a tensor with inf (no safe k) and
    # one of zeros (no non-zero value).
    tensors = {
        "at_top": np.array([1e-3, 0.7 * top], np.float32),
        "small": np.array([1e-3, 0.7 * top / 2**9], np.float32),
        "large": np.array([1.0, 0.7 * top * 2**3], np.float32),
    }
    for name, x in tensors.items():
        got = measured.rescaled_formats(summarize(x), (fmt,))
        # The safe k by brute force with ml_dtypes: the largest k at which nothing overflows.
        safe = max(k for k in range(-20, 21) if not _overflows(x, fmt, k))
        assert _overflows(x, fmt, safe + 1)
        assert got == ({} if safe == 0 else {fmt: safe}), name
    assert measured.rescaled_formats(summarize(tensors["small"]), (fmt,)) == {fmt: 9}
    assert measured.rescaled_formats(summarize(tensors["large"]), (fmt,)) == {fmt: -3}
    assert measured.rescaled_formats(summarize(np.array([1e-3, np.inf], np.float32)), (fmt,)) == {}
    assert measured.rescaled_formats(summarize(np.zeros(4, np.float32)), (fmt,)) == {}
