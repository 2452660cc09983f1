"""The installable package: the wheel's contents and metadata, and recording in a fresh environment from it.

The wheel is built from a copy of the package's own files (so no build output lands in the checkout) with this
environment's setuptools, without build isolation: no index is needed to build it. It is then installed with
``[record]`` into a new virtual environment, where pip brings numpy and ml_dtypes; torch, "the user's own",
comes from this environment through a path file that names torch and its own dependencies only, so streamlit,
plotly and the rest of this environment stay out of reach there.
"""

from __future__ import annotations

import email
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import requires_torch

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from: the package, its metadata, the readme the metadata shows and the license.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "lensa")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A copy of what the package is built from, so that no build output lands in the checkout."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(sources, tmp_path_factory) -> Path:
    src = sources
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("lensa_mixed_precision-*.whl")
    return built


def test_the_wheel_holds_lensa_and_its_data_but_not_tests_bench_or_pages(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"lensa"}
    shipped = {
        "lensa/__main__.py",
        "lensa/py.typed",
        "lensa/live/capture.py",
        "lensa/live/integrations/huggingface.py",
        "lensa/live/integrations/lightning.py",
        "lensa/ui/serve.py",
    }
    shipped |= {str(p.relative_to(ROOT)) for p in (ROOT / "lensa" / "data").iterdir()}
    shipped |= {str(p.relative_to(ROOT)) for p in (ROOT / "lensa" / "text").glob("*.toml")}
    # the scrub component's assets, Plotly.js and its licence among them (served by the app, never a CDN)
    shipped |= {str(p.relative_to(ROOT)) for p in (ROOT / "lensa" / "ui" / "components" / "assets").iterdir()}
    assert shipped <= set(names), sorted(shipped - set(names))
    assert not [n for n in names if n.startswith(("tests/", "bench/", "pages/", "app.py")) or "__pycache__" in n]


def test_the_wheels_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(z.read(info).decode("utf-8"))
        entry_points = z.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert meta["Name"] == "lensa-mixed-precision" and meta["Version"] == "0.1.0"
    assert meta["Requires-Python"] == ">=3.11" and meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# Lensa · Mixed Precision")  # the README is the long description
    requires = meta.get_all("Requires-Dist")
    plain = sorted(r for r in requires if "extra ==" not in r)
    assert [re.split(r"[<>=!~ ]", r)[0] for r in plain] == ["ml_dtypes", "numpy"]  # recording needs no more
    app = [r for r in requires if 'extra == "app"' in r]
    assert sorted(re.split(r"[<>=!~ ]", r)[0] for r in app) == ["plotly", "streamlit"]
    assert not [r for r in requires if r.startswith("torch")]  # the user's own
    fast = [r for r in requires if 'extra == "fast"' in r]
    assert [re.split(r"[<>=!~ ]", r)[0] for r in fast] == ["numba"]  # the compiled block-recipe pass, optional
    assert set(meta.get_all("Provides-Extra")) == {"record", "app", "fast"}
    assert "lensa = lensa.__main__:main" in entry_points
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in meta.get_all("Classifier"))


def test_the_license_is_apache_2_0_in_full():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    sections = re.findall(r"^   (\d)\. (\w[\w ]*?)\.", text, re.M)
    assert [n for n, _ in sections] == [str(i) for i in range(1, 10)]  # sections 1 to 9
    assert [t for _, t in sections][:3] == ["Definitions", "Grant of Copyright License", "Grant of Patent License"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License to your work" in text
    assert text.count("\n") == 202  # the canonical LICENSE-2.0.txt, untouched


def test_the_wheel_and_the_sdist_carry_the_license(wheel, sources, tmp_path):
    license_text = (ROOT / "LICENSE").read_bytes()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(z.read(info).decode("utf-8"))
        (shipped,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(shipped) == license_text
    assert tuple(int(v) for v in meta["Metadata-Version"].split(".")) >= (2, 4)  # PEP 639
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]  # the expression says it all
    assert not meta.get_all("Project-URL") and not meta["Home-page"]  # no public project URL yet
    # the sdist, built the same way (this environment's setuptools, no isolation)
    build = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)], cwd=sources, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    import tarfile

    with tarfile.open(tmp_path / done.stdout.strip().splitlines()[-1]) as tar:
        top = tar.getnames()[0].split("/")[0]
        assert tar.extractfile(f"{top}/LICENSE").read() == license_text
        pkg_info = email.message_from_bytes(tar.extractfile(f"{top}/PKG-INFO").read())
    assert pkg_info["License-Expression"] == "Apache-2.0" and pkg_info.get_all("License-File") == ["LICENSE"]


def test_the_container_image_keeps_the_license():
    # The image runs the app from a copy of the tree (COPY . ., less what .dockerignore names): LICENSE goes along.
    import fnmatch

    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "!"))
    ]
    assert "scripts" in patterns and "/*.md" in patterns  # the file was read
    assert not [p for p in patterns if fnmatch.fnmatch("LICENSE", p.lstrip("/").removeprefix("**/"))]
    assert "COPY . ." in (ROOT / "Dockerfile").read_text()


def _torch_path_file(site: Path, tmp: Path) -> None:
    """Make this environment's torch (and what torch itself requires) importable in the venv at ``site``."""
    shelf = tmp / "torch-only"
    shelf.mkdir()
    seen: set[str] = set()
    todo = ["torch"]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        todo += [re.match(r"[A-Za-z0-9_.\-]+", r).group(0) for r in dist.requires or [] if "extra ==" not in r]
        for file in dist.files or []:
            first = file.parts[0]
            if first in ("..", "__pycache__") or (shelf / first).exists():
                continue
            (shelf / first).symlink_to(Path(dist.locate_file(first)))
    (site / "torch-only.pth").write_text(str(shelf) + "\n")


@requires_torch
def test_record_from_the_installed_wheel_in_a_fresh_environment(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", f"{wheel}[record]"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    _torch_path_file(site, tmp_path)
    script = textwrap.dedent(
        """
        import importlib.util, sys
        import torch
        import lensa
        from lensa.live.capture import Recorder
        from lensa.runstats.reference_run import load_reference

        assert lensa.__file__.startswith(sys.prefix), lensa.__file__  # the installed copy, not the checkout
        missing = [m for m in ("streamlit", "plotly") if importlib.util.find_spec(m) is None]
        assert missing == ["streamlit", "plotly"], missing
        assert len(load_reference()) == 2  # the reference run came with the wheel

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        with Recorder(model, opt, steps=3) as rec:
            for _ in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                rec.step(loss=loss)
            rec.save("run.npz")
        print("recorded")
        """
    )
    done = subprocess.run([str(python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "recorded"
    report = subprocess.run(
        [str(venv / "bin" / "lensa"), "report", "run.npz", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert '"schema": "lensa-report"' in report.stdout and '"weight_grad"' in report.stdout
    text = subprocess.run(  # the text comes from the catalogues the wheel carries
        [str(python), "-m", "lensa", "report", "run.npz", "--lang", "id"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Laporan Lensa: run.npz")
