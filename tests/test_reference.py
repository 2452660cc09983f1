"""The shipped reference run (lensa/data) and its recipe (lensa.live.reference), read through lensa.reference."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from lensa import reference as ref
from lensa import runstats as R
from tests.conftest import requires_torch

ROOT = Path(__file__).resolve().parents[1]


def test_loader_does_not_import_torch():
    code = (
        "import sys, lensa.reference as r\nr.load_reference(); r.reference_recipe()\n"
        "assert 'torch' not in sys.modules\nprint('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_shipped_files_load_and_are_small():
    total = 0
    for arm in ref.REFERENCE_ARMS:
        path = ref.reference_path(arm)
        total += path.stat().st_size
        run = R.load(path)
        assert run.meta["arm"] == arm
        assert run.meta["text_bytes"] > 50_000 and len(run.meta["text_sha256"]) == 64
    assert total <= 2 * 1024 * 1024
    with pytest.raises(ValueError):
        ref.reference_path("bf16")


def test_the_frozen_corpus_is_the_text_the_shipped_runs_were_trained_on():
    """make reference-run trains on lensa/data/reference_corpus.txt, not on the catalogues, which keep changing:
    its bytes are the ones each shipped run recorded in its meta, so a rebuild gives the shipped files again."""
    import hashlib

    text = (ROOT / "lensa" / "data" / "reference_corpus.txt").read_bytes()
    for arm in ref.REFERENCE_ARMS:
        meta = R.load(ref.reference_path(arm)).meta
        assert meta["text_bytes"] == len(text)
        assert meta["text_sha256"] == hashlib.sha256(text).hexdigest()
    assert text.decode("utf-8").count("\n") > 1000  # every string of both catalogues, one per line at least


def test_shipped_runs_hold_every_kind_at_the_log_spaced_steps():
    recipe = ref.reference_recipe()
    assert set(recipe) == set(ref.RECIPE_FIELDS)
    assert recipe["init_scale"] == 2.0**16 and recipe["optimizer"] == "AdamW"
    fp32, fp16 = ref.load_reference()
    assert fp32.meta["recipe"] == fp16.meta["recipe"] == recipe
    steps = fp32.steps("weight")
    assert steps[0] == 1 and steps[-1] == recipe["steps"] and 8 <= len(steps) <= recipe["recorded_steps"] + 1
    for run in (fp32, fp16):
        assert run.kinds() == list(R.KINDS)
        for kind in R.KINDS:
            assert run.names(kind) == fp32.names(kind)
        assert "blocks.0.attn.qkv.weight" in run.names("weight_grad")
        assert "blocks.0.mlp.act" in run.names("activation_grad")
        assert sorted(run.losses()) == list(range(1, recipe["steps"] + 1))
    assert fp32.loss_scales() == {} and fp32.skipped_steps() == []
    first, last = fp32.losses()[1], fp32.losses()[recipe["steps"]]
    assert first == pytest.approx(5.545, abs=0.01)  # ln 256: uniform over the bytes
    assert last < first - 1.5  # it learned something


def test_fp16_scale_history_follows_gradscaler_rules():
    recipe = ref.reference_recipe()
    fp16 = ref.load_reference()[1]
    scales = fp16.loss_scales()
    skipped = set(fp16.skipped_steps())
    assert sorted(scales) == list(range(1, recipe["steps"] + 1))
    assert scales[1] == 2.0**16
    clean = 0
    for step in range(1, recipe["steps"]):
        nxt = scales[step + 1]
        if step in skipped:  # backoff: halved at the next step, and the growth count starts again
            assert nxt == scales[step] / 2, step
            clean = 0
        else:
            clean += 1
            grow = clean == recipe["growth_interval"]
            assert nxt == scales[step] * (2 if grow else 1), step
            if grow:
                clean = 0
    for step in skipped & set(fp16.steps("weight_grad")):  # an overflowed step's gradients, as they were
        grads = R.combine(fp16.get("weight_grad", n, step) for n in fp16.names("weight_grad"))
        assert grads.inf + grads.nan > 0


@requires_torch
def test_a_fresh_short_run_of_the_recipe_records_the_same_kinds_and_names():
    from lensa.live.reference import Recipe, run_arm

    assert {f.name for f in dataclasses.fields(Recipe)} == set(ref.RECIPE_FIELDS)
    shipped = ref.load_reference()
    short = dataclasses.replace(Recipe(), steps=3, recorded_steps=2)
    for arm, want in zip(("fp32", "fp16"), shipped, strict=True):
        run = run_arm(short, arm)
        assert run.kinds() == want.kinds()
        for kind in run.kinds():
            assert run.names(kind) == want.names(kind)
            assert run.steps(kind) == [1, 3]
        assert run.meta["recipe"]["steps"] == 3
        assert (run.loss_scales() != {}) == (arm == "fp16")
        # The warm-up's learning rates do not depend on the total, so the first steps repeat bit for bit, given
        # the same text (the catalogues change as the app does) and torch (other kernels may round differently).
        recipe = {**want.meta["recipe"], "steps": short.steps, "recorded_steps": short.recorded_steps}
        if run.meta["text_sha256"] == want.meta["text_sha256"] and run.meta["recipe"] == recipe:
            assert run.losses() == {s: want.losses()[s] for s in (1, 2, 3)}
            assert run.get("weight_grad", "tok.weight", 1) == want.get("weight_grad", "tok.weight", 1)
