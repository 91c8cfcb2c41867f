"""One file-change watcher for every book under the worker's roots (watchdog's inotify core).

Books sit at one depth, `<root>/<book>/events.jsonl`, so the watcher holds one inotify watch on
each root and one on each directory directly under it: a root of N books takes N + 1 watches (see
`/proc/sys/fs/inotify/max_user_watches`). Nothing deeper is watched and no file is polled. A
directory that appears under a root is watched at once. An event is mapped to what the worker cares
about:

- `<root>/<book>/events.jsonl` created, written, moved in or out, deleted: `on_journal(book)`;
- `<root>/<name>` created, deleted, moved in or out: `on_root(root)`.

The kernel is asked for those kinds of event only, so opening, reading, closing or chmod-ing a file
costs nothing. The engine's own files in a book directory (its SQLite database, `status.json`)
still reach the watcher's thread, since inotify filters by directory and not by name; each is dropped
after one comparison of its name. There is no debounce: the kernel merges identical events not yet
read, and the worker coalesces wake-ups per book.

Names are bytes on Linux. They are decoded with `os.fsdecode`, so a name that is not UTF-8 keeps
its bytes as surrogate escapes: a hostile directory name is one more directory, never a failure of
the watcher. No path is logged here.

Why watchdog's `InotifyFD` (its inotify binding) and not its `Observer`: the Observer pairs each IN_MOVED_FROM with its IN_MOVED_TO by holding the former for 0.5 s, and the
later events of the same root can wait behind it. Engines rename `status.json` into place every second:
in a simulation of 200 engines on one root (1,000 appends a second in all), 3 to 8 % of journal
writes were reported 0.4 to 0.5 s late; this watcher's p99 on the same load was about 1 ms. The
Observer also skips, without a word, a subdirectory it cannot watch (the watch limit), which the
worker must hear of.

The watcher's own thread reads the events and calls their callbacks, not the two threads of
`InotifyFD` (a reader handing what it read to a dispatcher): under appends to thousands of books
each wake-up of those threads cost more than the event it carried, and they held the interpreter
the worker's passes need (docs/performance.md, "Many books, a line each"). After a read that found
events the thread pauses `READ_PAUSE_S`, so that a steady stream of appends is read many events at
a time; the first event after a quiet spell is read at once.

If inotify cannot start, a watch cannot be added for lack of resources (ENOSPC: the watch limit),
a root is deleted, moved or unmounted, or reading fails, the worker is told
(`on_state(False)`), one ERROR is logged for the episode, the worker keeps working from its
periodic survey, and the watcher starts again after `RESTART_WAIT_S`. If the kernel's event queue
overflows (events were lost), every directory under the roots is watched again (its creation may
be among the losses) and the worker rescans the roots; lines whose notification was lost wait for
the survey.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from watchdog.utils import UnsupportedLibcError

from .._plain import counted
from ..journal.reader import JOURNAL_NAME

if TYPE_CHECKING:
    from watchdog.observers.inotify_c import (
        CallbackId,
        InotifyEvent,
        InotifyFD,
        Mask,
        WatchDescriptor,
    )

logger = logging.getLogger("platform_ingest")

RESTART_WAIT_S = 10.0
"""After a failure, the wait before the watcher starts again."""
READ_PAUSE_S = 0.002
"""After a read that found events, the pause before the next: under a steady stream of appends
over many books, the next read takes the events of the pause together (one wake-up for many,
where a read each event cost four times the CPU); an event after a quiet spell is read at once."""

_JOURNAL = os.fsencode(JOURNAL_NAME)
_RESOURCE_ERRORS = frozenset({errno.ENOSPC, errno.ENOMEM, errno.EMFILE})
"""A watch refused for one of these is a failure (the watch limit); any other refusal means the
directory is gone or is no directory, and it is skipped."""

# inotify(7) bits (the kernel's ABI), named here so that the module imports where there is no
# inotify: the watcher then reports a failure instead of the worker failing to start.
IN_MODIFY = 0x00000002
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

_NAMES = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_ROOT_MASK = cast("Mask", _NAMES | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
_BOOK_MASK = cast("Mask", _NAMES | IN_MODIFY | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_ROOT_GONE = "a root was deleted, moved or unmounted"


class Watcher:
    """A daemon thread that tells the worker which books changed."""

    def __init__(
        self,
        roots: Sequence[Path],
        *,
        on_journal: Callable[[Path], None],
        on_root: Callable[[Path], None],
        on_state: Callable[[bool], None],
    ) -> None:
        self.roots = [root.resolve() for root in roots]
        self.on_journal = on_journal
        self.on_root = on_root
        self.on_state = on_state
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._down_since: float | None = None
        self._thread = threading.Thread(target=self._run, name="ingest-watcher", daemon=True)
        self.started = threading.Event()
        """Set once every root and book directory is watched (changes after this are seen)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            session = self._session
        if session is not None:
            session.close()  # wakes the thread from its read
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                session = _Session(self)
            except (OSError, ImportError, UnsupportedLibcError) as error:
                self._failed(_describe(error))
                continue
            with self._lock:
                self._session = session
            try:
                session.watch_roots()
                if session.trouble is None and not self._stop.is_set():
                    self._up(session)
                    session.read()
            except OSError as error:
                session.fail(_describe(error))
            except Exception as error:  # noqa: BLE001 - a failure of the watcher, never the worker's
                session.fail(f"the watcher's reading failed: {type(error).__name__}")
            finally:
                with self._lock:
                    self._session = None
                session.close()
            if self._stop.is_set():
                return
            self._failed(session.trouble or "the inotify reader stopped")

    def _up(self, session: _Session) -> None:
        self.on_state(True)
        self.started.set()
        if self._down_since is not None:
            logger.info(
                "file-change notification works again after %.0f s",
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        logger.info(
            "watching %s and %s for changes",
            counted(len(self.roots), "root"),
            counted(session.books_watched(), "book directory", "book directories"),
        )
        # Whatever appeared while nothing was watched (or before the watches were in place).
        for root in self.roots:
            self.on_root(root)

    def _failed(self, reason: str) -> None:
        self.on_state(False)
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.error(
                "file-change notification failed (%s); the periodic survey goes on, and the "
                "watcher tries again every %.0f s",
                reason,
                RESTART_WAIT_S,
            )
        else:
            logger.debug("file-change notification failed again (%s)", reason)
        self._stop.wait(RESTART_WAIT_S)


def _describe(error: BaseException) -> str:
    """The error's kind and errno, never its text: an OSError's text can hold a path."""
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        if error.errno == errno.ENOSPC:
            return f"{type(error).__name__} {name}: the inotify watch limit is reached"
        return f"{type(error).__name__} {name}"
    if isinstance(error, (ImportError, UnsupportedLibcError)):
        return f"{type(error).__name__}: no inotify on this system"
    return type(error).__name__


class _Session:
    """One inotify instance and its watches, from one start of the watcher to its next failure.

    Watches are added and events read by the watcher's thread; `close` (which calls the
    callbacks of the watches it ends) may come from the thread that stops the watcher, so the
    bookkeeping is changed under one lock, never held while an event is delivered or while the
    instance closes.
    """

    def __init__(self, watcher: Watcher) -> None:
        # Imported here: where libc has no inotify the import raises, and that is a failure of
        # the watcher (the survey goes on), not of the worker.
        from watchdog.observers.inotify_c import InotifyFD  # noqa: PLC0415

        self.watcher = watcher
        self.trouble: str | None = None
        self._closing = False
        self._lock = threading.Lock()
        self._books_by_wd: dict[int, _Book] = {}
        # Its reader thread is not started: the watcher's own thread reads (`read`). watchdog
        # marks a new instance as being read, for its own thread; with none, `close` would wait
        # for a read that never comes and leave the descriptors open (tests/platform/
        # test_watchdog_internal.py holds this).
        self.inotify: InotifyFD = InotifyFD()
        self.inotify._is_reading = False

    def watch_roots(self) -> None:
        """Watch every root and every directory directly under it (an OSError: a root failed)."""
        for path in self.watcher.roots:
            root = _Root(self, path)
            wd = self.inotify.add_callback(root.raw, _ROOT_MASK, root, root.id)
            if wd < 0:  # watchdog gives -1 where access is denied: nothing is watched
                raise PermissionError(errno.EACCES, "root not watchable")
            self.list_root(root)
            if self.trouble is not None or self.watcher._stop.is_set():
                return

    def list_root(self, root: _Root) -> None:
        with os.scandir(root.raw) as entries:
            for entry in entries:
                if self.watcher._stop.is_set() or self.trouble is not None:
                    return
                if entry.is_dir(follow_symlinks=False):
                    self.watch_book(root, entry.name)

    def watch_book(self, root: _Root, name: bytes) -> bool:
        book = _Book(self, root, name)
        with self._lock:
            if self._closing:
                return False
            try:
                wd = self.inotify.add_callback(book.raw, _BOOK_MASK, book, book.id)
            except OSError as error:
                if error.errno in _RESOURCE_ERRORS:
                    self._fail(_describe(error))
                return False
            book.wd = wd
            if wd < 0:
                self._remove(book)
                return False
            # The same directory under another name (renamed in place), or seen twice at start.
            earlier = self._books_by_wd.get(wd)
            if earlier is not None:
                self._drop(earlier)
            self._books_by_wd[wd] = book
            root.books[name] = book
        return True

    def unwatch_book(self, root: _Root, name: bytes) -> None:
        with self._lock:
            book = root.books.get(name)
            if book is not None and not self._closing:
                self._drop(book)

    def forget(self, book: _Book) -> None:
        """The kernel removed the book's watch (the directory is gone)."""
        with self._lock:
            book.live = False
            if self._books_by_wd.get(book.wd) is book:
                del self._books_by_wd[book.wd]
            if book.root.books.get(book.name) is book:
                del book.root.books[book.name]

    def _drop(self, book: _Book) -> None:
        if not book.live:
            return
        book.live = False
        if self._books_by_wd.get(book.wd) is book:
            del self._books_by_wd[book.wd]
        if book.root.books.get(book.name) is book:
            del book.root.books[book.name]
        self._remove(book)

    def _remove(self, book: _Book) -> None:
        # An error means the kernel already dropped the watch; its IN_IGNORED settles the rest.
        with contextlib.suppress(OSError):
            self.inotify.remove_callbacks([(book.wd, book.id)])

    def read(self) -> None:
        """Read the events and call their callbacks, on this thread, until the watcher stops or
        this session fails (a callback found trouble, or `close` woke the read)."""
        inotify, stop = self.inotify, self.watcher._stop
        while self.trouble is None and not stop.is_set():
            events = inotify.read_events()  # waits for an event, or for `close`
            if not events:  # closed, or the descriptor failed
                if not self._closing:
                    self.fail("the inotify reader stopped")
                return
            for event in events:
                inotify.handle_event(event)
            stop.wait(READ_PAUSE_S)

    def fail(self, reason: str) -> None:
        with self._lock:
            self._fail(reason)

    def _fail(self, reason: str) -> None:
        if self.trouble is None and not self._closing:
            self.trouble = reason

    def books_watched(self) -> int:
        with self._lock:
            return len(self._books_by_wd)

    def close(self) -> None:
        """Close the inotify instance (from any thread: a read waiting on it returns)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self.inotify.close()


class _Root:
    """The inotify callback of one root: names appearing and vanishing under it."""

    def __init__(self, session: _Session, path: Path) -> None:
        self.session = session
        self.path = path
        self.raw = os.fsencode(path)
        self.id = cast("CallbackId", id(self))
        self.books: dict[bytes, _Book] = {}

    def on_event(self, event: InotifyEvent) -> None:
        mask = event.mask
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT):
            self.session.fail(_ROOT_GONE)
            return
        if not event.name:
            return
        session = self.session
        if mask & IN_ISDIR:
            if mask & (IN_CREATE | IN_MOVED_TO):
                if session.watch_book(self, event.name):
                    # Lines written before the watch was in place are read by this wake-up.
                    session.watcher.on_journal(self.path / os.fsdecode(event.name))
            elif mask & IN_MOVED_FROM:
                session.unwatch_book(self, event.name)
        session.watcher.on_root(self.path)

    def on_watch_deleted(self, wd: WatchDescriptor) -> None:
        self.session.fail(_ROOT_GONE)

    def on_queue_overflow(self) -> None:
        # Directories whose creation was lost are watched now; the worker rescans the root.
        session = self.session
        if session.watcher.roots[0] == self.path:
            logger.warning(
                "the kernel dropped file-change events (inotify queue overflow); lines whose "
                "notification was lost are read at the next periodic survey"
            )
        try:
            session.list_root(self)
        except OSError as error:
            session.fail(_describe(error))
            return
        session.watcher.on_root(self.path)

    def on_events_lost(self) -> None:
        # Called (watchdog 7.1.1 on) once every callback's `on_queue_overflow` has returned: each
        # watch is repaired, so a rescan of the root now sees them all.
        self.session.watcher.on_root(self.path)


class _Book:
    """The inotify callback of one book directory: its journal changed."""

    __slots__ = ("id", "live", "name", "path", "raw", "root", "session", "wd")

    def __init__(self, session: _Session, root: _Root, name: bytes) -> None:
        self.session = session
        self.root = root
        self.name = name
        self.raw = os.path.join(root.raw, name)
        self.path = root.path / os.fsdecode(name)
        self.id = cast("CallbackId", id(self))
        self.wd = cast("WatchDescriptor", -1)
        self.live = True

    def on_event(self, event: InotifyEvent) -> None:
        if event.name == _JOURNAL:
            self.session.watcher.on_journal(self.path)

    def on_watch_deleted(self, wd: WatchDescriptor) -> None:
        self.session.forget(self)

    def on_queue_overflow(self) -> None:
        pass  # the root's callback lists the root again

    def on_events_lost(self) -> None:
        pass  # the root's callback has the worker rescan the root
