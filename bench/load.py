"""Many visitors: N browser sessions walk every page and move sliders at once, for a fixed time.

    python bench/load.py [--sessions 10] [--seconds 60]

Starts the app on a free local port and one headless chromium with N pages
(each its own browser context, so its own Streamlit session). Each session
walks the pages in turn (the live lab included, without pressing Run),
moves the first slider of each lesson page a few stops, and times every
move from key press to the metric cards changing. Errors counted: a page
that fails to load or settle, a Streamlit exception on the page, a
JavaScript error, a slider move that never updates the page. Every page is
opened once before the clock starts (so one-off costs such as the live
lab's PyTorch import are in the baseline); then the server's memory is
sampled every second. Everything stops by itself after
``--seconds`` (and a hard limit of twice that plus two minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from pathlib import Path

from bench.browser_roundtrip import ARM
from bench.common import median, percentile, publish, table
from lensa.ui.site import PAGES
from tests.e2e.harness import CHROMIUM, CHROMIUM_ARGS, Server, chromium_missing_reason
from tests.e2e.harness import READY_SCRIPT as READY  # the same notion of "settled" as the browser tests


async def settle(page, timeout_s: float = 45.0) -> None:
    deadline = time.monotonic() + timeout_s
    last, stable = None, 0
    while time.monotonic() < deadline:
        count = await page.evaluate(READY)
        stable = stable + 1 if count > 0 and count == last else 0
        if stable >= 3:
            return
        last = count
        await asyncio.sleep(0.15)
    raise TimeoutError("page did not settle")


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.page_loads = 0
        self.moves = 0
        self.server_cpu_s = float("nan")


async def session(n: int, chromium, url: str, deadline: float, stats: Stats) -> None:
    rng = random.Random(n)
    context = await chromium.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    page.on("pageerror", lambda exc: stats.errors.append(f"session {n}: javascript error: {exc}"))
    order = [p for p in PAGES]
    rng.shuffle(order)
    i = 0
    try:
        while time.monotonic() < deadline:
            info = order[i % len(order)]
            i += 1
            lang = rng.choice(["id", "en"])
            try:
                await page.goto(f"{url}/{'' if info.key == 'overview' else info.key}?lang={lang}", timeout=60_000)
                await settle(page)
                stats.page_loads += 1
                if await page.locator('[data-testid="stException"]').count():
                    stats.errors.append(f"session {n}: exception on {info.key}")
                if info.step is None:
                    continue
                slider = page.locator('[data-testid="stSlider"] input[type="range"]').first
                await slider.focus()
                for k in range(3):
                    if time.monotonic() >= deadline:
                        break
                    await page.evaluate(ARM)
                    await slider.press("ArrowRight" if k % 2 == 0 else "ArrowLeft")
                    await page.wait_for_function("() => window.__lensaLatency !== null", timeout=30_000)
                    stats.latencies.append(await page.evaluate("() => window.__lensaLatency"))
                    stats.moves += 1
                    await asyncio.sleep(rng.uniform(0.2, 0.6))  # a person looks before moving again
            except Exception as exc:  # every failure is counted, the session goes on
                stats.errors.append(f"session {n}: {info.key}: {type(exc).__name__}: {str(exc)[:120]}")
    finally:
        await context.close()


async def warm_up(chromium, url: str) -> None:
    """Open every page once, so one-off costs (imports, PyTorch for the lab) are in the baseline."""
    page = await chromium.new_page()
    for info in PAGES:
        await page.goto(f"{url}/{'' if info.key == 'overview' else info.key}?lang=en", timeout=60_000)
        await settle(page)
    await page.close()


async def sample_memory(pid: int, deadline: float, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    while time.monotonic() < deadline:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    samples.append((time.monotonic() - start, int(line.split()[1]) / 1024))
        except OSError:
            return
        await asyncio.sleep(1.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(sessions: int, seconds: float) -> tuple[Stats, list[tuple[float, float]]]:
    from playwright.async_api import async_playwright

    stats, memory = Stats(), []
    with Server() as server:
        async with async_playwright() as p:
            chromium = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                await warm_up(chromium, server.url)
                cpu_before = cpu_seconds(server.proc.pid)
                deadline = time.monotonic() + seconds
                await asyncio.gather(
                    sample_memory(server.proc.pid, deadline, memory),
                    *(session(n, chromium, server.url, deadline, stats) for n in range(sessions)),
                )
                stats.server_cpu_s = cpu_seconds(server.proc.pid) - cpu_before
            finally:
                await chromium.close()
    return stats, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    reason = chromium_missing_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    stats, memory = asyncio.run(asyncio.wait_for(run(args.sessions, args.seconds), args.seconds * 2 + 120))
    # the memory trend, sample by sample, for the record
    trend = ", ".join(f"{t:.0f}s {m:.0f}" for t, m in memory[:: max(1, len(memory) // 12)])
    cores = os.cpu_count() or 1
    thirds = [
        max((m for t, m in memory if a * args.seconds / 3 <= t < (a + 1) * args.seconds / 3), default=float("nan"))
        for a in range(3)
    ]
    rows = [
        ["sessions × seconds", f"{args.sessions} × {args.seconds:.0f}"],
        ["pages loaded", stats.page_loads],
        ["slider moves", stats.moves],
        ["errors", len(stats.errors)],
        ["slider round trip p50", f"{median(stats.latencies):.0f} ms"],
        ["slider round trip p95", f"{percentile(stats.latencies, 95):.0f} ms"],
        [
            "server CPU time during the run",
            f"{stats.server_cpu_s:.0f} s of {cores * args.seconds:.0f} s on {cores} cores",
        ],
        ["server memory, peak", f"{max(m for _, m in memory):.0f} MB"],
        ["server memory, peak in each third of the run", " → ".join(f"{m:.0f} MB" for m in thirds)],
        ["server memory over time (MB)", trend],
    ]
    body = (
        "Concurrent chromium sessions walking every page and moving sliders, one server, localhost; "
        "the 2-core machine runs the browser and the server together.\n\n" + table(["measure", "value"], rows)
    )
    if stats.errors:
        body += "\n\nErrors:\n\n" + "\n".join(f"- {e}" for e in stats.errors[:20])
    publish("load", "Many visitors", body)
    raise SystemExit(1 if stats.errors else 0)


if __name__ == "__main__":
    main()
