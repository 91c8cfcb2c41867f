"""Every SQL statement of the code that `platform_ingest` runs; the schema's own are in `migrations`.

Nothing else reaches Postgres: the one execute helper in `db` refuses a text that is not listed
here, and a test runs EXPLAIN on each statement of kind "query" over a database filled with enough
rows that a full scan would show (no sequential scan of a table that grows with books or events).
A statement of kind "copy" (`COPY ... FROM STDIN`, run by `db`'s copy helper) has no plan: the
test checks instead that its target table has its columns, of its types.

Lock order, everywhere: attempts, then runs, then books. Placeholders are psycopg's `%s`, and `%b`
(binary) for the large arrays of a batch, which are cheaper to send that way. A statement that
writes what a pass holds in a view (an attempt's cursor, a book's scan hint, a run, a problem)
names its parameters (`%(last_seq)s`): the caller passes a mapping built where the statement runs
(`ingest.apply`), one key a column, and a statement that writes many rows at once (`unnest`)
takes the same keys, each a column of values.
"""

from __future__ import annotations

# Imported first, so that the migrations' steps are listed before the queries below.
from . import migrations as _migrations
from .statement import LISTED, Statement, session
from .statement import copy as _copy
from .statement import query as _q

_RUN_COLUMNS = (
    "run_id, book_id, state, reason, stop, refusal, outcome, exit_code, committed_micro_usd,"
    " shortfall_micro_usd, settled_micro_usd, progress"
)
_ATTEMPT_COLUMNS = (
    "attempt_id, run_id, engine_run_id, state, last_seq, last_line_sha256, hint_offset,"
    " hint_line_bytes, hint_file, stream_index, stream_version, chunker_version, error_kind,"
    " error_seq, error_offset, error_detail, last_line_time, exit_status, compacted_seq,"
    " compacted_sha256,"
    " EXISTS (SELECT 1 FROM line_skips s WHERE s.attempt_id = attempts.attempt_id) AS has_skips"
)
_BOOK_COLUMNS = (
    "book_id, path, scan_offset, scan_line_bytes, scan_sha256, scan_file, scan_stream, scan_mode,"
    " scan_epoch, error_kind, error_seq, error_offset, error_detail, starts_from_zero,"
    " ARRAY(SELECT p.kind FROM book_problems p WHERE p.book_id = books.book_id ORDER BY p.kind)"
    " AS problem_kinds,"
    " (SELECT count(*) FROM stream_starts t WHERE t.book_id = books.book_id) AS starts_recorded"
)

# --- books ----------------------------------------------------------------------------------

