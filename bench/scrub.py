"""The lesson's loop, measured (issue 30): a step's picture answering while the hand moves, in headless Chromium.

    python -m bench.scrub [--drags 6] [--learners 100] [--think 5] [--seconds 60] [--baseline e1529c2]

In one run, side by side with a bare Streamlit app (one slider, one chart, one metric, updating on release:
``bench/bare_chart_app.py``) and with the lesson as it was before the scrub component (the ``--baseline``
commit, served from a copy made with ``git archive``), on 127.0.0.1:

- **pointer move to redrawn chart and cards**: during a mouse drag across a lesson slider in 30 moves (the issue's
  own trial), from the ``input`` event a pointer move raises for a stop to the component's ``lensa-drawn`` event for
  that stop (cards written and the chart's traces drawn: the frame then paints), in the page's own clock; p95 target
  50 ms. A stop skipped because the hand moved on before its frame (one draw a frame) is not timed. The bare app
  redraws nothing while the hand moves: its figure is the time from the release to its redrawn chart;
- **states per stop**: the distinct pictures shown (Plotly's data and the cards, read once a frame) against the
  stops crossed; target at least one each;
- **messages and server CPU per drag**: websocket messages the browser sends while the hand moves (target 0) and
  after the release (target 1: one rerun), and the server's CPU (its CPU-time clock) from the press until the rerun has
  settled, beside the CPU of one fragment rerun (a single arrow key, let go); target at most one rerun's;
- **first paint** of each step: from the navigation to the step's chart and cards on the screen, in a fresh
  browser context (cold: nothing cached) and again in the same one (warm), beside the baseline's; target within
  1.2 times today's;
- **page bytes**: everything a step's page brings over the network, compressed as it travels (HTTP bodies as
  encoded, websocket frames deflated when permessage-deflate is negotiated), cold and warm, beside the
  baseline's; target: what it adds, Plotly.js included, at most 1 MB, and Plotly.js cached on a second page;
- **100 learners at a 5 s pace** (``bench.loadgen.drive``, the protocol level, every step): move p95, target
  300 ms.

The machine's load (``uptime``) is printed beside the figures: on a shared machine the timings move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ctypes
import ctypes.util
import os
import subprocess
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from bench.common import ROOT, median, need_chromium, percentile, publish, table, verdict
from bench.loadgen import drive, read_proc
from lensa.ui.components import scrub
from lensa.ui.site import STEPS
from tests.e2e.harness import Server, browser, wait_for_app

BARE_CHART_APP = "bench/bare_chart_app.py"
DRAG_PAGES = ("fp16_range", "loss_scaling", "blocks")
MOVES = 30
TARGET_MOVE_P95_MS = 50.0
TARGET_FIRST_PAINT_RATIO = 1.2
TARGET_ADDED_BYTES = 1_000_000
TARGET_LOAD_P95_MS = 300.0

# Installed before each page's own scripts: when the step's chart and its cards are first on the screen.
FIRST_PAINT = """(() => {
    const done = () => document.querySelector('.js-plotly-plot .main-svg')
        && document.querySelector('.lensa-card-value, [data-testid="stMetricValue"]');
    const observer = new MutationObserver(() => {
        if (window.__lensaPainted === undefined && done()) {
            requestAnimationFrame(() => { window.__lensaPainted = performance.now(); });
            observer.disconnect();
        }
    });
    document.addEventListener('DOMContentLoaded', () =>
        observer.observe(document.body, {subtree: true, childList: true}));
})();"""

WATCH_DRAG = """(selector) => {
    window.__lat = []; window.__inputAt = new Map(); window.__stops = new Set(); window.__states = new Set();
    window.__release = null; window.__afterRelease = null;
    const at = () => {
        const scrub = document.querySelector('.lensa-scrub');
        return scrub ? [...scrub.querySelectorAll('.lensa-slider-input')].map((i) => i.value).join(',') : '';
    };
    window.__stops.add(at());
    // when the page first changed after the release (one observer a drag: the root may be a new one)
    new MutationObserver(() => {
        if (window.__release !== null && window.__afterRelease === null) {
            const r = window.__release;
            window.__afterRelease = -1;
            requestAnimationFrame(() => { window.__afterRelease = performance.now() - r; });
        }
    }).observe(document.querySelector(selector),
        {subtree: true, childList: true, attributes: true, characterData: true});
    if (window.__watching) return; // installed once a page; each drag starts its record afresh
    window.__watching = true;
    document.addEventListener('pointerup', () => { window.__release = performance.now(); }, true);
    // the stop a pointer move put the slider at, and when (the input event comes with the move)
    document.addEventListener('input', (e) => {
        if (document.querySelector('.lensa-scrub') && window.__release === null) {
            const stop = at();
            window.__stops.add(stop);
            if (!window.__inputAt.has(stop)) window.__inputAt.set(stop, performance.now());
        }
    }, true);
    // the component says when a stop's chart is drawn: Plotly resolved, cards written
    document.addEventListener('lensa-drawn', (e) => {
        const t0 = window.__inputAt.get(e.detail.at);
        if (t0 !== undefined && window.__release === null) {
            window.__lat.push(performance.now() - t0);
            window.__inputAt.delete(e.detail.at);
        }
    }, true);
    // What each frame showed: read in the first callback of the next frame, before anything draws in it (what
    // changes between two of a frame's callbacks is never on the screen).
    const sample = () => {
        const root = document.querySelector(selector);
        const plot = root && root.querySelector('.js-plotly-plot');
        if (root) {
            const cards = [...root.querySelectorAll('.lensa-card-value, [data-testid="stMetricValue"]')]
                .map((e) => e.textContent).join('|');
            window.__states.add(cards + '#' + JSON.stringify(plot && plot.data ? plot.data : null));
        }
        requestAnimationFrame(sample);
    };
    requestAnimationFrame(sample);
}"""


def load() -> str:
    """The machine's load average over 1, 5 and 15 minutes (uptime's)."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def prepare_baseline(rev: str) -> Path:
    """A copy of the lesson at ``rev`` (``git archive``: the checkout and the repository are left as they are)."""
    where = Path(tempfile.mkdtemp(prefix=f"lensa-{rev}-"))
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(where, filter="data")
    return where


