"""Page rerun time: how long a lesson page takes to run again after a slider moves (AppTest, in process).

    python bench/page_rerun.py [--moves 60]

Each page is opened once, then its first slider is moved across its stops
and back; every move is one timed ``AppTest.run()``: the whole script, its
figures and its text, without the browser. Target: median at most 25 ms.
"""

from __future__ import annotations

import argparse
import time

from bench.common import median, percentile, publish, table, verdict
from lensa.ui.site import STEPS

TARGET_MS = 25.0


def moves_for(stops: tuple, n: int) -> list:
    """n slider positions walking across the stops and back (every move changes the value)."""
    path = list(stops) + list(reversed(stops[1:-1]))
    return [path[(i + 1) % len(path)] for i in range(n)]


def main() -> None:
    from tests.pagetools import open_page

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moves", type=int, default=60)
    args = parser.parse_args()
    rows = []
    for info in STEPS:
        control = next(c for c in info.controls if hasattr(c, "stops"))
        at = open_page(info.key, lang="en")
        slider = at.select_slider(key=f"w.{info.key}.{control.name}")
        for value in moves_for(control.stops, 5):  # warm caches and imports
            slider.set_value(value)
            at.run()
        times = []
        for value in moves_for(control.stops, args.moves):
            at.select_slider(key=f"w.{info.key}.{control.name}").set_value(value)
            t0 = time.perf_counter()
            at.run()
            times.append((time.perf_counter() - t0) * 1e3)
            assert not at.exception, at.exception
        med = median(times)
        rows.append(
            [
                f"{info.step} {info.key}",
                control.name,
                len(times),
                f"{med:.1f}",
                f"{percentile(times, 95):.1f}",
                f"{max(times):.1f}",
                verdict(med <= TARGET_MS),
            ]
        )
    body = (
        f"Rerun after a slider move through Streamlit's AppTest (script, core, figures, text; no browser), "
        f"{args.moves} moves per page. Target: median ≤ {TARGET_MS:.0f} ms.\n\n"
        + table(["page", "slider", "moves", "median ms", "p95 ms", "max ms", "target"], rows)
    )
    publish("page_rerun", "Page rerun time", body)


if __name__ == "__main__":
    main()
