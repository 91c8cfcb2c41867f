"""The watchdog internals the watcher relies on are there, as the watcher uses them.

`platform_ingest/worker/watcher.py` does not use watchdog's documented API (its `Observer`: that
one holds every IN_MOVED_FROM back for half a second, delaying the events behind it, and skips a
directory it cannot watch without a word; the watcher's docstring says more). It uses watchdog's
inotify reader, `watchdog.observers.inotify_c.InotifyFD`, directly: an internal module, which a
new version may change without notice. Hence the pin `watchdog>=7.1,<8` in pyproject.toml and in
packaging/platform-ingest/pyproject.toml, and this test, which fails:

- when the installed watchdog is not of the major these checks were written for (`MAJOR`), or the
  two pins no longer stop below the next major;
- when a name the watcher uses is gone, or a method or callback has other parameters: the class,
  its construction, `add_callback`, `remove_callbacks`, `read_events`, `handle_event` and `close`,
  the mark `_is_reading` (the watcher reads on its own thread, not on the reader's: the mark
  watchdog sets for its thread is cleared), the callback protocol (`on_event`, `on_watch_deleted`,
  `on_queue_overflow`), the event's `mask` and `name`, the types it annotates with,
  `UnsupportedLibcError`, and the inotify bits the watcher names itself;
- when a real `InotifyFD`, read as the watcher reads it, no longer behaves as the watcher expects:
  the watch descriptor returned, an event per name with its bytes, `on_watch_deleted` when a
  watched directory goes, a `close` from another thread that ends a read waiting for events, and
  a `close` of an instance never read that closes its descriptors.

mypy (strict, over `src`) checks the watcher's calls against the installed watchdog's own types as
well; tests/platform/test_watcher.py runs the whole watcher on real directories.

On the next major (8): install it in a scratch venv and run this file and test_watcher.py. If they
pass, raise `MAJOR` here and both pins' upper bound together. If they fail, adapt the watcher (and
these checks) to the new internals, or move it to a documented API, if the new major's `Observer`
no longer has the delays and the silent skips above.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import threading
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from platform_ingest.worker import watcher as _watcher

if not sys.platform.startswith("linux"):
    pytest.skip("watchdog's inotify reader exists on Linux only", allow_module_level=True)

# Imported after the skip: elsewhere the inotify module raises at import.
import watchdog.utils
import watchdog.version
from watchdog.observers import inotify_c

MAJOR = 7
"""The watchdog major these checks were written against; the pins stop below `MAJOR + 1`."""
ROOT = Path(__file__).resolve().parents[2]
PYPROJECTS = [ROOT / "pyproject.toml", ROOT / "packaging" / "platform-ingest" / "pyproject.toml"]
WAIT_S = 10.0
"""A bound on every wait for an event (not an expected speed)."""


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_installed_watchdog_is_the_pinned_major(pyproject: Path) -> None:
    """The installed major is the one checked here, and each pin stops below the next one."""
    assert int(metadata.version("watchdog").split(".")[0]) == MAJOR
    assert watchdog.version.VERSION_MAJOR == MAJOR
    (pin,) = [
        requirement
        for requirement in tomllib.loads(pyproject.read_text())["project"]["dependencies"]
        if re.match(r"watchdog\b", requirement)
    ]
    assert re.findall(r"<\s*([0-9]+)\b", pin) == [str(MAJOR + 1)], pin
    assert re.findall(r">=\s*([0-9]+)\.", pin) == [str(MAJOR)], pin


def test_the_reader_class_and_its_methods_are_as_the_watcher_calls_them() -> None:
    """`InotifyFD()` (no arguments) with its mark `_is_reading` set at construction;
    `add_callback(path, mask, callback, id_)`, `remove_callbacks([(wd, id_)])`, `read_events()`,
    `handle_event(event)`, `close()`."""
    reader = inotify_c.InotifyFD
    assert _parameters(reader.__init__) == ["self"]
    assert _parameters(reader.add_callback) == ["self", "path", "mask", "callback", "id_"]
    assert _parameters(reader.remove_callbacks) == ["self", "callbacks"]
    assert _parameters(reader.read_events) == ["self", "event_buffer_size"]
    assert inspect.signature(reader.read_events).parameters["event_buffer_size"].kind == (
        inspect.Parameter.KEYWORD_ONLY
    )
    assert _parameters(reader.handle_event) == ["self", "event"]
    assert _parameters(reader.close) == ["self"]
    instance = reader()
    try:
        assert instance._is_reading is True
    finally:
        instance._is_reading = False
        instance.close()


def test_the_callback_protocol_is_the_one_the_watcher_implements() -> None:
    """The reader calls `on_event(event)`, `on_watch_deleted(wd)` and `on_queue_overflow()` on a
    callback: the methods of the watcher's root and book callbacks, with the same parameters."""
    protocol = inotify_c.WatchCallback
    expected = {
        name: _parameters(getattr(protocol, name))
        for name in ("on_event", "on_watch_deleted", "on_queue_overflow")
    }
    assert expected == {
        "on_event": ["self", "event"],
        "on_watch_deleted": ["self", "wd"],
        "on_queue_overflow": ["self"],
    }
    for callback in (_watcher._Root, _watcher._Book):
        for name, parameters in expected.items():
            assert _parameters(getattr(callback, name)) == parameters, (callback, name)