BOOKS_INSERT = _q(
    "books_insert",
    # A page of books at once (ids, paths): those already registered are left as they are. No
    # conflict target: two workers registering the same new book at once may meet on either unique
    # index (book_id or path), and both mean "already registered".
    """INSERT INTO books (book_id, path) SELECT * FROM unnest(%s::text[], %s::text[])
       ON CONFLICT DO NOTHING""",
)
BOOK_SELECT = _q("book_select", f"SELECT {_BOOK_COLUMNS} FROM books WHERE book_id = %s")
BOOK_SELECT_BY_PATH = _q(
    "book_select_by_path", f"SELECT {_BOOK_COLUMNS} FROM books WHERE path = %s"
)
BOOKS_SELECT = _q(
    "books_select",
    f"SELECT {_BOOK_COLUMNS} FROM books WHERE book_id = ANY(%b) ORDER BY book_id",
)
BOOK_LOCK = _q("book_lock", "SELECT pg_try_advisory_lock(%s)")
# A group's books (`ingest.group_pass`): the advisory locks of those no other pass holds, taken for
# the group's transaction; the keys returned are the books the group may pass.
BOOKS_LOCK_FOR_TRANSACTION = _q(
    "books_lock_for_transaction",
    "SELECT key FROM unnest(%b::bigint[]) AS key WHERE pg_try_advisory_xact_lock(key)",
)
# The rows a group writes, locked without waiting: a row another transaction holds (an operator's
# remedy) is left out, and so is its book, passed again shortly (`ingest.group_pass`).
BOOKS_ROW_LOCK_SKIP = _q(
    "books_row_lock_skip",
    "SELECT book_id FROM books WHERE book_id = ANY(%b) ORDER BY book_id FOR UPDATE SKIP LOCKED",
)
BOOK_UNLOCK = _q("book_unlock", "SELECT pg_advisory_unlock(%s)")
BOOK_SCAN_ADVANCE = _q(
    "book_scan_advance",
    """UPDATE books SET scan_offset = %(scan_offset)s, scan_line_bytes = %(scan_line_bytes)s,
         scan_sha256 = %(scan_sha256)s, scan_file = %(scan_file)s, scan_stream = %(scan_stream)s,
         scan_mode = %(scan_mode)s, error_kind = %(error_kind)s, error_seq = %(error_seq)s,
         error_offset = %(error_offset)s, error_detail = %(error_detail)s,
         starts_from_zero = %(starts_from_zero)s
       WHERE book_id = %(book_id)s AND scan_epoch = %(scan_epoch)s""",
)
# `BOOK_SCAN_ADVANCE` of a group's books, one statement: a column an array (rowcount: the books
# whose epoch still matched).
BOOKS_SCAN_ADVANCE = _q(
    "books_scan_advance",
    """UPDATE books AS b SET scan_offset = v.scan_offset, scan_line_bytes = v.scan_line_bytes,
         scan_sha256 = v.scan_sha256, scan_file = v.scan_file, scan_stream = v.scan_stream,
         scan_mode = v.scan_mode, error_kind = v.error_kind, error_seq = v.error_seq,
         error_offset = v.error_offset, error_detail = v.error_detail,
         starts_from_zero = v.starts_from_zero
       FROM unnest(%(scan_offset)b::bigint[], %(scan_line_bytes)b::integer[],
         %(scan_sha256)b::bytea[], %(scan_file)b::text[], %(scan_stream)b::text[],
         %(scan_mode)b::text[], %(error_kind)b::text[], %(error_seq)b::bigint[],
         %(error_offset)b::bigint[], %(error_detail)b::text[], %(starts_from_zero)b::boolean[],
         %(book_id)b::text[], %(scan_epoch)b::bigint[])
         AS v(scan_offset, scan_line_bytes, scan_sha256, scan_file, scan_stream, scan_mode,
           error_kind, error_seq, error_offset, error_detail, starts_from_zero, book_id,
           scan_epoch)
       WHERE b.book_id = v.book_id AND b.scan_epoch = v.scan_epoch""",
)
BOOK_SCAN_BACK = _q(
    "book_scan_back",
    """UPDATE books SET scan_offset = %(hint_offset)s, scan_line_bytes = %(hint_line_bytes)s,
         scan_sha256 = %(hint_sha256)s, scan_file = %(hint_file)s, scan_stream = %(hint_stream)s,
         scan_epoch = scan_epoch + 1
       WHERE book_id = %(book_id)s AND scan_offset > %(hint_offset)s""",
)
BOOK_SCAN_RESET = _q(
    "book_scan_reset",
    """UPDATE books SET scan_offset = 0, scan_line_bytes = 0, scan_sha256 = NULL,
         scan_file = NULL, scan_stream = NULL, scan_epoch = scan_epoch + 1
       WHERE book_id = %s""",
)
BOOK_PROBLEM_SET = _q(
    "book_problem_set",
    """INSERT INTO book_problems (book_id, kind, detail, path) VALUES (%s, %s, %s, %s)
       ON CONFLICT (book_id, kind) DO UPDATE SET detail = EXCLUDED.detail,
         path = EXCLUDED.path, seen_at = now()""",
)
BOOK_PROBLEMS_CLEAR = _q(
    "book_problems_clear",
    "DELETE FROM book_problems WHERE book_id = %s AND kind = ANY(%s)",
)
BOOK_JOURNAL_MISSING_ENDED = _q(
    "book_journal_missing_ended",
    """DELETE FROM book_problems WHERE book_id = %s AND kind = 'journal_missing'
       AND NOT EXISTS (SELECT 1 FROM attempts WHERE book_id = %s AND state = ANY(%s))""",
)
BOOK_PROBLEMS_OF_BOOKS = _q(
    "book_problems_of_books",
    """SELECT book_id, kind, detail, path, since, seen_at FROM book_problems
       WHERE book_id = ANY(%s) ORDER BY book_id, kind""",
)
BOOKS_PAGE = _q(
    "books_page",
    f"SELECT {_BOOK_COLUMNS} FROM books WHERE book_id > %s ORDER BY book_id LIMIT %s",
)
BOOKS_BY_ID = _q(
    "books_by_id",
    f"SELECT {_BOOK_COLUMNS} FROM books WHERE book_id = ANY(%s) ORDER BY book_id",
)

# --- runs -----------------------------------------------------------------------------------

