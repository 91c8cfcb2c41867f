"""A Postgres that refuses who we are is said to refuse us, naming the role: never "connection lost
or refused" (nothing was lost, and waiting changes nothing). On a real server with password
authentication (a wrong password: SQLSTATE 28P01) and with a role it does not know (28000)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest.cli.exit_status import Exit
from platform_ingest.cli.main import main
from platform_ingest.errors import DatabaseAuthenticationFailed
from platform_ingest.store.db import Database
from server_fixtures import pg_ctl

pytestmark = pytest.mark.postgres


def _socket_dsn(server: Any, user: str, password: str | None = None) -> str:
    """A DSN of the server's socket as `user` (over the socket: `local` rules of pg_hba.conf)."""
    info = psycopg.conninfo.conninfo_to_dict(server.get_uri())
    parts = {"host": info["host"], "port": info.get("port", "5432"), "dbname": "postgres"}
    parts["user"] = user
    if password is not None:
        parts["password"] = password
    return psycopg.conninfo.make_conninfo(**parts)


@pytest.fixture
def password_server(own_server: Any) -> Any:
    """The test's own server with a role `ingest` (password `right`) and password authentication
    for every local connection."""
    with psycopg.connect(own_server.get_uri(), autocommit=True) as admin:
        admin.execute("SET password_encryption = 'scram-sha-256'")
        admin.execute("CREATE ROLE ingest LOGIN PASSWORD 'right'")
    hba = Path(own_server.pgdata) / "pg_hba.conf"
    hba.write_text(
        "local all postgres trust\n"
        "local all ghost trust\n"
        "local all barred reject\n"
        "local all all scram-sha-256\n"
    )
    pg_ctl(own_server, "reload")
    return own_server


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize(
    ("user", "password", "sqlstate"),
    [
        ("ingest", "wrong", "28P01"),  # a wrong password
        ("ghost", "any", "28000"),  # a role the server does not know
        ("barred", "any", "28000"),  # pg_hba.conf refuses the login
    ],
)
def test_a_refused_login_is_an_authentication_error_naming_the_role_exit_2(
    password_server: Any, user: str, password: str, sqlstate: str
) -> None:
    dsn = _socket_dsn(password_server, user, password)
    db = Database(dsn)
    with pytest.raises(DatabaseAuthenticationFailed) as refused:
        db.connect_once()
    assert refused.value.sqlstate == sqlstate
    assert f'role "{user}"' in str(refused.value)
    assert "lost or refused" not in str(refused.value)
    code, err = _cli(["--dsn", dsn, "show"])
    assert code == Exit.USAGE
    assert f'Postgres refused to authenticate role "{user}"' in err, err
    assert f"SQLSTATE {sqlstate}" in err
    assert "lost or refused" not in err


def test_the_right_password_is_let_in(password_server: Any) -> None:
    """The same server and role with the right password: the refusal above is the password's."""
    db = Database(_socket_dsn(password_server, "ingest", "right"))
    db.connect_once()
    db.close()
