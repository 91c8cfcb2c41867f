"""Several workers share books through Postgres, with no coordinator of their own.

A worker announces itself by the application name of its Postgres session, once it has
registered every book under its roots (until then its session is `platform-ingest joining <member
id>`, and it works no book): `platform-ingest worker <member id> <roots digest>` (the digest names the set of roots it was
started with). Postgres keeps 63 bytes of an application name, room for a worker id of up to 29
characters; a longer id (up to 63, a cloud hostname and `-1`) is announced as its member id, `#`
and 16 hex digits of its sha256, and every worker hashes books by the member ids it sees. It is live exactly as long as that session: a worker that exits, is killed or loses
its host leaves `pg_stat_activity` when Postgres ends its session (at once for a process that died
on the server's host or closed its socket; for a host that vanished or was cut off, 25 s by
default after Postgres last heard from it or sent it something: the TCP keepalive probes a
connection with nothing in flight, `tcp_user_timeout` drops one whose data stays unacknowledged,
`store.db.DatabaseSettings`). Nothing per book is held in Postgres, so 10,000 books cost no
lock-table entries, and no lease is needed: a worker cut off that still thinks a book its own can
commit nothing twice (the cursor's compare-and-set, below), and the book's advisory lock its
session may hold is freed only when that session ends (docs/platform/workers.md, "A host cut off
from Postgres").

Who works a book: among the live workers with the same roots digest, the one with the highest
rendezvous score `sha256(worker id, book id)` (highest random weight hashing). Every worker
computes the same answer from the same list, so the books split evenly, and when a worker comes or
goes only the books it gains or loses move. Each worker looks at the list every
`membership_interval_s`; a dead worker's books are therefore worked again within that interval
after its session ends.

During a change two workers may briefly both think a book is theirs (one saw the new list, the
other not yet). That is harmless: each pass holds the book's advisory lock (the other skips it and
tries again shortly), and even two passes that met would apply each line once (the cursor's
compare-and-set). Workers started with different roots form separate groups; a book seen by two
groups is worked by one worker of each, again only wasted effort, never a lost or doubled effect.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..store import statements
from ..store.db import Database

APPLICATION_PREFIX = "platform-ingest worker "
APPLICATION_NAME_BYTES_MAX = 63
"""What Postgres keeps of an application name (NAMEDATALEN - 1); the rest is cut off silently."""
DIGEST_LENGTH = 10
WORKER_ID_LENGTH_MAX = 63
WORKER_ID = re.compile(rf"[A-Za-z0-9._:-]{{1,{WORKER_ID_LENGTH_MAX}}}")
MEMBER_ID_LENGTH_MAX = APPLICATION_NAME_BYTES_MAX - len(APPLICATION_PREFIX) - 1 - DIGEST_LENGTH
"""The longest worker id announced as itself (29); a longer one is announced hashed."""


def new_worker_id() -> str:
    """A fresh worker id: short, random, safe to log."""
    return "w-" + secrets.token_hex(4)


def check_worker_id(worker_id: str) -> str:
    """`worker_id` when it is a valid worker id; `ConfigError` saying why not. Touches nothing, so
    the command can check `--worker-id` before it starts or connects to Postgres."""
    if not WORKER_ID.fullmatch(worker_id):
        raise ConfigError(
            f"worker id {worker_id!r}: 1 to {WORKER_ID_LENGTH_MAX} letters, digits, "
            "'.', '_', ':' or '-'"
        )
    return worker_id


def member_id(worker_id: str) -> str:
    """The id a worker is announced and hashed by: the worker id itself when the application name
    has room for it, else `#` and 16 hex digits of its sha256 (`#` is never in a worker id, so
    the two forms never meet). Idempotent."""
    if len(worker_id) <= MEMBER_ID_LENGTH_MAX:
        return worker_id
    return "#" + hashlib.sha256(worker_id.encode()).hexdigest()[:16]


def roots_digest(roots: Sequence[Path]) -> str:
    """The digest of a set of roots (their real paths, order and repeats ignored)."""
    texts = sorted({os.fspath(root.resolve()) for root in roots})
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:DIGEST_LENGTH]


def application_name(worker_id: str, digest: str) -> str:
    """The session's application name, at most the 63 bytes Postgres keeps (a long worker id is
    announced by its `member_id`)."""
    return f"{APPLICATION_PREFIX}{member_id(worker_id)} {digest}"


def joining_name(worker_id: str) -> str:
    """The session's application name while the worker registers its books, before it counts as
    a member (`survey.Survey.announce`): shown in `pg_stat_activity`, never taken for a worker."""
    return f"platform-ingest joining {member_id(worker_id)}"


@dataclass(frozen=True)
class Peer:
    worker_id: str
    """The worker's member id (its worker id, or the hash of a long one)."""
    digest: str
    pid: int


def live_workers(db: Database) -> list[Peer]:
    """Every worker with a session on this database, in backend pid order."""
    peers: list[Peer] = []
    for row in db.fetch_all(statements.WORKERS_LIVE):
        parts = str(row["application_name"])[len(APPLICATION_PREFIX) :].split()
        if len(parts) == 2:
            peers.append(Peer(parts[0], parts[1], int(row["pid"])))
    return peers


def _score(worker_id: str, book_id: str) -> bytes:
    return hashlib.sha256(f"{worker_id}\0{book_id}".encode()).digest()[:8]


def owner_of(book_id: str, worker_ids: Iterable[str]) -> str:
    """The worker (among the member ids `worker_ids`, not empty) that works `book_id`."""
    return max(worker_ids, key=lambda worker_id: (_score(worker_id, book_id), worker_id))


def group(peers: Iterable[Peer], worker_id: str, digest: str) -> tuple[str, ...]:
    """The member ids of the workers sharing books with this worker (itself, by its member id,
    always included), sorted."""
    ids = {peer.worker_id for peer in peers if peer.digest == digest}
    ids.add(member_id(worker_id))
    return tuple(sorted(ids))
