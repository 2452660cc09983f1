"""Rerun every test that computes with torch's or numpy's CPU kernels under other kernel sets than this CPU's own.

    .venv/bin/python scripts/test_kernels.py [pytest args]        # what `make test-kernels` runs

torch and numpy pick their vector kernels per CPU when they load, so the same code sums in another order, and rounds
differently in the last bits, on an AVX2-only EPYC than on an AVX-512 Xeon. Both can be told to use fewer:

- torch: ``ATEN_CPU_CAPABILITY`` = ``default`` (no vector kernels), ``avx2``, ``avx512``. Each is asked for only
  where this CPU has it (``/proc/cpuinfo``'s flags, else ``lscpu``'s): torch would not run what the CPU lacks.
- numpy: ``NPY_DISABLE_CPU_FEATURES`` naming every target numpy dispatches to at run time (X86_V3, X86_V4, ... as
  this numpy reports them), so only its baseline (X86_V2 for numpy 2.4's x86-64 wheels) is left.
- numba (lensa.numerics.blockscale_dispatch's compiled pass): ``NUMBA_CPU_NAME=generic`` compiles for the baseline CPU
  of the architecture instead of this one (numba keeps the two in its cache apart).

Three sets, the first the least any x86-64 CPU has:

1. ``torch default + numpy baseline``: both libraries without vector kernels beyond their baseline, and numba
   compiling for the baseline CPU, every test marked ``torch_kernels`` or ``numpy_kernels`` (the oldest CPU's case,
   in one run instead of two);
2. ``torch avx2``, the tests marked ``torch_kernels``, where the CPU has AVX2 and FMA;
3. ``torch avx512``, the same, where the CPU has what ATen's AVX512 kernels need.

Sets 2 and 3 are skipped where torch picks that set by itself (``make test`` ran every test under it already).

tests/test_kernel_markers.py checks that every test file computing with those kernels carries its mark. Before each
set a fresh interpreter checks that it took effect (torch.backends.cpu.get_cpu_capability(), numpy's dispatched
targets, numba's CPU name), and the set fails if it did not. It prints what it runs, what it skips and why, and each
set's counts and time; it exits 1 when any set fails. A failure in set 1 is told apart by rerunning with one variable
only.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "NUMBA_CPU_NAME")
# The flags ATen's kernels of each capability need (aten/src/ATen/native/DispatchStub.cpp asks cpuinfo for these).
TORCH_NEEDS = {"avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}


@dataclass
class Config:
    name: str
    env: dict[str, str]
    marker: str  # the -m expression
    expect: dict[str, str]  # probe ("torch", "numpy") -> how its report must start
    why: str
    skip: str = ""  # the reason it is not run, when it is not
    result: dict[str, float] = field(default_factory=dict)


def cpu_flags() -> set[str]:
    """This CPU's feature flags, from /proc/cpuinfo (Linux), else from `lscpu`; empty where neither answers."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Flags:"):
                return set(line.split(":", 1)[1].split())
    return set()


def numpy_dispatch_targets() -> list[str]:
    """Every target this numpy was built to dispatch to at run time (beyond its baseline), as it names them."""
    import numpy

    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:  # where numpy.show_runtime() reads them from, in numpy 2.x
        sys.exit(f"numpy {numpy.__version__} does not list its dispatch targets where numpy 2.4 did: update {__file__}")
    return list(__cpu_dispatch__)


TORCH_PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability())"
NUMPY_PROBE = (
    "import json; from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__\n"
    "print(json.dumps({'baseline': list(__cpu_baseline__), "
    "'dispatched': [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]}))"
)
NUMBA_PROBE = "import numba; print(numba.config.CPU_NAME)"


