"""The file-change watcher (`_watcher.Watcher`) on a real temporary root, with real inotify.

A journal append and a new book directory are reported; directories whose names are not UTF-8
(present at start, or appearing later, with journals being written) neither stop nor slow the
reports for the healthy books; a root that vanishes, or the inotify watch limit (lowered inside a
user namespace of the test's own), is reported as a failure with one ERROR naming no path, and the
watcher comes back by itself. Every wait is bounded; nothing here measures time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from platform_ingest.worker import watcher as _watcher
from platform_ingest.worker.watcher import Watcher

WAIT_S = 10.0
"""A bound on every wait for a report (not an expected speed)."""
SRC = Path(__file__).resolve().parents[2] / "src"


class Reports:
    """What a watcher reported, with a bounded wait for a condition on it."""

    def __init__(self) -> None:
        self.journals: list[Path] = []
        self.roots: list[Path] = []
        self.states: list[bool] = []
        self._changed = threading.Condition()

    def on_journal(self, book: Path) -> None:
        with self._changed:
            self.journals.append(book)
            self._changed.notify_all()

    def on_root(self, root: Path) -> None:
        with self._changed:
            self.roots.append(root)
            self._changed.notify_all()

    def on_state(self, up: bool) -> None:
        with self._changed:
            self.states.append(up)
            self._changed.notify_all()

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        with self._changed:
            assert self._changed.wait_for(check, timeout=WAIT_S), f"not reported: {what}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "books"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def watch(root: Path) -> Iterator[tuple[Watcher, Reports]]:
    reports = Reports()
    watcher = Watcher(
        [root], on_journal=reports.on_journal, on_root=reports.on_root, on_state=reports.on_state
    )
    yield watcher, reports
    watcher.stop(timeout_s=WAIT_S)


def started(watcher: Watcher) -> Watcher:
    watcher.start()
    assert watcher.started.wait(WAIT_S), "the watcher did not start"
    return watcher


def append(journal: Path | bytes, data: bytes = b'{"seq": 1}\n') -> None:
    with open(journal, "ab") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def test_a_journal_append_is_reported_for_its_book(
    root: Path, watch: tuple[Watcher, Reports]
) -> None:
    book = root / "book-a"
    book.mkdir()
    (book / "status.json").write_bytes(b"{}")
    watcher, reports = watch
    started(watcher)
    append(book / "status.json")  # not the journal: no report for it
    append(book / "events.jsonl")
    reports.wait("the append", lambda: book in reports.journals)
    assert set(reports.journals) == {book}
    assert reports.states == [True]


def test_a_new_book_directory_is_reported_for_its_root(
    root: Path, watch: tuple[Watcher, Reports]
) -> None:
    watcher, reports = watch
    started(watcher)
    reports.wait("the roots at start", lambda: root in reports.roots)
    count = len(reports.roots)
    (root / "book-new").mkdir()
    reports.wait("the new directory", lambda: len(reports.roots) > count)
    assert set(reports.roots) == {root}
    append(root / "book-new" / "events.jsonl")  # the new directory is watched too
    reports.wait("the new book's journal", lambda: root / "book-new" in reports.journals)


def test_names_that_are_not_utf8_do_not_stop_the_reports(
    root: Path, watch: tuple[Watcher, Reports], caplog: pytest.LogCaptureFixture
) -> None:
    raw = os.fsencode(root)
    healthy = root / "book-healthy"
    healthy.mkdir()
    os.mkdir(raw + b"/book-\xff")
    append(raw + b"/book-\xff/events.jsonl")
    watcher, reports = watch
    caplog.set_level(logging.DEBUG, logger="platform_ingest")
    started(watcher)

    append(healthy / "events.jsonl")
    reports.wait(
        "the healthy book (bad name present at start)", lambda: healthy in reports.journals
    )

    os.mkdir(raw + b"/book-\xfe\xfd")
    bad_names = {root / os.fsdecode(b"book-\xff"), root / os.fsdecode(b"book-\xfe\xfd")}
    for _ in range(3):
        append(raw + b"/book-\xff/events.jsonl")
        append(raw + b"/book-\xfe\xfd/events.jsonl")
    # Reported like any other book (by their surrogate-escaped paths): the worker refuses them.
    reports.wait("the books whose names are not UTF-8", lambda: bad_names <= set(reports.journals))
    reports.journals.clear()
    append(healthy / "events.jsonl")
    reports.wait("the healthy book (bad names written)", lambda: healthy in reports.journals)

    assert False not in reports.states
    assert watcher._thread.is_alive()
    assert [record for record in caplog.records if record.levelno >= logging.WARNING] == []


def test_a_renamed_book_directory_is_followed(root: Path, watch: tuple[Watcher, Reports]) -> None:
    (root / "book-old").mkdir()
    watcher, reports = watch
    started(watcher)
    (root / "book-old").rename(root / "book-new")
    append(root / "book-new" / "events.jsonl")
    reports.wait("the renamed book", lambda: root / "book-new" in reports.journals)
    assert root / "book-old" not in reports.journals


def test_stop_returns_promptly(root: Path, watch: tuple[Watcher, Reports]) -> None:
    for number in range(50):
        (root / f"book-{number:02d}").mkdir()
    watcher, _reports = watch
    started(watcher)
    watcher.stop(timeout_s=WAIT_S)
    assert not watcher._thread.is_alive()
    names = [thread.name for thread in threading.enumerate()]
    assert "ingest-watcher" not in names


def test_many_appends_to_many_books_are_each_reported(
    root: Path, watch: tuple[Watcher, Reports]
) -> None:
    """Read many at a time (the watcher pauses after a read), no append's book is missed."""
    books = [root / f"book-{number:03d}" for number in range(200)]
    for book in books:
        book.mkdir()
    watcher, reports = watch
    started(watcher)
    for _ in range(3):
        for book in books:
            with open(book / "events.jsonl", "ab") as file:
                file.write(b"{}\n")
    reports.wait("every book appended to", lambda: set(books) <= set(reports.journals))
    assert set(reports.journals) == set(books)


