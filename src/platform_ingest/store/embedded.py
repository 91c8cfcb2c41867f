"""The embedded Postgres: started by the command when no DSN is given, stopped when the last
command using it exits.

The server's data lives under the data directory (`.platform-ingest/` by default, made with mode
0700) in `postgres/`; it listens only on a Unix socket, and admits its owner alone
(`embedded_access`). The commands sharing one server count themselves in `postgres.handles`
beside it, under `postgres.lock`. The binaries come with the `pgserver` wheel, which the
`platform-ingest` distribution installs only with its `embedded` extra
(`pip install 'platform-ingest[embedded]'`): a host with a Postgres of its own gives a DSN and
needs no server binaries. Without the extra, a command given no database is refused with a typed
error that says both ways out.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import signal
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import EmbeddedServerError
from .embedded_access import (
    ServerUser,
    new_socket_directory,
    prepare_cluster_directory,
    reachable_install,
    remove_private_directory,
    server_user,
    write_access_rules,
)

logger = logging.getLogger("platform_ingest")

_PROGRAM_TIMEOUT_S = 120.0
"""How long initdb or pg_ctl may take (pg_ctl itself waits 60 s for a start or a stop)."""

MISSING = (
    "the embedded Postgres is not installed (pgserver, the 'embedded' extra): install "
    "platform-ingest[embedded], or give a DSN (--dsn, PLATFORM_INGEST_DSN or PG* variables)"
)
"""The refusal of a command that has no database: pgserver (the `embedded` extra) is missing."""


def _pgserver() -> Any:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset; the fallback it takes is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            import pgserver  # noqa: PLC0415 - slow to import; only the embedded mode needs it
        except ModuleNotFoundError as error:
            if error.name == "pgserver":
                raise EmbeddedServerError(MISSING) from None
            # pgserver is there, but something it needs is not.
            raise EmbeddedServerError(
                f"the embedded Postgres (pgserver) could not be imported: {error}"
            ) from error

    return pgserver


def require_installed() -> None:
    """Refuse (`EmbeddedServerError`, saying both ways out) when pgserver is not installed: before
    a command says that it uses or creates an embedded server."""
    _pgserver()


def cluster_dir(data_dir: Path) -> Path:
    """Where the embedded server's cluster lives under the data directory."""
    return data_dir / "postgres"


def cluster_exists(data_dir: Path) -> bool:
    """Whether a cluster was made under `data_dir` before (else starting one creates it)."""
    return (cluster_dir(data_dir) / "PG_VERSION").is_file()


@dataclass(frozen=True)
class _Postmaster:
    """What a running server's `postmaster.pid` says of it."""

    pid: int
    socket_directory: Path
    ready: bool