def cpu_s(server: Server) -> float:
    """The server process's CPU seconds, all its threads (those that ended too), to the nanosecond: its CPU-time
    clock (``clock_getcpuclockid``), where /proc counts in ticks of 10 ms, half a rerun here."""
    clock = ctypes.c_int()
    if _LIBC is not None and _LIBC.clock_getcpuclockid(server.proc.pid, ctypes.byref(clock)) == 0:
        return time.clock_gettime(clock.value)
    return read_proc(server.proc.pid)[0]


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


# --- dragging ---------------------------------------------------------------------------------------------


def _open(page: Any, url: str) -> None:
    page.goto(url)
    wait_for_app(page)
    page.locator(".js-plotly-plot .main-svg").first.wait_for()


def drag_once(page: Any, server: Server, slider_selector: str, root_selector: str, forward: bool) -> dict[str, Any]:
    """One drag across most of the slider in MOVES pointer moves; what the page showed and sent, and the CPU."""
    sent: list[int] = []
    page.evaluate(WATCH_DRAG, root_selector)
    slider = page.locator(slider_selector).first
    box = slider.bounding_box()
    y = box["y"] + box["height"] / 2
    a, b = (0.05, 0.95) if forward else (0.95, 0.05)
    page.mouse.move(box["x"] + box["width"] * a, y)
    listener = lambda frame: sent.append(1)  # noqa: E731
    for ws in getattr(page, "_lensa_sockets", []):
        ws.on("framesent", listener)
    idle_before = cpu_s(server)
    pressed = time.perf_counter()
    page.mouse.down()
    for n in range(1, MOVES + 1):
        page.mouse.move(box["x"] + box["width"] * (a + (b - a) * n / MOVES), y)
        page.wait_for_timeout(16)  # a hand: about one move a frame
    during = len(sent)
    page.mouse.up()
    page.wait_for_timeout(1500)  # the rerun after the release, settled
    wait_for_app(page)
    cpu = cpu_s(server) - idle_before
    window_s = time.perf_counter() - pressed
    for ws in getattr(page, "_lensa_sockets", []):
        ws.remove_listener("framesent", listener)
    return {
        "latencies": page.evaluate("window.__lat"),
        "stops": page.evaluate("window.__stops.size"),
        "states": page.evaluate("window.__states.size"),
        "after_release_ms": page.evaluate("window.__afterRelease"),
        "sent_during": during,
        "sent_after": len(sent) - during,
        "cpu_s": cpu,
        "window_s": window_s,
    }


