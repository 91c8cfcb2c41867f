"""The command's logs on stderr: the engine's one style (`engine_events._logs`: its formats, its
options, its levels), with what the platform adds. The worker (`run`) logs JSON by default, the
other commands text:

    json  {"time":"2026-11-30T02:08:57.213Z","level":"INFO","logger":"platform_ingest",
           "message":"worker w-3f2a9c01 shares 6 of 12 books with 1 other worker",
           "worker":"w-3f2a9c01"}
    text  2026-11-30T02:08:57.213Z INFO platform_ingest: worker w-3f2a9c01 shares 6 of 12 books
          with 1 other worker worker=w-3f2a9c01

A `FieldsLogger` (a `logging.LoggerAdapter`) gives the same fields to every line it logs, plus any
a call adds with `fields=...`. At INFO and above a log line holds no money amount and no book id:
books are named by their opaque reference (`book_ref`), and amounts are never passed to a log
call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

from engine_events import _logs
from engine_events._logs import (
    FORMATS,
    HANDLER_NAME,
    LEVELS,
    add_options,
    chosen_level,
    formatter,
    utc_time,
)

__all__ = [
    "FORMATS",
    "HANDLER_NAME",
    "LEVELS",
    "FieldsLogger",
    "add_options",
    "chosen_level",
    "configure",
    "formatter",
    "use_json_logs",
    "utc_time",
]


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


def configure(
    level: int, log_format: str, static_fields: dict[str, Any] | None = None
) -> logging.Handler:
    """`engine_events._logs.configure`: every record at `level` and above to stderr in
    `log_format`, replacing the handler a previous call of either half installed."""
    handler = _logs.configure(level, log_format, static_fields)
    # The embedded server's library narrates every start at INFO; its warnings still show.
    logging.getLogger("pgserver").setLevel(logging.WARNING if level > logging.DEBUG else level)
    return handler


def use_json_logs(level: int, static_fields: dict[str, Any] | None = None) -> None:
    """Send every log record at `level` and above to stderr as JSON lines (replaces handlers)."""
    configure(level, "json", static_fields)
