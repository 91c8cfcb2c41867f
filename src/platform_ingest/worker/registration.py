"""The book directories under the worker's roots, as the worker knows them, and their registration.

Each directory directly under a root is registered in Postgres on first sight (`register_books`,
in pages); a directory refused (a name that is not UTF-8, a second directory of a book's name, one
outside the roots) is skipped with one WARNING naming it by an opaque reference, and the survey
tries it again. A book whose row is gone from Postgres (a restore from an older backup) is
registered again; one whose directory is gone is forgotten, after one last pass if it was this
worker's.

Which of the books are this worker's is `ownership`'s to say; the survey of them is `survey`'s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._logs import FieldsLogger
from ..ingest.books import book_ref, path_ref, register_books
from ..store import statements
from ..store.db import Database, Row
from .schedule import Schedule

BOOKS_BY_ID_PAGE = 500
"""Books' rows are loaded in pages of this many ids."""


@dataclass(eq=False)
class Book:
    """A book directory under a root, as the worker knows it."""

    path: Path
    book_id: str | None = None
    """None: not registered yet; "": refused (tried again by the survey)."""
    ref: str = ""
    owned: bool = False
    epoch: int | None = None
    behind_since: float | None = None
    trouble: str | None = None
    """Why the last pass over the book (or its registration) failed: logged once per episode."""
    vanished: bool = False
    """Its directory is gone from its root: one last pass records what that leaves (a
    `journal_missing` when an attempt awaits lines), then the worker forgets it."""


Registered = list[tuple[Book, Row]]
"""Books registered just now, each with its row (`register_books`)."""


class BookRegistry:
    """The book directories under the roots, by path and by id once registered."""

    def __init__(
        self,
        db: Database,
        roots: Sequence[Path],
        *,
        schedule: Schedule,
        log: FieldsLogger,
        stopping: Callable[[], bool],
    ) -> None:
        self.db = db
        self.roots = list(roots)
        self.schedule = schedule
        self.log = log
        self._stopping = stopping
        self.books: dict[Path, Book] = {}
        self.rescan_roots: set[Path] = set()
        """The roots to list again at the next `rescan`."""
        self._listed: dict[Path, set[str]] = {}
        """The names of the directories under each root when it was last listed (`rescan`)."""
        self._by_id: dict[str, Book] = {}
        """The registered books by id (a survey's page and an operator's change name books by id)."""

    def rescan(self) -> Registered:
        """Find the book directories directly under the roots to rescan, and register new ones;
        return those registered now.

        Only the names that came or went since a root was last listed are made into paths: a
        root of 40,000 books is listed in about 18 ms, where a path a book took about 200 ms, and
        the worker passes nothing while it lists (every survey lists every root)."""
        roots, self.rescan_roots = self.rescan_roots, set()
        for root in sorted(roots):
            try:
                names = {entry.name for entry in os.scandir(root) if entry.is_dir()}
            except OSError as error:
                self.log.warning("a root could not be listed: %s", type(error).__name__)
                continue
            listed = self._listed.get(root, set())
            for name in names - listed:
                path = root / name
                if path not in self.books:
                    self.books[path] = Book(path)
                self.books[path].vanished = False
            for name in listed - names:
                path = root / name
                gone = self.books.get(path)
                if gone is not None and gone.owned and gone.book_id:
                    gone.vanished = True
                    self.schedule.mark(path, "survey", time.monotonic())
                elif gone is not None:
                    self.forget(gone)
            self._listed[root] = names
        return self.register_new()

    def forget(self, book: Book) -> None:
        """The book's directory is gone (and its last pass, if it was ours, is done)."""
        if self.books.get(book.path) is book:
            del self.books[book.path]
        self.schedule.forget(book.path)
        if book.book_id and self._by_id.get(book.book_id) is book:
            del self._by_id[book.book_id]

    def register_new(self, *, again: bool = False) -> Registered:
        """Register the books not registered yet, in pages (`register_books`); return those
        registered now.

        A directory refused is skipped with one WARNING naming it by an opaque reference;
        `again` (the survey) tries the refused ones once more, in case what refused them is gone.
        """
        pending = [
            book
            for book in self.books.values()
            if book.book_id is None or (again and book.book_id == "")
        ]
        if not pending or self._stopping():
            return []
        results = register_books(self.db, [book.path for book in pending], self.roots)
        registered: Registered = []
        for book, result in zip(pending, results, strict=True):
            if isinstance(result, Exception):
                reason = type(result).__name__
                if book.trouble != reason:
                    self.log.warning(
                        "a book directory (%s) was refused and is skipped: %s",
                        path_ref(book.path),
                        reason,
                        fields={"path_ref": path_ref(book.path)},
                    )
                book.trouble = reason
                book.book_id = ""
                continue
            book.trouble = None
            book.book_id = result["book_id"]
            self._by_id[book.book_id] = book
            book.ref = book_ref(result["book_id"])
            registered.append((book, result))
        return registered

    def registration_lost(self, book: Book) -> None:
        """The book's row is not in Postgres any more (a restore from an older backup, a replica
        promoted that had not seen it): it is registered again at once, as a new directory is,
        with one WARNING. Registered again, it is claimed, and its lag (every line of its journal)
        passes it."""
        if book.book_id and self._by_id.get(book.book_id) is book:
            del self._by_id[book.book_id]
        self.log.warning(
            "%s is not registered in Postgres any more (restored from an older backup?); "
            "registered again, its journal is read from its start",
            book.ref,
        )
        book.book_id = None
        book.owned = False
        book.epoch = None
        self.schedule.drop(book.path)
        self.rescan_roots.add(book.path.parent)

    def rows(self, ids: Sequence[str]) -> list[Row]:
        """The books' rows (`statements.BOOKS_BY_ID`), in pages."""
        rows: list[Row] = []
        for first in range(0, len(ids), BOOKS_BY_ID_PAGE):
            rows.extend(
                self.db.fetch_all(
                    statements.BOOKS_BY_ID, (list(ids[first : first + BOOKS_BY_ID_PAGE]),)
                )
            )
        return rows

    def book_by_id(self, book_id: str) -> Book | None:
        """The book of this id under the roots, if the worker knows it."""
        return self._by_id.get(book_id)

    def owned(self) -> list[Book]:
        """The books this worker works."""
        return [book for book in self.books.values() if book.owned]
