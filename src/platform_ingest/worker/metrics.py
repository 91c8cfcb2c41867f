"""The worker's metrics, in the Prometheus text format (`run --metrics-port P`, on 127.0.0.1
unless `--metrics-address` says otherwise; served at `/metrics` beside `/healthz` and `/readyz`,
`health`).

No series is per book: a worker tailing 10,000 books exposes the same few dozen series as one
tailing three. Lag is aggregated over the books the worker works (sum, max, how many are behind);
an operator looking for WHICH book lags runs `platform-ingest show --json` (its `lag` per book).

    platform_ingest_lines_applied_total            lines committed to Postgres
    platform_ingest_duplicates_total               lines met again and skipped (same bytes)
    platform_ingest_passes_total{trigger}          passes by what woke them: notify, survey, retry, claim
    platform_ingest_pass_failures_total{error}     passes that could not finish (Postgres away, journal unreadable)
    platform_ingest_problems_total{kind}           stream problems met: payload_conflict, malformed, gap, foreign_stream_ahead, ...
    platform_ingest_apply_seconds                  histogram: from a book's wake-up to the commit of its lines
    platform_ingest_group_books                    histogram: books committed by one group transaction (the books due at once; a book alone: one)
    platform_ingest_books{state}                   books seen under the roots: owned (worked here), shared (another worker's)
    platform_ingest_workers                        live workers sharing this worker's roots (itself included)
    platform_ingest_lag_bytes / _lag_lines         sum over owned books of what lies past the cursor
    platform_ingest_lag_bytes_max                  the largest one book's lag
    platform_ingest_books_behind                   owned books with complete lines past the cursor
    platform_ingest_lag_age_seconds_max            among those, the longest time since a line was applied: a stuck book grows it
    platform_ingest_database_up                    1 while Postgres does the work; 0 while it is away
    platform_ingest_database_down_reason{reason,sqlstate}  1 for why it is away (disk_full 53100, read_only 25006, ...); no series while up
    platform_ingest_database_errors_total{error}   unavailable, refusing writes, or timeout
    platform_ingest_watcher_up                     1 while change notification works (0: survey passes only)
    platform_ingest_last_survey_timestamp_seconds  when the safety-net survey last completed
    platform_ingest_scrub_bytes_total              bytes of journals read again by the background scrub
    platform_ingest_scrub_mismatches_total         applied lines it found changed (each quarantined its stream)

What is true now of the owned books, rebuilt from Postgres by every survey (the first at start),
each label present from then on, 0 included (a counter that starts empty at a restart would page
nobody for a quarantine older than the process):

    platform_ingest_attempts{state}                attempts by state: quarantined, stalled, parked, ...
    platform_ingest_books_with_problem{kind}       books with a standing problem of this kind (malformed, gap, journal_missing, unnamed_stream, ...)
    platform_ingest_lag_lines_held{hold}           lines that wait for a person, by what holds them: quarantined, stalled, refused, parked, unnamed
    platform_ingest_oldest_hold_age_seconds{hold}  the oldest hold of each kind: how long it has held (0: none)
    platform_ingest_projection_lines_behind{projection}  applied lines the projection has not applied (a rebuild is due)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

APPLY_SECONDS_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GROUP_BOOKS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """One registry per worker (never the process-wide default one)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        prefix = "platform_ingest_"
        self.lines_applied = Counter(
            prefix + "lines_applied", "Lines committed to Postgres", registry=registry
        )
        self.duplicates = Counter(
            prefix + "duplicates", "Lines met again and skipped (same bytes)", registry=registry
        )
        self.passes = Counter(
            prefix + "passes",
            "Passes over a book, by what woke them",
            ["trigger"],
            registry=registry,
        )
        self.pass_failures = Counter(
            prefix + "pass_failures", "Passes that could not finish", ["error"], registry=registry
        )
        self.projection_failures = Counter(
            prefix + "projection_failures",
            "Batches rolled back because a projection raised, by projection",
            ["projection"],
            registry=registry,
        )
        self.attempts_compacted = Counter(
            prefix + "attempts_compacted",
            "Quiet attempts whose line hashes became one digest",
            registry=registry,
        )
        self.scrub_bytes = Counter(
            prefix + "scrub_bytes",
            "Bytes of journals read again by the background scrub",
            registry=registry,
        )
        self.scrub_mismatches = Counter(
            prefix + "scrub_mismatches",
            "Applied lines the background scrub found changed since they were applied",
            registry=registry,
        )
        self.problems = Counter(
            prefix + "problems",
            "Stream problems met (quarantines, gaps, parks), by kind",
            ["kind"],
            registry=registry,
        )
        self.apply_seconds = Histogram(
            prefix + "apply_seconds",
            "From a book's wake-up to the commit of its lines (passes that applied lines)",
            buckets=APPLY_SECONDS_BUCKETS,
            registry=registry,
        )
        self.group_books = Histogram(
            prefix + "group_books",
            "Books committed by one group transaction (the books due at once; a book alone: one)",
            buckets=GROUP_BOOKS_BUCKETS,
            registry=registry,
        )
        self.books = Gauge(
            prefix + "books",
            "Books seen under the roots, by who works them",
            ["state"],
            registry=registry,
        )
        self.workers = Gauge(
            prefix + "workers", "Live workers sharing this worker's roots", registry=registry
        )
        self.lag_bytes = Gauge(
            prefix + "lag_bytes",
            "Bytes past the cursor, summed over owned books",
            registry=registry,
        )
        self.lag_lines = Gauge(
            prefix + "lag_lines",
            "Complete lines past the cursor, summed over owned books",
            registry=registry,
        )
        self.lag_bytes_max = Gauge(
            prefix + "lag_bytes_max",
            "The largest lag of one owned book, in bytes",
            registry=registry,
        )
        self.books_behind = Gauge(
            prefix + "books_behind",
            "Owned books with complete lines past the cursor",
            registry=registry,
        )
        self.lag_age_max = Gauge(
            prefix + "lag_age_seconds_max",
            "Among books behind, the longest time since one of their lines was applied",
            registry=registry,
        )
        self.database_up = Gauge(
            prefix + "database_up",
            "1 while Postgres does the work, 0 while it is away (see database_down_reason)",
            registry=registry,
        )
        self.database_down_reason = Gauge(
            prefix + "database_down_reason",
            "1 for why Postgres is away, by reason and SQLSTATE; no series while it is up",
            ["reason", "sqlstate"],
            registry=registry,
        )
        self.database_errors = Counter(
            prefix + "database_errors",
            "Postgres unavailable, refusing writes, or timing out",
            ["error"],
            registry=registry,
        )
        self.watcher_up = Gauge(
            prefix + "watcher_up", "1 while file-change notification works", registry=registry
        )
        self.last_survey = Gauge(
            prefix + "last_survey_timestamp_seconds",
            "When the safety-net survey last completed (Unix time)",
            registry=registry,
        )
        self.attempts = Gauge(
            prefix + "attempts",
            "Attempts of the owned books, by state (as of the last survey)",
            ["state"],
            registry=registry,
        )
        self.books_with_problem = Gauge(
            prefix + "books_with_problem",
            "Owned books with a standing problem of this kind (as of the last survey)",
            ["kind"],
            registry=registry,
        )
        self.lag_lines_held = Gauge(
            prefix + "lag_lines_held",
            "Lines past the cursor that wait for a person, by what holds them",
            ["hold"],
            registry=registry,
        )
        self.oldest_hold_age = Gauge(
            prefix + "oldest_hold_age_seconds",
            "How long the oldest hold of each kind has held (0: none)",
            ["hold"],
            registry=registry,
        )
        self.projection_lines_behind = Gauge(
            prefix + "projection_lines_behind",
            "Applied lines of the owned books the projection has not applied",
            ["projection"],
            registry=registry,
        )

    def database_down(self, reason: str, sqlstate: str) -> None:
        """Postgres is away for `reason` (its SQLSTATE, or "client"): the one reason shown."""
        self.database_up.set(0)
        self.database_down_reason.clear()
        self.database_down_reason.labels(reason, sqlstate).set(1)

    def database_back(self) -> None:
        self.database_up.set(1)
        self.database_down_reason.clear()

    def scrubbed(self, bytes_read: int, mismatches: int) -> None:
        """The background scrub read `bytes_read` more and found `mismatches` more."""
        self.scrub_bytes.inc(bytes_read)
        self.scrub_mismatches.inc(mismatches)
