"""Books: a directory registered on first sight, its path checked against the allowed roots.

A book's id is its directory's name; its registered path is the directory's real path, so two
symlinks to one directory are one book. A book directory (or its journal) that resolves outside the
allowed roots — a symlink escaping them — is refused before anything is read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from . import _sql
from ._cursor import BookView
from ._db import Database
from ._journal import JOURNAL_NAME
from .errors import BookPathConflict, ConfigError, NotFound, PathOutsideRoots


def book_ref(book_id: str) -> str:
    """An opaque short reference for logs: a book id is never logged at INFO or above."""
    return "b-" + hashlib.sha256(book_id.encode()).hexdigest()[:10]


def book_lock_key(book_id: str) -> int:
    """The advisory-lock key one worker holds while it passes over the book."""
    digest = hashlib.sha256(b"platform_ingest/book/" + book_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_book_dir(book_dir: str | os.PathLike[str], roots: Sequence[Path] = ()) -> Path:
    """The real path of a book directory, refused when it or its journal escapes the roots.

    With no roots given, the book directory itself is the root its journal must stay inside.
    """
    given = Path(book_dir)
    real = given.resolve()
    if not real.is_dir():
        raise ConfigError(f"{given} is not a directory")
    real_roots = [root.resolve() for root in roots]
    if real_roots and not any(_inside(real, root) for root in real_roots):
        raise PathOutsideRoots(str(given), [str(root) for root in roots])
    journal = given / JOURNAL_NAME
    if journal.is_symlink() or journal.exists():
        real_journal = journal.resolve()
        allowed = real_roots or [real]
        if not _inside(real_journal, real) and not any(
            _inside(real_journal, root) for root in allowed
        ):
            raise PathOutsideRoots(str(journal), [str(root) for root in allowed])
    return real


def journal_path(book: BookView) -> Path:
    """The journal's real path (a symlink inside the roots was checked at registration)."""
    return (Path(book.path) / JOURNAL_NAME).resolve()


def register_book(
    db: Database, book_dir: str | os.PathLike[str], roots: Sequence[Path] = ()
) -> BookView:
    """Register the book on first sight (id = the directory's name) and return it."""
    real = resolve_book_dir(book_dir, roots)
    book_id = real.name
    db.execute(_sql.BOOK_INSERT, (book_id, str(real)))
    row = db.fetch_one(_sql.BOOK_SELECT, (book_id,))
    if row is None:
        raise NotFound(f"book {book_id!r} vanished while it was registered")
    book = BookView.from_row(row)
    if book.path != str(real):
        raise BookPathConflict(str(book_dir), book.path)
    return book


def find_book(db: Database, book_dir: str | os.PathLike[str]) -> BookView:
    """The registered book of a directory, or `NotFound`."""
    real = Path(book_dir).resolve()
    row = db.fetch_one(_sql.BOOK_SELECT_BY_PATH, (str(real),))
    if row is None:
        raise NotFound(f"{book_dir} is not a registered book (sweep or name it first)")
    return BookView.from_row(row)


def load_book(db: Database, book_id: str) -> BookView:
    row = db.fetch_one(_sql.BOOK_SELECT, (book_id,))
    if row is None:
        raise NotFound(f"book {book_id!r} is not registered")
    return BookView.from_row(row)
