"""Structured logs for the worker: one JSON object per line on stderr.

    {"time": "2026-11-30T02:08:57.213Z", "level": "INFO", "logger": "platform_ingest",
     "message": "worker w-3f2a9c01 shares 6 of 12 books with 1 other worker", "worker": "w-3f2a9c01"}

Fields given with `extra={"fields": {...}}` are merged into the object; a `FieldsLogger` (a
`logging.LoggerAdapter`) gives the same fields to every line it logs, plus any a call adds with
`fields=...`. At INFO and above a log line holds no money amount and no book id: books are named
by their opaque reference (`book_ref`), and amounts are never passed to a log call.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """Formats a record as one compact JSON object (no newline inside)."""

    def __init__(self, static_fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static_fields = dict(static_fields or {})

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        milliseconds = int((record.created - seconds) * 1000)
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
            + f".{milliseconds:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(self.static_fields)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class FieldsLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose every line carries `fields` (the worker's id, say).

    A call may add its own: `log.warning("...", fields={"path_ref": ref})` logs the adapter's
    fields and these together, the call's winning a name both give.
    """

    def __init__(self, logger: logging.Logger, fields: Mapping[str, Any]) -> None:
        super().__init__(logger, {"fields": dict(fields)})
        self.fields: dict[str, Any] = dict(fields)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        fields = {**self.fields, **kwargs.pop("fields", {})}
        kwargs["extra"] = {**kwargs.get("extra", {}), "fields": fields}
        return msg, kwargs


def use_json_logs(level: int, static_fields: dict[str, Any] | None = None) -> None:
    """Send every log record at `level` and above to stderr as JSON lines (replaces handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(static_fields))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    if level > logging.DEBUG:
        # The embedded server's library narrates every start at INFO; its warnings still show.
        logging.getLogger("pgserver").setLevel(logging.WARNING)
