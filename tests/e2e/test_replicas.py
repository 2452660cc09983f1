"""Two app processes behind Debian's nginx (deploy/nginx/lensa.conf): sessions stick, and survive a replica.

The learners are bench/loadgen.py's: Streamlit's websocket protocol, the balancer's cookie kept as a browser
keeps it, each learner's URL kept up to date. No browser is needed.
"""

from __future__ import annotations

import asyncio
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from websockets.sync.client import connect

from bench.replicas import Cluster, failover, replicas_of, sticky

pytestmark = [pytest.mark.e2e, pytest.mark.nginx]  # skipped without nginx (failed in CI): tests/e2e/conftest.py


@pytest.fixture(scope="module")
def cluster():
    with Cluster(replicas=2) as c:
        yield c


def test_the_cookie_pins_the_page_and_its_websocket_to_one_replica(cluster):
    with urllib.request.urlopen(f"{cluster.url}/memory?lang=en", timeout=10) as page:
        cookies = [c.split(";", 1)[0] for c in page.headers.get_all("Set-Cookie") or []]
        replica = cluster.replica_index(page.headers["X-Lensa-Replica"])
    (route,) = [c for c in cookies if c.startswith("lensa_route=")]
    assert replica is not None
    for _ in range(3):
        ws_url = cluster.url.replace("http://", "ws://") + "/_stcore/stream"
        with connect(ws_url, additional_headers={"Cookie": route}, subprotocols=["streamlit"], open_timeout=10) as ws:
            assert ws.response.status_code == 101
            assert cluster.replica_index(ws.response.headers["X-Lensa-Replica"]) == replica
            assert "lensa_route" not in (ws.response.headers.get("Set-Cookie") or ""), "set once, not again"
    with urllib.request.urlopen(f"{cluster.url}/healthz", timeout=5) as health:
        assert health.read() == b"ok"


def test_stopping_a_replica_moves_only_its_sessions_and_they_get_their_page_back(cluster):
    # In a thread of its own: the browser tests' Playwright (sync API) keeps an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(
            asyncio.run, failover(cluster, learners=8, think_s=1.0, seconds=14, stop_after_s=5, timeout_s=20)
        ).result()
    everyone = result.affected + result.others
    assert all(p.replicas for p in everyone), "every learner connected, and the 101 named its replica"
    assert all(p.move_ms for p in everyone), "every learner moved a slider"
    assert result.affected, "the stopped replica had sessions"
    for p in result.affected:
        seen = replicas_of(cluster, p)
        assert p.reconnects >= 1 and seen[-1] != seen[0], f"learner {p.n} went {seen}"
        assert p.restored and all(p.restored), f"learner {p.n} did not get its slider back from the URL"
    for p in result.others:
        assert sticky(cluster, p) and p.reconnects == 0, f"learner {p.n} moved: {replicas_of(cluster, p)}"
        assert not p.errors, f"learner {p.n}: {p.errors}"
    assert result.ok