RUN_INSERT = _q(
    "run_insert",
    f"INSERT INTO runs (book_id, state) VALUES (%s, 'running') RETURNING {_RUN_COLUMNS}",
)
RUNS_OF_BOOK = _q(
    "runs_of_book", f"SELECT {_RUN_COLUMNS} FROM runs WHERE book_id = %s ORDER BY run_id"
)
RUN_CURRENT_LOCK = _q(
    "run_current_lock",
    f"""SELECT {_RUN_COLUMNS} FROM runs WHERE book_id = %s ORDER BY run_id DESC LIMIT 1
        FOR UPDATE""",
)
RUNS_LOCK = _q(
    "runs_lock",
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ANY(%s) ORDER BY run_id FOR UPDATE",
)
RUNS_LOCK_SKIP = _q(
    "runs_lock_skip",
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ANY(%b) ORDER BY run_id FOR UPDATE SKIP LOCKED",
)
RUN_UPDATE = _q(
    "run_update",
    """UPDATE runs SET state = %(state)s, reason = %(reason)s, stop = %(stop)s,
         refusal = %(refusal)s, outcome = %(outcome)s, exit_code = %(exit_code)s,
         committed_micro_usd = %(committed_micro_usd)s,
         shortfall_micro_usd = %(shortfall_micro_usd)s,
         settled_micro_usd = %(settled_micro_usd)s, progress = %(progress)s::jsonb,
         updated_at = now()
       WHERE run_id = %(run_id)s""",
)
# `RUN_UPDATE` of a group's runs, one statement: a column an array.
RUNS_UPDATE = _q(
    "runs_update",
    """UPDATE runs AS r SET state = v.state, reason = v.reason, stop = v.stop,
         refusal = v.refusal, outcome = v.outcome, exit_code = v.exit_code,
         committed_micro_usd = v.committed_micro_usd, shortfall_micro_usd = v.shortfall_micro_usd,
         settled_micro_usd = v.settled_micro_usd, progress = v.progress::jsonb,
         updated_at = now()
       FROM unnest(%(state)b::text[], %(reason)b::text[], %(stop)b::text[],
         %(refusal)b::text[], %(outcome)b::text[], %(exit_code)b::integer[],
         %(committed_micro_usd)b::bigint[], %(shortfall_micro_usd)b::bigint[],
         %(settled_micro_usd)b::bigint[], %(progress)b::text[], %(run_id)b::bigint[])
         AS v(state, reason, stop, refusal, outcome, exit_code, committed_micro_usd,
           shortfall_micro_usd, settled_micro_usd, progress, run_id)
       WHERE r.run_id = v.run_id""",
)
BOOKS_OF_RUNS = _q(
    "books_of_runs", "SELECT DISTINCT book_id FROM runs WHERE run_id = ANY(%s) ORDER BY book_id"
)
RUNS_OF_BOOKS = _q(
    "runs_of_books",
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE book_id = ANY(%s) ORDER BY book_id, run_id",
)

# --- stream starts and pruned streams ---------------------------------------------------------

STREAM_STARTS_INSERT = _q(
    "stream_starts_insert",
    """INSERT INTO stream_starts (book_id, engine_run_id, hint_offset, hint_line_bytes,
         hint_sha256, hint_file, hint_stream)
       SELECT %(book_id)s, * FROM unnest(%(engine_run_id)b::text[], %(hint_offset)b::bigint[],
         %(hint_line_bytes)b::integer[], %(hint_sha256)b::bytea[], %(hint_file)b::text[],
         %(hint_stream)b::text[])
       ON CONFLICT (book_id, engine_run_id) DO NOTHING""",
)
STREAM_STARTS_FORGET = _q("stream_starts_forget", "DELETE FROM stream_starts WHERE book_id = %s")
STREAM_START_OF = _q(
    "stream_start_of",
    """SELECT hint_offset, hint_line_bytes, hint_sha256, hint_file, hint_stream FROM stream_starts
       WHERE book_id = %s AND engine_run_id = %s""",
)
PRUNED_STREAMS_OF_BOOK = _q(
    "pruned_streams_of_book", "SELECT engine_run_id FROM pruned_streams WHERE book_id = %s"
)
PRUNED_STREAM_EXISTS = _q(
    "pruned_stream_exists",
    "SELECT 1 FROM pruned_streams WHERE book_id = %s AND engine_run_id = %s",
)

# --- attempts -------------------------------------------------------------------------------

