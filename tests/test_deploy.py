"""The deployment files agree with each other: compose, the nginx configuration, Kubernetes, the Dockerfiles.

checkov and kubernetes-validate (make lint) check the manifests' hardening and schema, tests/e2e/test_replicas.py
runs the nginx configuration for real, tests/e2e/test_compose.py runs deploy/compose.yaml on Docker Engine and
scripts/kube_play.py the Deployment on podman. These tests check what those do not see, without an engine: that the
pieces name the same files, ports, users and options.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.replicas import NGINX, NGINX_CONF, SERVER_OPTIONS, nginx_config, nginx_missing_reason

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def kube(kind: str) -> dict:
    docs = [d for f in sorted(KUBE.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    (doc,) = [d for d in docs if d.get("kind") == kind]
    return doc


def test_compose_runs_three_healthchecked_replicas_of_the_projects_image():
    app = compose()["services"]["app"]
    assert app["build"]["context"] == ".."
    assert (DEPLOY / app["build"]["context"] / app["build"]["dockerfile"]).resolve() == ROOT / "Dockerfile"
    assert app["deploy"]["replicas"] == 3
    assert "ports" not in app, "replicas publish no host port; nginx is the way in"
    assert "/_stcore/health" in " ".join(app["healthcheck"]["test"])
    assert app["read_only"] is True


def test_compose_nginx_mounts_the_config_the_local_test_uses():
    nginx = compose()["services"]["nginx"]
    source, target, *_ = nginx["volumes"][0].split(":")
    assert (DEPLOY / source).resolve() == NGINX_CONF
    assert target.startswith("/etc/nginx/templates/") and target.endswith(".conf.template")
    assert nginx["depends_on"]["app"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(nginx["healthcheck"]["test"])
    env = nginx["environment"]
    (published,) = nginx["ports"]
    assert published == f"${{LENSA_ADDRESS:-127.0.0.1}}:${{LENSA_PORT:-8080}}:{env['LENSA_LISTEN']}", (
        "nginx is published on this machine only unless LENSA_ADDRESS says otherwise"
    )
    # Every name the template uses is given, and the envsubst filter lets exactly those through.
    names = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)\}", NGINX_CONF.read_text()))
    assert names == {"LENSA_LISTEN", "LENSA_UPSTREAM_SERVERS"}
    assert names <= set(env)
    assert all(re.search(env["NGINX_ENVSUBST_FILTER"], n) for n in names)
    # The replicas get the same failover options in compose as in the local test.
    assert SERVER_OPTIONS in env["LENSA_UPSTREAM_SERVERS"]


def test_compose_names_public_images_by_default_and_takes_local_ones_from_the_environment():
    services = compose()["services"]
    assert services["app"]["image"] == "${LENSA_IMAGE:-lensa:latest}"
    assert services["app"]["build"]["args"]["BASE_IMAGE"] == "${LENSA_BASE_IMAGE:-python:3.11.13-slim-bookworm}"
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11\.13-slim-bookworm$", (ROOT / "Dockerfile").read_text(), re.M)
    assert services["nginx"]["image"] == "${LENSA_NGINX_IMAGE:-nginx:1.27.5-alpine}"
    # The default upstream (official nginx >= 1.27.3) re-resolves the replicas; make compose-up's Debian nginx (1.22)
    # gets server lines without `resolve`, with the same failover options.
    upstream = services["nginx"]["environment"]["LENSA_UPSTREAM_SERVERS"]
    assert upstream.startswith("${LENSA_UPSTREAM_SERVERS:-resolver 127.0.0.11 ") and " resolve " in upstream
    script = (ROOT / "scripts" / "compose_stack.sh").read_text()
    assert f'LENSA_UPSTREAM_SERVERS="server app:8501 {SERVER_OPTIONS};"' in script


def test_the_debian_nginx_image_renders_templates_as_the_official_one(tmp_path):
    if shutil.which("envsubst") is None:
        pytest.skip("envsubst not found (apt-get install -y gettext-base)")
    templates, out = tmp_path / "templates", tmp_path / "conf.d"
    templates.mkdir()
    out.mkdir()
    (templates / "default.conf.template").write_text(NGINX_CONF.read_text())
    nginx = compose()["services"]["nginx"]["environment"]
    env = {
        "PATH": "/usr/bin:/bin",
        "NGINX_ENVSUBST_TEMPLATE_DIR": str(templates),
        "NGINX_ENVSUBST_OUTPUT_DIR": str(out),
        "NGINX_ENVSUBST_FILTER": nginx["NGINX_ENVSUBST_FILTER"],
        "LENSA_LISTEN": "8080",
        "LENSA_UPSTREAM_SERVERS": f"server app:8501 {SERVER_OPTIONS};",
        "request_id": "must stay nginx's own",
    }
    done = subprocess.run(
        [str(DEPLOY / "nginx" / "entrypoint.sh"), "true"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    rendered = (out / "default.conf").read_text()
    assert rendered == nginx_config_for_compose(f"server app:8501 {SERVER_OPTIONS};")
    assert "$request_id" in rendered and "${LENSA_" not in rendered


def nginx_config_for_compose(servers: str) -> str:
    from bench.replicas import render

    return render(NGINX_CONF.read_text(), {"LENSA_LISTEN": "8080", "LENSA_UPSTREAM_SERVERS": servers})


def test_the_debian_nginx_image_runs_unprivileged_with_logs_on_the_console():
    dockerfile = (DEPLOY / "nginx" / "Dockerfile").read_text()
    main = (DEPLOY / "nginx" / "nginx.conf").read_text()
    assert re.search(r"^USER 33:33$", dockerfile, re.M), "www-data, not root"
    assert re.search(r"^EXPOSE 8080$", dockerfile, re.M)
    assert "STOPSIGNAL SIGQUIT" in dockerfile
    assert "/healthz" in dockerfile
    live = "\n".join(line.split("#", 1)[0] for line in main.splitlines())
    assert "user " not in live and "pid /tmp/nginx/" in live
    assert "error_log /dev/stderr" in live and "access_log /dev/stdout" in live
    assert "include /etc/nginx/conf.d/*.conf;" in live


def test_nginx_config_has_cookie_affinity_not_ip_hash():
    text = NGINX_CONF.read_text()
    live = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert "ip_hash" not in live
    assert "hash $lensa_affinity consistent;" in live
    assert "X-Lensa-Replica $upstream_addr always" in live
    assert "proxy_read_timeout 1d;" in live


@pytest.mark.skipif(nginx_missing_reason() is not None, reason=str(nginx_missing_reason()))
def test_nginx_accepts_the_rendered_config(tmp_path):
    (tmp_path / "lensa.conf").write_text(nginx_config(18080, ["127.0.0.1:18501", "127.0.0.1:18502"]))
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{ access_log off; include {tmp_path}/lensa.conf; }}\n"
    )
    nginx = NGINX if Path(NGINX).exists() else shutil.which("nginx")
    result = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"])
    assert listed == {f.name for f in KUBE.glob("*.yaml")} - {"kustomization.yaml"}


def test_kubernetes_runs_the_dockerfiles_user_and_probes_its_health():
    uid = re.search(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.M)
    pod = kube("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert str(pod["securityContext"]["runAsUser"]) == uid.group(1)
    assert str(pod["securityContext"]["runAsGroup"]) == uid.group(2)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/_stcore/health"
    # The Service, the HPA and the Ingress all point at this Deployment and its port.
    assert kube("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == kube("Deployment")["metadata"]["name"]
    backend = kube("Ingress")["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == kube("Service")["metadata"]["name"]
    assert kube("Ingress")["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"


def test_every_checkov_skip_gives_a_reason():
    files = [ROOT / "Dockerfile", DEPLOY / "nginx" / "Dockerfile", *KUBE.glob("*.yaml")]
    skips = [
        m for f in files for m in re.findall(r"(?:checkov:skip=|checkov\.io/skip\d+: )(CKV_\w+)[:=](.*)", f.read_text())
    ]
    assert skips, "the skips are annotated in the files"
    for check, reason in skips:
        assert len(reason.split()) >= 8, f"{check} is skipped without a real reason"


def compose_cli() -> list[str] | None:
    """Compose itself, to read the file as an engine would: v2 (docker compose) or 1.29 (docker-compose)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0:
        return [docker, "compose"]
    return [shutil.which("docker-compose") or ""] if shutil.which("docker-compose") else None


