"""Write one release's files: a book its engine wrote and a dump of the database its platform wrote.

Run it with the RELEASED code on the import path, never the checkout's own (the files stand for what
that release left on a machine), into the directory named after that release's version:

    git worktree add ../release-X.Y.Z COMMIT
    PYTHONPATH=../release-X.Y.Z/src python tests/vectors/releases/make_release_vectors.py \\
        tests/vectors/releases/X.Y.Z

The version is read from the pyproject.toml beside the imported source (the installed
distribution's metadata names the checkout's version, not the release's); a directory named
otherwise is refused. What it writes (tests/test_previous_release.py reads it):

- `book-1/`: the released reference engine's book. A first `demo` of 3 units stops at its money
  ceiling, a second one resumes and finishes: two streams, the SQLite outbox checkpointed into
  one file.
- `book-2/`: a hand-made journal (the engine never writes a malformed line): a stream whose fourth
  line is malformed, so the platform quarantines it.
- `platform.sql`: a plain SQL dump (`pg_dump --column-inserts`) of the released platform's
  database after `migrate`, a `sweep --auto` after each engine run, a `release` of the quarantined
  stream and the sweep that quarantines it again. The books' directory is written `@BOOKS@`.
- `README.md`: what these files are, and this command.

The files are not byte-reproducible (times, the journal's `time` fields): a regenerated directory
is a new set of vectors, with the same shape and the same figures.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import orjson

import engine_events
from engine_events import _cli as engine_cli
from platform_ingest.cli import main as platform_cli
from platform_ingest.store.embedded import embedded_postgres, postgres_binaries

BOOKS_PLACEHOLDER = "@BOOKS@"
"""What the dump says in place of the directory the books were in when the platform read them."""

UNITS = 3
STAGES = ("draft", "edit")
UNIT_COST_MICRO_USD = 250_000
CEILING_MICRO_USD = 1_000_000
"""The first run stops before its fifth step (4 steps of 250,000 reach the ceiling)."""
ENGINE_RUN_IDS = (
    "0b6c1f3e-0001-4000-8000-000000000001",
    "0b6c1f3e-0001-4000-8000-000000000002",
)
"""The engine book's two streams (fixed, so a regenerated directory names the same ones)."""
QUARANTINED_RUN_ID = "0b6c1f3e-0002-4000-8000-000000000001"
LINE_TIME = "2026-01-15T09:30:00.000Z"
OPERATOR = "release-vectors"


def release_root() -> Path:
    """The source tree the imported packages come from (its `src/`'s parent)."""
    return Path(engine_events.__file__).resolve().parents[2]


