"""The embedded Postgres admits its owner alone. Another local user (a real account, real
processes) can neither connect to it, on any socket its postmaster listens on, from a short or a
long working directory, nor read its data; a cluster the previous release made (trusting every
local connection) is closed at its first start by this one; and starting it changes the mode of no
directory above its data directory.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from local_user import LocalUser
from platform_ingest.errors import EmbeddedServerError
from platform_ingest.store.embedded import (
    _pgserver,
    cluster_dir,
    embedded_postgres,
    postgres_binaries,
)
from platform_ingest.store.embedded_access import INSTALL_COPY_PREFIX, install_copy_path
from server_fixtures import record_server_directory, stop_postmasters

pytestmark = pytest.mark.postgres

LEAKED_FROM = 68
"""From a working directory this long, the socket's path in `.platform-ingest/postgres/` passes
the 107 bytes of a Unix socket address: the previous release then put it in a directory of mode
0777 (0.2.0, run as root), where anyone could connect."""


@pytest.fixture
def open_base(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory every user may pass through (0755): what keeps another user out is ours."""
    base = Path(tempfile.mkdtemp(prefix="ingest-access-", dir="/tmp"))
    base.chmod(0o755)
    record_server_directory(request.config, base)
    try:
        yield base
    finally:
        stop_postmasters([base])
        shutil.rmtree(base, ignore_errors=True)


def _working_directory(base: Path, length: int) -> Path:
    """A directory under `base` whose path is `length` characters long, passable by anyone."""
    directory = base / ("w" * (length - len(str(base)) - 1))
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    assert len(str(directory)) == length
    return directory


def _postmaster_pid(cluster: Path) -> int:
    return int((cluster / "postmaster.pid").read_text().split("\n", 1)[0])


def _listening_sockets(pid: int) -> list[Path]:
    """Every Unix socket the process `pid` listens on: its descriptors' socket inodes, named in
    /proc/net/unix."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    sockets = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes:
            sockets.append(Path(fields[7]))
    return sockets


def _connects_as(user: LocalUser, socket: Path) -> subprocess.CompletedProcess[str]:
    """psql as `user` through `socket`'s directory, asking who it is."""
    return user.run(
        str(postgres_binaries() / "psql"),
        "-X",
        "-w",
        "-h",
        str(socket.parent),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-Atc",
        "select current_user",
    )


def _probe_can_work(user: LocalUser, working_directory: Path) -> None:
    """The other user can run psql and pass through the working directory: a refusal below is
    the server's, or its directories', not the probe's."""
    version = user.run(str(postgres_binaries() / "psql"), "--version")
    assert version.returncode == 0, version.stderr
    listed = user.run("ls", str(working_directory))
    assert listed.returncode == 0, listed.stderr


def _assert_kept_out(user: LocalUser, data_dir: Path, *, made_here: bool = True) -> None:
    """`user` connects on no socket of the server and reads nothing of the cluster, nor lists the
    data directory when this release made it (one made before keeps its mode)."""
    cluster = cluster_dir(data_dir)
    sockets = _listening_sockets(_postmaster_pid(cluster))
    assert sockets, "the postmaster listens on no Unix socket"
    for socket in sockets:
        # The owner gets in through this socket: it is a live one.
        with psycopg.connect(host=str(socket.parent), user="postgres", dbname="postgres") as own:
            assert own.execute("select current_user").fetchone() == ("postgres",)
        probe = _connects_as(user, socket)
        assert probe.returncode != 0, f"{user.name} connected through {socket}: {probe.stdout}"
        assert "postgres" not in probe.stdout
    for directory in (cluster, data_dir) if made_here else (cluster,):
        listed = user.run("ls", "-a", str(directory))
        assert listed.returncode != 0, f"{user.name} lists {directory}: {listed.stdout}"
    read = user.run("cat", str(cluster / "PG_VERSION"))
    assert read.returncode != 0, f"{user.name} reads {cluster / 'PG_VERSION'}"