ATTEMPT_INSERT = _q(
    "attempt_insert",
    """INSERT INTO attempts (book_id, run_id, engine_run_id, state)
       VALUES (%s, %s, %s, %s)
       ON CONFLICT (book_id, engine_run_id) DO NOTHING RETURNING attempt_id""",
)
ATTEMPTS_OF_BOOK = _q(
    "attempts_of_book",
    f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE book_id = %s ORDER BY attempt_id",
)
ATTEMPTS_OF_BOOKS = _q(
    "attempts_of_books",
    f"""SELECT book_id, {_ATTEMPT_COLUMNS} FROM attempts WHERE book_id = ANY(%b)
        ORDER BY book_id, attempt_id""",
)
ATTEMPTS_LOCK_SKIP = _q(
    "attempts_lock_skip",
    """SELECT attempt_id, last_seq FROM attempts WHERE attempt_id = ANY(%b)
       ORDER BY attempt_id FOR UPDATE SKIP LOCKED""",
)
ATTEMPT_BY_STREAM_LOCK = _q(
    "attempt_by_stream_lock",
    f"""SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE book_id = %s AND engine_run_id = %s
        FOR UPDATE""",
)
ATTEMPTS_LOCK = _q(
    "attempts_lock",
    """SELECT attempt_id, last_seq FROM attempts WHERE attempt_id = ANY(%s)
       ORDER BY attempt_id FOR UPDATE""",
)
# The cursor's compare-and-set: the row is locked, and `last_seq` must still be what this pass
# read; rowcount 1 or the whole transaction is rolled back (CursorMoved).
ATTEMPT_ADVANCE = _q(
    "attempt_advance",
    """UPDATE attempts SET state = %(state)s, last_seq = %(last_seq)s,
         last_line_sha256 = %(last_line_sha256)s, hint_offset = %(hint_offset)s,
         hint_line_bytes = %(hint_line_bytes)s, hint_file = %(hint_file)s,
         stream_index = %(stream_index)s, stream_version = %(stream_version)s,
         chunker_version = %(chunker_version)s, error_kind = %(error_kind)s,
         error_seq = %(error_seq)s, error_offset = %(error_offset)s,
         error_detail = %(error_detail)s, last_line_time = %(last_line_time)s,
         last_applied_at = CASE WHEN %(applied)s THEN now() ELSE last_applied_at END,
         changed_at = now()
       WHERE attempt_id = %(attempt_id)s AND last_seq = %(expected_seq)s""",
)
# `ATTEMPT_ADVANCE` of a group's attempts, one statement: a column an array (rowcount: the
# attempts whose cursor still matched).
ATTEMPTS_ADVANCE = _q(
    "attempts_advance",
    """UPDATE attempts AS a SET state = v.state, last_seq = v.last_seq,
         last_line_sha256 = v.last_line_sha256, hint_offset = v.hint_offset,
         hint_line_bytes = v.hint_line_bytes, hint_file = v.hint_file,
         stream_index = v.stream_index, stream_version = v.stream_version,
         chunker_version = v.chunker_version, error_kind = v.error_kind, error_seq = v.error_seq,
         error_offset = v.error_offset, error_detail = v.error_detail,
         last_line_time = v.last_line_time,
         last_applied_at = CASE WHEN v.applied THEN now() ELSE a.last_applied_at END,
         changed_at = now()
       FROM unnest(%(state)b::text[], %(last_seq)b::bigint[], %(last_line_sha256)b::bytea[],
         %(hint_offset)b::bigint[], %(hint_line_bytes)b::integer[], %(hint_file)b::text[],
         %(stream_index)b::integer[], %(stream_version)b::text[], %(chunker_version)b::text[],
         %(error_kind)b::text[], %(error_seq)b::bigint[], %(error_offset)b::bigint[],
         %(error_detail)b::text[], %(last_line_time)b::text[], %(applied)b::boolean[],
         %(attempt_id)b::bigint[], %(expected_seq)b::bigint[])
         AS v(state, last_seq, last_line_sha256, hint_offset, hint_line_bytes, hint_file,
           stream_index, stream_version, chunker_version, error_kind, error_seq, error_offset,
           error_detail, last_line_time, applied, attempt_id, expected_seq)
       WHERE a.attempt_id = v.attempt_id AND a.last_seq = v.expected_seq""",
)
ATTEMPT_RELEASE = _q(
    "attempt_release",
    """UPDATE attempts SET state = %s, error_kind = NULL, error_seq = NULL, error_offset = NULL,
         error_detail = NULL, changed_at = now()
       WHERE attempt_id = %s AND state = %s""",
)
ATTEMPT_QUARANTINE = _q(
    "attempt_quarantine",
    """UPDATE attempts SET state = 'quarantined', error_kind = %(error_kind)s,
         error_seq = %(error_seq)s, error_offset = %(error_offset)s,
         error_detail = %(error_detail)s, changed_at = now()
       WHERE attempt_id = %(attempt_id)s AND state = %(state)s""",
)
ATTEMPT_EXITED = _q(
    "attempt_exited",
    """UPDATE attempts SET exit_status = %s, exited_at = now(), changed_at = now(),
         state = CASE WHEN state IN ('pending', 'active') THEN 'exited' ELSE state END
       WHERE attempt_id = %s""",
)
ATTEMPT_SET_STATE = _q(
    "attempt_set_state",
    """UPDATE attempts SET state = %s, error_kind = NULL, error_seq = NULL, error_offset = NULL,
         error_detail = NULL, changed_at = now()
       WHERE attempt_id = %s AND state = %s""",
)
ATTEMPT_INSERT_DISOWNED = _q(
    "attempt_insert_disowned",
    """INSERT INTO attempts (book_id, run_id, engine_run_id, state)
       VALUES (%s, %s, %s, 'disowned') RETURNING attempt_id""",
)
ATTEMPT_DELETE_DISOWNED = _q(
    "attempt_delete_disowned",
    "DELETE FROM attempts WHERE attempt_id = %s AND state = 'disowned' AND last_seq = 0",
)
ATTEMPTS_UNPARK = _q(
    "attempts_unpark",
    """UPDATE attempts SET state = CASE WHEN exit_status IS NULL THEN 'active' ELSE 'exited' END,
         error_kind = NULL, error_seq = NULL, error_offset = NULL, error_detail = NULL,
         changed_at = now()
       WHERE book_id = %s AND state = 'parked'""",
)
ATTEMPTS_OF_RUNS = _q(
    "attempts_of_runs",
    f"""SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE run_id = ANY(%s)
        ORDER BY run_id, stream_index NULLS LAST, attempt_id""",
)

