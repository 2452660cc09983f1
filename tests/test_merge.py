"""``python -m lensa merge``: the per-rank files of one run become one file; files that cannot be the ranks of one
run are refused (exit code 2, one line on stderr, no file written).

A file keeps no rank number and no run id, so the checks read what the ranks of one run share
(:func:`lensa.runstats.check_one_run`); the files the Recorder's ranks record under DDP and FSDP2 (torchrun, two
ranks, each its own batch) still merge, into the very file ``Recorder.save`` writes from them.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from lensa.__main__ import main
from lensa.runstats import NotOneRunError, RunStats, check_one_run, load, merge_ranks, summarize
from lensa.ui import i18n

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def refused(tmp_path: Path, *names: str, lang: str = "en") -> str:
    """``lensa merge`` of ``names`` (in ``tmp_path``): refused as not one run, nothing written; its one line."""
    target = tmp_path / "refused.npz"
    code, out, err = run_cli("merge", str(target), *(str(tmp_path / n) for n in names), "--lang", lang)
    assert code == 2 and out == "" and not target.exists(), (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    lead = i18n.text(lang, "report.not_one_run", name=str(target), why="").split("“")[0]
    assert err.startswith(lead), err
    return err


def _vec(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


def part(
    seed: int,
    *,
    weights: dict[str, int] | None = None,
    acts: dict[str, int] | None = None,
    steps: tuple[int, ...] = (1, 2),
    trained: int = 2,
    meta: dict | None = None,
    act_dtype: str | None = None,
) -> RunStats:
    """One rank's file as the Recorder writes it: rank 0's holds the weights (``weights``: name -> size), every
    rank its own activations (``acts``); a loss at every trained step, records at ``steps``."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    run = RunStats(meta or {})
    for step in steps:
        for name, size in (weights or {}).items():
            run.add("weight", name, step, summarize(np.random.default_rng(step).standard_normal(size)))
        for name, size in (acts or {}).items():
            stats = summarize(_vec(rng, size))
            run.add("activation", name, step, replace(stats, dtype=act_dtype) if act_dtype else stats)
    for step in range(1, trained + 1):
        run.record_step(step, float(rng.uniform(1, 2)))
    return run


def save(tmp_path: Path, **runs: RunStats) -> None:
    for name, run in runs.items():
        run.save(tmp_path / f"{name}.npz")


RANKS = {"ranks": 2}
W = {"0.weight": 64, "0.bias": 8}


def test_per_rank_files_of_one_run_merge(tmp_path):
    """Rank 0 with the weights and its activations, rank 1 with its own activations (its own batch: another loss,
    another size): merged, as before."""
    r0 = part(0, weights=W, acts={"0": 32, "1": 32}, meta=RANKS)
    r1 = part(1, acts={"0": 24, "1": 24}, meta=RANKS)
    save(tmp_path, rank0=r0, rank1=r1)
    code, out, err = run_cli(
        "merge", str(tmp_path / "one.npz"), str(tmp_path / "rank0.npz"), str(tmp_path / "rank1.npz")
    )
    assert code == 0 and err == "" and "2 files merged" in out
    assert load(tmp_path / "one.npz") == merge_ranks([r0, r1])
    check_one_run([r0, r1])  # the function itself
    folder = tmp_path / "ranks"
    folder.mkdir()
    save(folder, rank0=r0, rank1=r1)
    assert run_cli("merge", str(tmp_path / "two.npz"), str(folder))[0] == 0  # a folder of them
    assert run_cli("merge", str(tmp_path / "three.npz"), str(tmp_path / "rank0.npz"))[0] == 0  # one file


def test_unrelated_models_are_refused(tmp_path):
    """Two whole runs (each file holds its weights): other parameter sizes, other parameter names, or the same
    model with other values: never one run, whose ranks hold the same weights."""
    save(
        tmp_path,
        small=part(0, weights={"0.weight": 64}, acts={"0": 16}),
        big=part(1, weights={"0.weight": 256}, acts={"0": 16}),
        other=part(2, weights={"fc.weight": 64}, acts={"fc": 16}),
    )
    err = refused(tmp_path, "small.npz", "big.npz")
    assert "“0.weight” among the weights at step 1 as 64 values, and “" in err and "as 256." in err
    err = refused(tmp_path, "small.npz", "other.npz")
    assert "only “" in err and "0.weight" in err
    # the same names and sizes, other values: another run of the same model
    twin = RunStats()
    for (kind, name, step), stats in part(0, weights={"0.weight": 64}, acts={"0": 16}).items():
        values = np.random.default_rng(99).standard_normal(64) if kind == "weight" else None
        twin.add(kind, name, step, summarize(values) if values is not None else stats)
    for step, loss in part(0, weights={"0.weight": 64}).losses().items():
        twin.record_step(step, loss)
    save(tmp_path, twin=twin)
    err = refused(tmp_path, "small.npz", "twin.npz")
    assert "different values of “0.weight”" in err


def test_unrelated_recorder_runs_are_refused(tmp_path):
    """The audit's case, recorded: two single-process runs of different models merge no more."""
    torch = pytest.importorskip("torch")
    from lensa.live.capture import Recorder

    def record(width: int, path: Path) -> None:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        with Recorder(model, opt, steps=[1, 2], background=False) as rec:
            for _ in range(2):
                opt.zero_grad()
                model(torch.randn(8, width)).pow(2).mean().backward()
                opt.step()
                rec.step()
        rec.save(path)

    record(8, tmp_path / "a.npz")
    record(16, tmp_path / "b.npz")
    err = refused(tmp_path, "a.npz", "b.npz")
    assert "holds “0.weight” among the weights at step 1 as 64 values, and “" in err and "as 256." in err, err


