"""deploy/compose.yaml on Docker Engine: three replicas and nginx, a class through nginx's port, one replica lost.

    sudo python -m bench.compose [--learners 200] [--think 5] [--seconds 60] [--failover-seconds 40] [--keep]

What it does, against the real compose file on this machine's engine (scripts/compose_stack.sh builds every
image here, no registry needed, and brings the stack up; the stack is taken down at the end unless --keep):

1. the stack: every replica and nginx report healthy to the engine, nginx answers /healthz;
2. steady: bench/loadgen.py's learners (Streamlit's websocket protocol, nginx's cookie kept as a browser keeps it)
   move sliders through nginx's port for --seconds: move p95, errors, sessions per replica, and whether every
   session stayed on one replica (nginx names the replica that answered in X-Lensa-Replica, the container's
   address on the compose network);
3. failover: a new crowd, and a third of the way into --failover-seconds the replica holding the most sessions is
   killed (SIGKILL to its process, a crash). Only its sessions may be affected: each must reconnect to another
   replica and get its page and slider position back from its URL, every other session must go on without an
   error or a move, and the engine must restart the killed replica (restart: unless-stopped) until it is healthy.

The table goes into the "compose" section of docs/performance.md. tests/e2e/test_compose.py runs the same with a
shorter load in make test.

    with ComposeStack() as stack:       # up (builds what is missing), down on exit
        stack.url                       # nginx, http://127.0.0.1:<LENSA_PORT>
        stack.addresses                 # "<ip>:8501" of each replica, as nginx names them
        stack.stop_replica(1)           # SIGKILL to its process, a crash; the engine starts it again
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, publish, table, verdict
from bench.loadgen import drive
from bench.replicas import Failover, failover, replicas_of, sticky

SCRIPT = ROOT / "scripts" / "compose_stack.sh"
DEFAULT_PORT = 8080


def docker_binary() -> str | None:
    """The Debian docker CLI (the daemon's own API version) when present, else any docker on PATH."""
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")


def engine_missing_reason() -> str | None:
    """Why the compose stack cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the compose test needs root (dockerd, debootstrap): run it as root"
    docker = docker_binary()
    if docker is None or shutil.which("dockerd") is None:
        return "no Docker Engine here (apt-get install -y docker.io docker-compose)"
    if shutil.which("docker-compose") is None:
        v2 = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if v2.returncode != 0:
            return "no docker compose nor docker-compose here (apt-get install -y docker-compose)"
    try:
        info = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "the Docker daemon did not answer within 30 s"
    if info.returncode != 0:
        return "no Docker daemon answers (start it: dockerd &, or systemctl start docker)"
    if shutil.which("debootstrap") is None and not _image_exists(docker, base_image()):
        return "no debootstrap to make the base image (apt-get install -y debootstrap)"
    return None


def podman_missing_reason() -> str | None:
    """Why the Deployment cannot run on podman here (scripts/kube_play.py), or None when it can."""
    spec = importlib.util.spec_from_file_location("kube_play", ROOT / "scripts" / "kube_play.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reason: str | None = module.podman_missing_reason()
    return reason


def base_image() -> str:
    return os.environ.get("LENSA_BASE_IMAGE", "localhost/lensa-base:bookworm-slim")


def _image_exists(docker: str, name: str) -> bool:
    return subprocess.run([docker, "image", "inspect", name], capture_output=True, timeout=60).returncode == 0


def _unix(stamp: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, Z) as Unix time; 0 when there is none."""
    if not stamp or stamp.startswith("0001-"):
        return 0.0
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp() + float(f"0.{frac or 0}")


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


@dataclass
class Container:
    id: str
    name: str
    service: str
    status: str  # running, restarting, exited ...
    health: str  # healthy, starting, unhealthy, "" without a health check
    restarts: int
    address: str  # on the compose network
    started_at: float  # when the engine last started it (Unix time)
    healthy_at: float | None  # the end of the first passing health check since then (Unix time)


class ComposeStack:
    """deploy/compose.yaml brought up by scripts/compose_stack.sh; nginx on 127.0.0.1:port."""

    def __init__(
        self, port: int | None = None, replicas: int = 3, project: str = "lensa", env: dict[str, str] | None = None
    ) -> None:
        self.port = port or int(os.environ.get("LENSA_PORT", DEFAULT_PORT))
        self.project = project
        self.url = f"http://127.0.0.1:{self.port}"
        self.count = replicas
        self.env = {**os.environ, "LENSA_PORT": str(self.port), "LENSA_REPLICAS": str(replicas)}
        self.env |= {"LENSA_PROJECT": project, **(env or {})}
        self.docker = docker_binary() or "docker"
        self.up_log = ""
        self.up_seconds = float("nan")
        self._replicas: list[Container] = []
        self.killed_at: dict[int, float] = {}  # replica index -> when stop_replica killed it (Unix time)

    # the stack

    def up(self, timeout: float = 1500.0) -> ComposeStack:
        started = time.monotonic()
        result = subprocess.run(
            [str(SCRIPT), "up"], env=self.env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        self.up_seconds = time.monotonic() - started
        self.up_log = result.stdout + result.stderr
        if result.returncode != 0:
            raise RuntimeError(f"scripts/compose_stack.sh up failed:\n{self.up_log[-6000:]}")
        self._replicas = self.containers("app")
        if len(self._replicas) != self.count:
            raise RuntimeError(f"expected {self.count} replicas, the engine runs {len(self._replicas)}")
        return self

    def down(self) -> None:
        subprocess.run([str(SCRIPT), "down"], env=self.env, capture_output=True, timeout=300, cwd=ROOT)

    def __enter__(self) -> ComposeStack:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()

    def containers(self, service: str | None = None) -> list[Container]:
        """The stack's containers (of one service), by name, as the engine sees them now."""
        labels = ["--filter", f"label=com.docker.compose.project={self.project}"]
        if service:
            labels += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = subprocess.run(
            [self.docker, "ps", "-a", "-q", "--no-trunc", *labels], capture_output=True, text=True, timeout=60
        ).stdout.split()
        if not ids:
            return []
        raw = subprocess.run([self.docker, "inspect", *ids], capture_output=True, text=True, timeout=60).stdout
        found = []
        for c in json.loads(raw):
            networks = c["NetworkSettings"]["Networks"] or {}
            address = next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), "")
            started_at = _unix(c["State"].get("StartedAt", ""))
            passes = [
                _unix(entry.get("End", ""))
                for entry in (c["State"].get("Health") or {}).get("Log") or []
                if entry.get("ExitCode") == 0
            ]
            healthy_at = min((s for s in passes if s >= started_at), default=None)
            found.append(
                Container(
                    id=c["Id"],
                    name=c["Name"].lstrip("/"),
                    service=c["Config"]["Labels"].get("com.docker.compose.service", ""),
                    status=c["State"]["Status"],
                    health=(c["State"].get("Health") or {}).get("Status", ""),
                    restarts=int(c.get("RestartCount", 0)),
                    address=address,
                    started_at=started_at,
                    healthy_at=healthy_at,
                )
            )
        return sorted(found, key=lambda c: c.name)

    def healthy(self) -> bool:
        """Every replica and nginx running and healthy, and nginx's /healthz says ok."""
        every = self.containers()
        if len(every) != self.count + 1 or any((c.status, c.health) != ("running", "healthy") for c in every):
            return False
        try:
            status, body = _get(f"{self.url}/healthz")
        except OSError:
            return False
        return status == 200 and body.strip() == b"ok"

    # what bench.replicas.failover needs

    @property
    def replicas(self) -> list[Container]:
        return self._replicas

    @property
    def addresses(self) -> list[str]:
        return [f"{c.address}:8501" for c in self._replicas]

    def replica_index(self, header: str | None) -> int | None:
        """Which replica an X-Lensa-Replica value names (after a retry: the last address, the one that answered)."""
        if not header:
            return None
        last = header.split(",")[-1].strip()
        return self.addresses.index(last) if last in self.addresses else None

    def stop_replica(self, i: int) -> str:
        """Crash replica i: SIGKILL to its process from the host, so the restart policy applies. (docker kill and
        docker stop count as stopping it by hand, after which unless-stopped leaves it stopped.)"""
        pid = subprocess.run(
            [self.docker, "inspect", "--format", "{{.State.Pid}}", self._replicas[i].id],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        self.killed_at[i] = time.time()
        os.kill(int(pid), signal.SIGKILL)
        return self.addresses[i]

    def wait_restarted(self, i: int, timeout: float = 180.0) -> Container:
        """Until the engine has started replica i again and it is healthy; returns it as the engine sees it."""
        before = self._replicas[i]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = {c.id: c for c in self.containers("app")}.get(before.id)
            if now and now.restarts > before.restarts and (now.status, now.health) == ("running", "healthy"):
                return now
            time.sleep(1)
        raise TimeoutError(f"the engine did not bring {before.name} back to healthy within {timeout:.0f} s")


# --- the measurement ----------------------------------------------------------------------------------------


@dataclass
class Run:
    steady_figures: dict[str, float]
    steady_errors: list[str]
    per_replica: Counter[int | None]
    all_sticky: bool
    lost: Failover
    restarted: Container | None
    restart_s: float  # from the kill to the engine's start of the replica
    healthy_s: float  # from the kill to its first passing health check
    address_kept: bool


def measure(
    stack: ComposeStack, learners: int, think_s: float, seconds: float, failover_s: float, timeout_s: float = 30.0
) -> Run:
    """The steady load, then the failover, against a stack that is up."""
    steady = asyncio.run(drive(stack.url, learners, think_s, seconds, timeout_s=timeout_s, label="compose"))
    per_replica = Counter(replicas_of(stack, p)[0] for p in steady.learners if p.replicas)  # type: ignore[arg-type]
    all_sticky = all(sticky(stack, p) and p.reconnects == 0 for p in steady.learners)  # type: ignore[arg-type]
    lost = asyncio.run(failover(stack, learners, think_s, failover_s, failover_s / 3, timeout_s))  # type: ignore[arg-type]
    index = stack.addresses.index(lost.stopped)
    restarted: Container | None = None
    with contextlib.suppress(TimeoutError):
        restarted = stack.wait_restarted(index)
    killed = stack.killed_at[index]
    restart_s = (restarted.started_at - killed) if restarted else float("nan")
    healthy_s = (restarted.healthy_at - killed) if restarted and restarted.healthy_at else float("nan")
    address_kept = restarted is not None and f"{restarted.address}:8501" == lost.stopped
    return Run(
        steady_figures=steady.figures(),
        steady_errors=steady.errors,
        per_replica=per_replica,
        all_sticky=all_sticky,
        lost=lost,
        restarted=restarted,
        restart_s=restart_s,
        healthy_s=healthy_s,
        address_kept=address_kept,
    )


def rows(stack: ComposeStack, run: Run, learners: int, think_s: float, seconds: float) -> list[list[object]]:
    f = run.steady_figures
    spread = " / ".join(str(run.per_replica.get(i, 0)) for i in range(len(stack.addresses)))
    lost = run.lost
    return [
        ["learners × think time × seconds", f"{learners} × {think_s:g} s × {seconds:g} s"],
        ["replicas behind nginx (containers)", len(stack.addresses)],
        ["moves", f["moves"]],
        ["move p50 / p95 / max", f"{f['move p50 (ms)']:.0f} / {f['move p95 (ms)']:.0f} / {f['move max (ms)']:.0f} ms"],
        ["first load p50 / p95", f"{f['first load p50 (ms)']:.0f} / {f['first load p95 (ms)']:.0f} ms"],
        ["errors", f["errors"]],
        ["p95 ≤ 500 ms and no errors", verdict(f["move p95 (ms)"] <= 500 and not run.steady_errors)],
        ["sessions per replica", spread],
        ["every session stayed on one replica", "yes" if run.all_sticky else "no"],
        ["failover: replica killed", f"{lost.stopped}, {len(lost.affected)} of {learners} sessions on it"],
        ["failover: its sessions reconnected to another replica", "yes" if lost.moved else "no"],
        ["failover: page and slider restored from the URL", "yes" if lost.restored else "no"],
        ["failover: the other sessions untouched", "yes" if lost.others_untouched else "no"],
        [
            "failover: the engine restarted it, healthy again",
            (
                f"yes: started {run.restart_s:.1f} s after the kill, healthy after {run.healthy_s:.0f} s, "
                + ("on the same address" if run.address_kept else "on another address")
            )
            if run.restarted
            else "no",
        ],
    ]


def passed(run: Run) -> bool:
    f = run.steady_figures
    return (
        f["move p95 (ms)"] <= 500
        and not run.steady_errors
        and run.all_sticky
        and run.lost.ok
        and run.restarted is not None
        and run.address_kept
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--think", type=float, default=5.0, help="seconds between one learner's moves (mean)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the steady phase")
    parser.add_argument("--failover-seconds", type=float, default=40.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--keep", action="store_true", help="leave the stack up afterwards")
    args = parser.parse_args(argv)
    reason = engine_missing_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")

    stack = ComposeStack()
    try:
        stack.up()
        up_s = stack.up_seconds
        run = measure(stack, args.learners, args.think, args.seconds, args.failover_seconds, args.timeout)
        body_rows = [["make compose-up (images cached or not, see below)", f"{up_s:.0f} s"]]
        body_rows += rows(stack, run, args.learners, args.think, args.seconds)
        timings = next((ln.strip() for ln in stack.up_log.splitlines() if ln.strip().startswith("timings")), "")
        engine = next((ln.strip() for ln in stack.up_log.splitlines() if "Docker Engine" in ln), "")
    finally:
        if not args.keep:
            stack.down()
    body = (
        f"bench/compose.py: deploy/compose.yaml on {engine}, every image built here (scripts/compose_stack.sh: the "
        "app from the Dockerfile on a debootstrap Debian base, nginx from Debian's packages), learners simulated at "
        "the protocol level by bench/loadgen.py through nginx's published port; the load generator, the engine and "
        "the containers share this machine's cores.\n\n"
        + table(["measure", "value"], body_rows)
        + f"\n\ncompose-up {timings}"
    )
    problems = run.steady_errors + [f"failover, learner {p.n}: {e}" for p in run.lost.others for e in p.errors]
    if problems:
        body += "\n\nErrors (first 10):\n\n" + "\n".join(f"- {e}" for e in problems[:10])
    publish("compose", "deploy/compose.yaml on Docker Engine", body)
    return 0 if passed(run) else 1


if __name__ == "__main__":
    sys.exit(main())
