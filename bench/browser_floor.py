"""How close to the bare app a lesson page can get: our page around the bare app's own slider and metric.

    python -m bench.browser_floor [--moves 20] [--rounds 2]

The browser round trip (``bench/browser_roundtrip.py``) compares each lesson
step with the bare Streamlit app: one slider, one metric. A step is more than
that: the language switch and the navigation in the sidebar, the title, the
notes, the two questions and the footer, around its controls, charts, metric
cards and explanation. This benchmark measures what that frame alone costs.
It serves a step whose lesson part is the bare app itself (``bench/bare_app.py``
run in its place: the same slider, the same one metric, nothing of ours
computed), with the rest of a real step around it (step 2's title, notes,
questions, footer and navigation), in two forms:

- *frame, whole-page reruns*: every move reruns the page, as the steps did
  before ``layout.lesson``;
- *frame, lesson fragment*: the bare app's part is the step's lesson fragment
  (``layout.lesson``), as the steps are drawn now: a move reruns that part.

Each is timed as ``bench/browser_roundtrip.py`` times a step (key press to
the metric changing, chromium, one session), beside the bare app, in turns,
``--rounds`` times. A step cannot be quicker than its frame with the bare
app's lesson, so the last row's ratio is a floor under every step's ratio.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.browser_roundtrip import BARE_APP, TARGET_RATIO, moves_on
from bench.common import ROOT, median, need_chromium, percentile, publish, table
from tests.e2e.harness import Server, browser

# The page: a step's frame (lensa.ui, as the lesson steps use it) with the bare app's script as its lesson.
FRAME_APP = '''"""Step 2's frame around the bare app's slider and metric (written by bench/browser_floor.py)."""
import os
import runpy

from lensa.ui import layout
from lensa.ui.frame import setup


def lesson() -> None:
    runpy.run_path(os.environ["LENSA_FLOOR_BARE"], run_name="__main__")
    layout.after_controls(page)


page = setup("fp16_range")
layout.step_header(page)
if os.environ.get("LENSA_FLOOR_FRAGMENT") == "1":
    layout.lesson(page, lesson)
else:
    lesson()
layout.step_end(page, page.t("notes"), [page.t("refs.ieee754"), page.t("refs.micikevicius2017")])
'''


def frame_app(folder: Path) -> Path:
    """The frame page as the main script of an app whose pages are ours (the navigation links need them)."""
    script = folder / "frame.py"
    script.write_text(FRAME_APP)
    (folder / "pages").symlink_to(ROOT / "pages", target_is_directory=True)
    return script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    need_chromium()
    arms = {"bare": [], "whole": [], "fragment": []}
    with tempfile.TemporaryDirectory(prefix="lensa-floor-") as tmp, browser() as chromium:
        script = str(frame_app(Path(tmp)))
        bare = str(ROOT / BARE_APP)
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        for _ in range(args.rounds):
            with Server(app=BARE_APP) as server:
                arms["bare"] += moves_on(page, f"{server.url}/", args.moves)
            for arm, fragment in (("whole", "0"), ("fragment", "1")):
                env = {"LENSA_FLOOR_BARE": bare, "LENSA_FLOOR_FRAGMENT": fragment, "PYTHONPATH": str(ROOT)}
                with Server(app=script, extra_env=env) as server:
                    arms[arm] += moves_on(page, f"{server.url}/?lang=en", args.moves)
    base_median, base_p95 = median(arms["bare"]), percentile(arms["bare"], 95)
    names = {
        "bare": "bare Streamlit app (slider + metric)",
        "whole": "step frame + the bare app's lesson, whole-page reruns",
        "fragment": "step frame + the bare app's lesson, lesson fragment (as shipped)",
    }
    rows = []
    for arm, times in arms.items():
        m, p = median(times), percentile(times, 95)
        rows.append([names[arm], len(times), f"{m:.0f}", f"{p:.0f}", f"{m / base_median:.2f}×", f"{p / base_p95:.2f}×"])
    body = (
        f"Key press on the slider to the metric changing, chromium on localhost, one session, {args.moves} moves "
        f"per arm and round, {args.rounds} rounds taking turns. The target for the lesson steps is at most "
        f"{TARGET_RATIO}× the bare app's median and p95; the last row is the least any step can cost.\n\n"
        + table(["page", "moves", "median ms", "p95 ms", "median ÷ bare", "p95 ÷ bare"], rows)
    )
    publish("browser_floor", "Browser round trip: the floor a step's frame sets", body)


if __name__ == "__main__":
    main()
