"""Several app processes behind Debian's nginx, with the sticky configuration that deploy/compose.yaml uses.

    python -m bench.replicas [--replicas 3] [--learners 200] [--think 5] [--seconds 60] [--failover-seconds 40]

Two phases against one cluster, learners simulated by bench/loadgen.py (Streamlit's websocket protocol, the
balancer's cookie kept like a browser keeps it):

1. steady: the learners move sliders for --seconds; reported are the move times (p50, p95, max), the
   errors, how many sessions each replica holds and whether every session stayed on one replica;
2. failover: a new crowd, and a third of the way into --failover-seconds the replica holding the most sessions
   is stopped. Only its sessions may be affected: each must reconnect to another replica and get its page and
   slider position back from its URL; every other session must go on without an error or a move.

The table goes into the "replicas" section of docs/performance.md.

    with Cluster(replicas=3) as cluster:
        cluster.url                 # nginx, http://127.0.0.1:<port>
        cluster.replicas            # the tests.e2e.harness.Server objects (.port, .proc, .url)
        cluster.addresses           # "127.0.0.1:<port>" of each, as nginx names them in X-Lensa-Replica
        cluster.stop_replica(1)     # stop one app process; nginx sends its visitors elsewhere

The nginx configuration is deploy/nginx/lensa.conf itself, with the listen port and the replicas' server
lines filled in the way the official nginx image's envsubst does it in compose; only the main file around it
(pid, logs and temporary files in a throwaway directory) is written here. Everything is stopped on exit:
terminate, then kill after a bounded wait.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, publish, table, verdict
from bench.loadgen import LESSON_PAGES, Learner, drive
from tests.e2e.harness import Server, free_port

NGINX = os.environ.get("LENSA_NGINX", "/usr/sbin/nginx")
NGINX_CONF = ROOT / "deploy" / "nginx" / "lensa.conf"
# The options on each replica's server line; deploy/compose.yaml gives its replicas the same.
SERVER_OPTIONS = "max_fails=1 fail_timeout=10s"

MAIN_CONF = """\
# Written by bench/replicas.py for one local run; the http part is deploy/nginx/lensa.conf.
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
worker_processes 1;
events {{ worker_connections 4096; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/temp/body;
    proxy_temp_path {dir}/temp/proxy;
    fastcgi_temp_path {dir}/temp/fastcgi;
    uwsgi_temp_path {dir}/temp/uwsgi;
    scgi_temp_path {dir}/temp/scgi;
    include {dir}/lensa.conf;
}}
"""


def nginx_missing_reason() -> str | None:
    """Why the replica test cannot run here, or None when it can."""
    if not (Path(NGINX).exists() or shutil.which("nginx")):
        return f"nginx not found at {NGINX} (apt-get install -y nginx)"
    return None


def render(template: str, values: dict[str, str]) -> str:
    """envsubst over the given names only, as the nginx image does: nginx's own $variables stay as they are."""

    def fill(match: re.Match[str]) -> str:
        return values[match.group(1)] if match.group(1) in values else match.group(0)

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}", fill, template)


def nginx_config(listen: int, addresses: list[str]) -> str:
    """deploy/nginx/lensa.conf for nginx on 127.0.0.1:listen in front of the given host:port replicas."""
    servers = "\n    ".join(f"server {a} {SERVER_OPTIONS};" for a in addresses)
    return render(NGINX_CONF.read_text(), {"LENSA_LISTEN": f"127.0.0.1:{listen}", "LENSA_UPSTREAM_SERVERS": servers})