# --- compaction and pruning (bounded storage) ----------------------------------------------------

QUIET_ATTEMPTS = _q(
    "quiet_attempts",
    """SELECT attempt_id FROM attempts
       WHERE compacted_seq = 0 AND last_seq > 0
         AND state IN ('finished', 'superseded', 'exited', 'disowned', 'abandoned')
         AND changed_at < now() - make_interval(secs => %s)
       ORDER BY changed_at LIMIT %s""",
)
COMPACTIONS_PENDING = _q(
    "compactions_pending",
    "SELECT attempt_id FROM attempts WHERE compaction_pending ORDER BY attempt_id LIMIT %s",
)
ATTEMPT_FOR_COMPACTION = _q(
    "attempt_for_compaction",
    """SELECT a.attempt_id, a.book_id, a.engine_run_id, a.state, a.last_seq, a.compacted_seq,
         a.compaction_pending, a.changed_at < now() - make_interval(secs => %s) AS quiet,
         EXISTS (SELECT 1 FROM attempts p WHERE p.book_id = a.book_id AND p.state = 'parked')
           AS book_parked
       FROM attempts a WHERE a.attempt_id = %s FOR UPDATE OF a""",
)
LINE_HASHES_PAGE = _q(
    "line_hashes_page",
    """SELECT seq, sha256 FROM line_hashes WHERE attempt_id = %s AND seq > %s AND seq <= %s
       ORDER BY seq LIMIT %s""",
)
BOOK_LOCK_FOR_TRANSACTION = _q("book_lock_for_transaction", "SELECT pg_try_advisory_xact_lock(%s)")
ATTEMPT_COMPACTED = _q(
    "attempt_compacted",
    """UPDATE attempts SET compacted_seq = %s, compacted_sha256 = %s, compacted_at = now(),
         compaction_pending = true
       WHERE attempt_id = %s AND last_seq = %s AND compacted_seq = 0""",
)
LINE_HASHES_DELETE_RANGE = _q(
    "line_hashes_delete_range",
    "DELETE FROM line_hashes WHERE attempt_id = %s AND seq > %s AND seq <= %s",
)
ATTEMPT_COMPACTION_DONE = _q(
    "attempt_compaction_done",
    "UPDATE attempts SET compaction_pending = false WHERE attempt_id = %s",
)
RUNS_TO_PRUNE = _q(
    "runs_to_prune",
    """SELECT r.run_id, r.book_id FROM runs r
       WHERE r.state IN ('completed', 'failed', 'refused')
         AND r.updated_at < now() - make_interval(secs => %s)
         AND r.run_id < (SELECT max(l.run_id) FROM runs l WHERE l.book_id = r.book_id)
         AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = r.run_id
               AND (a.state IN ('pending', 'active', 'parked')
                    OR a.changed_at >= now() - make_interval(secs => %s)))
       ORDER BY r.updated_at LIMIT %s""",
)
RUN_FOR_PRUNING = _q(
    "run_for_pruning",
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s FOR UPDATE",
)
ATTEMPTS_OF_RUN_LOCK = _q(
    "attempts_of_run_lock",
    """SELECT attempt_id, engine_run_id, state, last_seq, compacted_seq, changed_at,
         changed_at < now() - make_interval(secs => %s) AS quiet
       FROM attempts WHERE run_id = %s ORDER BY attempt_id FOR UPDATE""",
)
PRUNED_STREAM_INSERT = _q(
    "pruned_stream_insert",
    """INSERT INTO pruned_streams (book_id, engine_run_id, run_id, attempt_id, last_seq)
       VALUES (%s, %s, %s, %s, %s)""",
)
LINE_SKIPS_OF_RUN_DELETE = _q(
    "line_skips_of_run_delete",
    """DELETE FROM line_skips WHERE attempt_id IN
         (SELECT attempt_id FROM attempts WHERE run_id = %s)""",
)
ATTEMPTS_OF_RUN_DELETE = _q("attempts_of_run_delete", "DELETE FROM attempts WHERE run_id = %s")
RUN_DELETE = _q("run_delete", "DELETE FROM runs WHERE run_id = %s")
PRUNE_CLEANUP_PENDING = _q(
    "prune_cleanup_pending",
    """SELECT attempt_id, run_id, last_seq FROM pruned_streams WHERE cleanup_pending
       ORDER BY attempt_id LIMIT %s""",
)
RUN_UNITS_DELETE_SOME = _q(
    "run_units_delete_some",
    """DELETE FROM run_units WHERE run_id = %s AND unit IN
         (SELECT unit FROM run_units WHERE run_id = %s LIMIT %s)""",
)
RUN_UNITS_COUNT = _q("run_units_count", "SELECT count(*) AS units FROM run_units WHERE run_id = %s")
PRUNE_CLEANUP_DONE = _q(
    "prune_cleanup_done",
    "UPDATE pruned_streams SET cleanup_pending = false WHERE attempt_id = %s AND cleanup_pending",
)