def test_the_event_and_the_types_the_watcher_uses_exist() -> None:
    """An event carries `mask` (int) and `name` (bytes); the annotated types are ints; the error
    raised where libc has no inotify is an exception the watcher can catch."""
    fields = {field.name: field.type for field in dataclasses.fields(inotify_c.InotifyEvent)}
    assert {"wd", "mask", "name"} <= set(fields)
    event = inotify_c.InotifyEvent(
        inotify_c.WatchDescriptor(1), inotify_c.Mask(_watcher.IN_CREATE), 0, b"book"
    )
    assert (event.mask, event.name) == (_watcher.IN_CREATE, b"book")
    for name in ("CallbackId", "Mask", "WatchDescriptor"):
        assert getattr(inotify_c, name).__supertype__ is int, name
    assert issubclass(watchdog.utils.UnsupportedLibcError, Exception)


def test_the_watchers_inotify_bits_are_watchdogs() -> None:
    """The watcher names the kernel's bits itself (so that it imports without inotify); they are
    watchdog's, and watchdog still has the two it turns into callbacks (overflow, watch gone)."""
    names = [name for name in vars(_watcher) if re.fullmatch(r"IN_[A-Z_]+", name)]
    assert len(names) >= 12
    for name in names:
        assert getattr(_watcher, name) == getattr(inotify_c.InotifyConstants, name), name
    assert inotify_c.InotifyConstants.IN_Q_OVERFLOW == 0x4000
    assert inotify_c.InotifyConstants.IN_IGNORED == 0x8000


class _Calls:
    """A callback recording what the reader calls, with a bounded wait for a condition."""

    def __init__(self) -> None:
        self.events: list[inotify_c.InotifyEvent] = []
        self.deleted: list[int] = []
        self._changed = threading.Condition()

    def on_event(self, event: inotify_c.InotifyEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def on_watch_deleted(self, wd: inotify_c.WatchDescriptor) -> None:
        with self._changed:
            self.deleted.append(wd)
            self._changed.notify_all()

    def on_queue_overflow(self) -> None:
        pass

    def wait(self, what: str, check: Any) -> None:
        with self._changed:
            assert self._changed.wait_for(check, timeout=WAIT_S), f"not called: {what}"


def _open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def _read_until(reader: inotify_c.InotifyFD, calls: _Calls, check: Any) -> None:
    """Read and hand out events on this thread, as the watcher does, until `check()` holds."""
    waker = threading.Timer(WAIT_S, reader.close)  # a bound: a read that waits too long ends
    waker.start()
    try:
        while not check():
            events = reader.read_events()
            assert events, "the read ended without the events awaited"
            for event in events:
                reader.handle_event(event)
    finally:
        waker.cancel()


def test_a_real_reader_behaves_as_the_watcher_expects(tmp_path: Path) -> None:
    """Read on the caller's thread: a watch descriptor back (>= 0); each event named in bytes
    with its kernel mask; `on_watch_deleted` when a watched directory is removed; a `close` from
    another thread ends a read that waits, with no event."""
    root, book = _Calls(), _Calls()
    reader = inotify_c.InotifyFD()
    reader._is_reading = False
    try:
        root_wd = reader.add_callback(
            bytes(tmp_path), _watcher._ROOT_MASK, root, inotify_c.CallbackId(1)
        )
        assert isinstance(root_wd, int) and root_wd >= 0
        (tmp_path / "book-a").mkdir()
        _read_until(reader, root, lambda: any(e.name == b"book-a" for e in root.events))
        (created,) = [event for event in root.events if event.name == b"book-a"]
        assert created.mask & _watcher.IN_CREATE and created.mask & _watcher.IN_ISDIR

        book_wd = reader.add_callback(
            bytes(tmp_path / "book-a"), _watcher._BOOK_MASK, book, inotify_c.CallbackId(2)
        )
        assert book_wd >= 0 and book_wd != root_wd
        (tmp_path / "book-a" / "events.jsonl").write_bytes(b"{}\n")
        _read_until(reader, book, lambda: any(e.name == b"events.jsonl" for e in book.events))

        (tmp_path / "book-a" / "events.jsonl").unlink()
        (tmp_path / "book-a").rmdir()
        _read_until(reader, book, lambda: book_wd in book.deleted)

        reader.remove_callbacks([(root_wd, inotify_c.CallbackId(1))])
        closing = threading.Event()

        def close() -> None:
            closing.set()
            reader.close()

        closer = threading.Timer(0.2, close)
        closer.start()
        while events := reader.read_events():  # what is left (the watch's end), then the close
            for event in events:
                reader.handle_event(event)
        assert closing.is_set(), "a read ended with no event before the close"
        closer.join()
    finally:
        reader.close()


def test_closing_a_reader_never_read_closes_its_descriptors() -> None:
    """With its mark cleared, as the watcher clears it, `close` of an instance no read waited on
    closes what it opened (the inotify descriptor, the pipe that wakes a read)."""
    before = _open_descriptors()
    reader = inotify_c.InotifyFD()
    assert _open_descriptors() > before
    reader._is_reading = False
    reader.close()
    assert _open_descriptors() == before