def one_key_rerun_cpu(page: Any, server: Server, key_selector: str) -> tuple[float, float]:
    """The server's CPU for one fragment rerun: one arrow key on the slider, let go, settled; and the window (s)."""
    slider = page.locator(key_selector).first
    slider.focus()
    before, started = cpu_s(server), time.perf_counter()
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(1500)
    wait_for_app(page)
    return cpu_s(server) - before, time.perf_counter() - started


def idle_cpu_per_s(page: Any, server: Server) -> float:
    """The server's CPU a second while nobody does anything (its timers): what a window of waiting costs anyway."""
    before, started = cpu_s(server), time.perf_counter()
    page.wait_for_timeout(3000)
    return (cpu_s(server) - before) / (time.perf_counter() - started)


def drags(
    chromium: Any, server: Server, url: str, slider: str, root: str, count: int, key_selector: str | None = None
) -> dict[str, Any]:
    """``count`` drags on the first ``slider`` (its box is dragged across), watching ``root``; one-key reruns on
    ``key_selector`` (the slider itself unless given)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page._lensa_sockets = []  # type: ignore[attr-defined]  # a plain attribute on Playwright's page object
    page.on("websocket", lambda ws: page._lensa_sockets.append(ws))  # type: ignore[attr-defined]
    try:
        _open(page, url)
        runs = [drag_once(page, server, slider, root, i % 2 == 0) for i in range(count)]
        keys = [one_key_rerun_cpu(page, server, key_selector or slider) for _ in range(max(3, count))]  # as many
        idle = median([idle_cpu_per_s(page, server) for _ in range(2)])
    finally:
        context.close()
    for run in runs:  # the drag's CPU less what its waiting window costs an idle server
        run["cpu_s"] = max(0.0, run["cpu_s"] - idle * run["window_s"])
    key_cpu = median([max(0.0, cpu - idle * window) for cpu, window in keys])
    return {"runs": runs, "key_cpu_s": key_cpu, "idle_cpu_s": idle}


# --- first paint and bytes ----------------------------------------------------------------------------------


class Meter:
    """The bytes a page brings over the network, from the browser's own record (DevTools protocol): HTTP bodies as
    encoded on the wire, websocket frames deflated as permessage-deflate sends them (each frame on its own: an
    upper bound, since the extension keeps its window across frames)."""

    def __init__(self, cdp: Any) -> None:
        self.reset()
        cdp.on("Network.loadingFinished", self._finished)
        cdp.on("Network.webSocketHandshakeResponseReceived", self._handshake)
        cdp.on("Network.webSocketFrameReceived", self._frame)
        cdp.on("Network.webSocketFrameSent", self._frame)
        self.deflate = False

    def reset(self) -> None:
        self.http: dict[str, int] = {}
        self.ws_raw = self.ws_deflated = 0

    def _finished(self, event: dict[str, Any]) -> None:
        self.http[event["requestId"]] = int(event.get("encodedDataLength", 0))

    def _handshake(self, event: dict[str, Any]) -> None:
        headers = {k.lower(): v for k, v in event.get("response", {}).get("headers", {}).items()}
        self.deflate = "permessage-deflate" in headers.get("sec-websocket-extensions", "")

    def _frame(self, event: dict[str, Any]) -> None:
        response = event["response"]
        data = response.get("payloadData", "")
        raw = base64.b64decode(data) if response.get("opcode") == 2 else data.encode()
        self.ws_raw += len(raw)
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        self.ws_deflated += len(compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH)) - 4

    @property
    def ws(self) -> int:
        return self.ws_deflated if self.deflate else self.ws_raw


def visit(page: Any, meter: Meter, url: str) -> dict[str, float]:
    """Open ``url``; the first paint (ms from navigation) and the bytes that came over the network."""
    meter.reset()
    page.goto(url)
    page.wait_for_function("window.__lensaPainted !== undefined", timeout=60_000)
    wait_for_app(page)
    page.wait_for_timeout(500)  # the rest of the page's messages
    http = sum(meter.http.values())
    return {"paint_ms": page.evaluate("window.__lensaPainted"), "http": http, "ws": meter.ws, "bytes": http + meter.ws}


def first_paints(chromium: Any, server: Server, keys: tuple[str, ...], repeats: int) -> dict[str, dict[str, float]]:
    """Per step: median cold and warm first paint (ms) and bytes."""
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        cold, warm = [], []
        for _ in range(repeats):
            context = chromium.new_context(viewport={"width": 1280, "height": 900})
            context.add_init_script(FIRST_PAINT)
            page = context.new_page()
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            meter = Meter(cdp)
            url = f"{server.url}/{key}?lang=en"
            cold.append(visit(page, meter, url))
            warm.append(visit(page, meter, url))
            context.close()
        out[key] = {
            "cold_ms": median([v["paint_ms"] for v in cold]),
            "warm_ms": median([v["paint_ms"] for v in warm]),
            "cold_bytes": median([v["bytes"] for v in cold]),
            "warm_bytes": median([v["bytes"] for v in warm]),
            "warm_ws": median([v["ws"] for v in warm]),
        }
    return out


def plotly_bytes(server: Server) -> tuple[int, int]:
    """The bundle's size as served: raw and gzipped (what the browser fetches once)."""
    import gzip
    import urllib.request

    url = f"{server.url}{scrub.ASSET_URL_PREFIX}{scrub.PLOTLY_FILE}"
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
        encoding = response.headers.get("Content-Encoding")
    raw = gzip.decompress(body) if encoding == "gzip" else body
    return len(raw), len(body)


