"""Several app processes behind Debian's nginx, with the sticky configuration that deploy/compose.yaml uses.

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

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import ROOT
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
