"""Shared bits of the benchmarks: timing, percentiles, plain tables, and docs/performance.md sections.

Every benchmark prints its table and replaces its own section of
docs/performance.md (between ``<!-- bench:NAME -->`` markers), so the file
always holds the last run of each, with the date and the machine.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "performance.md"
# The core rounds and counts on one thread unless asked: the benchmarks ask for one thread per core (up to 8),
# as torch uses them too, so the ratios compare like with like.
WORKERS = min(os.cpu_count() or 1, 8)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the nearest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (which also reads well as plain text)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "| " + " | ".join("-" * w for w in widths) + " |", *map(line, cells[1:])])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def publish(name: str, title: str, body: str) -> None:
    """Print a section and write it into docs/performance.md in place of its previous run."""
    stamp = datetime.date.today().isoformat()
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    section = f"{start}\n### {title}\n\n_Last run {stamp} on {machine()}._\n\n{body.strip()}\n{end}"
    print(f"\n{title}\n\n{body.strip()}\n")
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def need_chromium() -> None:
    """Stop with a clear message when no Chromium is there for a browser benchmark to drive."""
    from tests.e2e.harness import chromium_missing_reason

    reason = chromium_missing_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")


# A lesson step's slider is its scrub component's (lensa.ui.components.scrub); another page's is Streamlit's own.
SLIDERS = '.lensa-slider-input, [data-testid="stSlider"] input[type="range"]'
# The metric cards: the scrub's own (they answer in the browser) and Streamlit's.
METRIC_VALUES = '.lensa-card-value, [data-testid="stMetricValue"]'


def first_slider(page: Any, url: str) -> Any:
    """Open ``url`` in ``page``, wait for the app, and focus its first slider (returned), ready for arrow keys."""
    from tests.e2e.harness import wait_for_app

    page.goto(url)
    wait_for_app(page)
    slider = page.locator(SLIDERS).first
    slider.focus()
    return slider
