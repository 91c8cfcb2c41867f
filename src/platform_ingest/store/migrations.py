"""The platform's schema, as frozen migration steps, and the statements that record them.

A released step is never edited (its hash is pinned in tests/platform/test_migrations.py): a
change of the schema is a new step and a new `SCHEMA_VERSION`. `schema.migrate` runs the missing
steps in order, each recorded in `ingest_schema_version` in the same transaction, and tells the
running workers on `SCHEMA_CHANNEL` when that transaction commits.

A new step keeps the previous release working for the moments its workers still run after the
step committed (each stops at its next look at the schema, `worker.schema_watch`): it adds tables,
nullable columns or columns with defaults, indexes; it never drops, renames or narrows what the
previous release reads or writes (that waits for the release after).
"""

from __future__ import annotations

import re

from .statement import Statement
from .statement import ddl as _ddl
from .statement import query as _q

SCHEMA_VERSION = 5
"""The schema version this code writes; a database at a higher version is refused."""

SCHEMA_TABLE_EXISTS = _q("schema_table_exists", "SELECT to_regclass('ingest_schema_version')")
SCHEMA_TABLE_CREATE = _ddl(
    "schema_table_create",
    """CREATE TABLE IF NOT EXISTS ingest_schema_version (
         version integer PRIMARY KEY,
         migrated_at timestamptz NOT NULL DEFAULT now())""",
)
SCHEMA_LOCK = _q("schema_lock", "SELECT pg_advisory_xact_lock(%s)")
SCHEMA_VERSION_READ = _q(
    "schema_version_read",
    "SELECT version FROM ingest_schema_version ORDER BY version DESC LIMIT 1",
)
SCHEMA_VERSION_RECORD = _q(
    "schema_version_record", "INSERT INTO ingest_schema_version (version) VALUES (%s)"
)

SCHEMA_CHANNEL = "platform_ingest_schema"
"""Where `migrate` says it changed the schema (the payload: the new version): a running worker
looks at the version at once, instead of at its next timed look."""
SCHEMA_CHANGED_NOTIFY = _q("schema_changed_notify", f"SELECT pg_notify('{SCHEMA_CHANNEL}', %s)")
SCHEMA_OWNER = _q(
    "schema_owner",
    """SELECT current_schema() AS schema,
         (SELECT pg_get_userbyid(c.relowner) FROM pg_class c
           WHERE c.oid = to_regclass('ingest_schema_version')) AS owner""",
)
"""Where the platform's tables are (the first schema of the search path) and the role that owns
them (None: not created yet), named when a role may not migrate."""

