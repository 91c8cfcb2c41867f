"""A transactional outbox of webhooks, as a `platform_ingest` projection, and a tiny sender.

The projection writes one outbox row for each event a downstream service wants to hear of (a run
that finished, hit its ceiling, or was stopped by the bank), in the apply transaction: the row
exists exactly when the event's effect is committed, never before and never twice (its
`idempotency_key` is unique, and is the event's place in the journal).

The sender delivers the rows at-least-once: it takes the oldest undelivered row (`FOR UPDATE SKIP
LOCKED`, so several senders share the work), sends it, and marks it delivered in the same
transaction. A sender that dies after sending and before its commit sends the row again later,
with the same `Idempotency-Key` header: the receiver keeps the first and drops the rest. It sleeps
on `LISTEN platform_ingest` (the platform's change notification), so a new row is sent at once,
without polling.

    PYTHONPATH=examples platform-ingest run ROOT --projection webhook_outbox:WebhookOutbox
    python examples/webhook_outbox.py --dsn DSN --url https://example.com/hooks
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from platform_ingest.projections import Event, ProjectionSession

EVENT_TYPES = frozenset({"finished", "ceiling", "bank_stop"})
"""The events worth a webhook; the others (progress, spend, units) are too many to send one by one."""

Send = Callable[[str, dict[str, Any]], None]
"""Deliver one payload under its idempotency key; raise if it was not accepted."""


class WebhookOutbox:
    """The outbox projection (see the module docstring)."""

    name = "webhook_outbox"
    version = 1

    def setup(self, session: ProjectionSession) -> None:
        session.execute(
            """CREATE TABLE IF NOT EXISTS webhook_outbox (
                 outbox_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 idempotency_key text NOT NULL UNIQUE,
                 payload jsonb NOT NULL,
                 created_at timestamptz NOT NULL DEFAULT now(),
                 delivered_at timestamptz)"""
        )
        session.execute(
            "CREATE INDEX IF NOT EXISTS webhook_outbox_pending ON webhook_outbox (outbox_id)"
            " WHERE delivered_at IS NULL"
        )

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        rows = [
            (idempotency_key(event), json.dumps(payload(event)))
            for event in events
            if event.type in EVENT_TYPES
        ]
        if rows:
            session.executemany(
                "INSERT INTO webhook_outbox (idempotency_key, payload) VALUES (%s, %s)"
                " ON CONFLICT (idempotency_key) DO NOTHING",
                rows,
            )


def idempotency_key(event: Event) -> str:
    """The event's place in the journal: the same event always makes the same key."""
    return f"run-{event.run_id}/attempt-{event.attempt_id}/seq-{event.seq}"


def payload(event: Event) -> dict[str, Any]:
    return {
        "run_id": event.run_id,
        "engine_run_id": event.engine_run_id,
        "type": event.type,
        "seq": event.seq,
        "time": event.time,
        "data": dict(event.data),
    }


def deliver_pending(connection: psycopg.Connection[Any], send: Send, *, limit: int = 100) -> int:
    """Send up to `limit` undelivered rows, oldest first, each in its own transaction (sent, then
    marked delivered: at-least-once). Returns how many were delivered; a failed send leaves its
    row pending and stops this round (its error is raised)."""
    delivered = 0
    while delivered < limit:
        with connection.transaction():
            row = connection.execute(
                "SELECT outbox_id, idempotency_key, payload FROM webhook_outbox"
                " WHERE delivered_at IS NULL ORDER BY outbox_id LIMIT 1 FOR UPDATE SKIP LOCKED"
            ).fetchone()
            if row is None:
                return delivered
            outbox_id, key, body = row
            send(key, body)
            connection.execute(
                "UPDATE webhook_outbox SET delivered_at = now() WHERE outbox_id = %s", (outbox_id,)
            )
        delivered += 1
    return delivered


def post_json(url: str, timeout_s: float = 10.0) -> Send:
    """A `Send` that POSTs the payload as JSON with an `Idempotency-Key` header."""

    def send(key: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if not 200 <= response.status < 300:
                raise RuntimeError(f"the receiver answered {response.status}")

    return send


def run_sender(
    dsn: str, send: Send, *, wait_s: float = 5.0, until_delivered: int | None = None
) -> int:
    """Deliver what is pending, then sleep until the platform announces a commit (or `wait_s`
    passes, for rows a crashed sender left), and again: forever, or until `until_delivered` rows
    were delivered. Returns how many were."""
    delivered = 0
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("LISTEN platform_ingest")  # before the first look: no commit is missed
        while until_delivered is None or delivered < until_delivered:
            delivered += deliver_pending(connection, send)
            if until_delivered is not None and delivered >= until_delivered:
                break
            for _ in connection.notifies(timeout=wait_s, stop_after=1):
                pass
    return delivered


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="deliver the webhook outbox at-least-once")
    parser.add_argument("--dsn", required=True, help="the platform's Postgres")
    parser.add_argument("--url", required=True, help="where each payload is POSTed")
    args = parser.parse_args(argv)
    run_sender(args.dsn, post_json(args.url))


if __name__ == "__main__":
    main()