# --- operator actions -------------------------------------------------------------------

ACTION_INSERT = _q(
    "action_insert",
    """INSERT INTO operator_actions (book_id, engine_run_id, action, by_whom, reason, evidence)
       VALUES (%s, %s, %s, %s, %s, %s) RETURNING action_id""",
)
ACTIONS_OF_BOOKS = _q(
    "actions_of_books",
    """SELECT action_id, book_id, engine_run_id, action, by_whom, reason, at, evidence
       FROM operator_actions WHERE book_id = ANY(%s) ORDER BY book_id, action_id""",
)
LINE_SKIP_INSERT = _q(
    "line_skip_insert",
    "INSERT INTO line_skips (attempt_id, seq, sha256, action_id) VALUES (%s, %s, %s, %s)",
)
LINE_SKIPS_OF_ATTEMPTS = _q(
    "line_skips_of_attempts",
    "SELECT attempt_id, seq, sha256 FROM line_skips WHERE attempt_id = ANY(%s)",
)
BOOK_ERROR_CLEAR = _q(
    "book_error_clear",
    """UPDATE books SET error_kind = NULL, error_seq = NULL, error_offset = NULL,
         error_detail = NULL, scan_epoch = scan_epoch + 1
       WHERE book_id = %s AND error_kind IS NOT NULL""",
)
BOOK_SELECT_LOCK = _q(
    "book_select_lock", f"SELECT {_BOOK_COLUMNS} FROM books WHERE book_id = %s FOR UPDATE"
)
BOOK_HOLDINGS = _q(
    "book_holdings",
    """SELECT (SELECT count(*) FROM runs WHERE book_id = %s) AS runs,
              (SELECT count(*) FROM attempts WHERE book_id = %s) AS attempts,
              (SELECT count(*) FROM pruned_streams WHERE book_id = %s) AS pruned_streams""",
)
"""What a book holds that `forget` must never delete: runs, attempts, pruned streams."""
BOOK_FORGET_ACTIONS = _q(
    "book_forget_actions",
    """DELETE FROM operator_actions WHERE book_id = %s
       RETURNING action_id, engine_run_id, action, by_whom, reason, at, evidence""",
)
BOOK_FORGET_PROBLEMS = _q(
    "book_forget_problems",
    "DELETE FROM book_problems WHERE book_id = %s RETURNING kind, detail",
)
BOOK_FORGET_STARTS = _q("book_forget_starts", "DELETE FROM stream_starts WHERE book_id = %s")
BOOK_FORGET_FAILURES = _q(
    "book_forget_failures", "DELETE FROM projection_failures WHERE book_id = %s"
)
BOOK_FORGET = _q("book_forget", "DELETE FROM books WHERE book_id = %s")
FORGOTTEN_INSERT = _q(
    "forgotten_insert",
    """INSERT INTO forgotten_books (book_id, path, by_whom, reason, evidence)
       VALUES (%s, %s, %s, %s, %s) RETURNING action_id, at""",
)
BOOK_EPOCH_BUMP = _q(
    "book_epoch_bump",
    "UPDATE books SET scan_epoch = scan_epoch + 1 WHERE book_id = %s",
)

# --- line hashes and units ------------------------------------------------------------------

# One row a line a batch applies, by binary COPY in the batch's transaction (no conflict clause: the
# attempt rows are locked and their `last_seq` checked first, so a key already there means another
# pass applied the line, and the batch is rolled back as `CursorMoved`).
LINE_HASHES_COPY = _copy(
    "line_hashes_copy",
    "COPY line_hashes (attempt_id, seq, sha256) FROM STDIN (FORMAT BINARY)",
    ("int8", "int8", "bytea"),
)
# A group's few line hashes, sent with its other writes in one round trip (`ingest.group_commit`).
LINE_HASHES_INSERT = _q(
    "line_hashes_insert",
    """INSERT INTO line_hashes (attempt_id, seq, sha256)
       SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::bytea[])""",
)
LINE_HASHES_WINDOW = _q(
    "line_hashes_window",
    """SELECT seq, sha256 FROM line_hashes WHERE attempt_id = %s AND seq >= %s AND seq < %s
       ORDER BY seq""",
)
UNITS_COPY = _copy(
    "units_copy",
    "COPY run_units (run_id, unit, unit_index, attempt_id, seq) FROM STDIN (FORMAT BINARY)",
    ("int8", "text", "int8", "int8", "int8"),
)
UNITS_INSERT = _q(
    "units_insert",
    """INSERT INTO run_units (run_id, unit, unit_index, attempt_id, seq)
       SELECT * FROM unnest(%b::bigint[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[])
       ON CONFLICT (run_id, unit) DO NOTHING""",
)
UNITS_OF_RUNS = _q(
    "units_of_runs",
    """SELECT run_id, unit FROM run_units WHERE run_id = ANY(%s)
       ORDER BY run_id, unit_index, attempt_id, seq""",
)

