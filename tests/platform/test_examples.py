"""The two example projections of docs/how-to/write-a-projection.md run as documented: the spend
ledger equals the platform's spend and never doubles an entry; the webhook outbox delivers every
row at-least-once, under a key that lets the receiver keep each event once."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest

from platform_ingest import Database, sweep_book
from platform_ingest.cli.main import main
from platform_journals import (
    RUN_A,
    RUN_B,
    append,
    bank_stop,
    ceiling,
    finished,
    hello,
    progress,
    spend,
    write,
)

pytestmark = pytest.mark.postgres

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_ledger_equals_the_platforms_spend_and_never_doubles(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    from ledger_projection import LedgerProjection, check_ledger

    book = make_book("book-1")
    write(
        book,
        hello(RUN_A),
        spend(2, 100),
        progress(3, plan=(1, 2)),
        spend(4, 100),
        spend(5, 250),
        finished(6, money=250),
    )
    sweep_book(db, book, mode="auto", projections=[LedgerProjection()])
    append(book, spend(5, 250), hello(RUN_B), spend(2, 400))  # a duplicate, then a new run
    sweep_book(db, book, mode="auto", projections=[LedgerProjection()])
    assert check_ledger(sql) == []
    entries = sql.execute(
        "SELECT seq, amount_micro_usd FROM ledger_entries WHERE account = 'run_spend'"
        " ORDER BY attempt_id, seq"
    ).fetchall()
    assert entries == [(2, 100), (5, 150), (2, 150)]
    sql.execute(
        "UPDATE ledger_entries SET amount_micro_usd = 1"
        " WHERE seq = 2 AND account = 'run_spend' AND amount_micro_usd = 100"
    )
    assert len(check_ledger(sql)) == 2  # the check can fail: the posting and the book's total


def test_sweep_from_the_command_line_applies_the_ledger(
    fresh_dsn: str, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 70), finished(3, money=70))
    spec = "ledger_projection:LedgerProjection"
    code = main(["--dsn", fresh_dsn, "sweep", "--auto", str(book), "--projection", spec])
    assert code == 0
    assert sql.execute("SELECT sum(amount_micro_usd) FROM ledger_entries").fetchone() == (0,)
    assert sql.execute(
        "SELECT amount_micro_usd FROM ledger_entries WHERE account = 'run_spend'"
    ).fetchall() == [(70,)]


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    refuse_next: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if _Receiver.refuse_next:
            _Receiver.refuse_next -= 1
            self.send_response(503)
        else:
            _Receiver.received.append((self.headers["Idempotency-Key"], body))
            self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.received, _Receiver.refuse_next = [], 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks"
    server.shutdown()
    server.server_close()


def test_the_webhook_outbox_delivers_each_event_at_least_once_under_one_key(
    db: Database, make_book: Any, sql: psycopg.Connection[Any], fresh_dsn: str, receiver: str
) -> None:
    from webhook_outbox import WebhookOutbox, deliver_pending, post_json

    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 10), ceiling(3), hello(RUN_B), bank_stop(2))
    sweep_book(db, book, mode="auto", projections=[WebhookOutbox()])
    append(book, bank_stop(2), finished(3, money=10))  # a duplicate line makes no second row
    sweep_book(db, book, mode="auto", projections=[WebhookOutbox()])
    keys = [key for (key,) in sql.execute("SELECT idempotency_key FROM webhook_outbox")]
    assert len(keys) == 3 and len(set(keys)) == 3

    send = post_json(receiver)
    sent: list[str] = []

    def dies_after_sending(key: str, body: dict[str, Any]) -> None:
        send(key, body)
        sent.append(key)
        raise ConnectionResetError("the sender died before its commit")

    with psycopg.connect(fresh_dsn, autocommit=True) as connection:
        with pytest.raises(ConnectionResetError):
            deliver_pending(connection, dies_after_sending)
        _Receiver.refuse_next = 1
        with pytest.raises(urllib.error.HTTPError) as refused:
            deliver_pending(connection, send)
        assert refused.value.code == 503
        refused.value.close()  # it holds the response's socket: closed now, not when collected
        assert deliver_pending(connection, send) == 3
        assert deliver_pending(connection, send) == 0
    delivered = [key for key, _ in _Receiver.received]
    assert sorted(set(delivered)) == sorted(keys)
    assert delivered.count(sent[0]) == 2  # at-least-once: the same key twice, kept once
    assert sql.execute(
        "SELECT count(*) FROM webhook_outbox WHERE delivered_at IS NULL"
    ).fetchone() == (0,)
    types = {body["type"] for _, body in _Receiver.received}
    assert types == {"ceiling", "bank_stop", "finished"}
    assert all("book_id" not in body for _, body in _Receiver.received)


def test_the_sender_wakes_on_the_platforms_notification(
    db: Database, make_book: Any, fresh_dsn: str, receiver: str
) -> None:
    """No polling: the sender waits on LISTEN with a long timeout, and a commit wakes it."""
    from webhook_outbox import WebhookOutbox, post_json, run_sender

    book = make_book("book-1")
    write(book, hello())
    sweep_book(db, book, mode="auto", projections=[WebhookOutbox()])
    sender = threading.Thread(
        target=run_sender,
        args=(fresh_dsn, post_json(receiver)),
        kwargs={"wait_s": 60, "until_delivered": 1},
    )
    sender.start()
    append(book, finished(2, money=0))
    sweep_book(db, book, mode="auto", projections=[WebhookOutbox()])
    sender.join(timeout=20)  # a sender asleep before the commit wakes by its notification only
    assert not sender.is_alive(), "the commit's notification did not wake the sender"
    assert [body["type"] for _, body in _Receiver.received] == ["finished"]
