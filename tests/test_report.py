"""``python -m lensa report``: the pages' numbers for a recorded run, as text, JSON and a CI check.

The pages' side is read through AppTest from the same uploaded bytes; the check's numbers are worked out by hand
from the formats' definitions (FP16's smallest subnormal 2**-24, largest finite 65,504; FP8 E4M3's 2**-9, 448).
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from lensa import measured
from lensa import report as R
from lensa.__main__ import main
from lensa.runstats import KINDS, RunStats, RunStatsError, load, summarize, summarize_update
from lensa.ui import i18n
from tests.pagetools import APP, metrics
from tests.runfixtures import upload_bytes

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def upload_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "my run.npz"
    path.write_bytes(upload_bytes())
    return path


def _grad_run(small: float = 1e-9, n_small: int = 1000, n_big: int = 99_000) -> RunStats:
    """1% of the gradients at ``small`` (0 in FP16 unscaled: below 2**-25), the rest at 1e-3."""
    run = RunStats()
    grads = np.concatenate([np.full(n_small, small, np.float32), np.full(n_big, 1e-3, np.float32)])
    run.add("weight_grad", "w", 1, summarize(grads))
    w = np.full(100, 1.0, np.float32)
    run.add("update", "w", 1, summarize_update(w, w + np.float32(1e-4)))  # under half FP16's spacing at 1 (2**-11)
    run.record_step(1, 1.0)
    return run


# --- the numbers ---------------------------------------------------------------------------------------------


def test_the_band_and_the_check_worked_out_by_hand():
    run = _grad_run()
    doc = R.build(run)
    grads = doc["kinds"]["weight_grad"]["all"]
    assert grads["nonzero"] == 100_000
    assert grads["shares"]["fp16"]["zero"] == pytest.approx(0.01, abs=0)  # 1,000 of 100,000, exactly
    assert grads["shares"]["bf16"]["zero"] == 0
    # 1e-9 * 2**5 = 3.2e-8 is past half the smallest subnormal (2**-25 = 2.98e-8); 2**4 is not.
    # 1e-3 * 2**25 = 33,554 fits under 65,504; 2**26 gives 67,109, which overflows.
    band = doc["loss_scale"]["weight_grad"]
    assert (band["keep_k"], band["safe_k"], band["window"]) == (5, 25, True)
    # FP8 E4M3: 1e-3 * 2**18 = 262 stays under 464 (saturation), 2**19 = 524 does not.
    assert band["safe_k_by_format"]["fp8_e4m3"] == 18
    # An update of 1e-4 on a weight of 1: FP16's spacing at 1 is 2**-10, so it is lost; FP32 keeps it.
    assert doc["updates"]["lost"]["fp16"] == 1.0 and doc["updates"]["losing"]["fp16"] == ["w"]

    fp16 = R.check(run, "fp16")  # gradients at S = 2**5, the band's scale nearest 1: nothing lost
    assert fp16.passed and fp16.items[0].scale_k == 5 and fp16.items[0].share == 0
    raw = R.check(run, "fp16", loss_scaling=False)
    assert not raw.passed and raw.items[0].share == 0.01
    assert R.check(run, "fp16", threshold=0.02, loss_scaling=False).passed
    # E4M3 needs S >= 2**20 to keep 1e-9 (2**-10 is half its smallest subnormal) but overflows past 2**18: no band.
    e4m3 = R.check(run, "fp8_e4m3")
    assert not e4m3.passed and e4m3.items[0].scale_k == 0 and e4m3.items[0].share == 0.01
    assert R.check(run, "bf16").passed
    assert not R.check(run, "fp16", kinds=["update"]).passed  # an FP16 weight would lose all of them


def test_the_report_equals_the_core_functions_the_pages_call(upload_file):
    run = load(upload_file)
    doc = R.build(run, name=upload_file.name)
    for kind in run.kinds():
        step = run.steps(kind)[-1]
        section = doc["kinds"][kind]
        assert section["step"] == step
        every = measured.tensor_stats(run, kind, "all", step)
        for f in R.REPORT_FORMATS:
            shares = measured.zone_shares(every, f)
            assert section["all"]["shares"][f] == {z: (v if math.isfinite(v) else None) for z, v in shares.items()}
        assert [layer["name"] for layer in section["layers"]] == list(measured.layers_at(run, kind, step))
    bounds = measured.scale_bounds(measured.tensor_stats(run, "weight_grad", "all", run.steps("weight_grad")[-1]))
    assert (doc["loss_scale"]["weight_grad"]["keep_k"], doc["loss_scale"]["weight_grad"]["safe_k"]) == (
        bounds.keep_k,
        bounds.safe_k,
    )
    history = measured.scaler_history(run)
    assert history is not None
    assert doc["scaler_history"]["skipped_steps"] == list(history.skipped_steps) == [3, 4, 17]


def T(key: str) -> str:
    return i18n.text("en", key)


def _pct(share, lang="en"):
    return "—" if share is None else i18n.percent(share, lang)


def _visit(key: str, content: bytes, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"pages/{key}.py")
    for name, value in {"lang": "en", "data": "upload", **params}.items():
        at.query_params[name] = value
    at.run()
    at.file_uploader[0].set_value(("my run.npz", content, "application/zip")).run()
    assert not at.exception
    return at


def test_every_number_equals_what_the_pages_show_for_the_same_file(upload_file):
    """Steps 2-5 with the file uploaded: their metric cards and layer tables against the report's numbers."""
    content = upload_file.read_bytes()
    doc = R.build(load(content), name=upload_file.name)
    code, text, _ = run_cli("report", str(upload_file), "--lang", "en")
    assert code == 0
    grads = doc["kinds"]["weight_grad"]

    m = metrics(_visit("fp16_range", content))
    fp16 = grads["all"]["shares"]["fp16"]
    assert m[T("fp16_range.metric_zero")] == _pct(fp16["zero"])
    assert m[T("fp16_range.metric_subnormal")] == _pct(fp16["subnormal"])
    assert m[T("fp16_range.metric_normal")] == _pct(fp16["normal"])
    assert m[T("fp16_range_data.metric_overflow")] == _pct(fp16["overflow"])

    at = _visit("fp16_range", content, kind="activation")  # another kind, and the page's layer table
    table = at.dataframe[0].value
    acts = doc["kinds"]["activation"]
    page_rows = {row[T("data.col_layer")]: row for _, row in table.iterrows()}
    assert set(page_rows) == {layer["name"] for layer in acts["layers"]}
    head = i18n.text(
        "en",
        "report.kind_head",
        kind="Activations",
        step=i18n.number(acts["step"], "en"),
        n=i18n.number(acts["all"]["nonzero"], "en"),
        layers=i18n.number(len(acts["layers"]), "en"),
    )
    text_rows = {line.split()[0]: line.split() for line in text.split(head, 1)[1].split("\n\n")[1].splitlines()}
    for layer in acts["layers"]:
        shares = layer["shares"]["fp16"]
        expected = [_pct(shares["zero"]), _pct(shares["overflow"])]
        row = page_rows[layer["name"]]
        assert [row[T("common.col_zero")], row[T("common.col_overflow")]] == expected  # the page's table
        assert text_rows[layer["name"]][2:4] == expected  # the report's: layer, values, FP16 to 0, FP16 overflow

    m = metrics(_visit("loss_scaling", content))
    band = doc["loss_scale"]["weight_grad"]
    assert m[T("loss_scaling_data.metric_keep")] == f"2^{band['keep_k']}"
    assert m[T("loss_scaling_data.metric_safe")] == f"2^{band['safe_k']}"
    assert f"S = 2^{band['keep_k']}, and the largest that overflows none is S = 2^{band['safe_k']}" in text

    m = metrics(_visit("master_weights", content))
    updates = doc["updates"]
    assert m[T("master_weights_data.metric_fp16")] == _pct(updates["lost"]["fp16"])
    assert m[T("master_weights_data.metric_bf16")] == _pct(updates["lost"]["bf16"])
    assert m[T("master_weights_data.metric_count")] == i18n.number(updates["nonzero"], "en")

    m = metrics(_visit("bf16", content))
    assert m[T("bf16.metric_fp16_zero")] == _pct(grads["all"]["shares"]["fp16"]["zero"])
    assert m[T("bf16.metric_bf16_zero")] == _pct(grads["all"]["shares"]["bf16"]["zero"])
    assert m[T("bf16.metric_fp16_err")] == _pct(grads["all"]["error"]["fp16"])
    assert m[T("bf16.metric_bf16_err")] == _pct(grads["all"]["error"]["bf16"])


