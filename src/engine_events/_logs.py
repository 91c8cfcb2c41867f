"""The command's logs on stderr: one style, the engine's and `platform-ingest`'s (whose
`platform_ingest._logs` adds its worker's fields to this module).

Two formats, one line per record, every time in UTC with milliseconds and a `Z`, as the stream's
`time`:

    text  2026-11-30T02:08:57.213Z INFO engine_events.demo: run stopped at the ceiling
    json  {"time":"2026-11-30T02:08:57.213Z","level":"INFO","logger":"engine_events.demo",
           "message":"run stopped at the ceiling"}

Fields given with `extra={"fields": {...}}` are merged into the JSON object, and follow the text
line's message as `name=value`. An exception's traceback is the JSON object's `exception`, or the
text lines after the record's.

The level is `--log-level LEVEL`, or the command's default moved one step per `-v` (more) or
`-q` (less); the three are one choice (argparse refuses two of them together). Every command's
parser takes the options too (`add_options(after_command=True)`): one given after the command
replaces the same choice given before it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import orjson

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""The levels, most verbose first: `-v` moves one step left, `-q` one step right."""

FORMATS = ("text", "json")

HANDLER_NAME = "run-event-journal-stderr"
"""The name of the handler `configure` installs, the same in both halves: a later call (of either
half, in one process under test) replaces it."""

_BARE = re.compile(r"[^\s\"=\\]+")


def utc_time(created: float) -> str:
    """A record's time as the stream writes `time`: `2026-11-30T02:08:57.213Z`."""
    moment = dt.datetime.fromtimestamp(created, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _json(value: object) -> str:
    return orjson.dumps(value, default=str).decode()


class JsonFormatter(logging.Formatter):
    """A record as one compact JSON object: `time`, `level`, `logger`, `message`, the fields."""

    def __init__(self, static_fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static_fields = dict(static_fields or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(self.static_fields)
        entry.update(_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _json(entry)


class TextFormatter(logging.Formatter):
    """A record as `TIME LEVEL LOGGER: MESSAGE name=value ...`, a traceback on the lines after."""

    def __init__(self, static_fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static_fields = dict(static_fields or {})

    def format(self, record: logging.LogRecord) -> str:
        line = f"{utc_time(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        for name, value in {**self.static_fields, **_fields(record)}.items():
            shown = value if isinstance(value, str) and _BARE.fullmatch(value) else _json(value)
            line += f" {name}={shown}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(log_format: str, static_fields: dict[str, Any] | None = None) -> logging.Formatter:
    """The formatter of `log_format` (`text` or `json`)."""
    if log_format == "json":
        return JsonFormatter(static_fields)
    if log_format == "text":
        return TextFormatter(static_fields)
    raise ValueError(f"unknown log format {log_format!r}: one of {', '.join(FORMATS)}")


LEVEL_DEFAULTS: dict[str, Any] = {"verbose": 0, "quiet": 0, "log_level": None}
"""The one choice of level (`-v`, `-q`, `--log-level`): each option's destination and default."""


class _LevelAfterCommand(argparse.Action):
    """`-v`, `-q` or `--log-level` given after the command: it replaces whichever of the three was
    given before it (the command's parser sets the other two back to their defaults, and the
    values it parsed replace the top-level parser's)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        for dest, default in LEVEL_DEFAULTS.items():
            if dest != self.dest:
                setattr(namespace, dest, default)
        if self.nargs == 0:  # -v, -q: one step each time
            setattr(namespace, self.dest, (getattr(namespace, self.dest, None) or 0) + 1)
        else:
            setattr(namespace, self.dest, values)


def add_options(
    parser: argparse.ArgumentParser,
    *,
    default_level: str,
    default_format: str,
    after_command: bool = False,
) -> None:
    """`-v`, `-q`, `--log-level` (one of them) and `--log-format`, with their defaults said.

    With `after_command`, the copy every command's parser takes (`COMMAND -v` as well as
    `-v COMMAND`): nothing has a default there (`argparse.SUPPRESS`), so that a value given before
    the command stays unless the option is given again after it, and then the one after wins."""
    group = parser.add_argument_group("logs (stderr)")
    level = group.add_mutually_exclusive_group()
    if after_command:
        step: dict[str, Any] = {
            "action": _LevelAfterCommand,
            "nargs": 0,
            "default": argparse.SUPPRESS,
        }
        named: dict[str, Any] = {"action": _LevelAfterCommand, "default": argparse.SUPPRESS}
        style: dict[str, Any] = {"default": argparse.SUPPRESS}
    else:
        step, named, style = {"action": "count", "default": 0}, {"default": None}, {"default": None}
    level.add_argument(
        "-v",
        "--verbose",
        **step,
        help=f"log more: one level down from the default per -v (default level {default_level})",
    )
    level.add_argument(
        "-q", "--quiet", **step, help="log less: one level up from the default per -q"
    )
    level.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        metavar="LEVEL",
        **named,
        help=f"the least level logged, one of {', '.join(LEVELS)} in any case "
        f"(default {default_level})",
    )
    group.add_argument(
        "--log-format",
        choices=FORMATS,
        **style,
        help=f"text: one readable line a record; json: one JSON object a line "
        f"(default {default_format})",
    )


def chosen_level(args: argparse.Namespace, default: str) -> int:
    """The level `args` ask for: `--log-level`, else `default` moved by `-v` and `-q`."""
    if args.log_level is not None:
        return int(logging.getLevelName(args.log_level))
    index = LEVELS.index(default) - args.verbose + args.quiet
    return int(logging.getLevelName(LEVELS[max(0, min(index, len(LEVELS) - 1))]))


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to the `sys.stderr` of the moment (a test's capture, say), not the one at setup."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(
    level: int, log_format: str, static_fields: dict[str, Any] | None = None
) -> logging.Handler:
    """Send every record at `level` and above to stderr in `log_format`, replacing the handler a
    previous call installed, of either half (others, such as a test runner's, stay)."""
    handler = StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter(log_format, static_fields))
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
