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
        " last_seq INTEGER NOT NULL CHECK (last_seq >= 0),"
        " projected_seq INTEGER NOT NULL CHECK (projected_seq >= 0 AND projected_seq <= last_seq))",
        "CREATE TABLE engine_events_outbox ("
        " stream_no INTEGER NOT NULL REFERENCES engine_events_stream (stream_no),"
        " seq INTEGER NOT NULL CHECK (seq >= 1),"
        " type TEXT NOT NULL,"
        " line BLOB NOT NULL,"
        " PRIMARY KEY (stream_no, seq))",
        "CREATE INDEX engine_events_outbox_by_type ON engine_events_outbox (type, stream_no, seq)",
    ),
)

# -- streams -----------------------------------------------------------------------------------------

STREAM_INSERT = (
    "INSERT INTO engine_events_stream (engine_run_id, book_id, last_seq, projected_seq) "
    "VALUES (:engine_run_id, :book_id, 0, 0)"
)
STREAM_BY_RUN_ID = "SELECT stream_no FROM engine_events_stream WHERE engine_run_id = :engine_run_id"
STREAMS_ALL = (
    "SELECT stream_no, engine_run_id, book_id, last_seq, projected_seq "
    "FROM engine_events_stream ORDER BY stream_no"
)
STREAMS_UNPROJECTED = (
    "SELECT stream_no, projected_seq FROM engine_events_stream "
    "WHERE projected_seq < last_seq ORDER BY stream_no"
)
# Allocates the next seq inside the host's transaction (rolled back with it) and records, for free,
# how far the previous flushes projected this stream.
SEQ_NEXT = (
    "UPDATE engine_events_stream "
    "SET last_seq = last_seq + 1, projected_seq = max(projected_seq, :projected_seq) "
    "WHERE stream_no = :stream_no RETURNING last_seq"
)
# Gives back a seq whose line could not be encoded (too long, say): the outbox stays dense.
SEQ_GIVE_BACK = (
    "UPDATE engine_events_stream SET last_seq = last_seq - 1 "
    "WHERE stream_no = :stream_no AND last_seq = :seq"
)
WATERMARK_SET = (
    "UPDATE engine_events_stream SET projected_seq = max(projected_seq, :projected_seq) "
    "WHERE stream_no = :stream_no"
)

# -- outbox ------------------------------------------------------------------------------------------

OUTBOX_INSERT = (
    "INSERT INTO engine_events_outbox (stream_no, seq, type, line) "
    "VALUES (:stream_no, :seq, :type, :line)"
)
OUTBOX_AFTER = (
    "SELECT seq, line FROM engine_events_outbox "
    "WHERE stream_no = :stream_no AND seq > :after_seq ORDER BY seq LIMIT :limit"
)
OUTBOX_LATEST_OF_TYPE = (
    "SELECT line FROM engine_events_outbox WHERE type = :type "
    "ORDER BY stream_no DESC, seq DESC LIMIT 1"
)
OUTBOX_LATEST_OF_TYPE_IN_STREAM = (
    "SELECT line FROM engine_events_outbox WHERE type = :type AND stream_no = :stream_no "
    "ORDER BY seq DESC LIMIT 1"
)

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
    STREAMS_UNPROJECTED,
    SEQ_NEXT,
    SEQ_GIVE_BACK,
    WATERMARK_SET,
    OUTBOX_INSERT,
    OUTBOX_AFTER,
    OUTBOX_LATEST_OF_TYPE,
    OUTBOX_LATEST_OF_TYPE_IN_STREAM,
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
    )
    + tuple(statement for migration in MIGRATIONS for statement in migration)
)
"""Everything engine_events may execute; a traced engine run must execute nothing else."""