def torch_native() -> str:
    """The kernel set torch picks on this CPU when nothing asks for another ("AVX512", "AVX2", "DEFAULT")."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env({}), capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def configs() -> list[Config]:
    flags = cpu_flags()
    first = Config(
        name="torch default + numpy baseline",
        env={"ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"},
        marker="torch_kernels or numpy_kernels",
        expect={"torch": "DEFAULT", "numba": "generic"},
        why="torch without vector kernels; numba compiling for the baseline CPU",
    )
    if platform.machine().lower() in ("x86_64", "amd64"):
        targets = numpy_dispatch_targets()
        first.env["NPY_DISABLE_CPU_FEATURES"] = " ".join(targets)
        first.expect["numpy"] = "dispatched=[]"
        first.why += f"; numpy at its baseline, none of its run-time targets ({' '.join(targets)})"
    else:
        first.why += f"; numpy as it is (its targets named here are x86-64's, this is {platform.machine()})"
    out = [first]
    native = torch_native()
    for cap in ("avx2", "avx512"):
        lacking = [f for f in TORCH_NEEDS[cap] if f not in flags]
        skip = f"this CPU lacks {', '.join(lacking)}" if lacking else ""
        if not skip and native == cap.upper():
            skip = "torch's own choice on this CPU: make test ran every test under these kernels"
        out.append(
            Config(
                name=f"torch {cap}",
                env={"ATEN_CPU_CAPABILITY": cap},
                marker="torch_kernels",
                expect={"torch": cap.upper()},
                why=f"torch's {cap.upper()} kernels",
                skip=skip,
            )
        )
    return out


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV}
    env.update(extra)
    return env


def probe(config: Config, library: str) -> str:
    """What a fresh interpreter under the configuration reports for ``library`` ("torch", "numpy" or "numba")."""
    code = {"torch": TORCH_PROBE, "numpy": NUMPY_PROBE, "numba": NUMBA_PROBE}[library]
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(config.env), capture_output=True, text=True)
    if out.returncode:
        return f"error: {out.stderr.strip()[-500:]}"
    if library != "numpy":
        return out.stdout.strip()
    seen = json.loads(out.stdout)
    return f"dispatched={seen['dispatched']} (baseline {' '.join(seen['baseline'])})"


def run(config: Config, pytest_args: list[str]) -> bool:
    env_text = " ".join(f"{k}={v!r}" if " " in v else f"{k}={v}" for k, v in config.env.items())
    print(f"\n== {config.name}: {env_text} ({config.why}); tests marked {config.marker}", flush=True)
    for library, want in config.expect.items():
        seen = probe(config, library)
        print(f"   check {library}: {seen}", flush=True)
        if not seen.startswith(want):
            print(f"   FAILED: {library}'s setting did not take effect (wanted {want})", flush=True)
            config.result = {"passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0, "error": 1}
            return False
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "auto",
            "-q",
            "-m",
            f"({config.marker}) and not e2e and not serial",  # serial tests time things; they check no kernel's value
            f"--junitxml={report}",
            *pytest_args,
        ]
        t0 = time.perf_counter()
        env = clean_env(config.env)
        # torch.compile's caches do not key on ATEN_CPU_CAPABILITY: a kernel Inductor generated for this CPU's
        # vector set, reused under "default", fails to compile (at::vec undeclared). Each set compiles afresh.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
        code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        seconds = time.perf_counter() - t0
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if report.is_file():
            for suite in ET.parse(report).getroot().iter("testsuite"):
                for key in counts:
                    counts[key] += int(suite.get(key, 0))
    failed = counts["failures"] + counts["errors"]
    config.result = {
        "passed": counts["tests"] - failed - counts["skipped"],
        "failed": failed,
        "skipped": counts["skipped"],
        "seconds": seconds,
        "error": int(code != 0 and failed == 0),
    }
    return code == 0


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    todo = configs()
    for c in todo:
        if c.skip:
            print(f"== {c.name}: skipped, {c.skip}")
    ok = True
    for c in todo:
        if not c.skip:
            ok = run(c, argv) and ok
    print("\n== kernel sets:")
    for c in todo:
        if c.skip:
            print(f"   {c.name:31} skipped: {c.skip}")
        else:
            r = c.result
            status = "ok" if not (r["failed"] or r["error"]) else "FAILED"
            print(
                f"   {c.name:31} {status:6} {r['passed']:.0f} passed, {r['failed']:.0f} failed, "
                f"{r['skipped']:.0f} skipped, {r['seconds']:.0f} s"
            )
    print(f"   all: {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
