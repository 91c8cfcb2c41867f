"""Who may reach the embedded Postgres: its owner alone, whatever the data directory's path.

- The server runs as the user running the command; run by root, as the system user `pgserver`
  (Postgres refuses to run as root; the name is the one earlier releases used, so their clusters
  keep their owner), with that user's own group and no other.
- It listens on a Unix socket only (no TCP), in a directory of its own with mode 0700: the cluster
  directory itself when the socket's path fits an address (107 bytes on Linux) and the server is
  the command's user; else a fresh directory under the temporary directory, made for this start
  and removed when the server stops.
- `pg_hba.conf` admits `peer` connections of the `postgres` role only, for the command's user and
  the server's user (`pg_ident.conf`'s map `owner`); any other role (one its owner created) by its
  password (`scram-sha-256`), and nothing else. Both files are written at
  every start: a cluster made by an earlier release (which trusted every local connection) is
  closed on its first start by this one.
- Nothing above the cluster is opened to the server: run by root, it is given its cluster as its
  working directory and names it `/proc/self/cwd`, so no parent directory needs to let it through
  (an earlier release added read and execute for group and others to every one of them).
- Nor above its programs: run by root from where the system user cannot reach them (a checkout
  in a private directory of mode 0700), the server runs a copy of its installation made once
  under the temporary directory (`reachable_install`): owned by root, writable by root alone,
  named after the installation's path and version so that later starts reuse it. A directory of
  that name that is not so (another user made it first) is not used: a fresh copy is made.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import EmbeddedServerError

SERVER_SYSTEM_USER = "pgserver"
"""The system user the server runs as when the command runs as root."""

SOCKET_NAME = ".s.PGSQL.5432"
"""The socket's file name (Postgres names it after the port, the default one here)."""

_MAX_SOCKET_PATH = 103 if sys.platform == "darwin" else 107
"""The longest Unix socket path the system takes, in bytes (sun_path less its terminating NUL)."""

PRIVATE_SOCKET_PREFIX = "platform-ingest-pg-"
"""The name of a socket directory made under the temporary directory, before its random part."""

_PROC_SELF_CWD = "/proc/self/cwd"

HBA = "# Written by platform-ingest at every start: the owner alone, over the Unix socket.\n" + (
    "local all postgres peer map=owner\n"
    # The roles an owner creates (an owner role and a worker role: docs/platform/workers.md,
    # "Roles") log in by password, through the same socket only its owner can reach.
    "local all all scram-sha-256\n"
)


