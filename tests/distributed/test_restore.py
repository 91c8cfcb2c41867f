"""Postgres restored from a base backup taken in the middle of a live run: it loses its latest
transactions, the effects and the cursors together, and the workers apply those lines again,
once each, until the platform is where a clean run leaves it.

A base backup (`pg_basebackup`, its WAL streamed with it) is taken while engines write and two
workers tail the books (`restore_scenario`). Then the engines end, an engine is killed and its
run repaired, a new book appears, the operator compacts and prunes; then Postgres stops, and a
copy of the backup is started where it listened. The workers are not restarted: they see Postgres
go away and come back older. What the backup lacks (the last lines, the new book's registration,
the repair, the compaction's digests, the prune's tombstones and audit records) is gone, and
nothing relies on it: every book ends as the engine's `status --json` says, each line once, the
projection as a rebuild gives it, and `compact` and `prune` run again find what they found before.
"""

from __future__ import annotations

import pytest

from platform_journals import wait_for
from postgres_cluster import clusters
from restore_scenario import (
    WORKERS,
    Life,
    after_the_backup,
    applied_to,
    check_kept,
    converge,
    finish,
    look_at,
)

pytestmark = [pytest.mark.postgres, pytest.mark.crash]


def test_a_restore_from_a_backup_taken_mid_run_ends_where_a_clean_run_ends(
    request: pytest.FixtureRequest,
) -> None:
    with clusters(request.config) as place:
        primary = place.new("primary")
        root = place.root / "books"
        root.mkdir()
        life = Life(root, primary.dsn(), [place.root / f"{worker}.log" for worker in WORKERS])
        try:
            life.start()
            wait_for("lines of the long book applied", lambda: applied_to(primary, "long") >= 10)
            backup = place.base_backup(primary, "backup")
            assert life.engines["long"].poll() is None, "the backup was not taken mid-run"
            after_the_backup(life)
            before = finish(primary, life)
            primary.kill()
            # A look at what the backup holds, before any worker reaches it (then stopped
            # cleanly: the restore below is a file copy of a stopped server).
            backup.start()
            kept = look_at(backup)
            backup.stop()
            check_kept(kept, before)
            restored = place.restored(backup, onto=primary, name="restored")
            restored.start()
            figures = converge(restored, life, before, kept)
        finally:
            life.stop()
    print(f"restore from a base backup: {figures}")
