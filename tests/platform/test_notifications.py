"""Change notifications: an operator's change reaches a running worker at once (not at its safety
pass), through a listener that survives losing its connection; `show --follow` prints each change
as it commits."""

from __future__ import annotations

import hashlib
import queue
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from platform_ingest import Database
from platform_ingest.errors import NotFound
from platform_ingest.operate.naming import name_stream, release_attempt
from platform_ingest.operate.remedies import skip_line
from platform_journals import (
    BIN,
    RUN_A,
    append,
    attempts,
    hello,
    passes_by_trigger,
    serves_metrics,
    spend,
    start_worker,
    sweep,
    wait_for,
    worker_metrics,
    write,
)

pytestmark = pytest.mark.postgres

BAD = b'{"seq":2,"type":"spend","time":"x"}\n'


def _control(connection: psycopg.Connection[Any]) -> list[str]:
    return [notify.payload for notify in connection.notifies(timeout=0.5, stop_after=20)]


def test_operators_changes_and_only_those_are_sent_on_the_control_channel(
    db: Database, make_book: Any, fresh_dsn: str
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 5))
    with psycopg.connect(fresh_dsn, autocommit=True) as listener:
        listener.execute("LISTEN platform_ingest_control")
        sweep(db, book, auto=False)  # registers the book and passes it: no operator's word
        assert _control(listener) == []
        name_stream(db, str(book), RUN_A)
        assert _control(listener) == ["book-1"]
        sweep(db, book, auto=False)
        assert _control(listener) == []
        append(book, BAD)
        write(book, hello(), spend(2, 5), spend(3, 6), BAD)
        sweep(db, book, auto=False)
        release_attempt(db, str(book), RUN_A, by="ops", reason="looked")
        assert _control(listener) == ["book-1"]


def _listener_pid(sql: psycopg.Connection[Any]) -> int | None:
    row = sql.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'platform-ingest listener %'"
    ).fetchone()
    return None if row is None else int(row[0])


def test_a_remedy_reaches_a_running_worker_at_once_and_after_its_listener_reconnects(
    db: Database, make_book: Any, fresh_dsn: str, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    """The safety pass is an hour away: only the operator's notification can wake the pass that
    applies the lines after a skipped one."""
    root = tmp_path / "root"
    root.mkdir()
    book = root / "book-1"
    book.mkdir()
    write(book, hello(), BAD, spend(3, 5))
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--safety-pass-s", "3600", "--metrics-port", "0")
    try:
        wait_for("the bad line quarantines the stream", lambda: _state(db, book) == "quarantined")
        wait_for("the listener is up", lambda: _listener_pid(sql) is not None)
        skip_line(db, str(book), RUN_A, 2, sha256=hashlib.sha256(BAD).hexdigest(), reason="bad")
        wait_for("the line after the skipped one is applied", lambda: _last_seq(db, book) == 3)
        wait_for("metrics", lambda: serves_metrics(log))
        assert passes_by_trigger(worker_metrics(log)).get("operator", 0) >= 1
        # The listener's connection is cut: it connects again, and the next remedy still lands.
        first = _listener_pid(sql)
        sql.execute("SELECT pg_terminate_backend(%s)", (first,))
        wait_for(
            "the listener is back",
            lambda: _listener_pid(sql) not in (None, first),
        )
        bad4 = b'{"seq":4,"type":"spend","time":"x"}\n'
        append(book, bad4, spend(5, 9))
        wait_for("the second bad line quarantines", lambda: _state(db, book) == "quarantined")
        skip_line(db, str(book), RUN_A, 4, sha256=hashlib.sha256(bad4).hexdigest(), reason="bad")
        wait_for("the lines after it are applied", lambda: _last_seq(db, book) == 5)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0


def _state(db: Database, book: Path) -> str | None:
    try:
        found = attempts(db, book).get(RUN_A)
    except NotFound:  # the worker has not registered the book yet
        return None
    return None if found is None else str(found["state"])


def _last_seq(db: Database, book: Path) -> int:
    found = attempts(db, book).get(RUN_A)
    return 0 if found is None else int(found["last_seq"])


def test_show_follow_prints_each_change_as_it_commits(
    db: Database, make_book: Any, fresh_dsn: str
) -> None:
    book = make_book("book-1")
    write(book, hello())
    sweep(db, book)
    argv = [str(BIN / "platform-ingest"), "--dsn", fresh_dsn, "show", "--follow", "--json"]
    with subprocess.Popen(
        [*argv, str(book)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as process:
        lines: queue.Queue[bytes] = queue.Queue()
        output = process.stdout
        assert output is not None
        threading.Thread(target=lambda: [lines.put(line) for line in output], daemon=True).start()
        try:
            first = orjson.loads(lines.get(timeout=30))
            assert first["runs"][0]["attempts"][0]["last_seq"] == 1
            append(book, spend(2, 5), spend(3, 7))
            sweep(db, book)
            changed = orjson.loads(lines.get(timeout=30))
            assert changed["book_id"] == "book-1"
            assert changed["runs"][0]["attempts"][0]["last_seq"] == 3
            assert changed["runs"][0]["committed_micro_usd"] == 7
            append(book, BAD)
            sweep(db, book)
            quarantined = orjson.loads(lines.get(timeout=30))
            assert quarantined["runs"][0]["attempts"][0]["state"] == "quarantined"
            release_attempt(db, str(book), RUN_A, by="ops", reason="looked")  # an operator's change
            released = orjson.loads(lines.get(timeout=30))
            assert released["actions"][-1]["action"] == "release"
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "[1, 2]",
        '{"run_id": "7"}',
        '{"run_id": 99999999999999999999999}',
        '{"run_id": -1}',
        '{"run_id": null}',
        "\ufffd" * 100,
    ],
)
def test_show_follow_passes_over_a_stranger_s_notification(
    db: Database, make_book: Any, fresh_dsn: str, sql: psycopg.Connection[Any], payload: str
) -> None:
    """Any session may NOTIFY on the channels: whatever it sends (not JSON, the wrong shape, a run
    id Postgres cannot hold, an unknown book id) is passed over, and the next real change prints."""
    from platform_ingest.operate.follow import follow

    book = make_book("book-1")
    write(book, hello())
    sweep(db, book)
    calls = 0

    def stopping() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            sql.execute("SELECT pg_notify('platform_ingest', %s)", (payload,))
            sql.execute("SELECT pg_notify('platform_ingest_control', %s)", (payload,))
        if calls == 4:
            append(book, spend(2, 5))
            sweep(db, book)
        return calls > 6

    listener = Database(fresh_dsn)
    printed: list[str] = []
    try:
        follow(db, listener, None, as_json=True, write=printed.append, stopping=stopping)
    finally:
        listener.close()
    last_seqs = [orjson.loads(line)["runs"][0]["attempts"][0]["last_seq"] for line in printed]
    assert last_seqs[0] == 1
    assert last_seqs[-1] == 2