def release_version(root: Path) -> str:
    with (root / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def release_commit(root: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def engine(*argv: str) -> int:
    return engine_cli.main(["-q", *argv])


def platform(dsn: str, *argv: str) -> int:
    return platform_cli.main(["-q", "--dsn", dsn, *argv])


def demo(book: Path, run_id: str, *, ceiling: int | None) -> int:
    argv = [
        "demo",
        str(book),
        "--pace-ms",
        "0",
        "--units",
        str(UNITS),
        "--stages",
        ",".join(STAGES),
        "--unit-cost-micro-usd",
        str(UNIT_COST_MICRO_USD),
        "--engine-run-id",
        run_id,
    ]
    if ceiling is not None:
        argv += ["--ceiling-micro-usd", str(ceiling)]
    return engine(*argv)


def one_database_file(book: Path) -> None:
    """Fold the WAL into the database file, so the book's database is one file."""
    database = book / "engine.sqlite3"
    conn = sqlite3.connect(database)
    try:
        (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise SystemExit(f"the WAL of {database.name} could not be checkpointed")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)


def journal_line(seq: int, kind: str, data: object) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": LINE_TIME, "data": data}) + b"\n"


def quarantined_journal() -> bytes:
    """A stream whose fourth line is malformed (an amount as a string): seqs 1 to 3 apply, and the
    stream is quarantined at seq 4; seq 5 stays unread."""
    hello = {
        "stream_version": "1.3",
        "engine_run_id": QUARANTINED_RUN_ID,
        "book_id": "book-2",
        "chunker_version": "hand-1",
    }
    return b"".join(
        (
            journal_line(1, "hello", hello),
            journal_line(2, "unit_done", {"unit": "unit-0001", "index": 0}),
            journal_line(3, "spend", {"committed_micro_usd": 400_000}),
            journal_line(4, "spend", {"committed_micro_usd": "500000"}),
            journal_line(5, "spend", {"committed_micro_usd": 600_000}),
        )
    )


def dump(dsn: str) -> str:
    done = subprocess.run(
        [
            str(postgres_binaries() / "pg_dump"),
            "--dbname",
            dsn,
            "--format",
            "plain",
            "--column-inserts",
            "--no-owner",
            "--no-privileges",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def write_books_and_dump(scratch: Path, out: Path) -> dict[str, int]:
    """Run the released engine and platform in `scratch`; copy what they wrote to `out`."""
    books = (scratch / "books").resolve()
    book_1, book_2 = books / "book-1", books / "book-2"
    book_2.mkdir(parents=True)
    (book_2 / "events.jsonl").write_bytes(quarantined_journal())
    codes: dict[str, int] = {}
    with embedded_postgres(scratch / "platform") as dsn:
        codes["migrate"] = platform(dsn, "migrate")
        codes["demo at the ceiling"] = demo(book_1, ENGINE_RUN_IDS[0], ceiling=CEILING_MICRO_USD)
        codes["sweep after the ceiling"] = platform(dsn, "sweep", "--auto", str(book_1))
        codes["demo resumed"] = demo(book_1, ENGINE_RUN_IDS[1], ceiling=None)
        codes["sweep after the resume"] = platform(dsn, "sweep", "--auto", str(book_1), str(book_2))
        codes["release"] = platform(
            dsn,
            "release",
            str(book_2),
            QUARANTINED_RUN_ID,
            "--by",
            OPERATOR,
            "--reason",
            "looked at the line: still malformed",
        )
        codes["sweep after the release"] = platform(dsn, "sweep", "--auto", str(book_2))
        text = dump(dsn)
    expected = {"demo at the ceiling": 4}
    for step, code in codes.items():
        if code != expected.get(step, 0):
            raise SystemExit(f"{step}: exit {code}")
    one_database_file(book_1)
    for book in (book_1, book_2):
        (out / book.name).mkdir(parents=True)
    for name in ("events.jsonl", "engine.sqlite3"):
        shutil.copyfile(book_1 / name, out / "book-1" / name)
    shutil.copyfile(book_2 / "events.jsonl", out / "book-2" / "events.jsonl")
    text = text.replace(str(books), BOOKS_PLACEHOLDER)
    for leftover in (str(scratch), str(scratch.resolve()), tempfile.gettempdir()):
        if leftover in text:
            raise SystemExit(f"the dump still names a machine path ({leftover})")
    (out / "platform.sql").write_text(text)
    return codes


README = """\
# The files release {version} wrote

Written by run-event-journal {version} (commit {commit}): its own `engine_events` and
`platform_ingest`, not this checkout's. `tests/test_previous_release.py` reads them with the
current code, upgrades them and goes on with each, and checks that nothing is lost.

| file | what it is |
| --- | --- |
| `book-1/events.jsonl` | the journal of the {version} reference engine (`engine-events demo`): a first run of {units} units (stages {stages}, {cost} micro-USD a step) stopped at its ceiling of {ceiling} micro-USD (exit 4), a second run resumed from its checkpoint and finished (exit 0): two streams, `{run_1}` and `{run_2}` |
| `book-1/engine.sqlite3` | that book's SQLite database (the outbox and the demo's checkpoint and ledger), its WAL checkpointed into the file |
| `book-2/events.jsonl` | a hand-made journal (the engine writes no malformed line): stream `{quarantined}`, whose seq 4 is malformed (an amount as a string), so the platform applies seqs 1 to 3 and quarantines the stream |
| `platform.sql` | a plain SQL dump (`pg_dump --column-inserts --no-owner --no-privileges`) of the {version} platform's database after `migrate`, `sweep --auto` of book-1 after each engine run (book-2 with the second), `release` of book-2's quarantined stream by `{operator}` and a `sweep --auto` of book-2 that quarantined it again |

## Paths in the dump

The platform stores each book's real path (`books.path`). The books were in a scratch directory
when the platform read them; the dump says `@BOOKS@` in its place, so it names no machine's
directory. The test restores it with `@BOOKS@` replaced by the directory it copies the books to:
the platform then finds each book where it registered it, as after an upgrade in place. The
journal's file identity (`books.scan_file`, `attempts.hint_file`: device and inode) is that of the
scratch file, so the platform takes the copy for a new file and reads it from byte 0 again: the
lines it applied before are duplicates, checked against their stored hashes.

Restored with a registered path that no longer exists, every book, run, attempt and action is still
shown (`show`, its lag's `journal` is `missing`), and a `sweep` of the copied directory is refused
(exit 2) as a second directory of the book's name (`book_path_conflict`): no command moves a
registered book. The test checks that too.

## Regenerate

With the release's code in a worktree outside the checkout (never the checkout's own code):

    git worktree add ../release-{version} {short}
    PYTHONPATH=../release-{version}/src python tests/vectors/releases/make_release_vectors.py \\
        tests/vectors/releases/{version}
    git worktree remove --force ../release-{version}

The directory must not exist yet, and its name must be the release's version. The files are not
byte-reproducible (the times in them change); the figures are the same. Every later release adds
its own directory the same way, from its own released commit.
"""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: {Path(__file__).name} OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    root = release_root()
    version = release_version(root)
    if out.name != version:
        print(f"the code imported is {version} ({root}): write it to a directory {version}/")
        return 2
    if out.exists():
        print(f"{out} exists: remove it first (a release's files are written once)")
        return 2
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="release-vectors-") as scratch:
        write_books_and_dump(Path(scratch), out)
    commit = release_commit(root)
    (out / "README.md").write_text(
        README.format(
            version=version,
            commit=commit,
            short=commit[:7],
            units=UNITS,
            stages=" and ".join(STAGES),
            cost=f"{UNIT_COST_MICRO_USD:,}",
            ceiling=f"{CEILING_MICRO_USD:,}",
            run_1=ENGINE_RUN_IDS[0],
            run_2=ENGINE_RUN_IDS[1],
            quarantined=QUARANTINED_RUN_ID,
            operator=OPERATOR,
        )
    )
    for path in sorted(out.rglob("*")):
        if path.is_file():
            print(f"{path.relative_to(out)}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
