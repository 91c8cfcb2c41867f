"""The data of a binary `COPY ... FROM STDIN`, built in one piece from columns of values.

A batch's line hashes (one row a line) and units are sent this way. Encoding row by row through
the driver costs a Python call a row and a round of the interpreter's lock for every buffer the
driver flushes, on the writer's thread, while the pass's thread wants the lock for the next batch;
this builds the whole data with the loops inside `struct`, `map` and `bytes.join`, and the driver
sends it in one write.

The format is Postgres's (`COPY` documentation, "Binary Format"): a signature and two 32-bit
words of zero, then per row a 16-bit count of fields and, per field, a 32-bit length and the
value's bytes (big-endian integers, text as UTF-8, bytea as it is), then a 16-bit -1.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat
from operator import add
from typing import Any

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_INT8_FIELD = struct.Struct(">iq")
_LENGTH = struct.Struct(">i")
_FIELD_COUNT = struct.Struct(">h")


def _int8_fields(values: Sequence[Any]) -> Iterator[bytes]:
    return map(_INT8_FIELD.pack, repeat(8), values)  # struct.error: not an int of 64 bits


def _bytea_fields(values: Sequence[Any]) -> Iterator[bytes]:
    return map(add, map(_LENGTH.pack, map(len, values)), values)


def _text_fields(values: Sequence[Any]) -> Iterator[bytes]:
    return _bytea_fields([value.encode() for value in values])


_FIELDS: dict[str, Callable[[Sequence[Any]], Iterable[bytes]]] = {
    "int8": _int8_fields,
    "bytea": _bytea_fields,
    "text": _text_fields,
}
"""How a column of each type a listed COPY may carry is encoded (`_sql.Statement.types`)."""


def copy_data(types: Sequence[str], columns: Sequence[Sequence[Any]]) -> bytes:
    """The whole binary COPY data of the rows whose values `columns` holds, one sequence a column
    in the order of `types` (all of one length). No value may be None: no column of a listed
    COPY is nullable. Raises `ValueError` for columns of unequal lengths or a type not known,
    `struct.error` for an integer that is not of 64 bits, `UnicodeEncodeError` for text that is
    not encodable."""
    if len(columns) != len(types):
        raise ValueError(f"{len(columns)} columns for {len(types)} types")
    rows = len(columns[0]) if columns else 0
    if any(len(column) != rows for column in columns):
        raise ValueError("the columns are not of one length")
    try:
        fields = [_FIELDS[kind](column) for kind, column in zip(types, columns, strict=True)]
    except KeyError as error:
        raise ValueError(f"no binary encoding for the type {error.args[0]!r}") from None
    count = _FIELD_COUNT.pack(len(types))
    body = b"".join(chain.from_iterable(zip(repeat(count, rows), *fields, strict=True)))
    return b"".join((_SIGNATURE, body, _TRAILER))
