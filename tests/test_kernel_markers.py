"""`make test-kernels` reruns the tests marked torch_kernels and numpy_kernels under other kernel sets: this keeps
the marks honest. A test file that imports torch or lensa.live (the torch side) must carry torch_kernels; one that
imports numpy, ml_dtypes, tests.runfixtures, or a lensa module outside lensa.ui that computes with numpy or torch
(directly or through another lensa module) must carry numpy_kernels. The few that need not say why below.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKS = ("torch_kernels", "numpy_kernels")

# (test file, mark) -> why the rule's answer does not apply to it. Each entry must still be one the rule asks for.
EXEMPT: dict[tuple[str, str], str] = {
    ("tests/test_i18n.py", "torch_kernels"): "imports lensa.live for its message keys and error classes; runs no torch",
    ("tests/test_i18n.py", "numpy_kernels"): "reads names and messages from the core modules; computes no numbers",
    ("tests/test_fuzz_links.py", "torch_kernels"): (
        "asks the lab's worker for this machine's calibrated defaults, to know what a link without settings "
        "shows; it checks link parsing, not a number torch computes"
    ),
    ("tests/test_fuzz_links.py", "numpy_kernels"): (
        "fuzzes the pages' link parsing, which is exact arithmetic on Python ints and Fractions "
        "(lensa.numerics.exact); it checks no number a numpy kernel computes, and takes ~50 s a rerun"
    ),
    ("tests/test_lab_page.py", "torch_kernels"): (
        "the lab page around lensa.live's runs, which tests/test_live.py and tests/test_worker.py rerun under each "
        "kernel set; its step 6 measures speed, not values, and takes ~30 s a rerun"
    ),
    ("tests/test_integrations.py", "torch_kernels"): (
        "trains tiny models through transformers' Trainer and Lightning to check the callbacks' wiring (what is "
        "recorded, when, with which scaler); the recorder's numbers are tests/test_capture.py's, rerun under each set"
    ),
    ("tests/test_integrations.py", "numpy_kernels"): "the callbacks' wiring (above); the summaries are test_capture's",
    ("tests/test_readme_recording.py", "torch_kernels"): (
        "runs the README's recording code as written, to keep it working; what it records is test_capture's to check"
    ),
    ("tests/test_readme_recording.py", "numpy_kernels"): "the README's code as written (above)",
    ("tests/test_merge.py", "torch_kernels"): (
        "records two-rank DDP and FSDP2 runs only to have real per-rank files to merge; the records' numbers are "
        "tests/test_capture.py's two-rank test, rerun under each set"
    ),
    ("tests/test_merge.py", "numpy_kernels"): (
        "which files lensa merge refuses (steps, names, sizes, types, equal records) and that its output is the "
        "Recorder's own file; merge_ranks' arithmetic is tests/test_runstats.py's, rerun under each set"
    ),
    ("tests/test_limits.py", "numpy_kernels"): (
        "the server's byte and memory limits under real HTTP and websocket traffic; it checks no number a numpy "
        "kernel computes, and takes ~2.5 min a rerun"
    ),
    ("tests/test_lab_page.py", "numpy_kernels"): "the page around the runs (above); its numbers come from lensa.live",
    ("tests/test_report.py", "torch_kernels"): (
        "one test records a pure-BF16 run to check what the report says of it; the recorder's numbers are "
        "tests/test_capture.py's, rerun under each kernel set"
    ),
    ("tests/e2e/test_report_html.py", "numpy_kernels"): (
        "a browser drawing `lensa report --html`'s page offline; the report's numbers are tests/test_report.py's, "
        "which carries the mark"
    ),
    ("tests/e2e/test_upload.py", "numpy_kernels"): (
        "a browser test against a server process (make test's e2e pass); the numbers it uploads are checked "
        "in-process by tests/test_measured.py and tests/test_measured_pages.py, which carry the mark"
    ),
}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (inside functions too), as dotted names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from lensa import runstats`
    return found


def _module_file(name: str) -> Path | None:
    base = ROOT / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.cache
def _computes_with(module: str) -> frozenset[str]:
    """Which of numpy, ml_dtypes and torch a lensa module (outside lensa.ui) imports, directly or through lensa.

    A walk over lensa's import graph with a visited set: modules may import each other (a cycle, fine for
    Python at run time when one side imports lazily) and the walk must still end."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        path = _module_file(current)
        if path is None or current.startswith("lensa.ui"):
            continue
        package = path.name == "__init__.py"  # a package computes with what its modules do (lensa.runstats)
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ("numpy", "ml_dtypes", "torch"):
                found.add(top)
            elif top == "lensa" and name != current and (package or not name.startswith(current + ".")):
                todo.append(name)
    return frozenset(found)


def required_marks(path: Path) -> set[str]:
    names = _imports(path)
    tops = {n.split(".")[0] for n in names}
    need = set()
    if "torch" in tops or any(n == "lensa.live" or n.startswith("lensa.live.") for n in names):
        need.add("torch_kernels")
    if tops & {"numpy", "ml_dtypes"} or "tests.runfixtures" in names:
        need.add("numpy_kernels")
    if any(_computes_with(n) for n in names if n.startswith("lensa.")):
        need.add("numpy_kernels")
    return need