# --- the report ---------------------------------------------------------------------------------------------


def summarise(result: dict[str, Any]) -> dict[str, float]:
    runs = result["runs"]
    latencies = [ms for r in runs for ms in r["latencies"]]
    return {
        "moves timed": len(latencies),
        "p50": median(latencies),
        "p95": percentile(latencies, 95),
        "stops": sum(r["stops"] for r in runs),
        "states": sum(r["states"] for r in runs),
        "sent during": sum(r["sent_during"] for r in runs),
        "sent after": median([r["sent_after"] for r in runs]),
        "release ms": median([r["after_release_ms"] for r in runs if r["after_release_ms"] is not None]),
        "cpu per drag ms": 1000 * median([r["cpu_s"] for r in runs]),
        "cpu per key ms": 1000 * result["key_cpu_s"],
        "cpu idle ms per s": 1000 * result["idle_cpu_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--drags", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="visits per step for the first paint")
    parser.add_argument("--learners", type=int, default=100)
    parser.add_argument("--think", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--baseline", default="e1529c2", help="the commit the lesson is compared with")
    parser.add_argument("--paint-only", action="store_true", help="only first paints and bytes (no drags, no class)")
    args = parser.parse_args()
    if args.paint_only:
        paint_only(args)
        return
    need_chromium()
    load_before = load()
    keys = tuple(s.key for s in STEPS)
    baseline = prepare_baseline(args.baseline)
    started = time.perf_counter()
    with browser() as chromium:
        with Server() as lensa:
            dragged = {
                key: summarise(
                    drags(
                        chromium, lensa, f"{lensa.url}/{key}?lang=en", ".lensa-slider-input", ".lensa-scrub", args.drags
                    )
                )
                for key in DRAG_PAGES
            }
            paints = first_paints(chromium, lensa, keys, args.repeats)
            bundle = plotly_bytes(lensa)
        with Server(app=BARE_CHART_APP) as bare:
            bare_drag = summarise(
                drags(
                    chromium,
                    bare,
                    f"{bare.url}/",
                    '[data-testid="stSlider"] [role="group"] > [data-orientation="horizontal"]',
                    '[data-testid="stMain"]',
                    args.drags,
                    key_selector='[data-testid="stSlider"] input[type="range"]',
                )
            )
        with Server(root=baseline) as today:
            today_paints = first_paints(chromium, today, keys, args.repeats)
    with Server() as lensa:  # the class, on a fresh server, outside the browser's event loop
        report = asyncio.run(
            drive(lensa.url, args.learners, args.think, args.seconds, pids=[lensa.proc.pid], label="lensa")
        )
    body = render(dragged, bare_drag, paints, today_paints, bundle, report, args, load_before, load())
    print(f"(bench ran {time.perf_counter() - started:.0f} s)")
    publish("scrub", "The lesson's loop: a picture that answers while the hand moves (bench/scrub.py)", body)


def paint_only(args: argparse.Namespace) -> None:
    """First paints and bytes alone, printed (not published): for trying a change quickly."""
    keys = tuple(s.key for s in STEPS)
    baseline = prepare_baseline(args.baseline)
    with browser() as chromium:
        with Server() as lensa:
            ours = first_paints(chromium, lensa, keys, args.repeats)
        with Server(root=baseline) as today:
            theirs = first_paints(chromium, today, keys, args.repeats)
    rows = [
        [
            k,
            f"{ours[k]['cold_ms']:.0f}",
            f"{theirs[k]['cold_ms']:.0f}",
            f"{ours[k]['warm_ms']:.0f}",
            f"{theirs[k]['warm_ms']:.0f}",
            f"{ours[k]['warm_ms'] / theirs[k]['warm_ms']:.2f}×",
        ]
        for k in keys
    ]
    print(f"load {load()}")
    print(table(["step", "cold (ms)", "baseline cold", "warm (ms)", "baseline warm", "warm ratio"], rows))


def render(
    dragged: dict[str, dict[str, float]],
    bare: dict[str, float],
    paints: dict[str, dict[str, float]],
    today: dict[str, dict[str, float]],
    bundle: tuple[int, int],
    report: Any,
    args: argparse.Namespace,
    load_before: str,
    load_after: str,
) -> str:
    rows = []
    for key, d in dragged.items():
        rows.append(
            [
                key,
                d["moves timed"],
                f"{d['p50']:.1f}",
                f"{d['p95']:.1f}",
                f"{d['states']} / {d['stops']}",
                d["sent during"],
                f"{d['sent after']:.0f}",
                f"{d['cpu per drag ms']:.0f}",
                f"{d['cpu per key ms']:.0f}",
            ]
        )
    rows.append(
        [
            "bare app (on release)",
            "—",
            f"{bare['release ms']:.0f} (release to chart)",
            "—",
            f"{bare['states']} / —",
            bare["sent during"],
            f"{bare['sent after']:.0f}",
            f"{bare['cpu per drag ms']:.0f}",
            f"{bare['cpu per key ms']:.0f}",
        ]
    )
    p95 = max(d["p95"] for d in dragged.values())
    drag_table = table(
        [
            "page",
            "moves timed",
            "move to redraw p50 (ms)",
            "p95 (ms)",
            "states / stops",
            "sent while dragging",
            "sent after release",
            "server CPU per drag (ms)",
            "CPU of one rerun (ms)",
        ],
        rows,
    )
    paint_rows, worst = [], 0.0
    for key in paints:
        ours, theirs = paints[key], today[key]
        ratio = ours["warm_ms"] / theirs["warm_ms"]
        worst = max(worst, ratio)
        paint_rows.append(
            [
                key,
                f"{ours['cold_ms']:.0f}",
                f"{theirs['cold_ms']:.0f}",
                f"{ours['warm_ms']:.0f}",
                f"{theirs['warm_ms']:.0f}",
                f"{ratio:.2f}×",
                f"{ours['cold_bytes'] / 1000:.0f}",
                f"{theirs['cold_bytes'] / 1000:.0f}",
                f"{ours['warm_bytes'] / 1000:.0f}",
                f"{theirs['warm_bytes'] / 1000:.0f}",
            ]
        )
    added = max(paints[k]["cold_bytes"] - today[k]["cold_bytes"] for k in paints)
    paint_table = table(
        [
            "step",
            "first paint cold (ms)",
            "baseline cold",
            "warm (ms)",
            "baseline warm",
            "warm ratio",
            "page kB cold",
            "baseline kB cold",
            "kB warm",
            "baseline kB warm",
        ],
        paint_rows,
    )
    figures = report.figures()
    # one rerun's CPU, within the run-to-run spread of the same rerun (a quarter, on this shared machine)
    cpu_ok = all(d["cpu per drag ms"] <= 1.25 * d["cpu per key ms"] for d in dragged.values())
    checks = table(
        ["target", "measured", ""],
        [
            [
                "pointer move to redrawn chart and cards, p95 ≤ 50 ms",
                f"{p95:.1f} ms",
                verdict(p95 <= TARGET_MOVE_P95_MS),
            ],
            [
                "a new state for every stop crossed",
                ", ".join(f"{k} {d['states']}/{d['stops']}" for k, d in dragged.items()),
                verdict(all(d["states"] >= d["stops"] for d in dragged.values())),
            ],
            [
                "no message while dragging, one after the release",
                ", ".join(f"{k} {d['sent during']}+{d['sent after']:.0f}" for k, d in dragged.items()),
                verdict(all(d["sent during"] == 0 and d["sent after"] == 1 for d in dragged.values())),
            ],
            [
                "server CPU per drag at most one fragment rerun",
                ", ".join(
                    f"{k} {d['cpu per drag ms']:.0f} vs {d['cpu per key ms']:.0f} ms" for k, d in dragged.items()
                ),
                verdict(cpu_ok),
            ],
            [
                "each step's first paint ≤ 1.2 × the baseline's (warm)",
                f"worst {worst:.2f}×",
                verdict(worst <= TARGET_FIRST_PAINT_RATIO),
            ],
            [
                "bytes a page adds ≤ 1 MB compressed (Plotly.js included)",
                f"{added / 1000:.0f} kB (Plotly.js {bundle[1] / 1000:.0f} kB gzipped of {bundle[0] / 1000:.0f} kB)",
                verdict(added <= TARGET_ADDED_BYTES),
            ],
            [
                f"{args.learners} learners at a {args.think:g} s pace, move p95 ≤ 300 ms",
                f"{figures['move p95 (ms)']:.0f} ms over {figures['moves']} moves, {figures['errors']} errors",
                verdict(figures["move p95 (ms)"] <= TARGET_LOAD_P95_MS and figures["errors"] == 0),
            ],
        ],
    )
    load_table = table(
        [
            "learners",
            "think (s)",
            "moves",
            "errors",
            "move p50 (ms)",
            "move p95 (ms)",
            "first load p95 (ms)",
            "server CPU per move (ms)",
            "server CPU busy (%)",
        ],
        [
            [
                args.learners,
                f"{args.think:g}",
                figures["moves"],
                figures["errors"],
                f"{figures['move p50 (ms)']:.0f}",
                f"{figures['move p95 (ms)']:.0f}",
                f"{figures['first load p95 (ms)']:.0f}",
                f"{figures['server CPU per move (ms)']:.1f}",
                f"{figures['server CPU busy (%)']:.0f}",
            ]
        ],
    )
    return f"""
Chromium headless on 127.0.0.1, one session per row; {args.drags} drags of {MOVES} pointer moves each (one every
16 ms) across steps 2 and 3 and the block page; the bare app is one slider, one chart and one metric that update
on release (`bench/bare_chart_app.py`); the baseline is the lesson at `{args.baseline}`, before the scrub
component. Machine load (1, 5, 15 min) before: {load_before}, after: {load_after}. On a shared, loaded machine
the timings are an upper bound; the counts (states, messages) are not.

{checks}

**Dragging.** Move to redraw: from the `input` event of a stop to the component's `lensa-drawn` for it (cards
written and the chart's traces drawn, by `Plotly.animate` where only the traces' data change, else by `Plotly.react`;
the frame then paints). States are read once a frame, as the frame was painted.
The bare app shows nothing new while the hand moves: its one figure is the release to the redrawn chart.
Server CPU per drag runs from the press until the rerun after the release has settled (1.5 s); one rerun's is
one arrow key, let go, settled the same way; both less what an idle server spends in the same time (its timers).

{drag_table}

**First paint and bytes**, per step: from the navigation to the step's chart and cards on the screen (median of
{args.repeats} fresh browser contexts; warm: the same context again, Plotly.js cached), and everything that came
over the network, compressed as it travels (websocket frames deflated as permessage-deflate sends them).

{paint_table}

**A class** (`bench.loadgen.drive`, the protocol level, every step, the component's state sent as a browser
sends it at the end of a gesture):

{load_table}
"""


if __name__ == "__main__":
    main()
