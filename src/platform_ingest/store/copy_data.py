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
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, repeat
from operator import add
from typing import Any

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_INT8_FIELD = struct.Struct(">iq")
_LENGTH = struct.Struct(">i")
_FIELD_COUNT = struct.Struct(">h")


def _as_bytes(kind: str, values: Sequence[Any]) -> Sequence[Any]:
    return list(map(str.encode, values)) if kind == "text" else values


def _fields(kind: str, values: Sequence[Any]) -> Iterator[bytes]:
    """Each value of a column as its field: its length, then its bytes."""
    if kind == "int8":
        return map(_INT8_FIELD.pack, repeat(8), values)  # struct.error: not an int of 64 bits
    return map(add, map(_LENGTH.pack, map(len, values)), values)


def copy_data(types: Sequence[str], columns: Sequence[Sequence[Any]]) -> bytes:
    """The whole binary COPY data of the rows whose values `columns` holds, one sequence a column
    in the order of `types` (all of one length; "int8", "text" or "bytea"). No value may be None:
    no column of a listed COPY is nullable.

    When every column's values are of one width (integers; bytes or text all of one length, as
    a batch's sha256 digests are), each row is packed by one `struct` call; otherwise each field
    is made on its own and the fields joined (about three times the work).

    Raises `ValueError` for columns of unequal lengths or a type not known, `struct.error` for
    an integer that is not of 64 bits, `UnicodeEncodeError` for text that is not encodable."""
    if len(columns) != len(types):
        raise ValueError(f"{len(columns)} columns for {len(types)} types")
    unknown = set(types) - {"int8", "text", "bytea"}
    if unknown:
        raise ValueError(f"no binary encoding for the type {sorted(unknown)[0]!r}")
    rows = len(columns[0]) if columns else 0
    if any(len(column) != rows for column in columns):
        raise ValueError("the columns are not of one length")
    values = [_as_bytes(kind, column) for kind, column in zip(types, columns, strict=True)]
    count = len(types)
    row_format = [">h"]
    arguments: list[Iterable[Any]] = [repeat(count, rows)]
    for kind, column in zip(types, values, strict=True):
        if kind == "int8":
            row_format.append("iq")
            arguments += (repeat(8, rows), column)
            continue
        widths = set(map(len, column))
        if len(widths) != 1:
            break
        (width,) = widths
        row_format.append(f"i{width}s")
        arguments += (repeat(width, rows), column)
    else:
        if rows:
            row = struct.Struct("".join(row_format))
            return b"".join((_SIGNATURE, *map(row.pack, *arguments), _TRAILER))
    fields = [_fields(kind, column) for kind, column in zip(types, values, strict=True)]
    header = _FIELD_COUNT.pack(count)
    body = chain.from_iterable(zip(repeat(header, rows), *fields, strict=True))
    return b"".join((_SIGNATURE, *body, _TRAILER))
