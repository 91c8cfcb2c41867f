"""The worker's port answers `/healthz` (the loop is alive), `/readyz` (it can do its work) and
`/metrics`, each with its own status code; any other path is 404."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from platform_ingest import Database, migrate
from platform_ingest.worker.health import Health
from platform_journals import (
    hello,
    log_entries,
    scrape_metrics,
    serves_metrics,
    spend,
    start_worker,
    stop_worker,
    wait_for,
    write,
)
from server_fixtures import pg_ctl, start_again

pytestmark = pytest.mark.postgres


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:  # it holds the response's socket: closed now, not whenever it is collected
            return error.code, error.read()


def _port(log: Path) -> int:
    (entry,) = [entry for entry in log_entries(log) if entry["message"].startswith("metrics on")]
    port: int = entry["metrics_port"]  # a field of its own, not only a word of the message
    assert entry["message"] == f"metrics on port {port}"
    return port


def test_a_running_worker_is_live_and_ready_and_serves_its_metrics(
    fresh_dsn: str, tmp_path: Path
) -> None:
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", hello(book="book-1"), spend(2, 5))
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--metrics-port", "0")
    try:
        wait_for("the port served", lambda: serves_metrics(log))
        port = _port(log)
        assert _get(port, "/healthz") == (200, b'{"status":"ok"}\n')
        wait_for("ready", lambda: _get(port, "/readyz")[0] == 200)
        assert json.loads(_get(port, "/readyz")[1]) == {"status": "ok"}
        messages = [entry["message"] for entry in log_entries(log)]
        assert any(m.endswith(" starts on 1 root (auto mode)") for m in messages), messages
        assert "watching 1 root and 1 book directory for changes" in messages, messages
        status, body = _get(port, "/metrics")
        assert status == 200 and b"platform_ingest_database_up 1.0" in body
        status, body = _get(port, "/")
        assert status == 404 and b"/metrics, /healthz and /readyz" in body
        assert _get(port, "/metrics/extra")[0] == 404
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def test_a_worker_whose_postgres_is_away_is_live_but_not_ready(
    own_server: Any, tmp_path: Path
) -> None:
    """Postgres stopped: `/readyz` says 503 and names `postgres`; `/healthz` stays 200 (a restart
    would only wait again). Postgres back: ready again, with nobody restarting the worker."""
    dsn: str = own_server.get_uri()
    db = Database(dsn)
    migrate(db)
    db.close()
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", hello(book="book-1"))
    log = tmp_path / "worker.log"
    worker = start_worker(dsn, root, log, "--metrics-port", "0", "--safety-pass-s", "1")
    socket_dir = own_server.get_postmaster_info().socket_dir
    try:
        wait_for("the port served", lambda: serves_metrics(log))
        port = _port(log)
        wait_for("ready", lambda: _get(port, "/readyz")[0] == 200)
        pg_ctl(own_server, "-w", "-m", "fast", "stop")
        wait_for("not ready", lambda: _get(port, "/readyz")[0] == 503)
        body = json.loads(_get(port, "/readyz")[1])
        assert body["status"] == "not ready" and "postgres" in body["failing"]
        assert _get(port, "/healthz")[0] == 200
        start_again(own_server, socket_dir)
        wait_for("ready again", lambda: _get(port, "/readyz")[0] == 200)
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def _closed_port() -> int:
    """A TCP port of this machine on which nothing listens (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_worker_started_while_postgres_cannot_be_reached_waits_for_it(
    own_server: Any, tmp_path: Path
) -> None:
    """Started with a DSN whose port nobody listens on, the worker does not give up: it stays
    up, `/healthz` 200 and `/readyz` 503 naming `postgres`, trying again after growing waits (a
    handful of tries in its first seconds, not one every 0.2 s). Postgres then started on that
    port: the worker checks the schema, joins, and is ready, with nobody restarting it."""
    db = Database(own_server.get_uri())
    migrate(db)
    db.close()
    pg_ctl(own_server, "-w", "-m", "fast", "stop")
    port = _closed_port()
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=2"
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", hello(book="book-1"), spend(2, 5))
    log = tmp_path / "worker.log"
    worker = start_worker(dsn, root, log, "--metrics-port", "0")
    socket_dir = own_server.get_postmaster_info().socket_dir
    try:
        wait_for("the port served", lambda: serves_metrics(log))
        metrics_port = _port(log)
        started = time.monotonic()
        wait_for(
            "the first try failed", lambda: b"database_up 0.0" in _get(metrics_port, "/metrics")[1]
        )
        time.sleep(max(0.0, 8.0 - (time.monotonic() - started)))
        assert worker.poll() is None, log.read_text()
        assert _get(metrics_port, "/healthz") == (200, b'{"status":"ok"}\n')
        status, body = _get(metrics_port, "/readyz")
        assert status == 503 and json.loads(body)["failing"][0] == "postgres"
        tries = scrape_metrics(metrics_port)[
            'platform_ingest_database_errors_total{error="DatabaseUnavailable"}'
        ]
        # Waits of 0.2, 0.4, 0.8, ... s (each within half of it either way), at most 5 s: about
        # six tries in eight seconds; a fixed 0.2 s wait would make forty.
        assert 2 <= tries <= 12, tries
        away = [e for e in log_entries(log) if e["message"].startswith("Postgres is away")]
        assert len(away) == 1 and away[0]["level"] == "WARNING", away
        pg_ctl(
            own_server,
            "-w",
            "-o",
            f"-h 127.0.0.1 -p {port}",
            "-o",
            f"-k {socket_dir}",
            "-l",
            str(own_server.log),
            "start",
        )
        wait_for("ready", lambda: _get(metrics_port, "/readyz")[0] == 200)
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def _registry(database_up: float, watcher_up: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("platform_ingest_database_up", "", registry=registry).set(database_up)
    Gauge("platform_ingest_watcher_up", "", registry=registry).set(watcher_up)
    return registry


@pytest.mark.parametrize(
    ("database_up", "watcher_up", "schema", "joined", "failing"),
    [
        (1, 1, True, True, []),
        (0, 1, True, True, ["postgres"]),
        (1, 0, True, True, ["watcher"]),
        (1, 1, False, True, ["schema"]),
        (1, 1, True, False, ["membership"]),
        (0, 0, False, False, ["postgres", "schema", "watcher", "membership"]),
    ],
)
def test_readiness_names_every_check_that_fails(
    database_up: float, watcher_up: float, schema: bool, joined: bool, failing: list[str]
) -> None:
    health = Health(_registry(database_up, watcher_up), stale_after_s=60)
    health.schema_checked = schema
    health.joined = lambda: joined
    ok, body = health.ready()
    assert ok is (failing == [])
    assert body == ({"status": "ok"} if ok else {"status": "not ready", "failing": failing})


def test_liveness_fails_only_once_the_loop_is_quiet_past_its_bound() -> None:
    clock = [1000.0]
    health = Health(_registry(0, 0), stale_after_s=60, clock=lambda: clock[0])
    clock[0] += 60
    assert health.live() == (True, {"status": "ok"})
    clock[0] += 0.5
    assert health.live() == (False, {"status": "stuck", "loop_quiet_s": 60.5})
    health.turned()
    assert health.live()[0] is True
