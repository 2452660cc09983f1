"""deploy/kubernetes's Deployment and Service on a real engine here: podman kube play, then checks in the pod.

    sudo python3 scripts/kube_play.py [--image localhost/lensa:compose] [--keep]      # make kube-play

No cluster runs on this machine, but podman runs a Deployment's pod from its YAML. What podman (4.3, Debian
bookworm's) does with each part, and so what this proves:

- Deployment: its pod template runs as written (user and group, read-only root file system, dropped capabilities,
  no privilege escalation, seccomp RuntimeDefault, emptyDir volumes on /tmp and /home/lensa, the environment with
  the cookie secret from a Secret); the checks below look at the running container, not at the YAML.
- Probes: podman runs the livenessProbe as the container's health check and ignores startupProbe and
  readinessProbe. It runs an httpGet probe as `curl -f URL || kill 1` inside the container, and the image has no
  curl; so this run gives podman the same probe (path, port, period, timeout, failures) as the GET the image's own
  HEALTHCHECK makes with python. The startup and readiness probes' GET is made from the host against the pod.
- Service: podman 4.3 takes no Service; the pod is reached at its own address on podman's network.
- What only a cluster does (Ingress and its cookie affinity, the HorizontalPodAutoscaler, the
  PodDisruptionBudget, the NetworkPolicy, the Namespace's Pod Security admission) is not run here: make lint checks
  those files with checkov and against the Kubernetes OpenAPI schemas (kubernetes-validate).

The image comes from Docker Engine (make compose-up builds it) via docker save | podman load, or is already in
podman's store (make container-check). Everything this starts is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
SECRET_NAME = "lensa-cookie"


ENV = dict(os.environ)


def run(*cmd: str, check: bool = True, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=ENV, **kw)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def manifest(kind: str) -> dict[str, Any]:
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                return dict(doc)
    raise LookupError(kind)


def python_probe(probe: dict[str, Any], port: int) -> dict[str, Any]:
    """An httpGet probe as the same GET made by the image's python (podman would run curl, which the image lacks).

    podman 4.3 joins an exec probe's words with spaces and hands them to sh -c (its health check is CMD-SHELL), so
    the program goes in as one single-quoted shell word without spaces."""
    get = probe["httpGet"]
    url = f"http://localhost:{port}{get['path']}"
    code = (
        f'exit(__import__("urllib.request").request.urlopen("{url}",timeout={probe.get("timeoutSeconds", 1)})'
        '.read()!=b"ok")'
    )
    assert " " not in code and "'" not in code
    adapted = {k: v for k, v in probe.items() if k != "httpGet"}
    adapted["exec"] = {"command": ["python3", "-c", f"'{code}'"]}
    return adapted


def adapt(deployment: dict[str, Any], image: str) -> dict[str, Any]:
    """The Deployment as podman is given it: this machine's image (as `kustomize edit set image` would set it), never
    pulled, and the liveness probe as python's GET. Everything else is the file's."""
    d = copy.deepcopy(deployment)
    (container,) = d["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    port = container["livenessProbe"]["httpGet"]["port"]
    container["livenessProbe"] = python_probe(container["livenessProbe"], ports.get(port, port))
    return d


def http(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def podman_missing_reason() -> str | None:
    """Why the Deployment cannot run on podman here, or None when it can."""
    if os.geteuid() != 0:
        return "podman kube play runs rootful here: run it as root"
    missing = [tool for tool in ("podman", "catatonit") if shutil.which(tool) is None]
    if missing and not (missing == ["catatonit"] and Path("/usr/libexec/podman/catatonit").exists()):
        return f"{' and '.join(missing)} not found (apt-get install -y podman catatonit)"
    return None


def podman_has(image: str) -> bool:
    return run("podman", "image", "exists", image, check=False).returncode == 0


def bring_image(image: str) -> str:
    if podman_has(image):
        return "already in podman's store"
    docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    if docker is None:
        raise RuntimeError(f"{image} is not in podman's store and there is no docker to take it from")
    save = subprocess.Popen([docker, "save", image], stdout=subprocess.PIPE)
    load = subprocess.run(["podman", "load"], stdin=save.stdout, capture_output=True, text=True, timeout=900)
    save.wait(timeout=60)
    if save.returncode != 0 or load.returncode != 0:
        raise RuntimeError(f"docker save {image} | podman load failed: {load.stderr[-2000:]}")
    return "from Docker Engine (docker save | podman load)"


def play(image: str, keep: bool = False, timeout: float = 120.0) -> tuple[list[tuple[str, str]], list[str]]:
    """Run the Deployment's pod on podman and check it; returns the report's lines and the failures."""
    report: list[tuple[str, str]] = []
    failures: list[str] = []

    def check(name: str, ok: bool, detail: str) -> None:
        report.append((("ok  " if ok else "FAIL") + " " + name, detail))
        if not ok:
            failures.append(f"{name}: {detail}")

    started = time.monotonic()
    source = bring_image(image)
    report.append(("     image", f"{image}, {source}, {time.monotonic() - started:.0f} s"))
    deployment = manifest("Deployment")
    (declared,) = deployment["spec"]["template"]["spec"]["containers"]
    work = Path(tempfile.mkdtemp(prefix="lensa-kube-play-"))
    # podman raises the containers' open-file and process limits (to 1,048,576 and more) unless told otherwise,
    # which a host, or a container this runs in, with lower limits refuses; this run's containers.conf keeps them at
    # this process's own, the process count also within the kernel's pid_max (higher is refused here too).
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = [pid_max if v < 0 else min(v, pid_max) for v in resource.getrlimit(resource.RLIMIT_NPROC)]
    ulimits = f'"nofile={nofile[0]}:{nofile[1]}", "nproc={nproc[0]}:{nproc[1]}"'
    (work / "containers.conf").write_text(f"[containers]\ndefault_ulimits = [{ulimits}]\n")
    ENV["CONTAINERS_CONF"] = str(work / "containers.conf")
    play_file = work / "lensa.yaml"
    # podman (4.3) reads a secretKeyRef from a podman secret holding the Secret's data: a JSON object of base64 values.
    secret = {"secret": base64.b64encode(secrets.token_hex(32).encode()).decode()}
    (work / "secret.json").write_text(json.dumps(secret))
    play_file.write_text(yaml.safe_dump_all([adapt(deployment, image)], sort_keys=False))
    run("podman", "kube", "play", "--down", str(play_file), check=False)
    run("podman", "secret", "rm", SECRET_NAME, check=False)
    try:
        run("podman", "secret", "create", SECRET_NAME, str(work / "secret.json"))
        out = run("podman", "kube", "play", str(play_file))
        report.append(("     kube play", " ".join(out.stdout.split())[:200]))
        # Its output lists the pod, then the container(s) it started.
        lines = out.stdout.split()
        (name,) = lines[lines.index("Container:") + 1 :] if "Container:" in lines else [""]
        info = json.loads(run("podman", "inspect", name).stdout)[0]
        address = next(
            (n["IPAddress"] for n in (info["NetworkSettings"].get("Networks") or {}).values() if n["IPAddress"]),
            info["NetworkSettings"].get("IPAddress", ""),
        )
        if not address:  # the pod's network belongs to its infra container
            pod = json.loads(run("podman", "pod", "inspect", info["Pod"]).stdout)
            pod = pod[0] if isinstance(pod, list) else pod
            infra = json.loads(run("podman", "inspect", pod["InfraContainerID"]).stdout)[0]
            address = next(n["IPAddress"] for n in infra["NetworkSettings"]["Networks"].values() if n["IPAddress"])
        port = declared["ports"][0]["containerPort"]
        base = f"http://{address}:{port}"

        # Ready: the startup and readiness probes' GET, from the host, within the startup probe's budget.
        t0 = time.monotonic()
        health = b""
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            try:
                status, health = http(f"{base}{declared['readinessProbe']['httpGet']['path']}", timeout=3)
                if status == 200 and health == b"ok":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        budget = declared["startupProbe"]["periodSeconds"] * declared["startupProbe"]["failureThreshold"]
        took = time.monotonic() - t0
        check(
            "startup/readiness probe's GET",
            health == b"ok" and took <= budget,
            f"{base}/_stcore/health -> {health.decode(errors='replace')!r} after {took:.1f} s "
            f"(the startup probe allows {budget} s)",
        )
        status, page = http(f"{base}/", timeout=20)
        check("the app serves", status == 200 and b'<div id="root">' in page, f"GET / -> {status}, {len(page)} bytes")

        # Liveness: podman's health check, the manifest's probe, run now and as the engine sees it.
        hc = run("podman", "healthcheck", "run", name, check=False)
        state = json.loads(run("podman", "inspect", name).stdout)[0]["State"]
        hstate = (state.get("Health") or state.get("Healthcheck") or {}).get("Status", "")
        cfg = json.loads(run("podman", "inspect", name).stdout)[0]["Config"].get("Healthcheck") or {}
        live = declared["livenessProbe"]
        same = (cfg.get("Interval"), cfg.get("Timeout"), cfg.get("Retries")) == (
            live["periodSeconds"] * 10**9,
            live["timeoutSeconds"] * 10**9,
            live["failureThreshold"],
        )
        check(
            "liveness probe as podman's health check",
            hc.returncode == 0 and hstate == "healthy" and same,
            f"podman healthcheck run -> exit {hc.returncode}, status {hstate!r}; "
            f"interval {cfg.get('Interval', 0) / 1e9:.0f} s, timeout {cfg.get('Timeout', 0) / 1e9:.0f} s, "
            f"retries {cfg.get('Retries')}",
        )

        # The pod's security, looked at in the running container.
        host = info["HostConfig"]
        uid = run("podman", "exec", name, "id", "-u").stdout.strip()
        gid = run("podman", "exec", name, "id", "-g").stdout.strip()
        ctx = declared["securityContext"]
        check("runs as non-root", uid == str(ctx["runAsUser"]) and gid == str(ctx["runAsGroup"]), f"id: {uid}:{gid}")
        write_root = run("podman", "exec", name, "sh", "-c", "touch /app/x 2>&1 || touch /x 2>&1", check=False)
        check(
            "read-only root file system",
            host.get("ReadonlyRootfs") is True and write_root.returncode != 0 and "Read-only" in write_root.stdout,
            f"ReadonlyRootfs {host.get('ReadonlyRootfs')}; {write_root.stdout.strip().splitlines()[-1][:80]}",
        )
        tmp = run("podman", "exec", name, "sh", "-c", "touch /tmp/x /home/lensa/x && echo writable", check=False)
        check("emptyDir /tmp and /home/lensa writable", tmp.stdout.strip() == "writable", tmp.stdout.strip()[:80])
        status_lines = run("podman", "exec", name, "cat", "/proc/1/status").stdout.splitlines()
        proc = dict(line.split(":", 1) for line in status_lines if ":" in line)
        cap_eff = proc.get("CapEff", "").strip()
        nnp = proc.get("NoNewPrivs", "").strip()
        seccomp = proc.get("Seccomp", "").strip()
        check("capabilities dropped (ALL)", int(cap_eff or "1", 16) == 0, f"CapEff {cap_eff}")
        check("no privilege escalation", nnp == "1", f"NoNewPrivs {nnp}")
        check("seccomp filter on", seccomp == "2", f"Seccomp {seccomp} (2 = filter)")
        env = run("podman", "exec", name, "printenv", "STREAMLIT_SERVER_COOKIE_SECRET", check=False).stdout.strip()
        check("cookie secret from the Secret", len(env) == 64, f"{len(env)} characters")
    except Exception as exc:  # reported with the rest; the pod is still removed below
        failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        if not keep:
            run("podman", "kube", "play", "--down", str(play_file), check=False)
            run("podman", "secret", "rm", SECRET_NAME, check=False)
        shutil.rmtree(work, ignore_errors=True)

    return report, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="localhost/lensa:compose")
    parser.add_argument("--keep", action="store_true", help="leave the pod running")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the pod to become ready")
    args = parser.parse_args(argv)
    reason = podman_missing_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    started = time.monotonic()
    report, failures = play(args.image, args.keep, args.timeout)
    width = max(len(k) for k, _ in report) if report else 0
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in report))
    if failures:
        print("\nkube play check: FAILED\n" + "\n".join(f"- {f}" for f in failures))
        return 1
    print(f"\nkube play check: PASS ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