def _postmaster(cluster: Path) -> _Postmaster | None:
    """The server running on `cluster`, or None (no pid file, or its process is gone)."""
    try:
        lines = (cluster / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    except PermissionError:  # alive, another user's
        pass
    socket_directory = lines[4].split(",")[0].strip() if len(lines) > 4 else ""
    if not socket_directory:
        raise EmbeddedServerError(
            f"the Postgres running on {cluster} (pid {pid}) has no Unix socket: not one this "
            "command started; stop it"
        )
    ready = len(lines) > 7 and lines[7].strip() == "ready"
    return _Postmaster(pid, Path(socket_directory), ready)


def _dsn(socket_directory: Path) -> str:
    host = quote(str(socket_directory), safe="/")
    return f"postgresql://postgres@/postgres?host={host}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Handles:
    """The processes using the server (one pid a handle, in `postgres.handles` beside the
    cluster): the last to leave stops it. A process that died without leaving is dropped."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "postgres.handles"

    def _read(self) -> list[int]:
        try:
            pids = json.loads(self._path.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [pid for pid in pids if isinstance(pid, int) and _alive(pid)]

    def _write(self, pids: list[int]) -> None:
        temporary = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(pids).encode())
        finally:
            os.close(fd)
        os.replace(temporary, self._path)

    def add(self) -> None:
        self._write([*self._read(), os.getpid()])

    def remove(self) -> bool:
        """Leave; whether no handle is left."""
        pids = self._read()
        if os.getpid() in pids:
            pids.remove(os.getpid())
        self._write(pids)
        return not pids


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Hold `postgres.lock` beside the cluster: one command at a time starts, joins or stops."""
    fd = os.open(data_dir / "postgres.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(user: ServerUser, cluster: Path, program: str, *arguments: str) -> None:
    binaries = server_binaries(user)
    argv = [str(binaries / program), "-D", user.data_argument(cluster), *arguments]
    try:
        user.run(argv, cluster, timeout=_PROGRAM_TIMEOUT_S)
    except subprocess.CalledProcessError as error:
        log = cluster / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        raise EmbeddedServerError(
            f"{program} failed on {cluster} (exit {error.returncode}): "
            f"{(error.stderr or '').strip()} {tail.strip()}".strip()
        ) from error


def _start(data_dir: Path, user: ServerUser) -> _Postmaster:
    """Start the server (making its cluster first when there is none), or join the running one;
    either way its access rules are this release's."""
    cluster = cluster_dir(data_dir)
    server_binaries(user)  # programs the server's user can reach (or why none), before anything
    running = _postmaster(cluster)
    if running is not None and running.ready:
        if write_access_rules(cluster, user):
            os.kill(running.pid, signal.SIGHUP)  # reload: a server an earlier release started
        return running
    prepare_cluster_directory(cluster, user)
    if not cluster_exists(data_dir):
        _run(
            user,
            cluster,
            "initdb",
            "-U",
            "postgres",
            "--encoding=utf8",
            "--auth-local=peer",
            "--auth-host=reject",
        )
    write_access_rules(cluster, user)
    socket_directory = new_socket_directory(cluster, user)
    options = f"-h '' -k {shlex.quote(str(socket_directory))}"  # no TCP; the socket only
    try:
        _run(user, cluster, "pg_ctl", "-w", "-t", "60", "-o", options, "-l", "log", "start")
    except BaseException:
        remove_private_directory(socket_directory, cluster)
        raise
    started = _postmaster(cluster)
    if started is None:
        raise EmbeddedServerError(f"the embedded Postgres on {cluster} stopped as it started")
    return started


def _stop(data_dir: Path, user: ServerUser) -> None:
    cluster = cluster_dir(data_dir)
    running = _postmaster(cluster)
    if running is None:
        return
    _run(user, cluster, "pg_ctl", "-w", "-t", "60", "-m", "fast", "stop")
    remove_private_directory(running.socket_directory, cluster)


@contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[str]:
    """Start (or join) the embedded server under `data_dir`; yield its DSN; stop it after, unless
    another command still uses it."""
    _pgserver()
    data_dir = data_dir.absolute()  # the server's programs run in the cluster directory
    user = server_user()
    handles = _Handles(data_dir)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _locked(data_dir):
            postmaster = _start(data_dir, user)
            handles.add()
    except (OSError, subprocess.SubprocessError) as error:
        raise EmbeddedServerError(
            f"the embedded Postgres under {data_dir} did not start: {error}"
        ) from error
    logger.debug("embedded Postgres under %s is up", data_dir)
    try:
        yield _dsn(postmaster.socket_directory)
    finally:
        try:
            with _locked(data_dir):
                if handles.remove():
                    _stop(data_dir, user)
        except (OSError, subprocess.SubprocessError, EmbeddedServerError) as error:
            logger.error("the embedded Postgres under %s did not stop cleanly: %s", data_dir, error)


def postgres_binaries() -> Path:
    """The directory of the embedded server's binaries (pg_ctl, postgres, initdb)."""
    return Path(_pgserver().__file__).parent / "pginstall" / "bin"


def server_binaries(user: ServerUser | None = None) -> Path:
    """The directory the server's user (`server_user()` unless given) runs the server's programs
    from: `postgres_binaries()`, or a copy of the installation it can reach when it cannot reach
    that (`embedded_access.reachable_install`: run by root from a private directory)."""
    return reachable_install(postgres_binaries().parent, user or server_user()) / "bin"