def _get(url: str, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, dict(r.headers.items()), r.read()


class Cluster:
    """N `streamlit run app.py` processes and one nginx in front of them, all on 127.0.0.1."""

    def __init__(self, replicas: int = 3, port: int | None = None, extra_env: dict[str, str] | None = None) -> None:
        self.count = replicas
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = extra_env
        self.replicas: list[Server] = []
        self.nginx: subprocess.Popen[bytes] | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="lensa-nginx-"))

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.replicas]

    def start(self, timeout: float = 180.0) -> Cluster:
        deadline = time.monotonic() + timeout
        # All processes start at once and import in parallel; then each is waited for in turn.
        self.replicas = [Server(extra_env=self.extra_env) for _ in range(self.count)]
        for server in self.replicas:
            server.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        conf = self.dir / "nginx.conf"
        (self.dir / "lensa.conf").write_text(nginx_config(self.port, self.addresses))
        conf.write_text(MAIN_CONF.format(dir=self.dir))
        (self.dir / "temp").mkdir()
        # As root, nginx's workers run as nobody and create their temporary files under this directory.
        self.dir.chmod(0o755)
        check = subprocess.run(
            [NGINX, "-t", "-q", "-p", str(self.dir), "-c", str(conf)], capture_output=True, text=True
        )
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t failed:\n{check.stderr}")
        self.nginx = subprocess.Popen(
            [NGINX, "-p", str(self.dir), "-c", str(conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so the workers can be killed with the master
        )
        self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until /healthz through nginx answers ok."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.nginx is not None and self.nginx.poll() is not None:
                err = self.nginx.stderr.read().decode() if self.nginx.stderr else ""
                raise RuntimeError(f"nginx exited early:\n{err}\n{self.error_log()}")
            with contextlib.suppress(OSError):
                status, _, body = _get(f"{self.url}/healthz", timeout=2)
                if status == 200 and body.strip() == b"ok":
                    return
            time.sleep(0.1)
        raise TimeoutError(f"nginx did not answer /healthz in time\n{self.error_log()}")

    def error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop_replica(self, i: int) -> str:
        """Stop replica i (SIGTERM, then SIGKILL after 10 s); returns its address."""
        self.replicas[i].stop()
        return self.addresses[i]

    def replica_index(self, header: str | None) -> int | None:
        """Which replica an X-Lensa-Replica value names; after a retry nginx lists every address tried, last the
        one that answered."""
        if not header:
            return None
        last = header.split(",")[-1].strip()
        return self.addresses.index(last) if last in self.addresses else None

    def stop(self) -> None:
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.terminate()
            try:
                self.nginx.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.nginx.pid, signal.SIGKILL)
                self.nginx.wait(timeout=10)
        for server in self.replicas:
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the measurement ----------------------------------------------------------------------------------------


@dataclass
class Failover:
    """What stopping one replica did to the sessions."""

    stopped: str
    affected: list[Learner]  # the sessions on the stopped replica
    others: list[Learner]
    moved: bool  # every affected session reconnected, to a live replica
    restored: bool  # ... and got its page and slider position back from its URL
    others_untouched: bool  # no other session lost its connection, moved or saw an error

    @property
    def ok(self) -> bool:
        return bool(self.affected) and self.moved and self.restored and self.others_untouched


def replicas_of(cluster: Cluster, learner: Learner) -> list[int | None]:
    """The replica of each of a learner's connections, in order."""
    return [cluster.replica_index(h) for h in learner.replicas]


def sticky(cluster: Cluster, learner: Learner) -> bool:
    """One connection or more, all on one known replica."""
    seen = set(replicas_of(cluster, learner))
    return len(seen) == 1 and None not in seen


def crowd(url: str, learners: int, seed: int) -> list[Learner]:
    """Learners as bench.loadgen.drive makes them: spread over the lesson pages and both languages."""
    rng = random.Random(seed)
    pages = LESSON_PAGES
    return [
        Learner(n, url, pages[n % len(pages)], ("id", "en")[n % 2], random.Random(rng.random()))
        for n in range(learners)
    ]


async def failover(
    cluster: Cluster, learners: int, think_s: float, seconds: float, stop_after_s: float, timeout_s: float = 30.0
) -> Failover:
    """Drive a crowd through nginx and stop the busiest replica after stop_after_s."""
    people = crowd(cluster.url, learners, seed=1)
    deadline = time.monotonic() + seconds
    arrivals = [min(think_s, stop_after_s / 2) * n / learners for n in range(learners)]
    running = asyncio.gather(*(p.live(deadline, think_s, arrivals[i], timeout_s) for i, p in enumerate(people)))
    await asyncio.sleep(stop_after_s)
    counts = Counter(replicas_of(cluster, p)[0] for p in people if p.replicas)
    busiest = max((i for i in counts if i is not None), key=lambda i: counts[i])
    stopped = await asyncio.to_thread(cluster.stop_replica, busiest)
    await asyncio.wait_for(running, seconds + 2 * timeout_s + 30)
    affected = [p for p in people if p.replicas and replicas_of(cluster, p)[0] == busiest]
    others = [p for p in people if p not in affected]
    return Failover(
        stopped=stopped,
        affected=affected,
        others=others,
        moved=all(p.reconnects >= 1 and replicas_of(cluster, p)[-1] not in (None, busiest) for p in affected),
        restored=all(p.restored and all(p.restored) for p in affected),
        others_untouched=all(p.reconnects == 0 and not p.errors and sticky(cluster, p) for p in others),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--think", type=float, default=5.0, help="seconds between one learner's moves (mean)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the steady phase")
    parser.add_argument("--failover-seconds", type=float, default=40.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    reason = nginx_missing_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")

    with Cluster(replicas=args.replicas) as cluster:
        steady = asyncio.run(
            drive(
                cluster.url,
                args.learners,
                args.think,
                args.seconds,
                pids=[s.proc.pid for s in cluster.replicas],
                timeout_s=args.timeout,
                label="steady",
            )
        )
        lost = asyncio.run(
            failover(cluster, args.learners, args.think, args.failover_seconds, args.failover_seconds / 3, args.timeout)
        )
        addresses = list(cluster.addresses)
        per_replica = Counter(replicas_of(cluster, p)[0] for p in steady.learners if p.replicas)
        all_sticky = all(sticky(cluster, p) and p.reconnects == 0 for p in steady.learners)

    figures = steady.figures()
    p95 = figures["move p95 (ms)"]
    spread = " / ".join(str(per_replica.get(i, 0)) for i in range(len(addresses)))
    affected_errors = sum(len(p.errors) for p in lost.affected)
    rows = [
        ["learners × think time × seconds", f"{args.learners} × {args.think:g} s × {args.seconds:g} s"],
        ["replicas (app processes) behind nginx", args.replicas],
        ["moves", figures["moves"]],
        ["move p50 / p95 / max", f"{figures['move p50 (ms)']:.0f} / {p95:.0f} / {figures['move max (ms)']:.0f} ms"],
        ["first load p50 / p95", f"{figures['first load p50 (ms)']:.0f} / {figures['first load p95 (ms)']:.0f} ms"],
        ["errors", figures["errors"]],
        ["p95 ≤ 500 ms and no errors", verdict(p95 <= 500 and not steady.errors)],
        ["sessions per replica", spread],
        ["every session stayed on one replica", "yes" if all_sticky else "no"],
        ["all replicas' CPU busy (% of one core)", f"{figures['server CPU busy (%)']:.0f} %"],
        ["failover: replica stopped", f"{lost.stopped}, {len(lost.affected)} of {args.learners} sessions on it"],
        ["failover: its sessions reconnected to another replica", "yes" if lost.moved else "no"],
        ["failover: page and slider restored from the URL", "yes" if lost.restored else "no"],
        ["failover: the other sessions untouched", "yes" if lost.others_untouched else "no"],
        ["failover: errors on the stopped replica's sessions (the cut connections)", affected_errors],
    ]
    body = (
        f"bench/replicas.py: {args.replicas} app processes behind Debian's nginx with deploy/nginx/lensa.conf "
        "(cookie affinity), learners simulated at the protocol level by bench/loadgen.py, all on this machine "
        "(the load generator, nginx and the replicas share its cores).\n\n" + table(["measure", "value"], rows)
    )
    problems = steady.errors + [f"failover, learner {p.n}: {e}" for p in lost.others for e in p.errors]
    if problems:
        body += "\n\nErrors (first 10):\n\n" + "\n".join(f"- {e}" for e in problems[:10])
    publish("replicas", "Several replicas behind nginx", body)
    return 0 if p95 <= 500 and not steady.errors and all_sticky and lost.ok else 1


if __name__ == "__main__":
    sys.exit(main())