def _ignore(_: object) -> None:
    pass


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_starting_and_stopping_leaves_no_descriptor_open(root: Path) -> None:
    """Each start opens an inotify instance; each stop closes it, whether or not it was read."""
    (root / "book-a").mkdir()
    before = _open_descriptors()
    for _ in range(10):
        watcher = started(Watcher([root], on_journal=_ignore, on_root=_ignore, on_state=_ignore))
        watcher.stop(timeout_s=WAIT_S)
        assert not watcher._thread.is_alive()
        unstarted = Watcher([root], on_journal=_ignore, on_root=_ignore, on_state=_ignore)
        unstarted.start()
        unstarted.stop(timeout_s=WAIT_S)  # as soon as started: stopped before or while it reads
        assert not unstarted._thread.is_alive()
    assert _open_descriptors() == before


def test_a_callback_that_raises_is_a_failure_and_the_watcher_comes_back(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events are read and handed out on the watcher's thread: a callback that raises ends
    that session (down, one ERROR naming the error's type), and the watcher starts again."""
    monkeypatch.setattr(_watcher, "RESTART_WAIT_S", 0.2)
    book = root / "book-a"
    book.mkdir()
    reports = Reports()
    raised: list[Path] = []

    def on_journal(path: Path) -> None:
        if not raised:
            raised.append(path)
            raise RuntimeError("a bug in a callback")
        reports.on_journal(path)

    watcher = Watcher(
        [root], on_journal=on_journal, on_root=reports.on_root, on_state=reports.on_state
    )
    caplog.set_level(logging.DEBUG, logger="platform_ingest")
    try:
        started(watcher)
        append(book / "events.jsonl")
        reports.wait("the failure", lambda: False in reports.states)
        reports.wait("the watcher back", lambda: reports.states[-1] is True)
        append(book / "events.jsonl")
        reports.wait("an append after the restart", lambda: book in reports.journals)
    finally:
        watcher.stop(timeout_s=WAIT_S)
    assert raised == [book]
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1 and "RuntimeError" in errors[0], errors


def test_a_vanished_root_is_a_failure_named_without_its_path(
    root: Path,
    watch: tuple[Watcher, Reports],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_watcher, "RESTART_WAIT_S", 0.2)
    (root / "book-a").mkdir()
    watcher, reports = watch
    caplog.set_level(logging.DEBUG, logger="platform_ingest")
    started(watcher)
    shutil.rmtree(root)
    reports.wait("the failure", lambda: False in reports.states)
    root.mkdir()
    (root / "book-b").mkdir()
    reports.wait("the watcher back", lambda: reports.states[-1] is True)
    append(root / "book-b" / "events.jsonl")
    reports.wait("an append after the restart", lambda: root / "book-b" in reports.journals)
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # one per episode, however many restarts it took
    assert str(root.parent) not in errors[0]
    assert "root" in errors[0]


WATCH_LIMIT_CHILD = textwrap.dedent(
    """
    import json, logging, sys, threading
    from pathlib import Path
    from platform_ingest.worker import watcher as _watcher

    LIMIT = "/proc/sys/user/max_inotify_watches"
    root = Path(sys.argv[1])
    errors, states = [], []
    changed = threading.Condition()

    class Errors(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage())

    logging.getLogger("platform_ingest").addHandler(Errors())
    _watcher.RESTART_WAIT_S = 0.2

    def on_state(up):
        with changed:
            states.append(up)
            changed.notify_all()

    def write_limit(value):
        with open(LIMIT, "w") as file:
            file.write(str(value))

    write_limit(4)  # the root and three of the six books
    watcher = _watcher.Watcher(
        [root], on_journal=lambda path: None, on_root=lambda path: None, on_state=on_state
    )
    watcher.start()
    with changed:
        down = changed.wait_for(lambda: False in states, timeout=10)
    write_limit(1000)
    with changed:
        up = changed.wait_for(lambda: states and states[-1] is True, timeout=10)
    watcher.stop(timeout_s=10)
    print(json.dumps({"down": down, "up": up, "states": states, "errors": errors}))
    """
)


def test_the_watch_limit_is_a_failure_until_it_is_raised(tmp_path: Path) -> None:
    root = tmp_path / "books"
    for number in range(6):
        (root / f"book-{number}").mkdir(parents=True)
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        # Lowering the limit for real would change it for every process of the machine: the test
        # only ever lowers it inside a user namespace of its own, and cannot run without one.
        pytest.skip("needs unshare(1) to lower the watch limit in a user namespace of its own")
    probe = subprocess.run(
        [unshare, "-U", "-r", "sh", "-c", "echo 5 > /proc/sys/user/max_inotify_watches"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(  # as above: never the machine's own limit
            "user namespaces unavailable here, and the machine's own watch limit is not the "
            f"test's to lower: {probe.stderr.decode(errors='replace')}"
        )
    environment = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [unshare, "-U", "-r", sys.executable, "-c", WATCH_LIMIT_CHILD, str(root)],
        capture_output=True,
        check=False,
        timeout=60,
        env=environment,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    outcome = json.loads(result.stdout)
    assert outcome["down"] and outcome["up"], outcome
    assert outcome["states"][0] is False
    assert len(outcome["errors"]) == 1, outcome
    assert "watch limit" in outcome["errors"][0]
    assert str(tmp_path) not in outcome["errors"][0]
