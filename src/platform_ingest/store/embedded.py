"""The embedded Postgres: started by the command when no DSN is given, stopped when it exits.

The server's data lives under the data directory (`.platform-ingest/` by default) in `postgres/`;
it listens only on a Unix socket. The binaries come with the `pgserver` wheel, which the
`platform-ingest` distribution installs only with its `embedded` extra
(`pip install 'platform-ingest[embedded]'`): a host with a Postgres of its own gives a DSN and
needs no server binaries. Without the extra, a command given no database is refused with a typed
error that says both ways out.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import EmbeddedServerError

logger = logging.getLogger("platform_ingest")

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


@contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[str]:
    """Start (or join) the embedded server under `data_dir`; yield its DSN; stop it after."""
    pgserver = _pgserver()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(cluster_dir(data_dir), cleanup_mode="stop")
        dsn: str = server.get_uri()
    except (OSError, subprocess.SubprocessError) as error:
        raise EmbeddedServerError(
            f"the embedded Postgres under {data_dir} did not start: {error}"
        ) from error
    logger.debug("embedded Postgres under %s is up", data_dir)
    try:
        yield dsn
    finally:
        try:
            server.cleanup()
        except (OSError, subprocess.SubprocessError) as error:
            logger.error("the embedded Postgres under %s did not stop cleanly: %s", data_dir, error)


def postgres_binaries() -> Path:
    """The directory of the embedded server's binaries (pg_ctl, postgres, initdb)."""
    return Path(_pgserver().__file__).parent / "pginstall" / "bin"