def carried_marks(path: Path) -> set[str]:
    """The kernel marks in the file's module-level ``pytestmark`` (pytest.mark.X, alone or in a list)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return {
                n.attr
                for n in ast.walk(node.value)
                if isinstance(n, ast.Attribute) and n.attr in MARKS and ast.unparse(n.value) == "pytest.mark"
            }
    return set()


TEST_FILES = sorted(ROOT.glob("tests/**/test_*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_that_computes_with_the_kernels_is_rerun_under_them(path):
    rel = str(path.relative_to(ROOT))
    missing = {m for m in required_marks(path) - carried_marks(path) if (rel, m) not in EXEMPT}
    assert not missing, f"{rel} uses torch or numpy: add {sorted(missing)} to its pytestmark or an EXEMPT reason"


def test_every_exemption_is_still_needed():
    for (rel, mark), why in EXEMPT.items():
        path = ROOT / rel
        assert path.is_file(), rel
        assert why
        assert mark in required_marks(path), f"{rel} no longer needs {mark}: drop its exemption"
        assert mark not in carried_marks(path), f"{rel} carries {mark}: drop its exemption"


def test_the_rule_sees_what_it_should():
    """The rule against files whose answer is known, so a rule that matches nothing cannot pass the check above."""
    tests = ROOT / "tests"
    assert required_marks(tests / "test_reference.py") == {"torch_kernels", "numpy_kernels"}  # imports inside a test
    assert required_marks(tests / "test_models.py") == {"torch_kernels"}
    assert required_marks(tests / "test_core_reference.py") == {"numpy_kernels"}  # through lensa.numerics.formats
    assert required_marks(tests / "test_pages.py") == set()
    assert carried_marks(tests / "test_capture.py") == {"torch_kernels", "numpy_kernels"}
    assert carried_marks(tests / "test_pages.py") == set()
    assert "numpy" in _computes_with("lensa.runstats") and _computes_with("lensa.ui.figures") == frozenset()


# --- scripts/test_kernels.py: which kernel sets it asks for, and that each takes effect ---------------------------


def _script():
    spec = importlib.util.spec_from_file_location("kernel_sets", ROOT / "scripts" / "test_kernels.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("flags", "skipped"),
    [
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, set()),
        ({"avx2", "fma"}, {"torch avx512"}),  # an AVX2-only EPYC: never ask torch for AVX-512
        ({"avx2", "fma", "avx512f"}, {"torch avx512"}),  # AVX-512 Foundation alone is not ATen's AVX512
        (set(), {"torch avx2", "torch avx512"}),
    ],
)
def test_the_kernel_sets_asked_for_are_the_ones_this_cpu_has(monkeypatch, flags, skipped):
    script = _script()
    monkeypatch.setattr(script, "cpu_flags", lambda: flags)
    monkeypatch.setattr(script.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(script, "torch_native", lambda: "DEFAULT")  # the flags alone decide here
    configs = {c.name: c for c in script.configs()}
    assert list(configs) == ["torch default + numpy baseline", "torch avx2", "torch avx512"]
    assert {n for n, c in configs.items() if c.skip} == skipped
    for name in skipped:
        assert "this CPU lacks" in configs[name].skip
    first = configs["torch default + numpy baseline"]
    assert first.env["ATEN_CPU_CAPABILITY"] == "default"
    assert first.env["NPY_DISABLE_CPU_FEATURES"].split() == script.numpy_dispatch_targets()
    assert first.marker == "torch_kernels or numpy_kernels"
    assert configs["torch avx2"].env == {"ATEN_CPU_CAPABILITY": "avx2"}


@pytest.mark.parametrize(("native", "skipped"), [("AVX512", {"torch avx512"}), ("AVX2", {"torch avx2"})])
def test_the_set_torch_picks_by_itself_is_not_run_twice(monkeypatch, native, skipped):
    # make test already ran every test under torch's own choice; its rerun would only repeat it
    script = _script()
    monkeypatch.setattr(script, "cpu_flags", lambda: {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
    monkeypatch.setattr(script.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(script, "torch_native", lambda: native)
    configs = {c.name: c for c in script.configs()}
    assert {n for n, c in configs.items() if c.skip} == skipped
    assert all("own choice" in configs[n].skip for n in skipped)
    assert not configs["torch default + numpy baseline"].skip


def test_torch_native_is_what_torch_reports():
    torch = pytest.importorskip("torch")
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        pytest.skip("this process runs under a kernel set asked for; torch_native asks a clean one")
    assert _script().torch_native() == torch.backends.cpu.get_cpu_capability()


def test_the_first_set_takes_effect_in_both_libraries():
    script = _script()
    first = script.configs()[0]
    assert script.probe(first, "numpy").startswith("dispatched=[]")
    native = script.Config("native", {}, "numpy_kernels", {}, "")
    if script.numpy_dispatch_targets() and script.cpu_flags() & {"avx2", "avx512f"}:
        assert not script.probe(native, "numpy").startswith("dispatched=[]")  # the probe can tell
    if importlib.util.find_spec("torch"):
        assert script.probe(first, "torch") == "DEFAULT"
