"""Install the torch build this machine needs, at the version requirements.txt pins (standard library only).

    .venv/bin/python scripts/install_torch.py        # what `make run`, `make test` and `make torch` call

PyPI's torch for Linux is the CUDA build (several GB with its nvidia-* packages); a machine without an NVIDIA
GPU needs only the CPU build (about 190 MB) from PyTorch's CPU index. The choice, in this order:

1. ``TORCH_INDEX_URL`` set (and not empty): torch from that index, whatever the machine has.
2. ``nvidia-smi -L`` lists a GPU: the default build from the configured index (PyPI's torch: CUDA).
3. not Linux (macOS, Windows): PyPI's torch, which is already the CPU (or Apple MPS) build there.
4. otherwise the CPU index (:data:`CPU_INDEX`) when it answers within :data:`PROBE_TIMEOUT_S` seconds;
   when it does not (a closed network, a company mirror only), the configured index, after saying so.

It prints one line with the build chosen and why, then runs ``python -m pip install torch==X`` with this
interpreter. The pin comes from requirements.txt (the only place versions are written); a pin such as
``torch==2.13.0`` is satisfied by the CPU index's ``2.13.0+cpu``, so ``pip install -r requirements.txt``
afterwards leaves it alone. Nothing is installed when the pinned version is already there.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 4.0
# pip's own network settings once the CPU index has answered: a hiccup there fails fast and falls back.
PIP_FAST_FAIL = ["--timeout", "15", "--retries", "1"]


def torch_requirement(requirements: Path = REQUIREMENTS) -> str:
    """The torch line of requirements.txt, e.g. ``torch==2.13.0`` (comments and spaces dropped)."""
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if re.match(r"^torch\s*(==|~=|>=|<=|<|>|!=)", line):
            return re.sub(r"\s+", "", line)
    raise SystemExit(f"{requirements} pins no torch version")


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def satisfied(requirement: str, version: str | None) -> bool:
    """Whether ``version`` (``2.13.0+cpu``) meets an exact pin (``torch==2.13.0``); other pins: reinstall."""
    if version is None or not requirement.startswith("torch=="):
        return False
    return version.split("+", 1)[0] == requirement.removeprefix("torch==")


def nvidia_gpu() -> str | None:
    """The first line ``nvidia-smi -L`` prints (``GPU 0: NVIDIA H100 ...``), or None without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    return lines[0].strip() if out.returncode == 0 and lines else None


def reachable(index: str, timeout: float | None = None) -> tuple[bool, str]:
    """Whether ``index``'s torch page answers within ``timeout`` s (:data:`PROBE_TIMEOUT_S`), and what happened."""
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    start = time.monotonic()
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout) as response:
            ok = 200 <= response.status < 300
            detail = f"HTTP {response.status}"
    except Exception as exc:  # DNS, refused, TLS, timeout, an HTTP error: each means "not usable"
        ok, detail = False, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
    return ok, f"{detail} after {time.monotonic() - start:.1f} s"


def choose(environ: dict[str, str] | None = None) -> tuple[list[str], str]:
    """pip's index arguments and the reason, as described at the top of this file."""
    environ = os.environ if environ is None else environ
    override = environ.get("TORCH_INDEX_URL", "").strip()
    if override:
        return ["--index-url", override], f"from TORCH_INDEX_URL={override}"
    gpu = nvidia_gpu()
    if gpu:
        return [], f"the default (CUDA) build from the configured index: nvidia-smi -L found {gpu}"
    if not sys.platform.startswith("linux"):
        return [], f"the configured index's build: on {sys.platform} PyPI's torch is not a CUDA build"
    ok, detail = reachable(CPU_INDEX)
    if ok:
        return ["--index-url", CPU_INDEX, *PIP_FAST_FAIL], f"the CPU build from {CPU_INDEX}: no NVIDIA GPU here"
    return [], (
        f"the configured index's build: no NVIDIA GPU here, but {CPU_INDEX} did not answer ({detail}); "
        "on Linux, PyPI's torch is the CUDA build, several GB (set TORCH_INDEX_URL to a CPU mirror to avoid it)"
    )


def main() -> int:
    requirement = torch_requirement()
    version = installed_version()
    if satisfied(requirement, version):
        print(f"torch: {version} is installed, which meets {requirement}; nothing to do")
        return 0
    index_args, reason = choose()
    print(f"torch: installing {requirement}, {reason}", flush=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", *index_args, requirement]
    result = subprocess.run(pip, check=False)
    if result.returncode != 0 and index_args and "TORCH_INDEX_URL" not in reason:
        print(f"torch: {CPU_INDEX} failed during the download; trying the configured index", flush=True)
        result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], check=False)
    if result.returncode == 0:
        print(f"torch: {installed_version()} installed")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