# --- projections ----------------------------------------------------------------------------

PROJECTION_REGISTER = _q(
    "projection_register",
    """INSERT INTO projections (name, version) VALUES (%s, %s)
       ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING version""",
)
PROJECTION_VERSION_OF = _q(
    "projection_version_of", "SELECT version FROM projections WHERE name = %s"
)
# Locked for share by each apply transaction, for update by a rebuild that resets the projection:
# a batch never applies a projection's events across a change of its version.
PROJECTIONS_LOCK = _q(
    "projections_lock",
    "SELECT name, version FROM projections WHERE name = ANY(%s) ORDER BY name FOR SHARE",
)
PROJECTION_TRACKING_LOCK = _q(
    "projection_tracking_lock",
    """SELECT projection, attempt_id, last_seq FROM projection_tracking
       WHERE projection = ANY(%s) AND attempt_id = ANY(%s)
       ORDER BY projection, attempt_id FOR UPDATE""",
)
PROJECTION_TRACKING_WRITE = _q(
    "projection_tracking_write",
    """INSERT INTO projection_tracking (projection, attempt_id, last_seq)
       SELECT * FROM unnest(%(projection)s::text[], %(attempt_id)s::bigint[],
         %(last_seq)s::bigint[])
       ON CONFLICT (projection, attempt_id) DO UPDATE SET last_seq = EXCLUDED.last_seq""",
)
PROJECTION_FAILURE_SET = _q(
    "projection_failure_set",
    """INSERT INTO projection_failures (book_id, engine_run_id, projection, seq, detail)
       VALUES (%s, %s, %s, %s, %s)
       ON CONFLICT (book_id, engine_run_id) DO UPDATE SET projection = EXCLUDED.projection,
         seq = EXCLUDED.seq, detail = EXCLUDED.detail,
         failures = projection_failures.failures + 1, seen_at = now()""",
)
PROJECTION_FAILURES_CLEAR = _q(
    "projection_failures_clear",
    "DELETE FROM projection_failures WHERE book_id = %s AND engine_run_id = ANY(%s)",
)
PROJECTION_FAILURES_OF_BOOKS = _q(
    "projection_failures_of_books",
    """SELECT book_id, engine_run_id, projection, seq, detail, failures, since, seen_at
       FROM projection_failures WHERE book_id = ANY(%s) ORDER BY book_id, since""",
)
# `rebuild`: the projection's registry row locked for update while its version changes (live
# batches wait on their share lock, and never apply across the change), its tracking forgotten.
PROJECTION_LOCK_FOR_REBUILD = _q(
    "projection_lock_for_rebuild",
    "SELECT version FROM projections WHERE name = %s FOR UPDATE",
)
PROJECTION_VERSION_SET = _q(
    "projection_version_set",
    "UPDATE projections SET version = %s, rebuilt_at = now() WHERE name = %s",
)
PROJECTION_REBUILT = _q(
    "projection_rebuilt", "UPDATE projections SET rebuilt_at = now() WHERE name = %s"
)
PROJECTION_TRACKING_FORGET = _q(
    "projection_tracking_forget", "DELETE FROM projection_tracking WHERE projection = %s"
)
PROJECTION_TRACKING_OF_ATTEMPTS = _q(
    "projection_tracking_of_attempts",
    """SELECT attempt_id, last_seq FROM projection_tracking
       WHERE projection = %s AND attempt_id = ANY(%s)""",
)
PROJECTION_TRACKING_START = _q(
    "projection_tracking_start",
    """INSERT INTO projection_tracking (projection, attempt_id, last_seq) VALUES (%s, %s, 0)
       ON CONFLICT (projection, attempt_id) DO NOTHING""",
)
PROJECTION_TRACKING_ONE_LOCK = _q(
    "projection_tracking_one_lock",
    """SELECT last_seq FROM projection_tracking WHERE projection = %s AND attempt_id = %s
       FOR UPDATE""",
)
PROJECTION_TRACKING_ADVANCE = _q(
    "projection_tracking_advance",
    """UPDATE projection_tracking SET last_seq = %s
       WHERE projection = %s AND attempt_id = %s AND last_seq = %s""",
)
# Lock order as the apply transaction's: the attempt first (for share: a live batch of it waits,
# and the rebuild reads its cursor as committed), then the registry, then the tracking row.
ATTEMPT_CURSOR_SHARE = _q(
    "attempt_cursor_share",
    "SELECT last_seq FROM attempts WHERE attempt_id = %s FOR SHARE",
)
PRUNED_STREAMS_FOR_REBUILD = _q(
    "pruned_streams_for_rebuild",
    """SELECT p.engine_run_id, p.last_seq, coalesce(t.last_seq, 0) AS tracked
       FROM pruned_streams p LEFT JOIN projection_tracking t
         ON t.projection = %s AND t.attempt_id = p.attempt_id
       WHERE p.book_id = %s ORDER BY p.engine_run_id""",
)
# The rows this transaction has written so far to each of some tables, by Postgres's own count:
# the same before and after the projections ran, or a projection wrote to the platform's tables.
PLATFORM_WRITES_OF_TRANSACTION = _q(
    "platform_writes_of_transaction",
    """SELECT relname::text, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables
       WHERE schemaname = current_schema() AND relname = ANY(%s)""",
)
# Change notifications: `platform_ingest` carries a payload per attempt a commit moved (run id,
# attempt id, state, last seq: no book id, no money) for downstream services and `show --follow`;
# `platform_ingest_control` carries the id of a book an operator changed (the trigger of step 4),
# for the workers.
CHANNEL_CHANGES = "platform_ingest"
CHANNEL_CONTROL = "platform_ingest_control"
LISTEN_CHANGES = session("listen_changes", f"LISTEN {CHANNEL_CHANGES}")
LISTEN_CONTROL = session("listen_control", f"LISTEN {CHANNEL_CONTROL}")
# `migrate` changed the schema (`migrations.SCHEMA_CHANGED_NOTIFY`): the workers look at once.
CHANNEL_SCHEMA = _migrations.SCHEMA_CHANNEL
LISTEN_SCHEMA = session("listen_schema", f"LISTEN {CHANNEL_SCHEMA}")
# A session's cached query plans forgotten, its prepared statements kept: each is planned again on
# its next run, with the tables as they are then (`Database.discard_plans`).
PLANS_DISCARD = session("plans_discard", "DISCARD PLANS")
# After each commit a small payload per attempt the batch moved: no book id and no money in it.
CHANGES_NOTIFY = _q(
    "changes_notify",
    "SELECT pg_notify('platform_ingest', payload) FROM unnest(%b::text[]) AS payload",
)

