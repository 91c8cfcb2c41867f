"""Postgres clusters of a test's own, run with the server's own tools: `initdb`, `pg_ctl`,
`pg_basebackup` (a base backup, or a streaming replica with `-R`), `pg_ctl promote`, a small
tmpfs for a tablespace; and the worker and engine processes the tests run against them.

Each cluster lives in a directory of its own under the system's temporary directory (a Unix
socket's path must stay short), recorded with `server_fixtures.record_server_directory`: a
postmaster still running from it at the end of the session fails the session. A cluster listens
only on its socket. As root, the server runs as the embedded server's own account (`pgserver`,
which the `pgserver` package creates), as Postgres refuses to run as root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from platform_ingest import Database, migrate
from platform_ingest.operate.show import show_state
from platform_ingest.store.embedded import server_binaries
from platform_journals import (
    BIN,
    serves_metrics,
    worker_metrics,
)
from server_fixtures import record_server_directory, stop_postmasters

SERVER_USER = "pgserver"
"""The account the servers run as when the tests run as root (the embedded server's own)."""
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HERE = Path(__file__).resolve().parent
DATABASE = "ingest"
SETTINGS = {
    # The data is thrown away after the test: durability against a power cut is not tested here
    # (a stopped server's files are what a restore copies), and fsync would only slow it.
    "fsync": "off",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "wal_keep_size": "256MB",
    "checkpoint_timeout": "30min",
    "log_min_messages": "warning",
}


def _server_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        import pgserver.utils  # the embedded server makes its account so

        pgserver.utils.ensure_user_exists(SERVER_USER)
        return pwd.getpwnam(SERVER_USER)


def give_to_server(path: Path) -> None:
    """Make `path` the server account's (when running as root), as its data must be."""
    user = _server_user()
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)