@pytest.mark.skipif(compose_cli() is None, reason="neither docker compose nor docker-compose here")
@pytest.mark.parametrize(
    ("env", "app_image", "nginx_image", "published"),
    [
        ({}, "lensa:latest", "nginx:1.27.5-alpine", ("127.0.0.1", "8080")),
        (
            {
                "LENSA_IMAGE": "localhost/lensa:compose",
                "LENSA_NGINX_IMAGE": "localhost/lensa-nginx:bookworm",
                "LENSA_PORT": "8090",
                "LENSA_ADDRESS": "0.0.0.0",
            },
            "localhost/lensa:compose",
            "localhost/lensa-nginx:bookworm",
            ("0.0.0.0", "8090"),
        ),
    ],
)
def test_compose_reads_the_file_with_public_defaults_and_local_overrides(env, app_image, nginx_image, published):
    cli = compose_cli()
    assert cli is not None
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LENSA_")}
    result = subprocess.run(
        [*cli, "-p", "lensa", "-f", str(DEPLOY / "compose.yaml"), "config"],
        env={**clean, "LENSA_COOKIE_SECRET": "0" * 64, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert services["app"]["image"] == app_image
    assert services["nginx"]["image"] == nginx_image
    (port,) = services["nginx"]["ports"]
    if isinstance(port, str):  # Compose 1.29: "127.0.0.1:8080:8080/tcp"
        assert port == f"{published[0]}:{published[1]}:8080/tcp"
    else:  # v2: a mapping
        assert (port["host_ip"], str(port["published"]), port["target"]) == (*published, 8080)
    upstream = services["nginx"]["environment"]["LENSA_UPSTREAM_SERVERS"]
    assert upstream == f"resolver 127.0.0.11 valid=10s ipv6=off; server app:8501 resolve {SERVER_OPTIONS};"


WORKER_MB = 800  # the lab's worker process after the largest run (lensa/live/worker.py)


def _mib(text: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", str(text).strip()).groups()
    scale = {"": 1 / 2**20, "g": 1024, "gi": 1024, "gb": 1000**3 / 2**20, "m": 1, "mi": 1, "mb": 1e6 / 2**20}
    return float(number) * scale[unit.lower()]


def test_memory_limits_hold_the_servers_budget_plus_the_lab_worker():
    """Compose and Kubernetes give the same budgets, and a replica's memory limit holds the server process's
    budget (health turns 503 above it) plus the lab's worker, so the budget is what trips first."""
    from lensa.ui import limits

    app = compose()["services"]["app"]
    container = kube("Deployment")["spec"]["template"]["spec"]["containers"][0]
    kube_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for name in (limits.MEMORY_BUDGET_ENV, limits.UPLOAD_BUDGET_ENV, limits.RECORDINGS_BUDGET_ENV):
        assert app["environment"][name] == kube_env[name], name
    budgets = limits.Limits.from_env(kube_env)
    assert budgets.upload_budget + budgets.recordings_budget < budgets.memory_budget
    for limit in (app["deploy"]["resources"]["limits"]["memory"], container["resources"]["limits"]["memory"]):
        assert budgets.memory_budget / 2**20 + WORKER_MB <= _mib(limit), limit


def test_the_balancers_take_a_run_file_upload_and_nothing_larger():
    """nginx and ingress-nginx refuse a body over 1 MB by default: both allow the app's largest upload."""
    from lensa.ui import limits

    allowed = f"{limits.UPLOAD_RESERVATION_BYTES // 2**20}m"
    assert re.search(rf"^\s*client_max_body_size {allowed};", NGINX_CONF.read_text(), re.M)
    annotations = kube("Ingress")["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == allowed


def test_the_orchestrators_wait_longer_than_the_warm_up_can_take():
    """Health answers 503 "warming up" for at most lensa.ui.warm.WARM_TIMEOUT_S after the server listens: the start-up
    probe and the compose start period must outlast it, with the imports before it, or a slow node restarts the
    replica in a loop."""
    from lensa.ui.warm import WARM_TIMEOUT_S

    (container,) = kube("Deployment")["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1.5 * WARM_TIMEOUT_S
    start_period = compose()["services"]["app"]["healthcheck"]["start_period"]
    assert int(start_period.removesuffix("s")) >= WARM_TIMEOUT_S
    docker = re.search(r"--start-period=(\d+)s", (ROOT / "Dockerfile").read_text())
    assert docker is not None and int(docker.group(1)) >= WARM_TIMEOUT_S
