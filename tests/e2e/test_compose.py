"""deploy/compose.yaml on a real engine (Docker Engine from Debian): the stack make compose-up brings up.

scripts/compose_stack.sh builds every image on this machine (the app from the Dockerfile on a debootstrap Debian
base, nginx from Debian's packages: no registry needed) and starts the stack under its own compose project and
port, so a stack a developer started with make compose-up is left alone. Then, through nginx's published port, a
class of bench/loadgen.py's learners (shorter than bench/compose.py's full run, for CI's time), and one replica
killed: only its sessions move, the engine restarts it.

Then the Kubernetes Deployment on podman (scripts/kube_play.py, with the image the stack ran): its probes, user,
read-only root and the rest of its securityContext, looked at in the running pod.

Skipped without root, Docker Engine, compose or a running daemon, or (the last test) podman (failed in CI, where
.ci/run installs and starts them: tests/e2e/conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.compose import ComposeStack, measure
from bench.replicas import replicas_of
from tests.e2e.harness import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.engine]

# CI's load: 200 learners at 5 s think time, as the full run, for a shorter time (bench/compose.py: 60 s + 40 s).
LEARNERS = int(os.environ.get("LENSA_COMPOSE_LEARNERS", "200"))
STEADY_S = float(os.environ.get("LENSA_COMPOSE_SECONDS", "30"))
FAILOVER_S = float(os.environ.get("LENSA_COMPOSE_FAILOVER_SECONDS", "30"))


@pytest.fixture(scope="module")
def stack():
    s = ComposeStack(port=free_port(), project="lensa-e2e")
    try:
        s.up()
        # What was built and what came from cache, and how long each phase took (shown with pytest -rA).
        print(next((ln.strip() for ln in s.up_log.splitlines() if ln.strip().startswith("timings")), s.up_log[-500:]))
        yield s
    finally:
        s.down()
    assert not s.containers(), "compose down removed every container of the stack"


def inspect(stack: ComposeStack, container_id: str) -> dict:
    out = subprocess.run([stack.docker, "inspect", container_id], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)[0]


def test_three_replicas_and_nginx_come_up_healthy_nginx_on_loopback_only(stack):
    every = stack.containers()
    assert sorted(c.service for c in every) == ["app", "app", "app", "nginx"]
    assert stack.healthy(), [(c.name, c.status, c.health) for c in every]
    (nginx,) = [c for c in every if c.service == "nginx"]
    bindings = inspect(stack, nginx.id)["HostConfig"]["PortBindings"]
    assert bindings == {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(stack.port)}]}
    for replica in stack.replicas:
        config = inspect(stack, replica.id)
        assert config["HostConfig"]["ReadonlyRootfs"] is True
        assert config["HostConfig"]["PortBindings"] in (None, {}), "replicas publish no port; nginx is the way in"
        assert config["Config"]["User"] == "10001:10001"
        assert config["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    # Nothing of the stack came from a registry: the images are the ones made here.
    assert all(inspect(stack, c.id)["Config"]["Image"].startswith("localhost/") for c in every)


def test_a_class_through_nginx_sticks_and_survives_a_killed_replica(stack):
    # In a thread of its own: the browser tests' Playwright (sync API) keeps an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        run = pool.submit(measure, stack, LEARNERS, 5.0, STEADY_S, FAILOVER_S).result()
    f = run.steady_figures
    print(f)  # the class's figures (shown with pytest -rA): how near the bounds below a run came
    assert not run.steady_errors, run.steady_errors[:10]
    assert f["moves"] >= LEARNERS * (STEADY_S / 5 - 2), "every learner moved its slider again and again"
    assert f["move p95 (ms)"] <= 500, f
    assert run.all_sticky, "every session stayed on the replica of its first answer"
    assert len([i for i in run.per_replica if i is not None]) == 3, f"nginx spread the class: {run.per_replica}"

    lost = run.lost
    assert lost.affected, "the killed replica had sessions"
    for p in lost.affected:
        seen = replicas_of(stack, p)  # type: ignore[arg-type]
        assert p.reconnects >= 1 and seen[-1] not in (None, seen[0]), f"learner {p.n} went {seen}"
        assert p.restored and all(p.restored), f"learner {p.n} did not get its slider back from the URL"
    for p in lost.others:
        assert p.reconnects == 0 and not p.errors, f"learner {p.n}: {p.errors} {replicas_of(stack, p)}"  # type: ignore[arg-type]
    assert run.restarted is not None, "the engine restarted the killed replica and it became healthy"
    assert run.address_kept, "it came back on the address nginx resolved at start"
    assert stack.healthy()


def kube_play():
    spec = importlib.util.spec_from_file_location(
        "kube_play", Path(__file__).resolve().parents[2] / "scripts" / "kube_play.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.podman
def test_the_kubernetes_deployment_runs_on_podman_with_its_probes_user_and_read_only_root(stack):
    image = next(c for c in stack.containers("app"))
    name = inspect(stack, image.id)["Config"]["Image"]
    report, failures = kube_play().play(name)
    assert not failures, "\n".join(f"{k}  {v}" for k, v in report)
    checked = {k.split(" ", 1)[1].strip() for k, _ in report if k.startswith("ok")}
    assert {
        "liveness probe as podman's health check",
        "startup/readiness probe's GET",
        "runs as non-root",
        "read-only root file system",
        "capabilities dropped (ALL)",
    } <= checked