@dataclass(frozen=True)
class ServerUser:
    """The user the server's programs run as: `uid` None when it is the command's own user."""

    name: str
    uid: int | None = None
    gid: int | None = None

    @property
    def is_other(self) -> bool:
        return self.uid is not None

    def run(
        self, argv: list[str], cluster: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the server's programs as this user, in the cluster directory."""
        return subprocess.run(
            argv,
            cwd=cluster,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
            user=self.uid,
            group=self.gid,
            extra_groups=[] if self.is_other else None,
        )

    def data_argument(self, cluster: Path) -> str:
        """How the server's programs name the cluster: by its path, or, run as another user, as
        their working directory (their own path to it needs no parent directory to let them by)."""
        return _PROC_SELF_CWD if self.is_other else str(cluster)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise EmbeddedServerError(
            f"the embedded Postgres admits its owner by user name, and uid {uid} has none "
            "(no passwd entry): give a DSN, or run as a user with a name"
        ) from None


def server_user() -> ServerUser:
    """The command's own user; run by root, the system user `pgserver` (created when missing)."""
    if os.geteuid() != 0:
        return ServerUser(_user_name(os.geteuid()))
    try:
        entry = pwd.getpwnam(SERVER_SYSTEM_USER)
    except KeyError:
        entry = _create_system_user()
    return ServerUser(SERVER_SYSTEM_USER, entry.pw_uid, entry.pw_gid)


def _create_system_user() -> pwd.struct_passwd:
    nologin = shutil.which("nologin") or "/bin/false"
    command = ["useradd", "--system", "--user-group", "--no-create-home", "--shell", nologin]
    try:
        subprocess.run([*command, SERVER_SYSTEM_USER], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as error:
        try:  # made meanwhile by another command
            return pwd.getpwnam(SERVER_SYSTEM_USER)
        except KeyError:
            pass
        detail = getattr(error, "stderr", None) or error
        raise EmbeddedServerError(
            f"run as root, the embedded Postgres runs as the system user {SERVER_SYSTEM_USER!r}, "
            f"which could not be created: {detail}"
        ) from error
    return pwd.getpwnam(SERVER_SYSTEM_USER)


def blocking_directory(path: Path, user: ServerUser) -> Path | None:
    """The first directory on `path` (its parents and itself) that `user` may not pass; None when
    every one lets it by. Only for another user (root and the command's user pass anyway)."""
    if not user.is_other:
        return None
    for directory in [*reversed(path.parents), path]:
        info = directory.stat()
        if info.st_uid == user.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == user.gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return directory
    return None


def prepare_cluster_directory(cluster: Path, user: ServerUser) -> None:
    """Make the cluster directory (mode 0700) when missing, owned by the server's user."""
    try:
        cluster.mkdir(mode=0o700)
    except FileExistsError:
        return
    if user.is_other:
        assert user.uid is not None and user.gid is not None
        os.chown(cluster, user.uid, user.gid)


def write_access_rules(cluster: Path, user: ServerUser) -> bool:
    """Write `pg_hba.conf` and `pg_ident.conf` (mode 0600, the server's user's); whether either
    changed (a running server must then reload them)."""
    names = dict.fromkeys([_user_name(os.geteuid()), user.name])
    ident = "# The users admitted as the postgres role: the owner and the server's own.\n" + (
        "".join(f"owner {name} postgres\n" for name in names)
    )
    changed = False
    for file_name, content in (("pg_hba.conf", HBA), ("pg_ident.conf", ident)):
        path = cluster / file_name
        try:
            if path.read_text() == content:
                continue
        except FileNotFoundError:
            pass
        temporary = path.with_name(f".{file_name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, content.encode())
            if user.is_other:
                assert user.uid is not None and user.gid is not None
                os.fchown(fd, user.uid, user.gid)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        changed = True
    return changed


def _fits(directory: Path) -> bool:
    return len(os.fsencode(directory / SOCKET_NAME)) <= _MAX_SOCKET_PATH


def new_socket_directory(cluster: Path, user: ServerUser) -> Path:
    """Where a server starting now puts its socket: the cluster directory (0700, its own) when it
    can be given there, else a new private directory (0700, the server user's) under the
    temporary directory."""
    if not user.is_other and _fits(cluster) and "," not in str(cluster):
        return cluster  # a comma would split Postgres's list of socket directories
    for base in dict.fromkeys([Path(tempfile.gettempdir()), Path("/tmp")]):
        # mkdtemp's random part is 8 characters.
        usable = base.is_dir() and "," not in str(base) and blocking_directory(base, user) is None
        if usable and _fits(base / f"{PRIVATE_SOCKET_PREFIX}xxxxxxxx"):
            return _private_directory(base, user)
    raise EmbeddedServerError(
        f"no directory for the embedded Postgres's socket: {cluster} is too long for a Unix "
        "socket's path, and the temporary directory (TMPDIR, /tmp) cannot be used; give a "
        "shorter --data-dir, or a DSN"
    )


def _private_directory(base: Path, user: ServerUser) -> Path:
    directory = Path(tempfile.mkdtemp(prefix=PRIVATE_SOCKET_PREFIX, dir=base))  # mode 0700
    if user.is_other:
        assert user.uid is not None and user.gid is not None
        os.chown(directory, user.uid, user.gid)
    return directory


def remove_private_directory(directory: Path, cluster: Path) -> None:
    """Remove a socket directory made for a server now stopped (never the cluster, nor any
    directory but one of ours, nor one a server still uses: its socket would be in it)."""
    if directory == cluster or not directory.name.startswith(PRIVATE_SOCKET_PREFIX):
        return
    with contextlib.suppress(OSError):  # gone, or not empty: a server still listens there
        os.rmdir(directory)


INSTALL_COPY_PREFIX = "platform-ingest-pginstall-"
"""The name of a copy of the server's installation under the temporary directory, before the
digest of the installation it copies (`reachable_install`)."""
_INSTALL_COPY_DONE = "copied"
"""A file a copy holds once it is whole."""
_own_copies: dict[Path, Path] = {}
"""The copy this process made of an installation when the kept name was not to be trusted: its
later programs (a start after `initdb`, the stop) run from it too."""


def install_copy_path(install: Path) -> Path:
    """Where `reachable_install` keeps its copy of `install`."""
    try:
        version = importlib.metadata.version("pgserver")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(f"{install.resolve()}\0{version}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"{INSTALL_COPY_PREFIX}{digest}"


def reachable_install(install: Path, user: ServerUser) -> Path:
    """`install` (the server's installation: `bin`, `lib`, `share`) when `user` can reach its
    programs; else a copy of it `user` can reach, owned by this (root) command and writable by
    it alone, made once under the temporary directory and reused (see the module). The copy
    keeps the installation's place beside its package's shared libraries (`<package>.libs`,
    which its programs find by a path relative to their own)."""
    if blocking_directory(install / "bin", user) is None:
        return install
    package = install.parent
    inside = Path(package.name) / install.name
    kept = install_copy_path(install)
    if _trusted_copy(kept, inside, user):
        return kept / inside
    own = _own_copies.get(install)
    if own is not None and _trusted_copy(own, inside, user):
        return own / inside
    made = Path(tempfile.mkdtemp(prefix=INSTALL_COPY_PREFIX, dir=kept.parent))
    try:
        shutil.copytree(install, made / inside, symlinks=True)
        libraries = package.parent / f"{package.name}.libs"
        if libraries.is_dir():
            shutil.copytree(libraries, made / libraries.name, symlinks=True)
        for directory, names, files in os.walk(made):
            for name in [*names, *files]:
                path = Path(directory) / name
                info = path.lstat()
                if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                    path.chmod(stat.S_IMODE(info.st_mode) & ~0o022)
        (made / _INSTALL_COPY_DONE).touch()
        made.chmod(0o755)
    except BaseException:
        shutil.rmtree(made, ignore_errors=True)
        raise
    try:
        made.rename(kept)  # refused when a copy is there already (another command's)
        made = kept
    except OSError:
        pass
    if _trusted_copy(kept, inside, user):
        if made != kept:
            shutil.rmtree(made, ignore_errors=True)
        return kept / inside
    blocked = blocking_directory(made / inside / "bin", user)
    if blocked is not None:  # the temporary directory itself lets no other user through
        shutil.rmtree(made, ignore_errors=True)
        raise EmbeddedServerError(
            f"run as root, the embedded Postgres runs as the system user {user.name!r}, which "
            f"cannot reach its programs, nor a copy of them: {blocked} lets no other user "
            "through; set TMPDIR to a directory it can pass, run as another user, or give a DSN"
        )
    _own_copies[install] = made  # the kept name is another user's: this command's own copy
    return made / inside


def _trusted_copy(path: Path, inside: Path, user: ServerUser) -> bool:
    """Whether `path` is a whole copy this command's user owns and alone may change, whose
    programs (`path / inside / "bin"`) `user` can reach."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and not info.st_mode & 0o022
        and (path / _INSTALL_COPY_DONE).is_file()
        and blocking_directory(path / inside / "bin", user) is None
    )
