"""A class of learners, simulated at the protocol level: Streamlit's own websocket messages, no browser.

    python -m bench.loadgen --learners 100 --think 5 --seconds 60
    python -m bench.loadgen --learners 40 --think 1 --seconds 60 --ramp 10
    python -m bench.loadgen --url http://127.0.0.1:8080 --learners 200 --think 5   # a running server or balancer

Each learner is what a browser tab does to the server, and no more: an HTTP
GET of the page (which sets a balancer's affinity cookie, as a browser's
would), a websocket on ``/_stcore/stream`` with that cookie, a first script
run of its page, then, after a think time, a move of the page's first slider
by one stop, again and again. The learners are spread over the lesson
steps of ``lensa.ui.site.STEPS`` (learner i opens step i mod their number)
and arrive spread over ``--ramp``
seconds. The client keeps each learner's query string equal to the page's
latest URL, as the browser does, so the app reads a move as a move and not
as a new shared link.

What counts:

- a move is timed from sending ``rerun_script`` to ``script_finished``; the
  slider must stay at the new position and the page must change (a move
  that changes nothing is an error); how many moves changed the metric
  cards is reported too (on step 3 the middle of the scale range changes
  only the text, as it should: nothing rounds to 0 and nothing overflows).
  A lesson slider is a scrub component (``lensa.ui.components.scrub``): its
  move is what the component sends at the end of a gesture, its state as
  JSON (a gesture id and the stop's index), and its cards are read from the
  frames the server sent, at the stop the server says;
- an error is an exception element, a run that did not finish successfully,
  a disconnect, or no answer within ``--timeout`` seconds;
- a first load is timed from the HTTP GET to the first run's
  ``script_finished``;
- the server's CPU time and memory come from ``/proc/PID`` (this machine
  only), sampled every second.

Without ``--url`` the run starts two fresh servers in turn on free local
ports, this app and a bare Streamlit app (one slider and one metric,
``bench/bare_app.py``), drives the same learners against each, and reports
every figure for both and as a ratio. With ``--url`` it drives that address
only (a balancer in front of replicas, say); a websocket answer's
``X-Lensa-Replica`` header, when present, records which replica a learner
landed on, so stickiness and failover can be checked.

Bounded: 127.0.0.1 only, at most ``--learners`` connections, everything
stops after ``--seconds`` (plus ``--timeout`` for moves in flight), and
each learner reconnects at most ``MAX_RECONNECTS`` times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, median, percentile, publish, table
from lensa.ui.components import scrub
from lensa.ui.site import PAGES, STEPS, PageInfo


def learner_page(info: PageInfo) -> str:
    """The name a learner opens ``info`` by: its key, or "app" for the entry page (the server's default page)."""
    return "app" if info.file == "app.py" else info.key


LESSON_PAGES = tuple(learner_page(p) for p in STEPS)  # every step, in order: each draws a slider and metric cards
ALL_PAGES = tuple(learner_page(p) for p in PAGES)
SUBPROTOCOLS = ["streamlit", "PLACEHOLDER_AUTH_TOKEN"]
MAX_RECONNECTS = 3
MAX_LEARNERS = 1000
REPLICA_HEADER = "X-Lensa-Replica"


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


# --- one learner ------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one script run sent back."""

    ms: float
    metrics: tuple[str, ...] = ()
    slider_id: str = ""
    slider_options: tuple[str, ...] = ()
    slider_value: str = ""
    slider_fragment: str = ""  # the fragment that drew the slider ("" when the page's full run did)
    scrub_names: tuple[str, ...] = ()  # a scrub component's sliders (its first is the one the learner moves)
    kinds: tuple[str, ...] = ()  # the kind of each element drawn, in the order the server sent them
    fragment_run: bool = False  # the run was a fragment's alone, not the page's
    query_string: str | None = None  # the URL the page wrote, when it wrote one
    digest: int = 0  # of everything the run drew, to tell whether a move changed the page
    problems: list[str] = field(default_factory=list)


@dataclass
class Learner:
    """One simulated browser tab on one page."""

    n: int
    base_url: str
    page: str
    lang: str
    rng: random.Random
    expects_slider: bool = True  # a lesson page (or the bare app): it draws a slider and metric cards
    first_load_ms: float | None = None
    move_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)  # the replica of each connection, in order
    reconnects: int = 0
    metric_changes: int = 0  # moves after which the metric cards showed other numbers
    restored: list[bool] = field(default_factory=list)  # after a reconnect: the page came back as the URL said
    query_string: str = ""
    cookie: str = ""
    largest_sent: int = 0  # bytes of the largest websocket message the learner sent
    largest_received: int = 0  # and received
    _page_hash: str = ""
    _direction: int = 1
    _gestures: int = 0
    _state: RunResult | None = None

    def __post_init__(self) -> None:
        self.query_string = f"lang={self.lang}"

    # the transport

    @property
    def last_run(self) -> RunResult | None:
        """What the learner's last script run sent back (None before the page was opened)."""
        return self._state

    def _get_page(self) -> None:
        """The HTTP GET a browser makes first; keeps any cookie the server (or balancer) sets."""
        path = "" if self.page == "app" else self.page
        url = f"{self.base_url}/{path}?{self.query_string}"
        request = urllib.request.Request(url, headers={"Cookie": self.cookie} if self.cookie else {})
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            for header in response.headers.get_all("Set-Cookie") or []:
                pair = header.split(";", 1)[0].strip()
                if "=" in pair:
                    jar = dict(p.split("=", 1) for p in self.cookie.split("; ") if "=" in p)
                    name, value = pair.split("=", 1)
                    jar[name] = value
                    self.cookie = "; ".join(f"{k}={v}" for k, v in jar.items())

    async def _connect(self):
        import websockets

        ws_url = self.base_url.replace("http://", "ws://", 1) + "/_stcore/stream"
        headers = {"Cookie": self.cookie} if self.cookie else None
        ws = await websockets.connect(
            ws_url, subprotocols=SUBPROTOCOLS, additional_headers=headers, max_size=None, open_timeout=30
        )
        replica = ws.response.headers.get(REPLICA_HEADER)
        if replica:
            self.replicas.append(replica)
        return ws

    async def _run(self, ws, timeout_s: float, widget: tuple[str, str] | None = None) -> RunResult:
        """Send one rerun_script and read until script_finished."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        back = BackMsg()
        rerun = back.rerun_script
        rerun.query_string = self.query_string
        if self._page_hash:
            rerun.page_script_hash = self._page_hash
        else:
            rerun.page_name = self.page  # the first run: the page by name (see ../shared/STREAMLIT-PROTOCOL.md)
        if widget:
            state = rerun.widget_states.widgets.add()
            state.id = widget[0]
            if self._state is not None and self._state.scrub_names:
                # What the component sends when a gesture ends: a new gesture id and the stop's index.
                index = self._state.slider_options.index(widget[1])
                self._gestures += 1
                gesture = {"g": f"load-{self.n}-{self._gestures}", "v": {self._state.scrub_names[0]: index}}
                state.json_value = json.dumps({"value": gesture})
            else:
                state.string_array_value.data.append(widget[1])
            if self._state is not None and self._state.slider_fragment:
                # As a browser does: a widget drawn by a fragment reruns that fragment alone.
                rerun.fragment_id = self._state.slider_fragment
        started = time.perf_counter()
        payload = back.SerializeToString()
        self.largest_sent = max(self.largest_sent, len(payload))
        await ws.send(payload)
        metrics: list[str] = []
        drawn: list[bytes] = []
        kinds: list[str] = []
        result = RunResult(ms=0.0)
        async with asyncio.timeout(timeout_s):
            while True:
                msg = ForwardMsg()
                raw = await ws.recv()
                self.largest_received = max(self.largest_received, len(raw))
                msg.ParseFromString(raw)
                kind = msg.WhichOneof("type")
                if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                    element = msg.delta.new_element
                    drawn.append(element.SerializeToString())
                    what = element.WhichOneof("type")
                    kinds.append(what or "")
                    if what == "metric":
                        metrics.append(element.metric.body)
                    elif what == "slider" and not result.slider_id and "w.lang" not in element.slider.id:
                        result.slider_id = element.slider.id
                        result.slider_fragment = msg.delta.fragment_id
                        result.slider_options = tuple(element.slider.options)
                        # The server names the position only when it sets it (a URL, a page switch);
                        # otherwise the slider stays where the learner put it.
                        if element.slider.set_value and element.slider.raw_value:
                            result.slider_value = element.slider.raw_value[0]
                        else:
                            default = element.slider.default
                            result.slider_value = (
                                widget[1] if widget else result.slider_options[int(default[0])] if default else ""
                            )
                    elif (
                        what == "bidi_component"
                        and element.bidi_component.component_name == scrub.NAME
                        and not result.scrub_names
                    ):  # the lesson's own slider: it wins over one drawn before it in a setup expander
                        data = json.loads(element.bidi_component.json)
                        parts = [json.loads(p) for p in data["parts"]]
                        result.slider_id = element.bidi_component.id
                        result.slider_fragment = msg.delta.fragment_id
                        result.slider_options = tuple(parts[0]["stops"])
                        result.slider_value = parts[0]["stops"][data["at"][0]]
                        result.scrub_names = tuple(p["name"] for p in parts)
                        metrics[:0] = [
                            value
                            for block in scrub.frame_at(parts[0], data["at"][0])
                            if block["k"] == "cards"
                            for _, value in block["cards"]
                        ]
                    elif what == "exception":
                        result.problems.append(
                            f"exception: {element.exception.type}: {element.exception.message[:160]}"
                        )
                elif kind == "navigation" and not self._page_hash:
                    for app_page in msg.navigation.app_pages:
                        if app_page.url_pathname == self.page or (self.page == "app" and app_page.is_default):
                            self._page_hash = app_page.page_script_hash
                elif kind == "page_info_changed":
                    result.query_string = msg.page_info_changed.query_string
                elif kind == "script_finished":
                    result.ms = (time.perf_counter() - started) * 1000
                    ok = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)
                    result.fragment_run = msg.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
                    if msg.script_finished not in ok:
                        result.problems.append(f"run ended with status {msg.script_finished}")
                    break
        result.metrics = tuple(metrics)
        result.kinds = tuple(kinds)
        result.digest = hash(tuple(drawn))
        if result.query_string is not None:
            self.query_string = result.query_string
        return result

    # the behaviour

    def _next_position(self, state: RunResult) -> str:
        options = state.slider_options
        i = options.index(state.slider_value) if state.slider_value in options else 0
        if not 0 <= i + self._direction < len(options):
            self._direction = -self._direction
        return options[i + self._direction]

    async def open(self, timeout_s: float, arrival: float = 0.0):
        """Load the page as a browser would; returns the websocket (or None after an error)."""
        started = time.perf_counter()
        try:
            await asyncio.to_thread(self._get_page)
            ws = await self._connect()
            state = await self._run(ws, timeout_s)
        except Exception as exc:  # every failure is counted; the learner gives up or reconnects
            self.errors.append(f"first load: {type(exc).__name__}: {str(exc)[:120]}")
            return None
        self.errors.extend(state.problems)
        if self.expects_slider and (not state.slider_id or not state.metrics):
            self.errors.append("first load: the page drew no slider or no metrics")
        if self.first_load_ms is None:
            self.first_load_ms = (time.perf_counter() - started) * 1000
        self._state = state
        return ws

    async def move(self, ws, timeout_s: float) -> bool:
        """One slider move; False when the connection is gone."""
        before = self._state
        assert before is not None
        target = self._next_position(before)
        try:
            after = await self._run(ws, timeout_s, (before.slider_id, target))
        except TimeoutError:
            self.errors.append(f"move on {self.page}: no answer within {timeout_s:.0f} s")
            return False
        except Exception as exc:
            self.errors.append(f"move on {self.page}: {type(exc).__name__}: {str(exc)[:120]}")
            return False
        self.move_ms.append(after.ms)
        self.errors.extend(after.problems)
        if after.slider_value != target:
            self.errors.append(f"move on {self.page}: asked for {target}, the page shows {after.slider_value}")
        elif after.digest == before.digest:
            self.errors.append(f"move on {self.page} to {target}: the page did not change")
        elif after.metrics != before.metrics:
            self.metric_changes += 1
        self._state = after
        return True

    async def live(self, deadline: float, think_s: float, arrival_s: float, timeout_s: float) -> None:
        await asyncio.sleep(arrival_s)
        ws = await self.open(timeout_s)
        closed = asyncio.ensure_future(ws.wait_closed()) if ws is not None else None
        try:
            while ws is not None and closed is not None and time.monotonic() < deadline:
                pause = think_s * self.rng.uniform(0.5, 1.5)
                if time.monotonic() + pause >= deadline:
                    break
                # The think time, cut short when the server closes the connection: a browser notices at once
                # and reconnects, it does not wait for the learner's next move.
                await asyncio.wait({closed}, timeout=pause)
                if not closed.done() and await self.move(ws, timeout_s):
                    continue
                # The connection broke (a replica stopped, say): reconnect as the browser does, which reloads
                # the page from its URL; the slider must come back where the URL says it was.
                with contextlib.suppress(Exception):
                    await ws.close()
                if self.reconnects >= MAX_RECONNECTS:
                    break
                self.reconnects += 1
                expected = self._state.slider_value if self._state else None
                self._page_hash = ""
                ws = await self.open(timeout_s)
                closed.cancel()
                closed = asyncio.ensure_future(ws.wait_closed()) if ws is not None else None
                if ws is not None and self._state is not None:
                    self.restored.append(self._state.slider_value == expected)
        finally:
            if closed is not None:
                closed.cancel()
            if ws is not None:
                with contextlib.suppress(Exception):
                    await ws.close()


# --- a server, measured -----------------------------------------------------------------------------


@dataclass
class Sample:
    t_s: float
    cpu_s: float
    rss_mb: float


def read_proc(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and resident memory (MB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(
        int(line.split()[1]) / 1024
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return cpu, rss


async def sample_server(pids: Sequence[int], deadline: float, samples: list[Sample], every_s: float = 1.0) -> None:
    """CPU and memory of the server process(es), summed, every ``every_s`` until the deadline."""
    start = time.monotonic()
    while time.monotonic() < deadline:
        try:
            readings = [read_proc(pid) for pid in pids]
        except (OSError, StopIteration):
            return
        samples.append(Sample(time.monotonic() - start, sum(c for c, _ in readings), sum(m for _, m in readings)))
        await asyncio.sleep(every_s)


@dataclass
class Report:
    """One load run against one address."""

    label: str
    learners: list[Learner]
    seconds: float
    samples: list[Sample]

    @property
    def moves(self) -> list[float]:
        return [ms for learner in self.learners for ms in learner.move_ms]

    @property
    def first_loads(self) -> list[float]:
        return [learner.first_load_ms for learner in self.learners if learner.first_load_ms is not None]

    @property
    def errors(self) -> list[str]:
        return [f"learner {learner.n}: {e}" for learner in self.learners for e in learner.errors]

    @property
    def cpu_s(self) -> float:
        return self.samples[-1].cpu_s - self.samples[0].cpu_s if len(self.samples) > 1 else float("nan")

    @property
    def cpu_ms_per_move(self) -> float:
        """Server CPU per move, first loads included in the time (so it is an upper bound)."""
        return 1000 * self.cpu_s / len(self.moves) if self.moves else float("nan")

    @property
    def rss_mb(self) -> tuple[float, float]:
        """Resident memory at the start and the end of the run."""
        return (self.samples[0].rss_mb, self.samples[-1].rss_mb) if self.samples else (float("nan"),) * 2

    def figures(self) -> dict[str, float]:
        moves, loads = self.moves, self.first_loads
        wall = self.samples[-1].t_s - self.samples[0].t_s if len(self.samples) > 1 else float("nan")
        return {
            "moves": len(moves),
            "errors": len(self.errors),
            "moves that changed the metric cards (%)": 100
            * sum(learner.metric_changes for learner in self.learners)
            / max(1, len(moves)),
            "move p50 (ms)": median(moves),
            "move p95 (ms)": percentile(moves, 95),
            "move max (ms)": max(moves, default=float("nan")),
            "first load p50 (ms)": median(loads),
            "first load p95 (ms)": percentile(loads, 95),
            "first load max (ms)": max(loads, default=float("nan")),
            "server CPU per move (ms)": self.cpu_ms_per_move,
            "server CPU busy (%)": 100 * self.cpu_s / wall if wall else float("nan"),
            "server memory start (MB)": self.rss_mb[0],
            "server memory end (MB)": self.rss_mb[1],
        }


async def drive(
    base_url: str,
    learners: int,
    think_s: float,
    seconds: float,
    *,
    ramp_s: float | None = None,
    pages: Sequence[str] = LESSON_PAGES,
    pids: Sequence[int] = (),
    timeout_s: float = 30.0,
    seed: int = 0,
    label: str = "",
) -> Report:
    """Run ``learners`` learners against ``base_url`` for ``seconds``; sample ``pids`` meanwhile.

    Arrivals are spread uniformly over ``ramp_s`` (default: one think time);
    ``ramp_s=0`` makes every learner arrive in the same instant.
    """
    if not _is_loopback(base_url):
        raise ValueError(f"the load generator only drives this machine (127.0.0.1), not {base_url}")
    if not 0 < learners <= MAX_LEARNERS:
        raise ValueError(f"learners must be between 1 and {MAX_LEARNERS}")
    ramp = think_s if ramp_s is None else ramp_s
    rng = random.Random(seed)
    crowd = [
        Learner(n, base_url.rstrip("/"), pages[n % len(pages)], ("id", "en")[n % 2], random.Random(rng.random()))
        for n in range(learners)
    ]
    deadline = time.monotonic() + seconds
    samples: list[Sample] = []
    sampler = asyncio.create_task(sample_server(pids, deadline + timeout_s, samples)) if pids else None
    arrivals = [ramp * n / learners for n in range(learners)] if ramp else [0.0] * learners
    rng.shuffle(arrivals)
    hard_limit = seconds + ramp + 2 * timeout_s + 30
    await asyncio.wait_for(
        asyncio.gather(*(learner.live(deadline, think_s, arrivals[i], timeout_s) for i, learner in enumerate(crowd))),
        hard_limit,
    )
    if sampler:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        with contextlib.suppress(OSError, StopIteration):
            readings = [read_proc(pid) for pid in pids]
            samples.append(Sample(time.monotonic() - (deadline - seconds), *map(sum, zip(*readings, strict=True))))
    return Report(label or base_url, crowd, seconds, samples)


# --- the memory curve ---------------------------------------------------------------------------------


def memory_curve_svg(samples: Sequence[Sample], title: str, width: int = 720, height: int = 260) -> str:
    """The server's resident memory over the run as a small standalone SVG line chart."""
    if len(samples) < 2:
        raise ValueError("need at least two samples")
    left, right, top, bottom = 56, 16, 28, 36
    t_max = samples[-1].t_s or 1.0
    peak = max(s.rss_mb for s in samples)
    y_max = max(50.0, 50.0 * (int(peak * 1.15) // 50 + 1))
    x = lambda t: left + (width - left - right) * t / t_max  # noqa: E731
    y = lambda mb: top + (height - top - bottom) * (1 - mb / y_max)  # noqa: E731
    points = " ".join(f"{x(s.t_s):.1f},{y(s.rss_mb):.1f}" for s in samples)
    y_ticks = "".join(
        f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
        f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>'
        for v in (y_max * i / 4 for i in range(5))
    )
    minutes = max(1, round(t_max / 60))
    x_ticks = "".join(
        f'<text x="{x(t):.1f}" y="{height - bottom + 16}" text-anchor="middle">{t / 60:.0f} min</text>'
        for t in (t_max * i / minutes for i in range(minutes + 1))
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11" role="img" aria-label="{title}">'
        f'<rect width="100%" height="100%" fill="white"/><title>{title}</title>'
        f'<text x="{left}" y="16" font-size="13">{title}</text>{y_ticks}{x_ticks}'
        f'<text x="14" y="{top + (height - top - bottom) / 2:.0f}" transform="rotate(-90 14 '
        f'{top + (height - top - bottom) / 2:.0f})" text-anchor="middle">MB resident</text>'
        f'<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="{points}"/></svg>\n'
    )


# --- the command ----------------------------------------------------------------------------------------


BARE_APP = ROOT / "bench" / "bare_app.py"


def _fmt(value: float) -> str:
    if value != value:  # nan
        return "—"
    return f"{value:,.0f}" if abs(value) >= 10 or value == int(value) else f"{value:.1f}"


def compare_table(ours: Report, bare: Report | None) -> str:
    a = ours.figures()
    if bare is None:
        return table(["measure", ours.label], [[k, _fmt(v)] for k, v in a.items()])
    b = bare.figures()
    rows = []
    for key, value in a.items():
        ratio = value / b[key] if b[key] and ("(ms)" in key or "(MB)" in key) else float("nan")
        rows.append([key, _fmt(value), _fmt(b[key]), "—" if ratio != ratio else f"{ratio:.2f}×"])
    return table(["measure", ours.label, bare.label, "ratio"], rows)


def serve(app: str | None = None, extra_env: dict[str, str] | None = None):
    """A fresh server of ``app`` on a free port (the same launcher as ``make run``)."""
    from tests.e2e.harness import Server

    return Server(app=app, extra_env=extra_env)


async def _against(server, label: str, args: argparse.Namespace, pages: Sequence[str]) -> Report:
    return await drive(
        server.url,
        args.learners,
        args.think,
        args.seconds,
        ramp_s=args.ramp,
        pages=pages,
        pids=[server.proc.pid],
        label=label,
        timeout_s=args.timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--think", type=float, default=5.0, help="seconds between one learner's moves (mean)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--ramp", type=float, default=None, help="arrivals spread over this many seconds")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--url", help="drive this address only (127.0.0.1), e.g. a balancer")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare Streamlit app")
    parser.add_argument("--publish", metavar="NAME", help="write the table into docs/performance.md")
    parser.add_argument("--curve", metavar="SVG", help="draw the server's memory over the run (our app) here")
    args = parser.parse_args(argv)

    if args.url:
        report = asyncio.run(drive(args.url, args.learners, args.think, args.seconds, ramp_s=args.ramp))
        ours, bare = report, None
    else:
        with serve() as server:
            ours = asyncio.run(_against(server, "Lensa", args, LESSON_PAGES))
        bare = None
        if not args.no_bare:
            with serve(str(BARE_APP)) as server:
                bare = asyncio.run(_against(server, "bare app", args, ("app",)))
    body = (
        f"{args.learners} learners, {args.think:g} s think time, {args.seconds:g} s, arrivals over "
        f"{args.think if args.ramp is None else args.ramp:g} s; one server process on this machine.\n\n"
        + compare_table(ours, bare)
    )
    if args.curve and ours.samples:
        title = f"Server memory, {args.learners} learners at {args.think:g} s think time"
        Path(args.curve).write_text(memory_curve_svg(ours.samples, title))
        thirds = [
            max(
                (s.rss_mb for s in ours.samples if k * args.seconds / 3 <= s.t_s < (k + 1) * args.seconds / 3),
                default=0,
            )
            for k in range(3)
        ]
        body += "\n\nServer memory, peak in each third of the run: " + " → ".join(f"{m:.0f} MB" for m in thirds)
        body += f"; the curve: [{Path(args.curve).name}]({Path(args.curve).name})."
    errors = ours.errors + (bare.errors if bare else [])
    if errors:
        body += "\n\nErrors (first 10):\n\n" + "\n".join(f"- {e}" for e in errors[:10])
    if args.publish:
        publish(args.publish, args.publish.replace("_", " ").capitalize(), body)
    else:
        print(body)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