MIGRATIONS: dict[int, tuple[Statement, ...]] = {
    1: (
        _ddl(
            "v1_books",
            """CREATE TABLE books (
                 book_id text PRIMARY KEY,
                 path text NOT NULL UNIQUE,
                 scan_offset bigint NOT NULL DEFAULT 0 CHECK (scan_offset >= 0),
                 scan_line_bytes integer NOT NULL DEFAULT 0,
                 scan_sha256 bytea,
                 scan_file text,
                 scan_stream text,
                 scan_mode text,
                 scan_epoch bigint NOT NULL DEFAULT 0,
                 error_kind text,
                 error_seq bigint,
                 error_offset bigint,
                 error_detail text,
                 registered_at timestamptz NOT NULL DEFAULT now())""",
        ),
        _ddl(
            "v1_runs",
            """CREATE TABLE runs (
                 run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 book_id text NOT NULL REFERENCES books,
                 state text NOT NULL CHECK (state IN
                   ('running', 'paused', 'completed', 'failed', 'refused')),
                 reason text,
                 stop text CHECK (stop IN ('soft', 'hard')),
                 refusal text,
                 outcome text,
                 exit_code integer,
                 committed_micro_usd bigint NOT NULL DEFAULT 0 CHECK (committed_micro_usd >= 0),
                 shortfall_micro_usd bigint CHECK (shortfall_micro_usd >= 0),
                 settled_micro_usd bigint CHECK (settled_micro_usd >= 0),
                 progress jsonb NOT NULL DEFAULT '{}',
                 created_at timestamptz NOT NULL DEFAULT now(),
                 updated_at timestamptz NOT NULL DEFAULT now())""",
        ),
        _ddl("v1_runs_book", "CREATE INDEX runs_book ON runs (book_id, run_id)"),
        _ddl(
            "v1_attempts",
            """CREATE TABLE attempts (
                 attempt_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 book_id text NOT NULL REFERENCES books,
                 run_id bigint NOT NULL REFERENCES runs,
                 engine_run_id text NOT NULL,
                 state text NOT NULL CHECK (state IN ('pending', 'active', 'parked', 'finished',
                   'stalled', 'quarantined', 'refused', 'superseded')),
                 last_seq bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
                 last_line_sha256 bytea,
                 hint_offset bigint NOT NULL DEFAULT 0 CHECK (hint_offset >= 0),
                 hint_line_bytes integer NOT NULL DEFAULT 0,
                 hint_file text,
                 stream_index integer,
                 stream_version text,
                 chunker_version text,
                 error_kind text,
                 error_seq bigint,
                 error_offset bigint,
                 error_detail text,
                 last_line_time text,
                 last_applied_at timestamptz,
                 created_at timestamptz NOT NULL DEFAULT now(),
                 UNIQUE (book_id, engine_run_id))""",
        ),
        _ddl("v1_attempts_run", "CREATE INDEX attempts_run ON attempts (run_id)"),
        # One row per applied line: what was applied at each (attempt, seq), so a duplicate of ANY
        # earlier seq is compared with it. Written only together with its attempt's cursor.
        _ddl(
            "v1_line_hashes",
            """CREATE TABLE line_hashes (
                 attempt_id bigint NOT NULL,
                 seq bigint NOT NULL,
                 sha256 bytea NOT NULL,
                 PRIMARY KEY (attempt_id, seq))""",
        ),
        # One row per unit of a run, recorded once. Written only in the transaction that holds
        # its run's row lock, so no foreign key is checked per row.
        _ddl(
            "v1_run_units",
            """CREATE TABLE run_units (
                 run_id bigint NOT NULL,
                 unit text NOT NULL,
                 unit_index bigint NOT NULL,
                 attempt_id bigint NOT NULL,
                 seq bigint NOT NULL,
                 PRIMARY KEY (run_id, unit))""",
        ),
    ),
    2: (
        # What stops a book as a whole, apart from its lines: a journal that is not a regular file,
        # a book directory swapped after registration, a value Postgres cannot store, a second
        # directory of the same name. Kept apart from the scan state, which passes compare-and-set.
        _ddl(
            "v2_book_problems",
            """CREATE TABLE book_problems (
                 book_id text NOT NULL REFERENCES books,
                 kind text NOT NULL,
                 detail text NOT NULL,
                 path text,
                 since timestamptz NOT NULL DEFAULT now(),
                 seen_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (book_id, kind))""",
        ),
        # A stream's place in the book is the byte offset of its hello (file order), not the order
        # in which passes first saw the streams: in named mode a stream named late is seen late.
        _ddl(
            "v2_attempts_stream_offset",
            "ALTER TABLE attempts ALTER COLUMN stream_index TYPE bigint",
        ),
        # The exit status the launcher reports (`exited`): a process that wrote no `finished`
        # still ends its run. `exited`, `disowned` and `abandoned` are states an operator's or the
        # launcher's word puts an attempt in.
        _ddl(
            "v2_attempts_exit",
            """ALTER TABLE attempts ADD COLUMN exit_status integer,
                 ADD COLUMN exited_at timestamptz,
                 DROP CONSTRAINT attempts_state_check,
                 ADD CONSTRAINT attempts_state_check CHECK (state IN ('pending', 'active',
                   'parked', 'finished', 'stalled', 'quarantined', 'refused', 'superseded',
                   'exited', 'disowned', 'abandoned'))""",
        ),
        # Every operator remedy and launcher report: who, why, when, and the evidence it overrode.
        # Never updated, never deleted by the apply path.
        _ddl(
            "v2_operator_actions",
            """CREATE TABLE operator_actions (
                 action_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 book_id text NOT NULL REFERENCES books,
                 engine_run_id text,
                 action text NOT NULL,
                 by_whom text NOT NULL,
                 reason text NOT NULL,
                 at timestamptz NOT NULL DEFAULT now(),
                 evidence jsonb NOT NULL DEFAULT '{}')""",
        ),
        _ddl(
            "v2_operator_actions_book",
            "CREATE INDEX operator_actions_book ON operator_actions (book_id, action_id)",
        ),
        # A line an operator skipped (`skip`): at this seq of this attempt, the line with this
        # sha256 advances the cursor with no effect, and only that line.
        _ddl(
            "v2_line_skips",
            """CREATE TABLE line_skips (
                 attempt_id bigint NOT NULL,
                 seq bigint NOT NULL,
                 sha256 bytea NOT NULL,
                 action_id bigint NOT NULL,
                 PRIMARY KEY (attempt_id, seq))""",
        ),
    ),
    3: (
        # Bounded storage. `changed_at`: when the attempt last moved (a line, a state, a hint), so
        # a quiet one can be found. `compacted_seq`/`compacted_sha256`: seqs 1..compacted_seq have
        # no `line_hashes` rows any more; their hashes, in seq order, hash to `compacted_sha256`.
        # `compaction_pending`: the digest is written and the rows are still being deleted.
        _ddl(
            "v3_attempts_compaction",
            """ALTER TABLE attempts ADD COLUMN changed_at timestamptz NOT NULL DEFAULT now(),
                 ADD COLUMN compacted_seq bigint NOT NULL DEFAULT 0 CHECK (compacted_seq >= 0),
                 ADD COLUMN compacted_sha256 bytea,
                 ADD COLUMN compacted_at timestamptz,
                 ADD COLUMN compaction_pending boolean NOT NULL DEFAULT false""",
        ),
        _ddl(
            "v3_attempts_to_compact",
            """CREATE INDEX attempts_to_compact ON attempts (changed_at)
                 WHERE compacted_seq = 0 AND last_seq > 0
                   AND state IN ('finished', 'superseded', 'exited', 'disowned', 'abandoned')""",
        ),
        _ddl(
            "v3_attempts_compaction_pending",
            """CREATE INDEX attempts_compaction_pending ON attempts (attempt_id)
                 WHERE compaction_pending""",
        ),
        # Where each foreign stream's hello lies (named mode): `name` moves the scan back to it
        # instead of to byte 0. `starts_from_zero`: every foreign hello since byte 0 of the
        # journal is recorded (else `name` must read the journal from byte 0 again).
        _ddl(
            "v3_stream_starts",
            """CREATE TABLE stream_starts (
                 book_id text NOT NULL REFERENCES books,
                 engine_run_id text NOT NULL,
                 hint_offset bigint NOT NULL CHECK (hint_offset >= 0),
                 hint_line_bytes integer NOT NULL,
                 hint_sha256 bytea,
                 hint_file text,
                 hint_stream text,
                 PRIMARY KEY (book_id, engine_run_id))""",
        ),
        _ddl(
            "v3_books_starts_from_zero",
            "ALTER TABLE books ADD COLUMN starts_from_zero boolean NOT NULL DEFAULT false",
        ),
        # Ended runs, oldest first, for `prune` (pruned runs leave the index with their rows).
        _ddl(
            "v3_runs_ended",
            """CREATE INDEX runs_ended ON runs (updated_at)
                 WHERE state IN ('completed', 'failed', 'refused')""",
        ),
        # A stream whose run was pruned (`prune`): its lines, still in the journal, are never
        # applied again. `cleanup_pending`: its attempt's hashes and its run's units are still
        # being deleted, a bounded transaction at a time.
        _ddl(
            "v3_pruned_streams",
            """CREATE TABLE pruned_streams (
                 book_id text NOT NULL REFERENCES books,
                 engine_run_id text NOT NULL,
                 run_id bigint NOT NULL,
                 attempt_id bigint NOT NULL,
                 last_seq bigint NOT NULL,
                 pruned_at timestamptz NOT NULL DEFAULT now(),
                 cleanup_pending boolean NOT NULL DEFAULT true,
                 PRIMARY KEY (book_id, engine_run_id))""",
        ),
        _ddl(
            "v3_pruned_streams_cleanup",
            """CREATE INDEX pruned_streams_cleanup ON pruned_streams (attempt_id)
                 WHERE cleanup_pending""",
        ),
    ),
    4: (
        # Projections (`platform_ingest.projections`): the registry of the projections a database
        # has seen, each at the version whose data its tables hold.
        _ddl(
            "v4_projections",
            """CREATE TABLE projections (
                 name text PRIMARY KEY,
                 version integer NOT NULL CHECK (version >= 1),
                 registered_at timestamptz NOT NULL DEFAULT now(),
                 rebuilt_at timestamptz)""",
        ),
        # A projection's own cursor over each attempt (a tracking record): the last seq whose
        # event it applied. Written in the transaction that applies those events, so a crash
        # anywhere leaves it equal to what the projection's tables hold.
        _ddl(
            "v4_projection_tracking",
            """CREATE TABLE projection_tracking (
                 projection text NOT NULL REFERENCES projections ON DELETE CASCADE,
                 attempt_id bigint NOT NULL,
                 last_seq bigint NOT NULL CHECK (last_seq >= 0),
                 PRIMARY KEY (projection, attempt_id))""",
        ),
        # The last failure of a projection on a stream: the batch was rolled back (the stream's
        # attempt may not be in Postgres yet), the book waits for its retry. Removed by the
        # commit that next moves the stream's attempt.
        # A change of a book's scan epoch is an operator's (or the launcher's) word on the book:
        # `name`, `release` and every remedy bump it. Running workers LISTEN on this channel, so
        # the change reaches the worker that owns the book at once. The payload is the book id.
        _ddl(
            "v4_book_changed_function",
            """CREATE FUNCTION platform_ingest_book_changed() RETURNS trigger
                 LANGUAGE plpgsql AS $$
               BEGIN
                 PERFORM pg_notify('platform_ingest_control', NEW.book_id);
                 RETURN NULL;
               END $$""",
        ),
        _ddl(
            "v4_book_changed_trigger",
            """CREATE TRIGGER books_changed_notify AFTER UPDATE OF scan_epoch ON books
                 FOR EACH ROW WHEN (OLD.scan_epoch IS DISTINCT FROM NEW.scan_epoch)
                 EXECUTE FUNCTION platform_ingest_book_changed()""",
        ),
        _ddl(
            "v4_projection_failures",
            """CREATE TABLE projection_failures (
                 book_id text NOT NULL REFERENCES books,
                 engine_run_id text NOT NULL,
                 projection text NOT NULL,
                 seq bigint,
                 detail text NOT NULL,
                 failures bigint NOT NULL DEFAULT 1,
                 since timestamptz NOT NULL DEFAULT now(),
                 seen_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (book_id, engine_run_id))""",
        ),
    ),
    5: (
        # A book an operator forgot (`forget`: a directory registered by mistake, nothing of it
        # ever applied or named): its rows are gone, and this record keeps who, why, when, and
        # what was deleted with it (its earlier audit included). No reference to `books`: the
        # record outlives the book's row.
        _ddl(
            "v5_forgotten_books",
            """CREATE TABLE forgotten_books (
                 action_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 book_id text NOT NULL,
                 path text NOT NULL,
                 by_whom text NOT NULL,
                 reason text NOT NULL,
                 at timestamptz NOT NULL DEFAULT now(),
                 evidence jsonb NOT NULL DEFAULT '{}')""",
        ),
    ),
}


PLATFORM_TABLES: frozenset[str] = frozenset(
    name
    for statement in (
        SCHEMA_TABLE_CREATE,
        *(step for steps in MIGRATIONS.values() for step in steps),
    )
    for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", statement.text)
)
"""Every table the platform creates: written only by the listed statements (a projection that
writes one is refused, `projection_step`)."""
