"""``python -m lensa report``: the pages' numbers for a recorded run, as text, JSON and a CI check.

The pages' side is read through AppTest from the same uploaded bytes; the check's numbers are worked out by hand
from the formats' definitions (FP16's smallest subnormal 2**-24, largest finite 65,504; FP8 E4M3's 2**-9, 448).
"""

from __future__ import annotations

import html
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from lensa.__main__ import main
from lensa.runstats import KINDS, RunStats, RunStatsError, load, measured, summarize, summarize_update
from lensa.runstats import report as R
from lensa.ui import i18n
from tests.pagetools import APP, metrics
from tests.runfixtures import upload_bytes

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _a_terminal_of_100_columns(monkeypatch):
    """The report fits the terminal's width: these tests read it at the width of no terminal (100), wherever
    pytest runs (an xdist worker may see another)."""
    monkeypatch.setenv("COLUMNS", "100")


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


def _pcts(shares, lang="en"):
    """A format's zones, written together as the cards write them (adding up to 100%)."""
    return i18n.percents(shares, lang)


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
    written = _pcts(fp16)
    assert m[T("fp16_range.metric_zero")] == written["zero"]
    assert m[T("fp16_range.metric_subnormal")] == written["subnormal"]
    assert m[T("fp16_range.metric_normal")] == written["normal"]
    assert m[T("fp16_range_data.metric_overflow")] == written["overflow"]
    fp16_row = next(line for line in text.splitlines() if line.split()[:1] == ["FP16"])
    assert fp16_row.split()[1:4] == [written["zero"], written["subnormal"], written["overflow"]]  # the report's

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
    assert doc["schema"] == "lensa-report" and doc["version"] == 2
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


@pytest.mark.parametrize(
    ("locale", "lang"), [("id_ID.UTF-8", "id"), ("en_GB.UTF-8", "en"), ("C.UTF-8", "en"), ("", "en"), ("id", "id")]
)
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
    from lensa.numerics import blockscale

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


# --- the terminal: a pipe, a language, a width, words that read right ---------------------------------------------


@pytest.mark.parametrize("check", [None, "fp8_e4m3"])
def test_piping_into_head_ends_quietly_with_the_checks_exit_code(upload_file, check):
    """``lensa report RUN | head``: the reader goes after a line; no BrokenPipeError traceback, and the exit code is
    the check's (1 for a failed one), not 1 for a crash."""
    args = [sys.executable, "-m", "lensa", "report", str(upload_file), *(["--check", check] if check else [])]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does once it has its lines
    code = proc.wait(timeout=120)
    stderr = proc.stderr.read().decode()
    assert first.startswith(b"Lensa report") and "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert code == (0 if check is None else 1)


def _env(**extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "COLUMNS")}
    return {**env, "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8", **extra}


@pytest.mark.parametrize("width", [60, 100, 160])
def test_the_text_fits_the_terminals_width_and_wraps_long_lists(upload_file, width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))  # what shutil.get_terminal_size reads first
    code, out, _ = run_cli("report", str(upload_file), "--lang", "en")
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width, max(lines, key=len)
    layer = i18n.text("en", "data.col_layer")
    tables = [line for line in lines if line.strip().startswith(layer)]
    assert len(tables) >= (3 if width == 60 else 1)  # cut into narrower tables, the layer column in each
    assert run_cli("report", str(upload_file), "--lang", "en", "--width", "60")[1] == (
        out if width == 60 else run_cli("report", str(upload_file), "--lang", "en", "--width", "60")[1]
    )


def test_the_wording_reads_right():
    """One loss scale that does both is said once ("S = 2^k", not "from 2^k to 2^k"); one failed share is one; a file
    with no arm names says nothing of arms."""
    run = RunStats()
    # Both values must stay (one of two is past 0.1%): 2^-20 x S >= 2^-24, FP16's smallest subnormal, needs S >= 2^-4;
    # 2^19 x S <= 2^15 (65,504 is below 2^16) needs S <= 2^-4. One scale, S = 2^-4, does both.
    grads = np.array([2.0**-20, 2.0**19], np.float32)
    run.add("weight_grad", "w", 1, summarize(grads))
    b = R.build(run)["loss_scale"]["weight_grad"]
    assert b["keep_k"] == b["safe_k"] == -4
    _, out, _ = run_cli_run(run, "--lang", "en", "--check", "fp16", "--no-loss-scale", "--threshold", "0")
    keep = i18n.power_of_two(b["keep_k"])
    out = " ".join(out.split())  # the text wraps to the terminal's width
    assert f"S = {keep}: that one scale does both" in out and f"from {keep} to {keep}" not in out
    assert "1 checked share is above" in out and "shares are above" not in out
    assert "arm" not in out.lower()


