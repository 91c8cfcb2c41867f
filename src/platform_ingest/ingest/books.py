"""Books: a directory registered on first sight, its path checked against the allowed roots.

A book's id is its directory's name; its registered path is the directory's real path, so two
symlinks to one directory are one book. A book directory (or its journal) that resolves outside the
allowed roots — a symlink escaping them — is refused before anything is read. Every pass checks
again that the directory is still the one registered, and that its journal is a regular file in
it, not a symbolic link (`reader.open_journal`).

A path that is not UTF-8 (a directory name of other bytes) cannot be a book id nor a path Postgres
stores: it is refused with `NotUtf8Path`, and logs name it by `path_ref` only. A second directory
with a registered book's name (under another root) is refused with `BookPathConflict`, and the
registered book shows the conflict (`book_path_conflict`) until that directory is gone.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from engine_events.grammar import IDENTIFIER_BYTES_MAX

from ..decisions.views import BOOK_PATH_CONFLICT, BookView
from ..errors import (
    BookPathConflict,
    BookPathNotStorable,
    ConfigError,
    DataRefused,
    NotFound,
    NotUtf8Path,
    PathOutsideRoots,
)
from ..journal.reader import JOURNAL_NAME
from ..store import statements
from ..store.db import Database, Row


def book_ref(book_id: str) -> str:
    """An opaque short reference for logs: a book id is never logged at INFO or above."""
    return "b-" + hashlib.sha256(book_id.encode()).hexdigest()[:10]


def path_ref(path: str | os.PathLike[str]) -> str:
    """An opaque short reference to a path (its bytes), for logs: safe for any path, UTF-8 or not."""
    return "d-" + hashlib.sha256(os.fsencode(path)).hexdigest()[:10]


def require_utf8(path: str | os.PathLike[str]) -> str:
    """The path as text Postgres can store, or `NotUtf8Path` (names are bytes on Linux)."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise NotUtf8Path(path_ref(path)) from error
    return text


