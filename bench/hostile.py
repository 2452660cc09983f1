"""A class under attack: the learners of bench/loadgen.py, plus visitors who try to fill the server's memory.

    python -m bench.hostile                                  # 100 learners at 5 s, 5 hostile clients, 60 s
    python -m bench.hostile --learners 30 --seconds 30 --publish hostile_load

Two runs on fresh servers, the same learners in both: one alone, one with the
hostile clients. A hostile client has nothing but what any visitor has, its
own sessions and the XSRF cookie the server hands out, and for the whole run
does, again and again and as fast as the server answers:

- uploads a 100 MB file, honestly labelled (``Content-Length``);
- uploads a 100 MB file in chunks, with no length given (a streamed lie);
- uploads 20 MB files under fresh ids, never letting its page run again
  (Streamlit drops a session's unused files only when its script runs), in
  :data:`SESSIONS_PER_CLIENT` sessions, so together the clients ask the
  server to hold far more than its upload budget;
- sends a well-formed 50 MB ``BackMsg`` (one huge widget state) on a
  websocket.

What counts: the learners' errors and move p95 in both runs (the target: 0
errors, p95 within 2x of the run without hostile clients); the server's peak
resident memory against its budget (``LENSA_MEMORY_BUDGET_MB``); and what the
hostile clients got back, by answer. A refusal is 413, 429, 503 or a
websocket closed with 1009; anything else refused (a 500, a body with a
traceback) is counted as a failure of the server.

Bounded: 127.0.0.1 only, at most :data:`MAX_CLIENTS` hostile clients, every
request with a time-out, everything stops after ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from bench.common import ROOT, percentile, publish, table
from bench.loadgen import SUBPROTOCOLS, Report, _is_loopback, drive, read_proc

MAX_CLIENTS = 20
SESSIONS_PER_CLIENT = 6
BIG_MB = 100
RUN_MB = 20
BACKMSG_MB = 50
CHUNK = os.urandom(1024 * 1024)
REFUSALS = {"413", "429", "503", "ws 1009", "ws closed"}


# --- what any visitor can do ------------------------------------------------------------------------------------


def xsrf_cookie(base_url: str) -> str:
    """The XSRF cookie's value, as a browser gets it with its first requests."""
    host, port = _hostport(base_url)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", "/_stcore/health")
        response = conn.getresponse()
        response.read()
        for header in response.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            if name.strip() == "_streamlit_xsrf":
                return rest.split(";", 1)[0]
    finally:
        conn.close()
    raise RuntimeError("the server set no XSRF cookie")