def run_cli_run(run: RunStats, *args: str) -> tuple[int, str, str]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.npz"
        run.save(path)
        return run_cli("report", str(path), *args)


# --- FP8 as trained, block recipes, and what a narrow recording cannot say ----------------------------------------


def test_fp8s_verdict_is_the_scaled_one_and_the_raw_cast_is_named():
    """One tensor of 1e-6 gradients: the raw cast rounds them all to 0 in FP8 E4M3 (its smallest subnormal is
    2^-9), one power-of-two scale per tensor (2^24: 1e-6 x 2^24 = 16.8, under 448; 2^29 would pass it) keeps them."""
    run = RunStats()
    run.add("weight_grad", "w", 1, summarize(np.full(64, 1e-6, np.float32)))
    raw = R.check(run, "fp8_e4m3", loss_scaling=False)
    scaled = R.check(run, "fp8_e4m3")
    assert raw.items[0].how == "raw" and raw.items[0].share == 1.0 and not raw.passed
    assert scaled.items[0].how == "per_tensor" and scaled.items[0].share == 0 and scaled.passed
    doc = R.build(run)
    assert doc["kinds"]["weight_grad"]["fp8_scaled"]["fp8_e4m3"]["zero"] == 0
    code, out, _ = run_cli_run(run, "--lang", "en", "--check", "fp8_e4m3")
    assert code == 0 and "FP8 E4M3 raw cast" in out and "FP8 E4M3 × scale per tensor" in out
    assert run_cli_run(run, "--check", "fp8_e4m3", "--no-loss-scale")[0] == 1


def test_check_takes_any_block_recipe_and_counts_it_over_the_layers():
    from lensa.numerics import blockscale

    rng = np.random.default_rng(9)
    a = (rng.standard_normal((32, 64)) * np.exp(rng.uniform(-9, 0, (32, 64)))).astype(np.float32)
    b = (rng.standard_normal((16, 32)) * 1e-3).astype(np.float32)
    run = RunStats()
    run.add("activation", "a", 1, summarize(a, recipes=True))
    run.add("activation", "b", 1, summarize(b, recipes=True))
    for key in blockscale.RECIPES:
        la, lb = blockscale.lost(a, key), blockscale.lost(b, key)
        flushed = (round(la.flushed * np.count_nonzero(a)) + round(lb.flushed * np.count_nonzero(b))) / (
            a.size + b.size
        )
        saturated = (la.saturated * a.size + lb.saturated * b.size) / (a.size + b.size)
        item = R.check(run, key, kinds=["activation"]).items[0]
        assert item.share == pytest.approx(flushed + saturated, abs=1e-15), key
        assert item.sqnr_db == min(la.sqnr_db, lb.sqnr_db), key
        code, out, _ = run_cli_run(run, "--lang", "en", "--check", key, "--kinds", "activation", "--threshold", "1")
        assert code == (0 if item.sqnr_db >= R.DEFAULT_MIN_SQNR_DB else 1), key
        assert f"({key})" in out
    plain = RunStats()
    plain.add("activation", "a", 1, summarize(a))
    code, _, err = run_cli_run(plain, "--check", "nvfp4", "--lang", "en")
    assert code == 2 and "recipes=True" in err


def test_a_narrow_recording_says_its_columns_are_trivial():
    from dataclasses import replace

    run = RunStats()
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    stored = x.astype(np.float16).astype(np.float32)  # the values an FP16 autocast activation holds
    run.add("activation", "fc", 1, replace(summarize(stored), dtype="float16"))
    doc = R.build(run)
    assert doc["kinds"]["activation"]["dtypes"] == ["float16"] and doc["kinds"]["activation"]["trivial"] == ["fp16"]
    item = R.check(run, "fp16", kinds=["activation"]).items[0]
    assert item.trivial and item.share == 0
    _, out, _ = run_cli_run(run, "--lang", "en", "--check", "fp16", "--kinds", "activation")
    flat = " ".join(out.split())
    assert "These tensors were FP16 when recorded, and every FP16 value is exact in FP16" in flat
    assert "Only a recording in FP32" in flat and "0 by construction" in flat
    mark = i18n.text("en", "report.trivial_row", fmt="FP16", mark=i18n.text("en", "report.trivial_mark"))
    assert mark in _format_rows(out, "Activations")  # its row says so, not a bare 0%
    assert "FP16 hold" not in out  # "FP16 hold every FP16 value": a plural verb for one format


