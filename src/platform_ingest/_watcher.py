"""One file-change watcher for every book under the worker's roots (watchfiles' notify core).

Each root is watched recursively by ONE notifier (inotify on Linux: one watch per directory, so a
root of 10,000 books takes 10,001 watches; see `/proc/sys/fs/inotify/max_user_watches`). The files
themselves are never polled. A change is mapped to what the worker cares about:

- `<root>/<book>/events.jsonl` changed: that book has something to read;
- `<root>/<name>` appeared or vanished: the list of books may have changed.

Everything else (the engine's SQLite files, `status.json`) is ignored. The notifier groups changes
for at most `DEBOUNCE_MS` and checks for more every `STEP_MS` (its own tick; no file is read).

If the notifier cannot start or fails (the watch limit is reached, a root vanished) the worker is
told (`on_failure`), keeps working from its periodic survey, and the watcher starts again after
`RESTART_WAIT_S`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from watchfiles._rust_notify import RustNotify, WatchfilesRustInternalError

from ._journal import JOURNAL_NAME

logger = logging.getLogger("platform_ingest")

STEP_MS = 2
"""How often the notifier looks for new changes once one arrived (and for the stop event)."""
DEBOUNCE_MS = 20
"""The longest a burst of changes is grouped before the worker hears of it."""
TIMEOUT_MS = 1000
"""How long one wait for changes lasts before the stop event is looked at again."""
RESTART_WAIT_S = 10.0
"""After a failure, the wait before the notifier is started again."""


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
        self._root_texts = {str(root): root for root in self.roots}
        self.on_journal = on_journal
        self.on_root = on_root
        self.on_state = on_state
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-watcher", daemon=True)
        self.started = threading.Event()
        """Set once the notifier watches every root (changes after this are seen)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                notify = RustNotify(
                    [str(root) for root in self.roots], False, False, 300, True, False
                )
            except (OSError, WatchfilesRustInternalError) as error:
                self._failed(error)
                continue
            try:
                self.on_state(True)
                self.started.set()
                logger.info("watching %d roots for changes", len(self.roots))
                while not self._stop.is_set():
                    changes = notify.watch(DEBOUNCE_MS, STEP_MS, TIMEOUT_MS, self._stop)
                    if isinstance(changes, set):
                        self._dispatch(changes)
                    elif changes == "stop":
                        return
            except (OSError, WatchfilesRustInternalError, RuntimeError) as error:
                self._failed(error)
            finally:
                notify.close()

    def _failed(self, error: BaseException) -> None:
        self.on_state(False)
        logger.error(
            "file-change notification failed (%s: %s); the periodic survey goes on, "
            "notification restarts in %.0f s",
            type(error).__name__,
            error,
            RESTART_WAIT_S,
        )
        self._stop.wait(RESTART_WAIT_S)

    def _dispatch(self, changes: set[tuple[int, str]]) -> None:
        roots_changed: set[Path] = set()
        books: set[Path] = set()
        for _change, text in changes:
            path = Path(text)
            parent = path.parent
            root = self._root_texts.get(str(parent))
            if root is not None:
                roots_changed.add(root)  # a book directory appeared or vanished
                continue
            if path.name == JOURNAL_NAME and str(parent.parent) in self._root_texts:
                books.add(parent)
        for root in roots_changed:
            self.on_root(root)
        for book in books:
            self.on_journal(book)