def _hostport(base_url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(base_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


class Session:
    """A page open on a websocket (synchronous), kept open so the server counts the session as active."""

    def __init__(self, base_url: str, cookie: str, page: str = "loss_scaling", query: str = "lang=en&data=upload"):
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from websockets.sync.client import connect

        self.base_url, self.cookie = base_url, cookie
        ws_url = base_url.replace("http://", "ws://", 1) + "/_stcore/stream"
        self.ws = connect(
            ws_url,
            subprotocols=SUBPROTOCOLS,  # type: ignore[arg-type]
            additional_headers={"Cookie": f"_streamlit_xsrf={cookie}"},
            max_size=None,
            open_timeout=30,
            legacy=True,  # kept open across calls, closed by close()
        )
        back = BackMsg()
        back.rerun_script.page_name = page
        back.rerun_script.query_string = query
        self.ws.send(back.SerializeToString())
        self.id = ""
        self.largest_received = 0
        self.read_until_finished()

    def read_until_finished(self, timeout_s: float = 60) -> list[object]:
        """Messages up to the end of the script run (the session id is read from the first)."""
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        messages: list[object] = []
        deadline = time.monotonic() + timeout_s
        while True:
            raw = self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            self.largest_received = max(self.largest_received, len(raw))
            msg = ForwardMsg()
            msg.ParseFromString(raw)
            messages.append(msg)
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                self.id = msg.new_session.initialize.session_id
            elif kind == "script_finished":
                return messages

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def _multipart(size: int, boundary: str) -> tuple[bytes, bytes]:
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="run.npz"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head, f"\r\n--{boundary}--\r\n".encode()


def _body(size: int, boundary: str) -> Iterator[bytes]:
    head, tail = _multipart(size, boundary)
    yield head
    left = size
    while left > 0:
        piece = CHUNK[: min(left, len(CHUNK))]
        left -= len(piece)
        yield piece
    yield tail


def upload(
    base_url: str, session_id: str, cookie: str, size: int, *, chunked: bool = False, xsrf: bool = True
) -> tuple[str, str]:
    """PUT a file of ``size`` bytes; (what came back: the status or how the connection ended, the body's start)."""
    host, port = _hostport(base_url)
    boundary = uuid.uuid4().hex
    head, tail = _multipart(size, boundary)
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.putrequest("PUT", f"/_stcore/upload_file/{session_id}/{uuid.uuid4()}")
        conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
        conn.putheader("Cookie", f"_streamlit_xsrf={cookie}")
        if xsrf:
            conn.putheader("X-Xsrftoken", cookie)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        else:
            conn.putheader("Content-Length", str(len(head) + size + len(tail)))
        conn.endheaders()
        try:
            for piece in _body(size, boundary):
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped reading: its answer says why
        try:
            response = conn.getresponse()
            return str(response.status), response.read(400).decode(errors="replace")
        except (OSError, http.client.HTTPException) as exc:
            return f"closed ({type(exc).__name__})", ""
    finally:
        conn.close()


def huge_backmsg(session: Session, size: int) -> str:
    """Send a well-formed ``BackMsg`` of about ``size`` bytes (one widget's state); how the server answered."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from websockets.exceptions import ConnectionClosed

    back = BackMsg()
    state = back.rerun_script.widget_states.widgets.add()
    state.id = "$$ID-hostile"
    state.string_value = "x" * size
    try:
        session.ws.send(back.SerializeToString())
        session.read_until_finished(timeout_s=30)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        return f"ws {code}" if code is not None else "ws closed"
    except TimeoutError:
        return "ws no answer"
    return "ws accepted"


# --- a hostile client ------------------------------------------------------------------------------------------


@dataclass
class Hostile:
    """One visitor with a script, for ``seconds``."""

    base_url: str
    seconds: float
    sessions: int = SESSIONS_PER_CLIENT
    answers: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def _record(self, what: str, answer: tuple[str, str] | str) -> None:
        status, body = answer if isinstance(answer, tuple) else (answer, "")
        self.answers[f"{what}: {status}"] += 1
        if "Traceback" in body or (status.startswith("5") and status != "503"):
            self.failures.append(f"{what}: {status} {body[:200]}")

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        cookie = xsrf_cookie(self.base_url)
        sessions = [Session(self.base_url, cookie) for _ in range(self.sessions)]
        try:
            round_ = 0
            while time.monotonic() < deadline:
                s = sessions[round_ % len(sessions)]
                self._record("100 MB", upload(self.base_url, s.id, cookie, BIG_MB * 1024 * 1024))
                self._record("100 MB chunked", upload(self.base_url, s.id, cookie, BIG_MB * 1024 * 1024, chunked=True))
                for s2 in sessions:
                    if time.monotonic() >= deadline:
                        break
                    self._record("20 MB", upload(self.base_url, s2.id, cookie, RUN_MB * 1024 * 1024))
                if round_ % 3 == 0:
                    victim = Session(self.base_url, cookie)
                    self._record("50 MB BackMsg", huge_backmsg(victim, BACKMSG_MB * 1024 * 1024))
                    victim.close()
                round_ += 1
        finally:
            for s in sessions:
                s.close()


def attack(base_url: str, clients: int, seconds: float) -> list[Hostile]:
    """``clients`` hostile clients, each in its own thread, for ``seconds``."""
    if not _is_loopback(base_url):
        raise ValueError(f"only this machine (127.0.0.1), not {base_url}")
    if not 0 < clients <= MAX_CLIENTS:
        raise ValueError(f"clients must be between 1 and {MAX_CLIENTS}")
    crowd = [Hostile(base_url, seconds) for _ in range(clients)]

    def one(h: Hostile) -> None:
        try:
            h.run()
        except Exception as exc:  # counted: a hostile client that could not even start is a finding
            h.failures.append(f"client: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in crowd]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 180)
    return crowd


def attack_elsewhere(base_url: str, clients: int, seconds: float) -> tuple[Counter[str], list[str], float]:
    """:func:`attack` in a process of its own, so the hostile clients never hold the learners' interpreter lock.

    Returns the answers, the failures and the attacking process's CPU seconds.
    """
    command = [sys.executable, "-m", "bench.hostile", "--attack", base_url, "--clients", str(clients)]
    command += ["--seconds", str(seconds)]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300, check=False)
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return Counter(), [f"the attacking process failed: {out.stderr[-600:]}"], 0.0
    return Counter(result["answers"]), result["failures"], result["cpu_s"]


def _attack_main(base_url: str, clients: int, seconds: float) -> int:
    crowd = attack(base_url, clients, seconds)
    answers: Counter[str] = Counter()
    for h in crowd:
        answers.update(h.answers)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "answers": dict(answers),
        "failures": [f for h in crowd for f in h.failures],
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    print(json.dumps(result))
    return 0


# --- the comparison --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    report: Report
    peak_rss_mb: float
    clients: int
    answers: Counter[str]
    failures: list[str]
    client_cpu_pct: float  # the learners' process
    attacker_cpu_pct: float  # the hostile clients' process


def _peak_sampler(pid: int, stop: threading.Event, peak: list[float]) -> None:
    while not stop.wait(0.2):
        with contextlib.suppress(OSError, StopIteration):
            peak[0] = max(peak[0], read_proc(pid)[1])


def measure(
    learners: int,
    think: float,
    seconds: float,
    clients: int,
    env: dict[str, str] | None = None,
    ramp_s: float | None = None,
) -> Outcome:
    """One fresh server: the learners for ``seconds``, with ``clients`` hostile clients alongside (0: none)."""
    from tests.e2e.harness import Server

    with Server(extra_env=env) as server:
        cpu_before, wall_before = sum(os.times()[:2]), time.monotonic()
        stop, peak = threading.Event(), [0.0]
        sampler = threading.Thread(target=_peak_sampler, args=(server.proc.pid, stop, peak), daemon=True)
        sampler.start()
        outcome: list[tuple[Counter[str], list[str], float]] = []
        attacker = None
        if clients:
            attacker = threading.Thread(
                target=lambda: outcome.append(attack_elsewhere(server.url, clients, seconds)), daemon=True
            )
            attacker.start()
        report = asyncio.run(
            drive(
                server.url, learners, think, seconds, ramp_s=ramp_s, pids=[server.proc.pid], label=f"{clients} hostile"
            )
        )
        if attacker is not None:
            attacker.join(seconds + 240)
        stop.set()
        sampler.join()
        client_cpu = 100 * (sum(os.times()[:2]) - cpu_before) / (time.monotonic() - wall_before)
        wall = time.monotonic() - wall_before
        answers, failures, attacker_cpu = outcome[0] if outcome else (Counter(), [], 0.0)
        if "Traceback" in server.output():
            failures.append(f"server log: {server.output().split('Traceback', 1)[1][:400]}")
    return Outcome(report.label, report, peak[0], clients, answers, failures, client_cpu, 100 * attacker_cpu / wall)


def summary(calm: Outcome, attacked: Outcome, memory_budget_mb: float) -> str:
    rows = []
    for name, get in (
        ("learners' moves", lambda o: len(o.report.moves)),
        ("learners' errors", lambda o: len(o.report.errors)),
        ("move p50 (ms)", lambda o: percentile(o.report.moves, 50)),
        ("move p95 (ms)", lambda o: percentile(o.report.moves, 95)),
        ("server memory peak (MB)", lambda o: o.peak_rss_mb),
        ("server CPU busy (%)", lambda o: o.report.figures()["server CPU busy (%)"]),
        ("learners' process CPU busy (%)", lambda o: o.client_cpu_pct),
        ("hostile clients' process CPU busy (%)", lambda o: o.attacker_cpu_pct),
    ):
        a, b = get(calm), get(attacked)
        ratio = f"{b / a:.2f}×" if "(ms)" in name and a else "—"
        rows.append([name, f"{a:,.0f}", f"{b:,.0f}", ratio])
    lines = [table(["measure", "no hostile clients", f"{attacked.clients} hostile clients", "ratio"], rows)]
    lines.append(f"\nMemory budget {memory_budget_mb:.0f} MB; peak under attack {attacked.peak_rss_mb:.0f} MB.")
    answers = attacked.answers
    lines.append("\nWhat the hostile clients got back:\n")
    lines.append(table(["request: answer", "times"], [[k, f"{v:,}"] for k, v in sorted(answers.items())]))
    failures = attacked.failures
    lines.append(f"\nServer failures seen by the hostile clients (500s, tracebacks): {len(failures)}")
    lines.extend(f"- {f}" for f in failures[:5])
    return "\n".join(lines)


def verdict(calm: Outcome, attacked: Outcome, memory_budget_mb: float, p95_ratio: float = 2.0) -> list[str]:
    """What is wrong with the attacked run, by the targets (empty when every target is met)."""
    problems = []
    if attacked.report.errors:
        problems.append(f"{len(attacked.report.errors)} learner errors, e.g. {attacked.report.errors[:3]}")
    calm_p95, p95 = percentile(calm.report.moves, 95), percentile(attacked.report.moves, 95)
    if not p95 <= p95_ratio * calm_p95:
        problems.append(f"move p95 {p95:.0f} ms is over {p95_ratio:g}x the calm run's {calm_p95:.0f} ms")
    if not attacked.peak_rss_mb < memory_budget_mb:
        problems.append(f"server memory peaked at {attacked.peak_rss_mb:.0f} MB, budget {memory_budget_mb:.0f} MB")
    if attacked.failures:
        problems.append(f"server failures: {attacked.failures[:3]}")
    refused = sum(v for k, v in attacked.answers.items() if k.rsplit(": ", 1)[1] in REFUSALS)
    if attacked.clients and not refused:
        problems.append("the hostile clients were never refused")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    from lensa.ui.limits import Limits

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=100)
    parser.add_argument("--think", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=5, help="hostile clients")
    parser.add_argument("--ramp", type=float, default=None, help="learners arrive over this many seconds")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs, calm then attacked, in turn")
    parser.add_argument("--publish", metavar="NAME", help="write the table into docs/performance.md")
    parser.add_argument("--attack", metavar="URL", help=argparse.SUPPRESS)  # the hostile clients' own process
    args = parser.parse_args(argv)
    if args.attack:
        return _attack_main(args.attack, args.clients, args.seconds)

    budget_mb = Limits.from_env().memory_budget / (1024 * 1024)
    pairs = []
    for _ in range(max(1, args.repeats)):
        calm = measure(args.learners, args.think, args.seconds, 0, ramp_s=args.ramp)
        attacked = measure(args.learners, args.think, args.seconds, args.clients, ramp_s=args.ramp)
        pairs.append((calm, attacked))
    body = (
        f"{args.learners} learners at {args.think:g} s think time for {args.seconds:g} s (arriving over "
        f"{args.think if args.ramp is None else args.ramp:g} s), each run on a fresh server, alone and then with "
        f"{args.clients} hostile clients (bench/hostile.py), {len(pairs)} pair(s) in turn; one server process "
        "on this machine."
    )
    for n, (calm, attacked) in enumerate(pairs, 1):
        body += f"\n\n**Pair {n}.**\n\n" + summary(calm, attacked, budget_mb)
    ratios = [percentile(a.report.moves, 95) / percentile(c.report.moves, 95) for c, a in pairs]
    ratio = statistics.median(ratios)
    problems = [p for c, a in pairs for p in verdict(c, a, budget_mb, p95_ratio=float("inf"))]
    if not ratio <= 2.0:
        problems.append(f"the median pair's move p95 ratio is {ratio:.2f}x, over 2x")
    body += "\n\nMove p95 with hostile clients over without, by pair: " + ", ".join(f"{r:.2f}×" for r in ratios)
    body += f"; median {ratio:.2f}×."
    body += "\n\nTargets: " + ("all met." if not problems else "NOT met: " + "; ".join(problems))
    if args.publish:
        publish(args.publish, args.publish.replace("_", " ").capitalize(), body)
    print(body)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
