"""scripts/install_torch.py picks the torch build a machine needs, and a silent CPU index costs only seconds."""

from __future__ import annotations

import importlib.util
import socket
import stat
import sys
import time

import pytest

from tests.pagetools import ROOT

_spec = importlib.util.spec_from_file_location("install_torch", ROOT / "scripts" / "install_torch.py")
install_torch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_torch)


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on PATH
    monkeypatch.setattr(sys, "platform", "linux")


def fake_nvidia_smi(directory, output: str, code: int = 0) -> None:
    tool = directory / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_the_pin_comes_from_requirements_txt_and_a_local_label_meets_it():
    assert install_torch.torch_requirement().startswith("torch==")
    assert install_torch.satisfied("torch==2.13.0", "2.13.0+cpu")
    assert install_torch.satisfied("torch==2.13.0", "2.13.0")
    assert not install_torch.satisfied("torch==2.13.0", "2.12.1+cpu")
    assert not install_torch.satisfied("torch==2.13.0", None)


def test_torch_index_url_wins_even_with_a_gpu(monkeypatch, tmp_path):
    fake_nvidia_smi(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-x)")
    monkeypatch.setenv("PATH", str(tmp_path))
    args, reason = install_torch.choose({"TORCH_INDEX_URL": "https://mirror.example/whl/cu126"})
    assert args == ["--index-url", "https://mirror.example/whl/cu126"]
    assert "TORCH_INDEX_URL" in reason


def test_a_gpu_gets_the_default_cuda_build(monkeypatch, tmp_path):
    fake_nvidia_smi(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-x)")
    monkeypatch.setenv("PATH", str(tmp_path))
    args, reason = install_torch.choose({})
    assert args == []
    assert "CUDA" in reason and "NVIDIA H200" in reason


def test_nvidia_smi_without_a_gpu_counts_as_none(monkeypatch, tmp_path):
    fake_nvidia_smi(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert install_torch.nvidia_gpu() is None


def test_no_gpu_and_a_reachable_cpu_index_gets_the_cpu_build(no_gpu, monkeypatch):
    monkeypatch.setattr(install_torch, "reachable", lambda index: (True, "HTTP 200 after 0.1 s"))
    args, reason = install_torch.choose({})
    assert args[:2] == ["--index-url", install_torch.CPU_INDEX]
    assert "CPU build" in reason


def test_a_silent_cpu_index_falls_back_within_the_probe_timeout(no_gpu, monkeypatch):
    # A server that accepts the connection and never answers: the slowest way for an index to be unreachable.
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setattr(install_torch, "CPU_INDEX", f"http://127.0.0.1:{server.getsockname()[1]}/whl/cpu")
        monkeypatch.setattr(install_torch, "PROBE_TIMEOUT_S", 1.0)
        start = time.monotonic()
        args, reason = install_torch.choose({})
        took = time.monotonic() - start
    assert args == []
    assert "did not answer" in reason and "TORCH_INDEX_URL" in reason
    assert took < 3.0


def test_an_empty_torch_index_url_means_automatic(no_gpu, monkeypatch):
    # The Makefile passes TORCH_INDEX_URL="$(TORCH_INDEX_URL)", empty unless the user sets it.
    assert "TORCH_INDEX_URL ?=\n" in (ROOT / "Makefile").read_text()
    monkeypatch.setattr(install_torch, "reachable", lambda index: (True, "HTTP 200 after 0.1 s"))
    args, reason = install_torch.choose({"TORCH_INDEX_URL": " "})
    assert args[:2] == ["--index-url", install_torch.CPU_INDEX]
    assert not reason.startswith("from TORCH_INDEX_URL")
