"""A streaming replica promoted while it lags behind its primary: the failover loses what the
replica had not received, the effects and the cursors together, and the workers apply those
lines again, once each, on the promoted server.

The replica is made with `pg_basebackup -R` and streams from the primary while engines write
and two workers tail the books (`restore_scenario`). Then it is cut off from the primary (its
`primary_conninfo` emptied, as a network partition between them would): pausing its replay
(`pg_wal_replay_pause()`) or delaying it (`recovery_min_apply_delay`) would not do, as promotion
replays every WAL record the replica has received before it takes writes. The primary goes on: the
engines end, an engine is killed and its run repaired, a new book appears, the operator compacts
and prunes. Then the primary dies (an immediate stop) and the replica is promoted (`pg_ctl
promote`). The workers were given both servers (`host=primary,replica
target_session_attrs=read-write`, libpq's own failover) and are not restarted: they find the
promoted one by themselves. Every check of the restore holds on it.
"""

from __future__ import annotations

import pytest

from platform_journals import wait_for
from postgres_cluster import Cluster, clusters
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


def _both(primary: Cluster, replica: Cluster) -> str:
    """A DSN naming both servers: libpq connects to whichever of them takes writes."""
    return (
        f"host={primary.socket_dir},{replica.socket_dir} port={primary.port},{replica.port}"
        " user=postgres dbname=ingest target_session_attrs=read-write"
    )


def _cut_off(replica: Cluster) -> None:
    """The replica receives nothing more from its primary."""
    replica.execute("ALTER SYSTEM SET primary_conninfo = ''", database="postgres")
    replica.execute("SELECT pg_reload_conf()", database="postgres")
    wait_for(
        "the replica's WAL receiver stopped",
        lambda: (
            replica.scalar("SELECT count(*) FROM pg_stat_wal_receiver", database="postgres") == 0
        ),
    )


def test_a_replica_promoted_while_it_lags_ends_where_a_clean_run_ends(
    request: pytest.FixtureRequest,
) -> None:
    with clusters(request.config) as place:
        primary = place.new("primary")
        replica = place.base_backup(primary, "replica", standby=True)
        replica.start()
        assert replica.in_recovery()
        root = place.root / "books"
        root.mkdir()
        logs = [place.root / f"{worker}.log" for worker in WORKERS]
        life = Life(root, _both(primary, replica), logs)
        try:
            life.start()
            wait_for(
                "lines of the long book applied and streamed to the replica",
                lambda: applied_to(replica, "long") >= 10,
            )
            _cut_off(replica)
            assert life.engines["long"].poll() is None, "the replica was cut off after the run"
            after_the_backup(life)
            before = finish(primary, life)
            kept = look_at(replica)  # a hot standby answers reads
            check_kept(kept, before)
            primary.kill()
            replica.promote()
            assert not replica.in_recovery()
            figures = converge(replica, life, before, kept)
        finally:
            life.stop()
    print(f"promotion of a lagging replica: {figures}")
