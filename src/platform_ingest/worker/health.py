"""What the worker's HTTP port answers: `/metrics` (the Prometheus text), `/healthz` (the
process's loop is alive) and `/readyz` (it can do its work), as a service manager or an
orchestrator probes them.

- `/healthz`: 200 while the worker's loop has turned (or committed a batch) within
  `stale_after_s`; 503 when it has not, the one case a restart helps. Postgres away is not a
  reason: the loop goes on turning while it waits, and a restart would only wait again.
- `/readyz`: 200 when Postgres answers (`platform_ingest_database_up` 1), the schema and the
  projections' tables were checked, change notification works (`platform_ingest_watcher_up` 1) and
  the worker has joined its group (it announced itself after registering every book); 503 with
  the checks that fail, otherwise.

Each answers a small JSON object: `{"status": "ok"}`, or `{"status": ..., "failing": [...]}`.
Any other path is 404. The values come from the worker's own state and its metrics' registry,
never from a query: a probe costs Postgres nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

READINESS_CHECKS = ("postgres", "schema", "watcher", "membership")
"""What `/readyz` checks, in the order it names what fails."""


class Health:
    """The worker's liveness and readiness, from its own state (set by the worker's loop)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        stale_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._turned_at = clock()
        self.schema_checked = False
        """The schema was found current and the projections' tables set up."""
        self.joined: Callable[[], bool] = lambda: False
        """Whether the worker has joined its group (`Survey.joined`)."""

    def turned(self) -> None:
        """The loop turned, or a batch was committed: the worker is alive."""
        self._turned_at = self._clock()

    def live(self) -> tuple[bool, dict[str, Any]]:
        quiet_s = self._clock() - self._turned_at
        if quiet_s <= self.stale_after_s:
            return True, {"status": "ok"}
        return False, {"status": "stuck", "loop_quiet_s": round(quiet_s, 1)}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        passing = {
            "postgres": self._sample("platform_ingest_database_up") == 1,
            "schema": self.schema_checked,
            "watcher": self._sample("platform_ingest_watcher_up") == 1,
            "membership": self.joined(),
        }
        failing = [check for check in READINESS_CHECKS if not passing[check]]
        if not failing:
            return True, {"status": "ok"}
        return False, {"status": "not ready", "failing": failing}

    def _sample(self, name: str) -> float | None:
        return self._registry.get_sample_value(name)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes and scrapes are not logged: every few seconds, forever."""


def health_app(registry: CollectorRegistry, health: Health) -> Callable[..., Iterable[bytes]]:
    """The WSGI application of the worker's port."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            answer: Iterable[bytes] = metrics(environ, start_response)
            return answer
        if path in ("/healthz", "/readyz"):
            ok, body = health.live() if path == "/healthz" else health.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [orjson.dumps(body) + b"\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: the paths are /metrics, /healthz and /readyz\n"]

    return app


def serve(
    registry: CollectorRegistry, health: Health, port: int, address: str = "127.0.0.1"
) -> int:
    """Serve the worker's port on `address`:`port` (0: any free port) from a daemon thread;
    return the bound port."""
    server = make_server(
        address,
        port,
        health_app(registry, health),
        server_class=_Server,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return int(server.server_port)