# --- workers and lag ------------------------------------------------------------------------

# The live workers of this database: a worker announces itself by its session's application name
# (`platform-ingest worker <worker id> <roots digest>`), so it is live exactly as long as its
# connection, and a worker that dies leaves the list when its session ends.
# A worker takes its member name once it is ready to work its share (`survey.Survey.announce`).
APPLICATION_NAME_SET = _q(
    "application_name_set", "SELECT set_config('application_name', %s, false)"
)
WORKERS_LIVE = _q(
    "workers_live",
    """SELECT pid, application_name FROM pg_stat_activity
       WHERE datname = current_database() AND application_name LIKE 'platform-ingest worker %%'
       ORDER BY pid""",
)
# What lag needs of every attempt of some books: where a live attempt's reading stands, and when a
# line of the book was last applied (with the server's clock, so the age needs no other clock).
ATTEMPTS_LAG_OF_BOOKS = _q(
    "attempts_lag_of_books",
    """SELECT book_id, engine_run_id, state, error_kind, hint_offset, hint_file, last_applied_at,
         changed_at, statement_timestamp() AS now
       FROM attempts WHERE book_id = ANY(%s) ORDER BY book_id, attempt_id""",
)
UNNAMED_STARTS_OF_BOOKS = _q(
    "unnamed_starts_of_books",
    """SELECT s.book_id, s.engine_run_id, s.hint_offset, s.hint_file FROM stream_starts s
       WHERE s.book_id = ANY(%s)
         AND NOT EXISTS (SELECT 1 FROM attempts a
                          WHERE a.book_id = s.book_id AND a.engine_run_id = s.engine_run_id)
         AND NOT EXISTS (SELECT 1 FROM pruned_streams p
                          WHERE p.book_id = s.book_id AND p.engine_run_id = s.engine_run_id)
       ORDER BY s.book_id, s.hint_offset""",
)
"""The streams of named-mode books whose hello a pass saw and that nobody named, disowned or
pruned: their lines wait to be named (`lag`)."""
PROJECTION_LAG_OF_BOOKS = _q(
    "projection_lag_of_books",
    """SELECT p.name AS projection,
         coalesce(sum(a.last_seq - coalesce(t.last_seq, 0)), 0)::bigint AS behind
       FROM attempts a CROSS JOIN projections p
       LEFT JOIN projection_tracking t ON t.projection = p.name AND t.attempt_id = a.attempt_id
       WHERE a.book_id = ANY(%s) AND p.name = ANY(%s)
       GROUP BY p.name""",
)
"""Per projection, how many applied lines of these books it has not applied: a projection added
after its books were applied is that many behind until `rebuild` (`survey`, `sweep`)."""


STATEMENTS: tuple[Statement, ...] = tuple(LISTED)
"""Every statement, each once: the queries above and the migrations' steps. `db.execute` refuses
any text not in here."""

LISTED_TEXTS: frozenset[str] = frozenset(statement.text for statement in STATEMENTS)
