"""The compiled pass of lensa.numerics.blockscale.lost_all (lensa.numerics.blockscale_dispatch) against the numpy pass,
and its summing order.

The numpy pass is itself checked against encode() (tests/test_blockscale.py), and encode against gfloat and NVFP4's
formulas. Here both passes run on the same tensors: the counts must be equal and the SQNR equal to a relative
1e-12 (the same exact squared errors, summed in another order). ``make test-kernels`` reruns this file with numba
compiling for the baseline x86-64 CPU (NUMBA_CPU_NAME=generic): the numbers must not move.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lensa.numerics import blockscale as B
from lensa.numerics import blockscale_dispatch as J
from tests.test_blockscale import LOST_ALL_CASES

pytest.importorskip("numba", reason="numba is not installed: lost_all takes the numpy pass")

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels, numba compiling for the baseline CPU too
ROOT = Path(__file__).resolve().parents[1]

SHAPES = {
    "a long row, cut into stretches": lambda rng: rng.standard_normal(3 * J.STRETCH + 1000) * 1e-3,
    "long rows whose blocks do not divide them": lambda rng: rng.standard_normal((3, 2 * J.STRETCH + 77)),
    "one column": lambda rng: rng.standard_normal((6000, 1)),
    "rows of 16": lambda rng: np.exp2(rng.uniform(-30, 5, (700, 16))),
    "rows of 20": lambda rng: rng.standard_normal((400, 20)) * 1e4,
    "zero rows among others": lambda rng: rng.standard_normal((64, 160)) * (rng.random((64, 1)) < 0.5),
    "float32 subnormals beside normals": lambda rng: np.where(
        rng.random((50, 128)) < 0.5, rng.standard_normal((50, 128)) * 1e-42, rng.standard_normal((50, 128))
    ),
}
CASES = {**LOST_ALL_CASES, **SHAPES}


# recipes of one's own, beside the shipped ones: blocks of 100 values (a row's last cut short, stretches cutting
# them anywhere), and NVFP4's rule over 48 x 100 blocks
CUSTOM = (
    B.Recipe("odd", "blocks of 100", "fp8_e4m3", (1, 100), "fp32", "amax"),
    B.Recipe("tall", "48 x 100 blocks", "fp4_e2m1", (48, 100), "fp8_e4m3", "nvfp4"),
)


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter in the checkout (numba loads, or not, as it would for a user), with
    ``env`` added to this environment."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=300
    )


def both_passes(x: np.ndarray, monkeypatch: pytest.MonkeyPatch, workers: int = 1) -> tuple[dict, dict]:
    recipes = [*B.RECIPES.values(), *CUSTOM]
    with monkeypatch.context() as m:
        m.setattr(J, "MIN_VALUES", 0)  # every tensor, however small, through the compiled pass
        compiled = B.lost_all(x, recipes, workers=workers)
    with monkeypatch.context() as m:
        m.setenv("LENSA_NUMBA", "0")
        assert not J.available()
        plain = B.lost_all(x, recipes, workers=workers)
    return compiled, plain


def assert_same(compiled: dict, plain: dict, what: str) -> None:
    assert compiled.keys() == plain.keys()
    for key in plain:
        got, want = compiled[key], plain[key]
        assert (got.flushed, got.saturated) == (want.flushed, want.saturated), (what, key, got, want)
        if math.isinf(want.sqnr_db) or math.isnan(want.sqnr_db):
            assert got.sqnr_db == want.sqnr_db or (math.isnan(got.sqnr_db) and math.isnan(want.sqnr_db)), (what, key)
        else:
            assert got.sqnr_db == pytest.approx(want.sqnr_db, rel=1e-12), (what, key)


@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_pass_counts_what_the_numpy_pass_counts(case, monkeypatch):
    rng = np.random.default_rng(21)
    x = CASES[case](rng).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = 0.0
    compiled, plain = both_passes(x, monkeypatch)
    assert_same(compiled, plain, case)
    assert any(v.flushed > 0 or v.saturated > 0 or v.sqnr_db < math.inf for v in plain.values())  # something to see


def test_both_passes_agree_on_the_tiniest_subnormals(monkeypatch):
    """Where an FP32 scale would underflow (found by the property test below): both passes stop it at 2**-149."""
    tiny = np.float32(2.0**-149)
    for x in (
        np.array([0, tiny], np.float32),
        np.concatenate([np.full(64, tiny), np.zeros(64)]).astype(np.float32).reshape(4, 32),
        np.concatenate([[0, np.float32(3e-42)], np.full(126, tiny)]).astype(np.float32),
    ):
        compiled, plain = both_passes(x, monkeypatch)
        assert_same(compiled, plain, f"tiny {x.shape}")
        assert all(0 <= v.flushed <= 1 and 0 <= v.saturated <= 1 for v in plain.values())


@pytest.mark.parametrize("case", list(CASES))
def test_quantize_compiled_stores_what_the_numpy_pieces_store(case, monkeypatch):
    rng = np.random.default_rng(26)
    x = CASES[case](rng).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = -0.0
    for key in B.RECIPES:
        with monkeypatch.context() as m:
            m.setattr(J, "MIN_VALUES", 0)
            compiled = B.quantize(x, key)
        with monkeypatch.context() as m:
            m.setenv("LENSA_NUMBA", "0")
            plain = B.quantize(x, key)
        np.testing.assert_array_equal(compiled, plain, err_msg=f"{case} {key}")
        assert (np.signbit(compiled) == np.signbit(plain)).all(), (case, key)  # -0.0 stays -0.0


@pytest.mark.parametrize("case", ["rows 300 x 1000", "a long row, cut into stretches", "one column"])
def test_threads_change_no_number_of_the_compiled_pass(case):
    rng = np.random.default_rng(22)
    x = CASES[case](rng).astype(np.float32)
    assert x.size >= J.MIN_VALUES and J.available()
    one = B.lost_all(x)
    for workers in (2, 3, 5):
        assert B.lost_all(x, workers=workers) == one  # bit for bit: threads take whole chunks


@settings(max_examples=60, deadline=None)
@given(
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=140),
        elements=st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True),
    )
)
def test_the_compiled_pass_on_any_finite_tensor(x):
    mp = pytest.MonkeyPatch()
    try:
        compiled, plain = both_passes(x, mp)
    finally:
        mp.undo()
    assert_same(compiled, plain, str(x.shape))


def test_a_tensor_with_nan_or_inf_takes_encodes_path_either_way(monkeypatch):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((100, 64)).astype(np.float32)
    x[3, 5], x[50, 1] = np.nan, np.inf
    compiled, plain = both_passes(x, monkeypatch)
    assert compiled == plain


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 50), cols=st.integers(1, 5 * J.STRETCH))
def test_stretches_cover_every_value_once_from_the_shape_alone(rows, cols):
    table, marks = J.stretches(rows, cols)
    covered = np.zeros(rows * cols, np.int64)
    for row, c0, end in table.tolist():
        start, stop = row * cols + c0, row * cols + end
        assert start < stop <= rows * cols and stop - start <= max(J.STRETCH, cols)
        if end > cols:  # several whole rows end to end, only where rows are short
            assert c0 == 0 and end % cols == 0 and cols <= J.STRETCH
        covered[start:stop] += 1
    assert (covered == 1).all()
    assert marks[0] == 0 and marks[-1] == len(table) and (np.diff(marks) > 0).all()
    step = int(table[0, 2] - table[0, 1])  # the stretch length (the last of a row or of the matrix may be shorter)
    counts = np.diff(marks)
    assert (counts[:-1] == -(-J.CHUNK // step)).all() and counts[-1] <= -(-J.CHUNK // step)


@pytest.mark.parametrize("shape", [(3, 2 * J.STRETCH + 77), (700, 20), (5, 12345)])
def test_a_recipes_numbers_do_not_depend_on_the_recipes_asked_with_it(shape):
    """The stretches follow the shape alone, so a recipe of one's own whose blocks (100 values, 48 rows x 100) cut
    the stretches anywhere changes no number of the others, and its own are those it gets alone."""
    rng = np.random.default_rng(28)
    x = (rng.standard_normal(shape) * np.exp2(rng.uniform(-20, 10, (shape[0], 1)))).astype(np.float32)
    odd, tall = CUSTOM
    together = B.lost_all(x, [*B.RECIPES, odd, tall])
    for key in B.RECIPES:
        assert together[key] == B.lost(x, key), key
    assert together["odd"] == B.lost(x, odd) and together["tall"] == B.lost(x, tall)


def test_switched_off_it_is_not_loaded_and_small_tensors_never_load_it():
    code = (
        "import sys, numpy as np\n"
        "from lensa import runstats\n"
        "from lensa.numerics import blockscale as B\n"
        "x = np.linspace(-3, 3, 32, dtype=np.float32)  # the Block scaling page's largest block\n"
        "B.lost_all(x); B.quantize(x, 'nvfp4'); runstats.summarize(x, recipes=True)\n"
        "assert 'numba' not in sys.modules, 'a block of 32 loaded numba'\n"
        "import os; os.environ['LENSA_NUMBA'] = '0'\n"
        "B.lost_all(np.ones((100, 100), np.float32))\n"
        "assert 'numba' not in sys.modules, 'LENSA_NUMBA=0 loaded numba'\n"
        "print('clean')"
    )
    out = python(code)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-2000:]


def test_where_numba_can_keep_no_cache_it_compiles_in_the_process():
    code = (
        "import math, os, numpy as np, numba.core.caching as c\n"
        "c.CacheImpl._locator_classes = []  # as in a read-only install with a read-only home\n"
        "from lensa.numerics import blockscale as B, blockscale_dispatch as J\n"
        "x = np.linspace(-3, 3, 8192, dtype=np.float32).reshape(64, 128)\n"
        "assert J.available()\n"
        "got = B.lost_all(x)\n"
        "os.environ['LENSA_NUMBA'] = '0'\n"
        "for k, v in B.lost_all(x).items():\n"
        "    assert (got[k].flushed, got[k].saturated) == (v.flushed, v.saturated)\n"
        "    assert math.isclose(got[k].sqnr_db, v.sqnr_db, rel_tol=1e-12)\n"
        "print('compiled without a cache:', os.environ['LENSA_NUMBA_CACHE'])"
    )
    out = python(code)
    assert out.returncode == 0 and "compiled without a cache: 0" in out.stdout, out.stderr[-2000:]


def test_the_same_numbers_compiled_for_the_baseline_cpu():
    """The summing order is the code's, not the vector width's: numba compiling for x86-64's baseline (no AVX)
    gives every number bit for bit as it does for this CPU."""
    code = (
        "import json, numpy as np\n"
        "from lensa.numerics import blockscale as B\n"
        "rng = np.random.default_rng(24)\n"
        "x = (rng.standard_normal((300, 700)) * np.exp2(rng.uniform(-20, 10, (300, 1)))).astype(np.float32)\n"
        "print(json.dumps({k: [v.flushed, v.saturated, v.sqnr_db.hex()] for k, v in B.lost_all(x).items()}))"
    )
    seen = []
    for cpu in ("host", "generic"):
        out = python(code, NUMBA_CPU_NAME=cpu)
        assert out.returncode == 0, out.stderr[-2000:]
        seen.append(json.loads(out.stdout))
    assert seen[0] == seen[1]


def test_where_numba_cannot_compile_the_pass_numpys_runs_with_a_warning(monkeypatch):
    """A numba or LLVM the pass was not written for fails in numba's own errors: the pass is switched off for the
    process, once, with a warning, and every answer comes from the numpy pass; any other error is raised."""
    from numba.core.errors import TypingError

    rng = np.random.default_rng(27)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    monkeypatch.setenv("LENSA_NUMBA", "0")
    want_lost, want_stored = B.lost_all(x), B.quantize(x, "nvfp4")
    monkeypatch.delenv("LENSA_NUMBA")
    monkeypatch.setattr(J, "_given_up", None)  # restored after the test: the pass is on again for the others

    def fails(*args: object) -> None:
        raise TypingError("this numba cannot type it")

    monkeypatch.setattr(J, "lost", fails)
    monkeypatch.setattr(J, "store", fails)
    with pytest.warns(RuntimeWarning, match="numba could not compile"):
        assert B.lost_all(x) == want_lost
    assert not J.available() and J._given_up.startswith("TypingError")
    np.testing.assert_array_equal(B.quantize(x, "nvfp4"), want_stored)  # no second warning: it stays off

    def broken(*args: object) -> None:
        raise IndexError("a bug of ours")

    monkeypatch.setattr(J, "_given_up", None)
    monkeypatch.setattr(J, "lost", broken)
    with pytest.raises(IndexError, match="a bug of ours"):
        B.lost_all(x)
