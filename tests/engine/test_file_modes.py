"""The files the engine creates in a book take the documented mode: `file_mode` (0o640 unless the
host says otherwise) less the process's umask, the database's -wal and -shm the database's; a mode
that would lock the owner out or carry more than read and write bits is refused before the book is
touched; and another local user, in none of the owner's groups, reads none of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events import Emitter, ExitCode, FileModeInvalid, Spend, UnitDone, connect
from engine_events._file_mode import DEFAULT_FILE_MODE
from local_user import LocalUser

BOOK_FILES = (".engine.lock", "events.jsonl", "status.json", "engine.sqlite3")
DATABASE_COMPANIONS = ("engine.sqlite3-wal", "engine.sqlite3-shm")


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _write_a_book(book: Path, **options: int) -> dict[str, int]:
    """Write a short stream into `book` as a host does; every file's mode, the database's -wal
    and -shm read while its connection is open (SQLite removes them at the last close)."""
    conn = connect(book / "engine.sqlite3", **options)
    try:
        with (
            Emitter.open(conn, book, chunker_version="c1", **options) as emitter,
            emitter.transaction(),
        ):
            emitter.emit(UnitDone(unit="u-1", index=0))
            emitter.emit(Spend(committed_micro_usd=10))
        return {name: _mode(book / name) for name in (*BOOK_FILES, *DATABASE_COMPANIONS)}
    finally:
        conn.close()


# Every mode a host may choose: the owner's read and write, any read and write bits of the others.
valid_modes = st.sets(st.sampled_from([0o040, 0o020, 0o004, 0o002])).map(
    lambda bits: 0o600 | sum(bits)
)


# Any umask that leaves the owner's own bits (one that did not could not write a book at all).
@given(umask=st.integers(0, 0o077), file_mode=st.none() | valid_modes)
def test_every_file_takes_the_mode_less_the_umask(umask: int, file_mode: int | None) -> None:
    options = {} if file_mode is None else {"file_mode": file_mode}
    chosen = DEFAULT_FILE_MODE if file_mode is None else file_mode
    with tempfile.TemporaryDirectory() as directory, _umask(umask):
        modes = _write_a_book(Path(directory), **options)
    expected = chosen & ~umask
    assert modes == dict.fromkeys((*BOOK_FILES, *DATABASE_COMPANIONS), expected)


def test_the_default_is_owner_read_write_and_group_read() -> None:
    assert DEFAULT_FILE_MODE == 0o640
    with tempfile.TemporaryDirectory() as directory, _umask(0o022):
        modes = _write_a_book(Path(directory))
    assert set(modes.values()) == {0o640}


@given(
    file_mode=st.integers(-1, 0o7777).filter(lambda mode: mode & ~0o666 or mode & 0o600 != 0o600)
    | st.sampled_from([True, "0o640", 0o640 * 1.0, None])
)
def test_a_mode_locking_the_owner_out_or_beyond_read_write_is_refused_untouched(
    file_mode: object,
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        book = Path(directory)
        with pytest.raises(FileModeInvalid) as refused:
            connect(book / "engine.sqlite3", file_mode=file_mode)  # type: ignore[arg-type]
        assert refused.value.exit_code == ExitCode.CONFIG_INVALID
        assert list(book.iterdir()) == []
        conn = connect(book / "engine.sqlite3")
        try:
            with pytest.raises(FileModeInvalid):
                Emitter.open(conn, book, file_mode=file_mode)  # type: ignore[arg-type]
        finally:
            conn.close()
        assert sorted(path.name for path in book.iterdir()) == ["engine.sqlite3"]


@pytest.fixture
def passable_book() -> Iterator[Path]:
    """A book directory anyone may pass through and list (0755): what keeps another user out of
    its files is their own modes."""
    base = Path(tempfile.mkdtemp(prefix="engine-modes-", dir="/tmp"))
    try:
        base.chmod(0o755)
        book = base / "book-1"
        book.mkdir()
        book.chmod(0o755)
        yield book
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_another_user_reads_none_of_the_books_files(
    other_user: LocalUser, passable_book: Path
) -> None:
    with _umask(0o022):  # the usual umask: the mode alone keeps the other user out
        _write_a_book(passable_book)
    listed = other_user.run("ls", "-a", str(passable_book))
    assert listed.returncode == 0, listed.stderr  # the directory lets it by: the probe works
    for name in BOOK_FILES:
        read = other_user.run("cat", str(passable_book / name))
        assert read.returncode != 0, f"{other_user.name} read {name}: {read.stdout[:200]}"


def test_a_host_may_open_the_journal_to_every_user(
    other_user: LocalUser, passable_book: Path
) -> None:
    """The mode is the host's choice: with 0o644, the other user reads the journal."""
    with _umask(0o022):
        _write_a_book(passable_book, file_mode=0o644)
    read = other_user.run("cat", str(passable_book / "events.jsonl"))
    assert read.returncode == 0, read.stderr
    assert '"type":"hello"' in read.stdout