def test_a_pure_bf16_run_is_reported_as_losing_its_updates(tmp_path):
    """The run the issue found called safe: model.to(bfloat16), SGD at lr 1e-3. The report says BF16 loses about
    99% of its updates and the CI check on updates fails."""
    torch = pytest.importorskip("torch")
    from lensa.live.capture import Recorder

    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)
    with Recorder(model, opt, steps=[1], background=False) as rec:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        rec.step(loss=loss)
    rec.save(tmp_path / "bf16.npz")
    doc = R.build(load(tmp_path / "bf16.npz"))
    assert doc["updates"]["intended"] and doc["updates"]["lost"]["bf16"] > 0.97
    code, out, _ = run_cli("report", str(tmp_path / "bf16.npz"), "--lang", "en", "--check", "bf16", "--kinds", "update")
    assert code == 1 and "the one the optimizer meant to make" in out
    assert "These tensors were BF16 when recorded" in out  # the weights: BF16 "in BF16" is trivially 0%
    # The updates' own table: BF16's row holds each update alone (its 0% to 0 is BF16's range), never a bare 0%
    # above the ~99% a BF16 weight loses; the sentence under it gives that share.
    rows = _format_rows(out, "Updates (what each step adds to a weight)")
    assert "BF16, the update alone" in rows and "BF16" not in rows and rows["BF16, the update alone"][0] == "0%"
    lost = _pct(doc["updates"]["lost"]["bf16"])
    assert f"A weight held in BF16 loses {lost} of these updates" in " ".join(out.split())
    assert "BF16, exact by construction" in _format_rows(out, "Weights")
    _, out, _ = run_cli("report", str(tmp_path / "bf16.npz"), "--lang", "id")
    assert "BF16, update saja" in _format_rows(out, "Update (yang ditambahkan setiap langkah ke weight)")
    assert f"Weight yang disimpan dalam BF16 kehilangan {i18n.percent(doc['updates']['lost']['bf16'], 'id')}" in (
        " ".join(out.split())
    )
    assert "BF16, persis dengan sendirinya" in _format_rows(out, "Weight")


def _format_rows(out: str, kind: str) -> dict[str, list[str]]:
    """The rows of the format table under ``kind``'s heading: each label (up to the first two spaces), its cells."""
    rows = {}
    for line in out.split(f"\n{kind}, ", 1)[1].splitlines()[3:]:
        label, _, cells = line[2:].partition("  ")
        if not line.startswith("  ") or not cells.strip():
            break  # the sentences under the table
        rows[label] = cells.split()
    return rows


def test_updates_of_narrow_weights_read_as_after_minus_before_say_what_they_hide():
    """Where the updates of BF16 weights are after − before (the Recorder could not replay the optimizer's step),
    every update such a weight rounded away is 0 and not counted: BF16's column of lost updates is 0% by
    construction, and the report says so in both languages."""
    from dataclasses import replace

    w = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    before = w.astype(np.float32)
    after = before + np.float32(1e-2)
    as_bf16 = lambda x: (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)  # noqa: E731  # BF16 values
    run = RunStats()
    run.add("update", "fc.weight", 1, replace(summarize_update(as_bf16(before), as_bf16(after)), dtype="bfloat16"))
    doc = R.build(run)
    assert not doc["updates"]["intended"] and doc["updates"]["lost"]["bf16"] == 0
    _, out, _ = run_cli_run(run, "--lang", "en")
    flat = " ".join(out.split())
    assert "BF16, the update alone" in _format_rows(out, "Updates (what each step adds to a weight)")
    assert "the columns of BF16 are 0% by construction" in flat and "A weight held in" not in flat
    _, out, _ = run_cli_run(run, "--lang", "id")
    assert "kolom BF16 0% dengan sendirinya" in " ".join(out.split())


# --- several files, a folder, merging, HTML ---------------------------------------------------------------------


