"""The README's "Your own run": its three ways to record and its report commands, run as written.

Each Python block runs unchanged with only the names a reader brings (a model, its data, ``total_steps``) set
beforehand, small and on the CPU; each ``lensa report`` line then runs on the file that block wrote.
"""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from lensa.__main__ import main
from lensa.runstats import KINDS, load
from tests.conftest import requires_torch

pytestmark = requires_torch
ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Your own run\n")
    return text[start : text.index("\n### ", start + 1)]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section(), flags=re.S)


def _python_block(marker: str) -> str:
    (block,) = [b for b in _blocks("python") if marker in b]
    return block


def _report_lines() -> list[list[str]]:
    lines = [line.split("#", 1)[0].strip() for b in _blocks("sh") for line in b.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("lensa report")]


def _run_reports(tmp_path: Path) -> None:
    commands = _report_lines()
    assert len(commands) >= 3 and any("--check" in c for c in commands) and any("--json" in c for c in commands)
    for argv in commands:
        code = main(argv[1:], out=io.StringIO(), err=io.StringIO())
        assert code in ((0, 1) if "--check" in argv else (0,)), argv  # a check may fail: that is its answer


def test_the_readme_shows_three_ways_and_the_report():
    assert len(_blocks("python")) == 3
    for marker in ("Recorder(", "huggingface import LensaCallback", "lightning import LensaCallback"):
        _python_block(marker)
    assert _report_lines()


def _check(path: Path) -> None:
    run = load(path.read_bytes())
    assert set(run.kinds()) <= set(KINDS) and run.names("weight_grad") and run.steps("weight_grad")


def test_the_hand_written_loop(tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    namespace = {
        "torch": torch,
        "model": model,
        "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3),
        "scaler": torch.amp.GradScaler("cpu"),
        "criterion": torch.nn.CrossEntropyLoss(),
        "x": torch.randn(32, 8),
        "y": torch.randint(0, 3, (32,)),
        "device": "cpu",
        "total_steps": 5,
    }
    exec(_python_block("Recorder("), namespace)
    path = tmp_path / "my_run.npz"
    _check(path)
    assert load(path).loss_scales()  # the GradScaler's history is in the file
    _run_reports(tmp_path)


def test_the_trainer_callback(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from tests.test_integrations import _gpt2, _Tokens

    monkeypatch.chdir(tmp_path)
    exec(_python_block("huggingface import"), {"model": _gpt2(), "train_dataset": _Tokens(), "total_steps": 3})
    _check(tmp_path / "my_run.npz")


def test_the_lightning_callback(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    from tests.test_integrations import _batches, _lightning_module

    monkeypatch.chdir(tmp_path)
    namespace = {"module": _lightning_module(), "train_loader": _batches(), "total_steps": 3}
    exec(_python_block("lightning import"), namespace)
    _check(tmp_path / "my_run.npz")
    _run_reports(tmp_path)