# --- the command line ----------------------------------------------------------------------------------------


def test_json_is_the_documented_document(upload_file):
    code, out, err = run_cli("report", str(upload_file), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["schema"] == "lensa-report" and doc["version"] == 1
    assert doc["file"] == "my run.npz" and doc["formats"] == list(R.REPORT_FORMATS)
    assert set(doc["kinds"]) == set(load(upload_file).kinds()) and set(doc["kinds"]) <= set(KINDS)
    documented = (ROOT / "docs" / "report.md").read_text()
    for key in ("schema", "version", "kinds", "loss_scale", "scaler_history", "updates", "fp16_against_bf16", "check"):
        assert f"`{key}`" in documented, key


def test_check_exit_codes_for_ci(tmp_path):
    path = tmp_path / "grads.npz"
    _grad_run().save(path)
    assert run_cli("report", str(path), "--check", "fp16")[0] == 0
    code, out, _ = run_cli("report", str(path), "--check", "fp16", "--no-loss-scale", "--lang", "en")
    assert code == 1 and "Check FP16: FAILED" in out and "1%" in out
    assert run_cli("report", str(path), "--check", "fp16", "--no-loss-scale", "--threshold", "2%")[0] == 0
    assert run_cli("report", str(path), "--check", "fp8_e4m3")[0] == 1
    code, out, _ = run_cli("report", str(path), "--check", "fp16", "--json")
    assert code == 0 and json.loads(out)["check"]["passed"] is True
    assert run_cli("report", str(path), "--check", "fp16", "--kinds", "update")[0] == 1
    assert run_cli("report", str(path), "--check", "fp4")[0] == 2  # not a format the run statistics count
    assert run_cli("report", str(path), "--threshold", "150%")[0] == 2


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_bad_file_gives_the_uploads_message_and_exit_code_2(tmp_path, lang):
    bad = tmp_path / "notes.npz"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(RunStatsError) as e:
        load(b"this is not a zip file")
    code, out, err = run_cli("report", str(bad), "--lang", lang)
    assert code == 2 and out == ""
    assert err.strip() == i18n.text(lang, "data.upload_error", name="notes.npz", detail=str(e.value))
    code, _, err = run_cli("report", str(tmp_path / "missing.npz"), "--lang", lang)
    assert code == 2 and "missing.npz" in err and "Traceback" not in err


def test_an_unrecorded_step_says_which_are(upload_file):
    code, _, err = run_cli("report", str(upload_file), "--step", "7", "--lang", "en")
    assert code == 2 and "Step 7 was not recorded" in err and "1, 10, 20, 30" in err
    code, out, _ = run_cli("report", str(upload_file), "--step", "10", "--json")
    assert code == 0 and {s["step"] for s in json.loads(out)["kinds"].values()} == {10}


@pytest.mark.parametrize(("locale", "lang"), [("id_ID.UTF-8", "id"), ("en_GB.UTF-8", "en"), ("C.UTF-8", "id")])
def test_the_text_follows_the_locale(upload_file, monkeypatch, locale, lang):
    for var in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", locale)
    code, out, _ = run_cli("report", str(upload_file))
    assert code == 0 and out.startswith(i18n.text(lang, "report.title", file="my run.npz"))


def test_python_m_lensa_runs_without_streamlit_plotly_or_torch(upload_file):
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['lensa', 'report', {str(upload_file)!r}, '--json']\n"
        "try:\n    runpy.run_module('lensa', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "heavy = sorted(m for m in ('streamlit', 'plotly', 'torch') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["schema"] == "lensa-report"


def test_per_layer_recipe_shares_are_the_records_and_blockscale_s():
    from lensa import blockscale

    x = np.random.default_rng(22).standard_normal((48, 80)).astype(np.float32) * np.float32(1e-3)
    run = RunStats({"arm": "fp32"})
    run.add("weight_grad", "fc.weight", 1, summarize(x, recipes=True))
    run.add("weight_grad", "old.weight", 1, summarize(x))  # a record without them
    doc = R.build(run)
    layers = {layer["name"]: layer for layer in doc["kinds"]["weight_grad"]["layers"]}
    assert layers["old.weight"]["recipes"] is None and doc["kinds"]["weight_grad"]["all"]["recipes"] is None
    for key in blockscale.RECIPES:
        want = blockscale.lost(x, key)
        got = layers["fc.weight"]["recipes"][key]
        assert (got["flushed"], got["saturated"], got["sqnr_db"]) == (want.flushed, want.saturated, want.sqnr_db)
    json.dumps(doc, allow_nan=False)