def require_stream_id(engine_run_id: str) -> str:
    """An `engine_run_id` an operator typed, held to the stream's own rule for it: 1 to 255 bytes
    of UTF-8, no U+0000 (what no hello could carry is refused here, not by Postgres)."""
    try:
        size = len(engine_run_id.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise ConfigError("an engine_run_id must be UTF-8 text") from error
    if not 0 < size <= IDENTIFIER_BYTES_MAX or "\x00" in engine_run_id:
        raise ConfigError(
            f"an engine_run_id is 1 to {IDENTIFIER_BYTES_MAX} bytes of UTF-8 without U+0000"
        )
    return engine_run_id


def book_lock_key(book_id: str) -> int:
    """The advisory-lock key one worker holds while it passes over the book."""
    digest = hashlib.sha256(b"platform_ingest/book/" + book_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def require_no_nul(path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """`path` if it holds no U+0000; else a `ConfigError` (no path or book id can)."""
    if "\x00" in os.fspath(path):
        raise ConfigError(f"{os.fspath(path)!r} holds U+0000: no directory or book id can")
    return path


def is_directory(path: Path) -> bool:
    """Whether `path` is a directory; a name the system refuses (too long) is none."""
    try:
        return path.is_dir()
    except OSError:
        return False


def resolve_book_dir(book_dir: str | os.PathLike[str], roots: Sequence[Path] = ()) -> Path:
    """The real path of a book directory, refused when it escapes the roots or is not UTF-8.

    Its journal is checked by every pass (`reader.open_journal`): a regular file in that very
    directory, never a symbolic link, wherever it would point.
    """
    given = Path(require_no_nul(book_dir))
    real = given.resolve()
    require_utf8(real)
    if not is_directory(real):
        raise ConfigError(f"{given} is not a directory")
    real_roots = [root.resolve() for root in roots]
    if real_roots and not any(_inside(real, root) for root in real_roots):
        raise PathOutsideRoots(str(given), [str(root) for root in roots])
    held = _book_held(real)
    if held is not None:
        raise ConfigError(
            f"{given} holds book directories ({held.name}, ...) and no journal of its own: it is "
            "a root, not a book. Give its book directories, or run a worker on it "
            "(`platform-ingest run ROOT`)"
        )
    return real


def _book_held(directory: Path) -> Path | None:
    """A book directory directly inside `directory` (one holding a journal) when `directory`
    holds no journal of its own, else None: such a directory is a root given as a book."""
    if os.path.lexists(directory / JOURNAL_NAME):
        return None
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and os.path.lexists(
                    os.path.join(entry.path, JOURNAL_NAME)
                ):
                    return Path(entry.path)
    except OSError:
        return None  # unreadable: the pass says what is wrong with it
    return None


REGISTER_PAGE_BOOKS = 500
"""Books are registered in pages of this many: one insert and one read-back per page."""

Refused = ConfigError | NotFound
"""Why a directory is not a book: its typed error (`register_books` keeps one per directory)."""


def register_books(
    db: Database, book_dirs: Sequence[str | os.PathLike[str]], roots: Sequence[Path] = ()
) -> list[Row | Refused]:
    """Register every book not yet registered, in pages, and return each one's row
    (`statements.BOOKS_BY_ID`), in the order given, or why that directory was refused.

    Each directory is checked as `resolve_book_dir` does, then the new ones are inserted with one
    statement per page and every page is read back with one query. A directory refused (not
    UTF-8, outside the roots, not a directory, a second directory of a registered book's name)
    gets its own typed error; the others are registered all the same.
    """
    results: list[Row | Refused | None] = []
    resolved: dict[int, Path] = {}
    for index, book_dir in enumerate(book_dirs):
        try:
            resolved[index] = resolve_book_dir(book_dir, roots)
        except (ConfigError, NotFound) as error:
            results.append(error)
        else:
            results.append(None)
    # One path per book id is inserted (the first given): a second directory of the same name
    # meets the first one's row below, as it would meet a book registered earlier.
    paths: dict[str, str] = {}
    for real in resolved.values():
        paths.setdefault(real.name, str(real))
    ids = sorted(paths)
    rows: dict[str, Row] = {}
    refused: dict[str, BookPathNotStorable] = {}
    for first in range(0, len(ids), REGISTER_PAGE_BOOKS):
        page = ids[first : first + REGISTER_PAGE_BOOKS]
        try:
            db.execute(statements.BOOKS_INSERT, (page, [paths[book_id] for book_id in page]))
        except DataRefused:
            # One path of the page Postgres cannot store: find it, one book at a time; only
            # that directory is refused.
            for book_id in page:
                try:
                    db.execute(statements.BOOKS_INSERT, ([book_id], [paths[book_id]]))
                except DataRefused as error:
                    refused[book_id] = BookPathNotStorable(paths[book_id], str(error))
        for row in db.fetch_all(statements.BOOKS_BY_ID, (page,)):
            rows[row["book_id"]] = row
    for index, real in resolved.items():
        if real.name in refused and real.name not in rows:
            results[index] = refused[real.name]
            continue
        try:
            results[index] = _registered(db, book_dirs[index], real, rows.get(real.name))
        except (ConfigError, NotFound) as error:
            results[index] = error
    return [result for result in results if result is not None]


def _registered(db: Database, book_dir: str | os.PathLike[str], real: Path, row: Row | None) -> Row:
    """The book's row, once its directory is known to be the one registered: a second directory
    of the book's name is recorded on the book (`book_path_conflict`) and refused."""
    book_id = real.name
    if row is None:
        raise NotFound(f"book {book_id!r} vanished while it was registered")
    if row["path"] != str(real):
        db.execute(
            statements.BOOK_PROBLEM_SET,
            (
                book_id,
                BOOK_PATH_CONFLICT,
                f"a second directory has this book's name: {real}; the book stays registered at "
                f"{row['path']}, and the second directory is not read",
                str(real),
            ),
        )
        raise BookPathConflict(str(book_dir), row["path"])
    return row


def register_book(
    db: Database, book_dir: str | os.PathLike[str], roots: Sequence[Path] = ()
) -> BookView:
    """Register the book on first sight (id = the directory's name) and return it."""
    (result,) = register_books(db, [book_dir], roots)
    if isinstance(result, Exception):
        raise result
    return BookView.from_row(result)


def recheck_path_conflicts(db: Database, book: BookView) -> None:
    """Clear the book's `book_path_conflict` once the second directory is gone (or renamed)."""
    for row in db.fetch_all(statements.BOOK_PROBLEMS_OF_BOOKS, ([book.book_id],)):
        if row["kind"] != BOOK_PATH_CONFLICT or row["path"] is None:
            continue
        other = Path(row["path"])
        if not other.is_dir() or other.resolve().name != book.book_id:
            db.execute(statements.BOOK_PROBLEMS_CLEAR, (book.book_id, [BOOK_PATH_CONFLICT]))


def find_book(db: Database, book_dir: str | os.PathLike[str]) -> BookView:
    """The registered book of a directory, or `NotFound`."""
    real = Path(book_dir).resolve()
    row = db.fetch_one(statements.BOOK_SELECT_BY_PATH, (require_utf8(real),))
    if row is None:
        raise NotFound(f"{book_dir} is not a registered book (sweep or name it first)")
    return BookView.from_row(row)


def remedied_book(db: Database, book_dir: str | os.PathLike[str]) -> BookView:
    """The book a remedy names: its directory (registered on first sight), or, once that
    directory is gone, its registered path or its book id. A remedy that ends what a gone
    journal left waiting (`exited`, `abandon`) must still find the book."""
    if is_directory(Path(require_no_nul(book_dir))):
        return register_book(db, book_dir)
    try:
        return find_book(db, book_dir)
    except NotFound:
        row = db.fetch_one(statements.BOOK_SELECT, (str(book_dir),))
        if row is None:
            raise NotFound(
                f"{book_dir} is neither a directory nor the registered path or id of a book"
            ) from None
        return BookView.from_row(row)


def load_book(db: Database, book_id: str) -> BookView:
    row = db.fetch_one(statements.BOOK_SELECT, (book_id,))
    if row is None:
        raise NotFound(f"book {book_id!r} is not registered")
    return BookView.from_row(row)


def scan_back_to_stream(db: Database, book: BookView, engine_run_id: str) -> None:
    """A stream was named for the book (inside the caller's transaction): the next pass must
    read its hello. When the book keeps every foreign stream's start (`starts_from_zero`), the
    scan moves back to that start if it lies behind it, else stays (the hello is ahead); without
    them, the next pass reads from byte 0. The epoch is bumped either way, so a pass that began
    before cannot commit past the hello."""
    if book.scan_mode != "named" or not book.starts_from_zero:
        db.execute(statements.BOOK_SCAN_RESET, (book.book_id,))
        return
    start = db.fetch_one(statements.STREAM_START_OF, (book.book_id, engine_run_id))
    if start is not None:
        moved = db.execute(statements.BOOK_SCAN_BACK, {**start, "book_id": book.book_id})
        if moved:
            return
    db.execute(statements.BOOK_EPOCH_BUMP, (book.book_id,))


def unnamed_streams(db: Database, book_id: str) -> list[tuple[str, int]]:
    """(engine_run_id, byte offset of its hello) of each stream of a named-mode book that a pass
    saw and nobody named, disowned or pruned: nothing of it is applied until it is named."""
    return [
        (row["engine_run_id"], row["hint_offset"])
        for row in db.fetch_all(statements.UNNAMED_STARTS_OF_BOOKS, ([book_id],))
    ]