def _group_ids(pid: int) -> set[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    gids = {int(gid) for gid in fields["Gid"].split()}
    return gids | {int(gid) for gid in fields["Groups"].split()}


@pytest.mark.parametrize("length", [40, LEAKED_FROM, 120])
def test_another_user_neither_connects_nor_reads_the_data(
    other_user: LocalUser, open_base: Path, length: int
) -> None:
    working_directory = _working_directory(open_base, length)
    data_dir = working_directory / ".platform-ingest"  # what the commands use from there
    with embedded_postgres(data_dir):
        _probe_can_work(other_user, working_directory)
        _assert_kept_out(other_user, data_dir)
        if os.geteuid() == 0:
            # Run by root, the server is another user: with root's group, whatever root's group
            # may read would be its to read (and a superuser's `COPY ... TO PROGRAM`'s).
            assert 0 not in _group_ids(_postmaster_pid(cluster_dir(data_dir)))


@pytest.mark.parametrize("left_running", [False, True], ids=["stopped", "left-running"])
def test_a_cluster_of_the_previous_release_is_closed_at_its_first_start(
    other_user: LocalUser, open_base: Path, left_running: bool
) -> None:
    """A data directory made as 0.2.0 made it (pgserver's own start: `trust` for every local
    connection) keeps its data, and admits its owner alone once this release starts it, or joins
    the server 0.2.0 left running."""
    working_directory = _working_directory(open_base, 40)
    data_dir = working_directory / ".platform-ingest"
    data_dir.mkdir()
    previous = _pgserver().get_server(cluster_dir(data_dir), cleanup_mode="stop")
    with psycopg.connect(previous.get_uri(), autocommit=True) as conn:
        conn.execute("create table kept (note text)")
        conn.execute("insert into kept values ('made by the previous release')")
        rules = conn.execute("select distinct auth_method from pg_hba_file_rules").fetchall()
    assert ("trust",) in rules  # the previous release's cluster, as it was
    if not left_running:
        previous.cleanup()

    with embedded_postgres(data_dir) as dsn, psycopg.connect(dsn) as conn:
        assert conn.execute("select note from kept").fetchall() == [
            ("made by the previous release",)
        ]
        rules = conn.execute(
            "select type, user_name, auth_method, options from pg_hba_file_rules"
        ).fetchall()
        assert rules == [
            ("local", ["postgres"], "peer", ["map=owner"]),
            ("local", ["all"], "scram-sha-256", None),  # the roles its owner makes, by password
        ]
        _probe_can_work(other_user, working_directory)
        _assert_kept_out(other_user, data_dir, made_here=False)


def _modes(paths: list[Path]) -> dict[Path, int]:
    return {path: stat.S_IMODE(path.lstat().st_mode) for path in paths}


def _around(path: Path) -> list[Path]:
    return [*path.parents, path]


def test_migrate_changes_the_mode_of_no_directory_it_did_not_create(
    request: pytest.FixtureRequest,
) -> None:
    """`platform-ingest migrate` under a directory of mode 0700 starts the embedded server there
    (run by root, as another user) and leaves that directory, every one above it, and the
    server's installed programs as they were."""
    parent = Path(tempfile.mkdtemp(prefix="ingest-private-", dir="/tmp"))  # mode 0700
    record_server_directory(request.config, parent)
    try:
        working_directory = parent / "work"
        working_directory.mkdir(mode=0o700)
        installed = postgres_binaries().parent
        watched = [*_around(working_directory), *_around(installed), *installed.rglob("*")]
        before = _modes(watched)
        assert before[parent] == 0o700
        environment = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("PG") and key != "PLATFORM_INGEST_DSN"
        }
        migrated = subprocess.run(
            [str(Path(sys.executable).parent / "platform-ingest"), "migrate"],
            cwd=working_directory,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert migrated.returncode == 0, migrated.stderr
        assert "creating a new embedded Postgres" in migrated.stderr
        assert (cluster_dir(working_directory / ".platform-ingest") / "PG_VERSION").is_file()
        after = _modes(watched)
        assert {path: oct(mode) for path, mode in after.items() if before[path] != mode} == {}
        assert after[parent] == 0o700
    finally:
        stop_postmasters([parent])
        shutil.rmtree(parent, ignore_errors=True)


def _installed_privately(open_base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's installation copied under a directory of mode 0700, and used: out of the
    system user's reach, as in a checkout of root's in a private directory."""
    private = open_base / "private"
    private.mkdir(mode=0o700)
    original = postgres_binaries().parent  # <site>/pgserver/pginstall, beside <site>/pgserver.libs
    installed = private / original.parent.name / original.name
    shutil.copytree(original, installed, symlinks=True)
    libraries = original.parent.parent / f"{original.parent.name}.libs"
    if libraries.is_dir():
        shutil.copytree(libraries, private / libraries.name, symlinks=True)
    monkeypatch.setattr(
        "platform_ingest.store.embedded.postgres_binaries", lambda: installed / "bin"
    )
    return installed


def _server_program(data_dir: Path) -> str:
    """The path of the program the running server was started from."""
    pid = int((cluster_dir(data_dir) / "postmaster.pid").read_text().split()[0])
    return os.readlink(f"/proc/{pid}/exe")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a server started by root runs as another user")
def test_programs_the_server_user_cannot_reach_run_from_a_copy_it_can(
    monkeypatch: pytest.MonkeyPatch, open_base: Path
) -> None:
    """Installed under a directory of mode 0700, the server's programs are out of the system
    user's reach: the server runs from a copy under the temporary directory, owned by root and
    writable by root alone, and the private directory keeps its mode."""
    installed = _installed_privately(open_base, monkeypatch)
    kept = install_copy_path(installed)
    shutil.rmtree(kept, ignore_errors=True)
    try:
        with embedded_postgres(open_base / ".platform-ingest") as dsn:
            with psycopg.connect(dsn) as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
            assert _server_program(open_base / ".platform-ingest").startswith(f"{kept}/")
        info = kept.lstat()
        assert info.st_uid == 0 and not info.st_mode & 0o022
        assert stat.S_IMODE((open_base / "private").stat().st_mode) == 0o700
    finally:
        stop_postmasters([open_base])
        shutil.rmtree(kept, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a server started by root runs as another user")
def test_a_copy_of_the_programs_another_user_could_change_is_not_used(
    monkeypatch: pytest.MonkeyPatch, open_base: Path
) -> None:
    """The copy's name taken first by a directory another user may write (made by that user, or
    open to all): it is not used, nor changed; the server runs from a fresh copy of its own."""
    installed = _installed_privately(open_base, monkeypatch)
    kept = install_copy_path(installed)
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    kept.chmod(0o777)
    planted = kept / "pginstall" / "bin"
    planted.mkdir(parents=True)
    fresh: Path | None = None
    try:
        with embedded_postgres(open_base / ".platform-ingest") as dsn:
            with psycopg.connect(dsn) as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
            program = Path(_server_program(open_base / ".platform-ingest"))
            fresh = program.parents[3]  # <copy>/pgserver/pginstall/bin/postgres
            assert fresh != kept and fresh.name.startswith(INSTALL_COPY_PREFIX)
            info = fresh.lstat()
            assert info.st_uid == 0 and not info.st_mode & 0o022
        assert stat.S_IMODE(kept.stat().st_mode) == 0o777
        assert list(planted.iterdir()) == []
    finally:
        stop_postmasters([open_base])
        shutil.rmtree(kept, ignore_errors=True)
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a server started by root runs as another user")
def test_a_temporary_directory_the_server_user_cannot_pass_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, open_base: Path
) -> None:
    """The programs out of the system user's reach, and the temporary directory too: no copy
    would be reachable, so the start is refused, naming the temporary directory, and no copy is
    left in it."""
    _installed_privately(open_base, monkeypatch)
    private_temporary = open_base / "tmp"
    private_temporary.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private_temporary))
    with (
        pytest.raises(EmbeddedServerError, match=f"nor a copy of them: {private_temporary} lets"),
        embedded_postgres(open_base / ".platform-ingest"),
    ):
        pass
    assert list(private_temporary.iterdir()) == []
    assert not cluster_dir(open_base / ".platform-ingest").exists()