def test_several_files_or_a_folder_are_the_arms_of_one_run(tmp_path):
    from tests.runfixtures import reference_arms

    folder = tmp_path / "arms"
    folder.mkdir()
    for arm, run in reference_arms().items():
        run.save(folder / f"{arm}.npz")
    together = run_cli("report", str(folder / "fp32.npz"), str(folder / "fp16.npz"), "--json")
    assert together[0] == 0 and json.loads(together[1])["arms"] == ["fp32", "fp16"]
    code, out, _ = run_cli("report", str(folder), "--json")
    assert code == 0 and sorted(json.loads(out)["arms"]) == ["fp16", "fp32"]
    assert json.loads(out)["scaler_history"] == json.loads(together[1])["scaler_history"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli("report", str(empty), "--lang", "en")
    assert code == 2 and "holds no .npz files" in err


def test_merge_makes_one_run_of_per_rank_files(tmp_path):
    rng = np.random.default_rng(4)
    parts = []
    for rank in range(2):
        run = RunStats({"arm": "fp32"})
        if rank == 0:
            run.add("weight", "w", 1, summarize(rng.standard_normal(8).astype(np.float32)))
        run.add("activation", "a", 1, summarize(rng.standard_normal(16).astype(np.float32)))
        run.record_step(1, 1.0 + rank)
        run.save(tmp_path / f"rank{rank}.npz")
        parts.append(run)
    code, out, _ = run_cli("merge", str(tmp_path / "one.npz"), str(tmp_path / "rank0.npz"), str(tmp_path / "rank1.npz"))
    assert code == 0 and "2 files merged" in out
    one = load(tmp_path / "one.npz")
    assert one == R_merge(parts) and one.losses() == {1: 1.5} and one.get("activation", "a", 1).size == 32
    code, _, err = run_cli("merge", str(tmp_path / "x.npz"), str(tmp_path / "missing.npz"))
    assert code == 2 and "missing.npz" in err


def R_merge(parts):
    from lensa.runstats import merge_ranks

    return merge_ranks(parts)


def test_html_is_one_self_contained_file_with_the_lessons_charts(upload_file, tmp_path):
    out_path = tmp_path / "report.html"
    code, out, _ = run_cli("report", str(upload_file), "--html", str(out_path), "--lang", "en")
    assert code == 0 and str(out_path) in out
    page = out_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and '<html lang="en">' in page
    assert "<script src=" not in page and 'src="http' not in page  # plotly.js is inside: nothing to fetch
    assert page.count('class="plotly-graph-div"') >= 8 and "Plotly.newPlot" in page
    for title in ("fp16_range", "loss_scaling", "master_weights", "bf16"):
        assert f"<h2>{html.escape(i18n.text('en', f'nav.{title}'))}</h2>" in page
    assert i18n.text("en", "figure.table") in page and "Lensa report: my run.npz" in page
    code, _, _ = run_cli("report", str(upload_file), "--html", str(tmp_path / "id.html"), "--lang", "id")
    assert code == 0 and '<html lang="id">' in (tmp_path / "id.html").read_text()


def test_the_pages_say_when_a_column_is_trivial_and_when_updates_are_intended():
    """A file of a pure-BF16 run with FP16 activations (file version 3): step 2's caption says FP16 loses nothing of
    FP16 values by construction; step 4's says the updates are the optimizer's intended ones, and its FP32 card
    counts what an FP32 weight would lose of them."""
    from dataclasses import replace

    rng = np.random.default_rng(2)
    w = rng.standard_normal(512).astype(np.float32).astype(np.float16).astype(np.float32)
    u = (rng.standard_normal(512) * 1e-4).astype(np.float32)
    u[:3] = 2.0**-40  # lost by an FP32 weight too
    run = RunStats()
    run.add("activation", "fc", 1, replace(summarize(w), dtype="float16"))
    run.add("update", "fc.weight", 1, replace(R_intended(w, u), dtype="bfloat16"))
    run.record_step(1, 1.0)
    content = run.to_bytes()
    at = _visit("fp16_range", content, kind="activation")
    captions = " ".join(c.value for c in at.caption)
    assert i18n.text("en", "data.trivial_note", dtypes="FP16", formats="FP16") in captions
    at = _visit("master_weights", content)
    captions = " ".join(c.value for c in at.caption)
    assert i18n.text("en", "data.intended_note", dtypes="BF16") in captions
    assert metrics(at)[T("master_weights_data.metric_master")] == _pct(3 / 512)


def R_intended(w, u):
    from lensa.runstats import summarize_intended

    return summarize_intended(w, u)
