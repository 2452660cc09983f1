"""With no torch at all (the lesson-only image, a partial install) every page still opens, and the three live
parts say how to add it: the lab, step 3's real GradScaler run and step 6's measurement. No page needs what the
lesson-only image also leaves out (altair and its jsonschema, Pillow's AVIF codec).

The pages run in a fresh interpreter where ``import torch`` fails and ``importlib.util.find_spec("torch")``
answers None, exactly as where torch was never installed (``sys.modules["torch"] = None``). The server's
start-up import (:func:`lensa.ui.serve.preload`) runs there too.
"""

from __future__ import annotations

import json
import subprocess
import sys

from lensa.ui import i18n
from lensa.ui.live_view import torch_pip_command
from lensa.ui.site import PAGES
from tests.pagetools import ROOT

LIVE_PAGES = {"lab": "error", "loss_scaling": "info", "speed": "info"}

# What the lesson-only image (Dockerfile, WITH_TORCH=0) leaves out besides torch: no page may need them, numba (which
# it drops with torch: only the live parts compile with it) included.
LESSON_IMAGE_LEAVES_OUT = (
    "altair",
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "PIL._avif",
    "numba",
    "llvmlite",
)

SCRIPT = """
import importlib.util, json, sys
# What a machine without torch answers: ImportError, and find_spec(...) is None. The same for what the lesson-only
# image leaves out (argv[2]).
for name in ("torch", *json.loads(sys.argv[2])):
    sys.modules[name] = None
assert importlib.util.find_spec("torch") is None
try:
    import torch  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("torch is still importable")

from lensa.ui import serve
serve.preload()

from lensa.ui.site import PAGES
from tests.pagetools import open_page

LIVE = json.loads(sys.argv[1])
report = {}
for page in PAGES:
    for lang in ("en", "id") if page.key in LIVE else ("en",):
        at = open_page(page.key, lang=lang)
        kind = LIVE.get(page.key)
        report[f"{page.key}/{lang}"] = {
            "exception": [str(e.value) for e in at.exception],
            "messages": [e.value for e in getattr(at, kind)] if kind else [],
            "titles": [t.value for t in at.title],
        }
report["torch_imported"] = any(
    (name == "torch" or name.startswith("torch.")) and module is not None for name, module in sys.modules.items()
)
print("REPORT " + json.dumps(report))
"""


def test_every_page_opens_without_torch_and_the_live_parts_say_how_to_add_it():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(LIVE_PAGES), json.dumps(LESSON_IMAGE_LEAVES_OUT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    assert report.pop("torch_imported") is False

    assert {key.split("/")[0] for key in report} == {p.key for p in PAGES}
    for key, seen in report.items():
        assert seen["exception"] == [], (key, seen["exception"])
        assert seen["titles"], key  # the page drew its title, not just the navigation

    pip = torch_pip_command()
    assert pip.startswith('pip install "torch==') and "/whl/cpu" in pip
    for page_key in LIVE_PAGES:
        for lang in ("en", "id"):
            expected = i18n.text(lang, "live.torch_missing", pip=pip)
            assert "`make torch`" in expected and f"`{pip}`" in expected
            assert expected in report[f"{page_key}/{lang}"]["messages"], (page_key, lang)