def test_mismatched_steps_are_refused(tmp_path):
    """Every rank records a loss at every step and tensors at the same steps."""
    save(
        tmp_path,
        r0=part(0, weights=W, acts={"0": 8}, steps=(1, 2, 4), trained=4),
        longer=part(1, acts={"0": 8}, steps=(1, 2, 4), trained=8),
        other=part(2, acts={"0": 8}, steps=(1, 3, 4), trained=4),
    )
    err = refused(tmp_path, "r0.npz", "longer.npz")
    assert "has a loss at step 5" in err and "every rank records every step's loss" in err
    err = refused(tmp_path, "r0.npz", "other.npz")
    assert "recorded tensors at step 2" in err and "r0.npz" in err
    err = refused(tmp_path, "r0.npz", "other.npz", lang="id")
    assert "merekam tensor pada langkah 2" in err
    with pytest.raises(NotOneRunError) as e:
        check_one_run([load(tmp_path / "r0.npz"), load(tmp_path / "other.npz")])
    assert e.value.reason == "recorded" and e.value.parts == (0, 1) and e.value.values == {"step": 2}


def test_a_file_twice_is_refused(tmp_path):
    """A file keeps no rank number, so nothing says which rank wrote it; but a rank records its own batch, so one
    file named twice, or two files holding the same records, are one rank's part twice: its activations would
    count twice."""
    save(tmp_path, rank0=part(0, weights=W, acts={"0": 8}, meta=RANKS), rank1=part(1, acts={"0": 8}, meta=RANKS))
    assert "is named twice" in refused(tmp_path, "rank1.npz", "rank1.npz")
    shutil.copy(tmp_path / "rank1.npz", tmp_path / "copy.npz")
    err = refused(tmp_path, "rank1.npz", "copy.npz")
    assert "hold the same records" in err
    assert "disebut dua kali" in refused(tmp_path, "rank0.npz", "rank0.npz", lang="id")


def test_ranks_arms_and_types_must_agree(tmp_path):
    save(
        tmp_path,
        r0=part(0, weights=W, acts={"0": 8}, meta=RANKS),
        r1=part(1, acts={"0": 8}, meta=RANKS),
        r2=part(2, acts={"0": 8}, meta=RANKS),
        four=part(3, acts={"0": 8}, meta={"ranks": 4}),
        alone=part(4, acts={"0": 8}),
        fp16=part(5, weights=W, acts={"0": 8}, meta={"arm": "fp16"}),
        bf16=part(6, acts={"0": 8}, meta={"arm": "bf16"}),
        half=part(7, acts={"0": 8}, meta=RANKS, act_dtype="float16"),
        bhalf=part(8, weights=W, acts={"0": 8}, meta=RANKS, act_dtype="bfloat16"),
    )
    assert "there are 3 of them and the run had 2 ranks" in refused(tmp_path, "r0.npz", "r1.npz", "r2.npz")
    assert "was recorded on 2 ranks and “" in refused(tmp_path, "r0.npz", "four.npz")
    assert "in one process, a whole run" in refused(tmp_path, "r0.npz", "alone.npz")
    assert "of the arm “fp16”" in refused(tmp_path, "fp16.npz", "bf16.npz")
    err = refused(tmp_path, "bhalf.npz", "half.npz")
    assert "in BF16, and “" in err and "in FP16" in err


def test_the_recorders_per_rank_files_under_ddp_and_fsdp2_merge_into_the_recorders_own_file(tmp_path):
    """Two ranks (gloo, CPU), each its own batch (tests/distributed_recording.py with a folder for the parts); each
    saves its own part (``Recorder.stats()``) and ``Recorder.save`` writes the run. ``lensa merge`` of the parts
    passes every check and writes that same run, for DDP and for FSDP2 (sharded weights, which rank 0 alone
    records); a part twice, or a third file, is refused."""
    pytest.importorskip("torch")
    from tests.test_capture import torchrun

    for mode in ("ddp", "fsdp"):
        out = tmp_path / mode
        out.mkdir()
        reported = torchrun(
            ROOT / "tests" / "distributed_recording.py", mode, str(out / "recorder.npz"), str(out), timeout=240
        )
        assert sorted(r["rank"] for r in reported) == [0, 1]
        r0, r1 = load(out / "rank0.npz"), load(out / "rank1.npz")
        assert r0.kinds() != r1.kinds() and r1.kinds() == ["activation_grad", "activation"]  # rank 0 has weights
        assert r0.losses() != r1.losses()  # each rank its own batch: losses are not compared
        code, _, err = run_cli("merge", str(out / "merged.npz"), str(out / "rank0.npz"), str(out / "rank1.npz"))
        assert code == 0 and err == "", (mode, err)
        assert load(out / "merged.npz") == load(out / "recorder.npz"), mode
        refused(out, "rank0.npz", "rank1.npz", "rank1.npz")
        shutil.copy(out / "rank1.npz", out / "copy.npz")
        refused(out, "rank0.npz", "rank1.npz", "copy.npz")  # three files of a run of two ranks
