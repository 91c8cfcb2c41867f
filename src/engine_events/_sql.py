"""Every SQL statement engine_events runs, in one place.

A test runs EXPLAIN QUERY PLAN on each and checks that none scans the outbox (a table that grows with
events), and traces a whole engine run to check that nothing else is executed. Named parameters only.
"""

from __future__ import annotations

# -- schema ------------------------------------------------------------------------------------------

META_TABLE_EXISTS = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'engine_events_meta'"
)
SCHEMA_VERSION_GET = "SELECT value FROM engine_events_meta WHERE key = 'schema_version'"
SCHEMA_VERSION_SET = (
    "INSERT INTO engine_events_meta (key, value) VALUES ('schema_version', :version) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the outbox, its streams, and a small key/value table for the schema version and journal state.
    (
        "CREATE TABLE engine_events_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE engine_events_stream ("
        " stream_no INTEGER PRIMARY KEY,"
        " engine_run_id TEXT NOT NULL UNIQUE,"
        " book_id TEXT NOT NULL,"
        " projected_seq INTEGER NOT NULL DEFAULT 0 CHECK (projected_seq >= 0))",
        # Each row also carries a running summary of its stream as of that row: how far the
        # stream's lines were durable in the journal when it was stored, and the seq of the
        # stream's latest event of each type the status report needs. Reading a stream's state is
        # then one index seek, and an event costs no write besides its own row.
        "CREATE TABLE engine_events_outbox ("
        " stream_no INTEGER NOT NULL REFERENCES engine_events_stream (stream_no),"
        " seq INTEGER NOT NULL CHECK (seq >= 1),"
        " type TEXT NOT NULL,"
        " line BLOB NOT NULL,"
        " projected_seq INTEGER NOT NULL CHECK (projected_seq >= 0 AND projected_seq < seq),"
        " progress_seq INTEGER,"
        " spend_seq INTEGER,"
        " ceiling_seq INTEGER,"
        " finished_seq INTEGER,"
        " PRIMARY KEY (stream_no, seq))",
    ),
)

SUMMARY_TYPES = ("progress", "spend", "ceiling", "finished")
"""The event types whose latest occurrence each outbox row points at."""

# -- streams -----------------------------------------------------------------------------------------

STREAM_INSERT = (
    "INSERT INTO engine_events_stream (engine_run_id, book_id) VALUES (:engine_run_id, :book_id)"
)
STREAM_BY_RUN_ID = "SELECT stream_no FROM engine_events_stream WHERE engine_run_id = :engine_run_id"
STREAMS_ALL = (
    "SELECT stream_no, engine_run_id, book_id, projected_seq FROM engine_events_stream "
    "ORDER BY stream_no"
)
STREAM_PROJECTED_SET = (
    "UPDATE engine_events_stream SET projected_seq = max(projected_seq, :projected_seq) "
    "WHERE stream_no = :stream_no"
)

# -- outbox ------------------------------------------------------------------------------------------

OUTBOX_LAST = (
    "SELECT seq, projected_seq, progress_seq, spend_seq, ceiling_seq, finished_seq "
    "FROM engine_events_outbox WHERE stream_no = :stream_no ORDER BY seq DESC LIMIT 1"
)
OUTBOX_INSERT = (
    "INSERT INTO engine_events_outbox (stream_no, seq, type, line, projected_seq,"
    " progress_seq, spend_seq, ceiling_seq, finished_seq) "
    "VALUES (:stream_no, :seq, :type, :line, :projected_seq,"
    " :progress_seq, :spend_seq, :ceiling_seq, :finished_seq)"
)
OUTBOX_AFTER = (
    "SELECT seq, line FROM engine_events_outbox "
    "WHERE stream_no = :stream_no AND seq > :after_seq ORDER BY seq LIMIT :limit"
)
OUTBOX_BEFORE = (
    "SELECT seq, line FROM engine_events_outbox "
    "WHERE stream_no = :stream_no AND seq > :after_seq AND seq <= :through_seq "
    "ORDER BY seq DESC LIMIT :limit"
)
OUTBOX_LINE = "SELECT line FROM engine_events_outbox WHERE stream_no = :stream_no AND seq = :seq"

# -- journal state -----------------------------------------------------------------------------------

JOURNAL_STATE_GET = "SELECT value FROM engine_events_meta WHERE key = 'journal'"
JOURNAL_STATE_SET = (
    "INSERT INTO engine_events_meta (key, value) VALUES ('journal', :state) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

# -- transactions and connection checks --------------------------------------------------------------

BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
JOURNAL_MODE_GET = "PRAGMA journal_mode"
SYNCHRONOUS_GET = "PRAGMA synchronous"
JOURNAL_MODE_WAL_SET = "PRAGMA journal_mode=WAL"
SYNCHRONOUS_FULL_SET = "PRAGMA synchronous=FULL"

QUERIES: tuple[str, ...] = (
    META_TABLE_EXISTS,
    SCHEMA_VERSION_GET,
    SCHEMA_VERSION_SET,
    STREAM_INSERT,
    STREAM_BY_RUN_ID,
    STREAMS_ALL,
    STREAM_PROJECTED_SET,
    OUTBOX_LAST,
    OUTBOX_INSERT,
    OUTBOX_AFTER,
    OUTBOX_BEFORE,
    OUTBOX_LINE,
    JOURNAL_STATE_GET,
    JOURNAL_STATE_SET,
)
"""The data statements: each one's query plan is checked by a test."""

ALL_STATEMENTS: frozenset[str] = frozenset(
    (
        *QUERIES,
        BEGIN_IMMEDIATE,
        JOURNAL_MODE_GET,
        SYNCHRONOUS_GET,
        JOURNAL_MODE_WAL_SET,
        SYNCHRONOUS_FULL_SET,
        "COMMIT",
        "ROLLBACK",
        *(statement for migration in MIGRATIONS for statement in migration),
    )
)
"""Everything engine_events may execute; a traced engine run must execute nothing else."""
