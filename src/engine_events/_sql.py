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
    # 2: a summary row per stream, so that a stream's state outlives the outbox rows that carry
    # it (retention prunes them): its last seq and the seq and exact line of its latest event of
    # each type the status report needs. It is a copy of a last outbox row's running summary,
    # refreshed when a stream starts and when its watermark is recorded, never per event; the
    # outbox's last row, when there is one, stays the fresher truth. Existing streams get theirs
    # from their last rows here, so an upgraded book reports the same status.
    (
        "CREATE TABLE engine_events_stream_summary ("
        " stream_no INTEGER PRIMARY KEY REFERENCES engine_events_stream (stream_no),"
        " last_seq INTEGER NOT NULL CHECK (last_seq >= 1),"
        " progress_seq INTEGER CHECK (progress_seq BETWEEN 1 AND last_seq),"
        " progress_line BLOB CHECK ((progress_line IS NULL) = (progress_seq IS NULL)),"
        " spend_seq INTEGER CHECK (spend_seq BETWEEN 1 AND last_seq),"
        " spend_line BLOB CHECK ((spend_line IS NULL) = (spend_seq IS NULL)),"
        " ceiling_seq INTEGER CHECK (ceiling_seq BETWEEN 1 AND last_seq),"
        " ceiling_line BLOB CHECK ((ceiling_line IS NULL) = (ceiling_seq IS NULL)),"
        " finished_seq INTEGER CHECK (finished_seq BETWEEN 1 AND last_seq),"
        " finished_line BLOB CHECK ((finished_line IS NULL) = (finished_seq IS NULL)))",
        "INSERT INTO engine_events_stream_summary (stream_no, last_seq,"
        " progress_seq, progress_line, spend_seq, spend_line,"
        " ceiling_seq, ceiling_line, finished_seq, finished_line) "
        "SELECT latest.stream_no, latest.seq,"
        " latest.progress_seq, (SELECT line FROM engine_events_outbox"
        " WHERE stream_no = latest.stream_no AND seq = latest.progress_seq),"
        " latest.spend_seq, (SELECT line FROM engine_events_outbox"
        " WHERE stream_no = latest.stream_no AND seq = latest.spend_seq),"
        " latest.ceiling_seq, (SELECT line FROM engine_events_outbox"
        " WHERE stream_no = latest.stream_no AND seq = latest.ceiling_seq),"
        " latest.finished_seq, (SELECT line FROM engine_events_outbox"
        " WHERE stream_no = latest.stream_no AND seq = latest.finished_seq) "
        "FROM engine_events_stream AS stream "
        # CROSS JOIN keeps the streams the outer loop: one seek into the outbox per stream.
        "CROSS JOIN engine_events_outbox AS latest ON latest.stream_no = stream.stream_no"
        " AND latest.seq = (SELECT seq FROM engine_events_outbox"
        " WHERE stream_no = stream.stream_no ORDER BY seq DESC LIMIT 1)",
    ),
)
SUMMARY_SINCE = 2
"""The schema version that has `engine_events_stream_summary`. The repair channel reads and repairs
an older database as it is (it never migrates: the book's own engine does that when it starts)."""

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
STREAM_PROJECTED_GET = "SELECT projected_seq FROM engine_events_stream WHERE stream_no = :stream_no"

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
OUTBOX_APPEND = (
    "INSERT INTO engine_events_outbox (stream_no, seq, type, line, projected_seq,"
    " progress_seq, spend_seq, ceiling_seq, finished_seq) "
    "SELECT stream_no, :seq, :type, :line, min(max(projected_seq, :projected_seq), seq),"
    " CASE :type WHEN 'progress' THEN :seq ELSE progress_seq END,"
    " CASE :type WHEN 'spend' THEN :seq ELSE spend_seq END,"
    " CASE :type WHEN 'ceiling' THEN :seq ELSE ceiling_seq END,"
    " CASE :type WHEN 'finished' THEN :seq ELSE finished_seq END "
    "FROM engine_events_outbox WHERE stream_no = :stream_no AND seq = :seq - 1 "
    "ON CONFLICT (stream_no, seq) DO NOTHING"
)
"""The next row of a stream whose last row is expected at `:seq - 1`, its running summary carried
over from that row in the same statement (what `OUTBOX_LAST` then `OUTBOX_INSERT` do in two). It
inserts nothing when there is no row at `:seq - 1` (the expectation is stale: a rollback took the
row away) or already one at `:seq`; the outbox is dense, so a row at `:seq - 1` and none at `:seq`
means `:seq - 1` is the last row."""
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

# -- retention (`_prune`) ----------------------------------------------------------------------------

OUTBOX_FIRST_FROM = (
    "SELECT stream_no, seq FROM engine_events_outbox WHERE stream_no >= :stream_no "
    "ORDER BY stream_no, seq LIMIT 1"
)
"""The oldest row of the first stream from `stream_no` on that still has rows: streams whose rows
are all gone cost nothing to skip."""
OUTBOX_OLDEST = (
    "SELECT seq, line FROM engine_events_outbox "
    "WHERE stream_no = :stream_no AND seq <= :through_seq ORDER BY seq LIMIT :limit"
)
OUTBOX_PRUNE = (
    "DELETE FROM engine_events_outbox WHERE stream_no = :stream_no AND seq <= :through_seq"
)

# -- stream summaries (schema 2) ---------------------------------------------------------------------

SUMMARY_ALL = (
    "SELECT stream_no, last_seq, progress_seq, spend_seq, ceiling_seq, finished_seq "
    "FROM engine_events_stream_summary ORDER BY stream_no"
)
SUMMARY_GET = (
    "SELECT last_seq, progress_seq, spend_seq, ceiling_seq, finished_seq,"
    " progress_line, spend_line, ceiling_line, finished_line "
    "FROM engine_events_stream_summary WHERE stream_no = :stream_no"
)
SUMMARY_UPSERT = (
    "INSERT INTO engine_events_stream_summary (stream_no, last_seq,"
    " progress_seq, progress_line, spend_seq, spend_line,"
    " ceiling_seq, ceiling_line, finished_seq, finished_line) "
    "VALUES (:stream_no, :last_seq, :progress_seq, :progress_line, :spend_seq, :spend_line,"
    " :ceiling_seq, :ceiling_line, :finished_seq, :finished_line) "
    "ON CONFLICT (stream_no) DO UPDATE SET last_seq = excluded.last_seq,"
    " progress_seq = excluded.progress_seq, progress_line = excluded.progress_line,"
    " spend_seq = excluded.spend_seq, spend_line = excluded.spend_line,"
    " ceiling_seq = excluded.ceiling_seq, ceiling_line = excluded.ceiling_line,"
    " finished_seq = excluded.finished_seq, finished_line = excluded.finished_line "
    "WHERE excluded.last_seq > engine_events_stream_summary.last_seq"
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
    STREAM_PROJECTED_SET,
    OUTBOX_LAST,
    OUTBOX_INSERT,
    OUTBOX_APPEND,
    OUTBOX_AFTER,
    OUTBOX_BEFORE,
    OUTBOX_LINE,
    STREAM_PROJECTED_GET,
    OUTBOX_FIRST_FROM,
    OUTBOX_OLDEST,
    OUTBOX_PRUNE,
    SUMMARY_ALL,
    SUMMARY_GET,
    SUMMARY_UPSERT,
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