def server_tool(tool: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one of the server's programs (initdb, pg_ctl, pg_basebackup, ...) as the server's
    account; fail the test with its output when it fails."""
    user = _server_user()
    done = subprocess.run(
        [str(server_binaries() / tool), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        user=user.pw_name if user is not None else None,
        cwd="/",
    )
    if done.returncode != 0:
        pytest.fail(f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


@dataclass
class Cluster:
    """One Postgres cluster: its data directory, and the socket it listens on."""

    data: Path
    socket_dir: Path
    port: int
    log: Path

    def dsn(self, database: str = DATABASE) -> str:
        return f"host={self.socket_dir} port={self.port} user=postgres dbname={database}"

    @property
    def admin_dsn(self) -> str:
        return self.dsn("postgres")

    def start(self) -> None:
        server_tool(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-h '' -k {self.socket_dir} -p {self.port}",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        server_tool("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def kill(self) -> None:
        """Stop at once, as a crash of the host does (SIGQUIT: no checkpoint)."""
        self.stop("immediate")

    def promote(self) -> None:
        server_tool("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def connect(self, database: str = DATABASE) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(database), autocommit=True)

    def scalar(self, query: str, params: Sequence[Any] = (), database: str = DATABASE) -> Any:
        with self.connect(database) as connection:
            row = connection.execute(query, params).fetchone()  # type: ignore[arg-type]
            return None if row is None else row[0]

    def execute(self, query: str, database: str = DATABASE) -> None:
        with self.connect(database) as connection:
            connection.execute(query)  # type: ignore[arg-type]

    def in_recovery(self) -> bool:
        return bool(self.scalar("SELECT pg_is_in_recovery()", database="postgres"))


@dataclass
class Clusters:
    """Where a test's clusters live; every postmaster started from there is stopped after."""

    root: Path
    mounts: list[Path] = field(default_factory=list)
    _ports: Iterator[int] = field(default_factory=lambda: iter(range(5432, 5532)))

    def _place(self, name: str) -> tuple[Path, Path]:
        home = self.root / name
        home.mkdir()
        give_to_server(home)
        return home / "data", home

    def _settle(self, data: Path, home: Path) -> Cluster:
        return Cluster(data, home, next(self._ports), home / "server.log")

    def new(self, name: str, *, tablespace: Path | None = None) -> Cluster:
        """A new cluster (initdb), started, with the database `DATABASE` migrated: in a
        tablespace at `tablespace` when one is given (its tables, their indexes and their free
        space maps are files there; the WAL stays in the data directory)."""
        data, home = self._place(name)
        server_tool("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with open(data / "postgresql.conf", "a") as conf:
            for key, value in SETTINGS.items():
                conf.write(f"{key} = '{value}'\n")
        cluster = self._settle(data, home)
        cluster.start()
        if tablespace is None:
            cluster.execute(f"CREATE DATABASE {DATABASE}", database="postgres")
        else:
            cluster.execute(f"CREATE TABLESPACE small LOCATION '{tablespace}'", database="postgres")
            cluster.execute(f"CREATE DATABASE {DATABASE} TABLESPACE small", database="postgres")
        db = Database(cluster.dsn())
        try:
            migrate(db)
        finally:
            db.close()
        return cluster

    def small_filesystem(self, name: str, size: str) -> Path:
        """A tmpfs of `size` (`mount -t tmpfs -o size=...`), the server's, unmounted once the
        servers are stopped. Where it cannot be mounted (not root, no `mount`) the test is
        skipped, saying the command and what it answered."""
        path = self.root / name
        path.mkdir()
        argv = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except OSError as error:
            pytest.skip(f"a small filesystem is needed: {' '.join(argv)}: {error}")
        if done.returncode != 0:
            pytest.skip(
                f"a small filesystem is needed: {' '.join(argv)} exited {done.returncode}: "
                f"{done.stderr.strip()}"
            )
        self.mounts.append(path)
        give_to_server(path)
        return path

    def base_backup(self, source: Cluster, name: str, *, standby: bool = False) -> Cluster:
        """A base backup of the running `source` (`pg_basebackup`, its WAL streamed with it: the
        backup is consistent by itself). `standby`: it is made a streaming replica of `source`
        (`-R`). Not started."""
        data, home = self._place(name)
        server_tool(
            "pg_basebackup",
            "-D",
            str(data),
            "-d",
            source.admin_dsn,
            "-X",
            "stream",
            "-c",
            "fast",
            *(["-R"] if standby else []),
        )
        return self._settle(data, home)

    def restored(self, backup: Cluster, onto: Cluster, name: str) -> Cluster:
        """A copy of `backup`'s data directory that listens where `onto` listened: the DSN the
        workers were given now reaches the restored server. `onto` must be stopped."""
        assert not onto.running
        data, _home = self._place(name)
        shutil.copytree(backup.data, data, symlinks=True)
        _chown_tree(data)
        return Cluster(data, onto.socket_dir, onto.port, onto.socket_dir / f"{name}.log")


def _chown_tree(path: Path) -> None:
    user = _server_user()
    if user is None:
        return
    for directory, directories, files in os.walk(path):
        os.chown(directory, user.pw_uid, user.pw_gid)
        for name in [*directories, *files]:
            os.chown(os.path.join(directory, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


@contextlib.contextmanager
def clusters(config: pytest.Config) -> Iterator[Clusters]:
    """A place for a test's clusters; every server started from it is stopped, and the place
    deleted, after the test however it ended."""
    root = Path(tempfile.mkdtemp(prefix="pgc-"))
    root.chmod(0o755)
    record_server_directory(config, root)
    place = Clusters(root)
    try:
        yield place
    finally:
        stop_postmasters([root])
        for mount in place.mounts:
            done = subprocess.run(
                ["umount", str(mount)], capture_output=True, text=True, timeout=60, check=False
            )
            assert done.returncode == 0, f"umount {mount}: {done.stderr}"
        shutil.rmtree(root, ignore_errors=True)


# --- the processes: workers and engines ------------------------------------------------------


def environment() -> dict[str, str]:
    """The commands' environment: this venv's commands first, the test projections importable."""
    paths = [str(FIXTURES), str(HERE), os.environ.get("PYTHONPATH", "")]
    environment = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(path for path in paths if path),
    }
    environment.pop("PLATFORM_INGEST_DSN", None)
    return environment


PROJECTION = "projection_fixtures:Recording"
"""The projection every worker of these tests feeds: one row per event given, keyed by
(attempt, seq), so that an event given twice is a unique violation, never unnoticed."""


def start_worker(
    dsn: str, root: Path, log: Path, *options: str, worker_id: str
) -> subprocess.Popen[bytes]:
    """`platform-ingest run ROOT --auto` with the recording projection and metrics on a free
    port (its log names it), quick safety passes and membership checks."""
    argv = [
        str(BIN / "platform-ingest"),
        "--dsn",
        dsn,
        "run",
        str(root),
        "--auto",
        "--projection",
        PROJECTION,
        "--metrics-port",
        "0",
        "--safety-pass-s",
        "1",
        "--membership-s",
        "0.3",
        "--worker-id",
        worker_id,
        *options,
    ]
    with open(log, "ab") as stderr:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=environment())


def stop_process(process: subprocess.Popen[bytes], *, timeout_s: float = 60) -> int | None:
    """SIGTERM, then wait; a process that does not stop is killed (and None returned)."""
    if process.poll() is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
        return None


def engine(book: Path, *options: str) -> subprocess.Popen[bytes]:
    """The reference engine (`engine-events demo`) on `book`, as a process of its own."""
    argv = [str(BIN / "engine-events"), "--log-level", "WARNING", "demo", str(book), *options]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=environment())


def command(*argv: str, timeout_s: float = 120) -> subprocess.CompletedProcess[bytes]:
    """One of the project's commands, run to its end."""
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        capture_output=True,
        timeout=timeout_s,
        check=False,
        env=environment(),
    )


def engine_status(book: Path) -> dict[str, Any]:
    """`engine-events status BOOK --json`: the engine's own account of the book."""
    done = command("engine-events", "status", str(book), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    status: dict[str, Any] = orjson.loads(done.stdout)
    return status


# --- what Postgres holds -----------------------------------------------------------------------


def show(dsn: str) -> dict[str, dict[str, Any]]:
    """`show --json`'s books, by book id."""
    db = Database(dsn)
    try:
        return {book["book_id"]: book for book in show_state(db)["books"]}
    finally:
        db.close()


def projection_rows(cluster: Cluster, table: str = "recorded_events") -> list[tuple[Any, ...]]:
    with cluster.connect() as connection:
        rows = connection.execute(
            f"SELECT book_id, engine_run_id, seq, type, time FROM {table}"  # type: ignore[arg-type]
            " ORDER BY book_id, engine_run_id, seq"
        ).fetchall()
    return [tuple(row) for row in rows]


def fill(filesystem: Path) -> Path:
    """Take the filesystem's every free byte with a file of its own (written until the kernel
    says ENOSPC); the file, to delete when the space is to come back."""
    filler = filesystem / "filler"
    chunk = b"\0" * 1024 * 1024
    with open(filler, "wb", buffering=0) as file:
        try:
            while True:
                file.write(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return filler


def metric(log: Path, name: str) -> float | None:
    """One sample of a running worker's /metrics (None: no such series now, or no metrics yet:
    the worker has not said its port)."""
    return worker_metrics(log).get(name) if serves_metrics(log) else None
