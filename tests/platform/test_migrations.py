"""The schema's forward-only steps: a released step is never edited, and a populated database
upgrades with its data intact."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database, migrate
from platform_ingest.decisions.states import RUN_STATES, STOP_KINDS
from platform_ingest.decisions.views import ATTEMPT_STATES
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.show import show_state
from platform_ingest.store import migrations
from platform_ingest.store.schema import schema_version
from platform_journals import RUN_A, finished, hello, spend, sweep, unit_done, write

pytestmark = pytest.mark.postgres

RELEASED_STEPS = {
    1: "ca77a643ada39f4b0f49be96dc1d41cf8a44f12f6deb54345eb42530fc3a104a",
    2: "2e08c385b5baedb8c7640c2350dab650b7f415ab752d46436699a9ac37888c21",
    3: "8fc163e49f1020dc49e7a4e1fe64ba66888e0464e73ad6ba8bf91766c338ad8e",
    4: "2a85176998a00ea323408ba760d3d494627be7d5e7baaad2c6a6e681f2059d1e",
    5: "e3518a5ec749b45ecc4506adefefe3c821c309f2e645dc36138bcf7d99549c0b",
}
"""The sha256 of each released step's statements. A released step is followed, never edited: a
database migrated by it must reach the same schema as one that runs it today."""


def _step_hash(version: int) -> str:
    digest = hashlib.sha256()
    for statement in migrations.MIGRATIONS[version]:
        digest.update(statement.text.encode() + b"\n")
    return digest.hexdigest()


def test_released_steps_are_never_edited() -> None:
    assert {version: _step_hash(version) for version in RELEASED_STEPS} == RELEASED_STEPS
    assert sorted(migrations.MIGRATIONS) == list(range(1, migrations.SCHEMA_VERSION + 1))
    assert set(migrations.MIGRATIONS) - set(RELEASED_STEPS) == set(), "pin the new step's hash here"


ADDS_ONLY_FROM = 5
"""The first step a running worker of the previous release may meet before it stops (workers look
at the schema while they run from the release after 0.2.0 on, docs/platform/workers.md,
"Upgrading a running fleet"): from it on, a step only adds."""
_REMOVES = re.compile(
    r"\bDROP\s+(?:TABLE|COLUMN|INDEX|VIEW|TRIGGER|FUNCTION|NOT\s+NULL|DEFAULT)\b|\bRENAME\b"
    r"|\bALTER\s+COLUMN\s+\w+\s+(?:TYPE|SET\s+NOT\s+NULL)\b|\bTRUNCATE\b",
    re.IGNORECASE,
)
"""What a step must not do while the previous release's workers may still run: drop, rename or
narrow what they read or write. (A CHECK is widened by dropping and adding it again: whether the
new one is wider is for the review of the step.)"""


@pytest.mark.parametrize(
    ("text", "removes"),
    [
        ("ALTER TABLE runs ADD COLUMN note text", False),
        ("CREATE TABLE upgrade_notes (note text)", False),
        ("CREATE INDEX runs_note ON runs (note)", False),
        ("ALTER TABLE runs DROP COLUMN reason", True),
        ("ALTER TABLE runs RENAME COLUMN reason TO why", True),
        ("ALTER TABLE attempts ALTER COLUMN hint_file TYPE bytea", True),
        ("ALTER TABLE runs ALTER COLUMN reason SET NOT NULL", True),
        ("DROP TABLE line_skips", True),
    ],
)
def test_what_counts_as_removing(text: str, removes: bool) -> None:
    assert bool(_REMOVES.search(text)) is removes


def test_a_step_a_running_worker_may_meet_only_adds() -> None:
    """The previous release's workers apply batches in the moments between `migrate` and their
    stop: every step they may meet keeps their statements valid."""
    removing = [
        statement.name
        for version, steps in migrations.MIGRATIONS.items()
        if version >= ADDS_ONLY_FROM
        for statement in steps
        if _REMOVES.search(statement.text)
    ]
    assert removing == []


def test_a_populated_step_1_database_upgrades_with_its_data_intact(
    empty_dsn: str, tmp_path: Path
) -> None:
    """A book as step 1's code left it (its rows, in step 1's tables); step 2 keeps every row, and
    the book goes on from its cursor: the applied lines are duplicates, the new one is applied."""
    db = Database(empty_dsn)
    try:
        assert migrate(db, target=1) == (0, 1)
        book = tmp_path / "books" / "book-1"
        book.mkdir(parents=True)
        write(book, hello(), unit_done(2, "u-1", 0), spend(3, 70))
        _write_step_1_rows(db, book)
        assert schema_version(db) == 1
        assert migrate(db) == (1, migrations.SCHEMA_VERSION)
        (shown,) = show_state(db)["books"]
        (run,) = shown["runs"]
        assert (run["units"], run["committed_micro_usd"]) == (["u-1"], 70)
        (attempt,) = run["attempts"]
        assert (attempt["engine_run_id"], attempt["last_seq"]) == (RUN_A, 3)
        write(book, hello(), unit_done(2, "u-1", 0), spend(3, 70), finished(4, money=90))
        report = sweep(db, book)
        assert (report.lines_applied, report.duplicates) == (1, 3)
        (run,) = show_state(db)["books"][0]["runs"]
        assert (run["state"], run["committed_micro_usd"]) == ("completed", 90)
    finally:
        db.close()


def _write_step_1_rows(db: Database, book: Path) -> None:
    """The rows step 1's pass writes for hello, unit_done and spend, in step 1's tables."""
    line_hashes = [
        hashlib.sha256(line).digest()
        for line in (book / "events.jsonl").read_bytes().splitlines(keepends=True)
    ]
    with psycopg.connect(db.dsn, autocommit=True) as sql:
        sql.execute("INSERT INTO books (book_id, path) VALUES ('book-1', %s)", (str(book),))
        sql.execute(
            "INSERT INTO runs (book_id, state, committed_micro_usd) VALUES ('book-1', 'running', 70)"
        )
        sql.execute(
            "INSERT INTO attempts (book_id, run_id, engine_run_id, state, last_seq,"
            " last_line_sha256, stream_index, stream_version, chunker_version)"
            " VALUES ('book-1', 1, %s, 'active', 3, %s, 1, '1.3', 'c1')",
            (RUN_A, line_hashes[-1]),
        )
        for seq, digest in enumerate(line_hashes, start=1):
            sql.execute("INSERT INTO line_hashes VALUES (1, %s, %s)", (seq, digest))
        sql.execute("INSERT INTO run_units VALUES (1, 'u-1', 0, 1, 2)")


def test_a_populated_step_2_database_upgrades_and_its_old_attempts_compact(
    empty_dsn: str, tmp_path: Path
) -> None:
    """Step 3 (bounded storage) keeps every row of a step 2 database, audit and skips included;
    an attempt from before it is quiet only a quiet period after the upgrade, then compacts, and a
    re-read of its lines is judged by the digest."""
    db = Database(empty_dsn)
    try:
        assert migrate(db, target=1) == (0, 1)
        book = tmp_path / "books" / "book-1"
        book.mkdir(parents=True)
        lines = [hello(), unit_done(2, "u-1", 0), spend(3, 70)]
        write(book, *lines)
        _write_step_1_rows(db, book)
        assert migrate(db, target=2) == (1, 2)
        with psycopg.connect(db.dsn, autocommit=True) as sql:
            sql.execute(
                "INSERT INTO operator_actions (book_id, engine_run_id, action, by_whom, reason)"
                " VALUES ('book-1', %s, 'release', 'ops', 'looked')",
                (RUN_A,),
            )
            sql.execute("INSERT INTO line_skips VALUES (1, 3, '\\x00', 1)")
            sql.execute("UPDATE attempts SET state = 'exited', exit_status = 0")
        assert migrate(db) == (2, migrations.SCHEMA_VERSION)
        (shown,) = show_state(db)["books"]
        assert [action["action"] for action in shown["actions"]] == ["release"]
        (run,) = shown["runs"]
        assert (run["units"], run["committed_micro_usd"]) == (["u-1"], 70)
        assert compact_quiet(db, quiet_for_s=3600).compacted == []  # changed at the upgrade
        assert compact_quiet(db, quiet_for_s=0).compacted == [1]
        with psycopg.connect(db.dsn, autocommit=True) as sql:
            assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (0,)
            assert sql.execute("SELECT count(*) FROM line_skips").fetchone() == (1,)
        write(book, *lines)  # a new inode: the pass reads from byte 0
        report = sweep(db, book)
        assert (report.lines_applied, report.duplicates, report.unverified_duplicates) == (0, 3, 0)
        (attempt,) = show_state(db)["books"][0]["runs"][0]["attempts"]
        assert (attempt["state"], attempt["error"]) == ("exited", None)
    finally:
        db.close()


def _allowed(sql: psycopg.Connection[tuple[object, ...]], table: str, column: str) -> set[str]:
    """The values a CHECK constraint of the migrated schema allows in `table.column`."""
    rows = sql.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype = 'c'",
        (table,),
    ).fetchall()
    (definition,) = [str(row[0]) for row in rows if f"({column} = ANY" in str(row[0])]
    return set(re.findall(r"'([^']*)'::text", definition))


def test_the_states_the_code_knows_are_the_states_the_schema_allows(
    sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """The typed states of the decisions (`decisions/views.py`, `decisions/states.py`) and the
    CHECK constraints of the migrated schema name the same values: a state added on one side
    only fails here, not on the first row that carries it."""
    assert _allowed(sql, "attempts", "state") == set(ATTEMPT_STATES)
    assert _allowed(sql, "runs", "state") == set(RUN_STATES)
    assert _allowed(sql, "runs", "stop") == set(STOP_KINDS)
