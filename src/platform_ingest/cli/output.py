"""What the commands print: JSON reports, NDJSON lines, and an error's text about a book."""

from __future__ import annotations

import sys

import orjson

from .._plain import display_path, plain


def print_json(value: object) -> None:
    """A report as indented JSON."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_json_line(value: object) -> None:
    """One compact JSON object on one line (NDJSON: a report per book, each line whole)."""
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def about(book_dir: str, error: Exception) -> str:
    """The error's text, led by the book's path unless the text already names it."""
    text, path = plain(str(error)), display_path(book_dir)
    return text if path in text else f"{path}: {text}"
