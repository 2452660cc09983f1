"""Cold start: a fresh `streamlit run` until it is healthy and until a browser shows the first page.

    python bench/cold_start.py [--runs 5]

Each run starts a new server process, waits for /_stcore/health, then opens
a lesson page in chromium and waits until it is drawn. After every lesson
page has been shown, the server's memory map is read: the lesson pages must
not have loaded PyTorch (no libtorch in /proc/<pid>/maps). Opening the live
lab then loads it, which shows the check can see it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import median, need_chromium, publish, table
from lensa.ui.site import PAGES
from tests.e2e.harness import Server, browser, wait_for_app


def torch_loaded(pid: int) -> bool:
    """Whether the process has PyTorch's shared library mapped."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    need_chromium()
    healthy, first_page, lesson_rss, torch_after_lessons, torch_after_lab = [], [], [], [], []
    with browser() as chromium:
        for _ in range(args.runs):
            server = Server()
            try:
                healthy.append(server.wait_healthy())
                page = chromium.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{server.url}/memory?lang=en")
                wait_for_app(page)
                first_page.append(time.perf_counter() - server.started)
                for info in PAGES:
                    if info.key != "lab":
                        page.goto(f"{server.url}/{'' if info.key == 'overview' else info.key}?lang=en")
                        wait_for_app(page)
                torch_after_lessons.append(torch_loaded(server.proc.pid))
                lesson_rss.append(rss_mb(server.proc.pid))
                page.goto(f"{server.url}/lab?lang=en")
                wait_for_app(page)
                torch_after_lab.append(torch_loaded(server.proc.pid))
                page.close()
            finally:
                server.stop()
    rows = [
        ["process start → /_stcore/health ok", f"{median(healthy):.2f} s", f"{min(healthy):.2f}–{max(healthy):.2f} s"],
        [
            "process start → first page drawn in chromium (/memory)",
            f"{median(first_page):.2f} s",
            f"{min(first_page):.2f}–{max(first_page):.2f} s",
        ],
        ["server memory after every lesson page (RSS)", f"{median(lesson_rss):.0f} MB", ""],
        ["PyTorch loaded after every lesson page", "no" if not any(torch_after_lessons) else "YES", ""],
        ["PyTorch loaded after opening the live lab", "yes" if all(torch_after_lab) else "no", ""],
    ]
    body = f"{args.runs} fresh server processes; median and range.\n\n" + table(["measure", "median", "range"], rows)
    publish("cold_start", "Cold start", body)


if __name__ == "__main__":
    main()
