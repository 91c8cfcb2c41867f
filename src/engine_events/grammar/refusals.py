"""A line a reader refuses: `LineError`, the base of every refusal, and `MalformedLine`, the one
refusal of a line that breaks a rule of its form, with the name of the rule (`reason`).

Both sides raise and catch these classes: the engine's `verify`, `watch` and `status`, and the
platform's decoder (which calls `LineError` `LineRefused`, and names the stream in its own
`UnsupportedVersion`, a kind of the engine's).
What a refusal says (`detail`) is what `verify` prints and what the platform stores and `show`
prints; its wording is built here only.

A refusal is built whole and never changed once made: what a later step knows (the line's offset,
the stream a readable hello starts) goes into a new error of the same class (`at`, `of_hello`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self

from .._error_root import EngineEventsError

MalformedReason = Literal[
    "invalid_utf8",
    "invalid_json",
    "not_compact",
    "duplicate_key",
    "not_an_object",
    "wrong_keys",
    "nul_character",
    "line_too_long",
    "nesting_too_deep",
    "wrong_type",
    "string_too_long",
    "money_not_integer",
    "integer_too_wide",
    "hello_not_first",
]
"""The rule a malformed line breaks, in the order the judge looks (`judge`):

- `line_too_long`: over 1 MiB with its newline (read in bounded memory);
- `invalid_json`: no newline at its end, a byte-order mark, a carriage return, not JSON or NaN;
- `nesting_too_deep`: arrays or objects nested deeper than 64;
- `invalid_utf8`: bytes that are not UTF-8;
- `not_an_object`: JSON, but not an object;
- `not_compact`: whitespace outside strings;
- `duplicate_key`: a key twice in one object, at any depth;
- `wrong_keys`: keys other than seq, type, time, data in that order;
- `nul_character`: U+0000 in a string or a key (no reader can store it);
- `wrong_type`: a known field of the wrong type or range, an impossible time;
- `string_too_long`: a known string over its bound in UTF-8 bytes;
- `money_not_integer`: money that is not a non-negative JSON integer;
- `hello_not_first`: a hello that is not seq 1;
- `integer_too_wide`: an integer past signed 64 bits, anywhere in the line.
"""


class LineError(EngineEventsError, ValueError):
    """A journal line that a reader must refuse; `kind` is the verdict's name, `detail` what is
    wrong with the line.

    `seq` is the line's seq when it has a valid one (None when the refusal was found before it
    could be read); `offset` is the byte offset where the line starts, set by the reader that
    knows it (`at`). When the line is a readable hello (docs/reference/stream-format.md, "A hello
    that starts its stream"), `engine_run_id` names the stream it starts and `stream_version` is
    its version when that can be read: the refusal is that stream's, never the one before it in
    the file (`of_hello`)."""

    kind: ClassVar[Literal["malformed", "unsupported_version"]] = "malformed"
    engine_run_id: str | None = None
    stream_version: str | None = None

    def __init__(self, detail: str, *, seq: int | None = None, offset: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.seq = seq
        self.offset = offset

    def at(self, offset: int) -> Self:
        """This refusal, of the line that starts at byte `offset`: a new error."""
        return self._with(offset=offset)

    def of_hello(self, engine_run_id: str, stream_version: str | None) -> Self:
        """This refusal, of a line that starts the stream `engine_run_id`: a new error."""
        return self._with(engine_run_id=engine_run_id, stream_version=stream_version)

    def _with(self, **fields: object) -> Self:
        """A new error of this class, with this one's message, fields and cause, and `fields`
        over them; this one is left as it was (a log, a test or a report may hold it)."""
        made: Self = type(self).__new__(type(self), *self.args)
        made.__dict__.update(self.__dict__)
        made.__dict__.update(fields)
        made.__cause__ = self.__cause__
        return made


class MalformedLine(LineError):
    """The line is not a valid stream 1.x line; `reason` names the rule it breaks
    (`MalformedReason`). The constructors below build each reason's `detail`; `field` names the
    field at fault when there is one, and a line too long keeps its size and, when the reader
    skipped it whole, the sha256 of its bytes."""

    kind: ClassVar[Literal["malformed"]] = "malformed"
    field: str | None = None
    """The known field at fault (`wrong_type`, `string_too_long`, `money_not_integer`)."""
    limit_bytes: int | None = None
    """The bound passed (`string_too_long`, `line_too_long`)."""
    size_bytes: int = 0
    """The line's size (`line_too_long`): at least this, when it has no newline yet."""
    line_sha256: bytes | None = None
    """The sha256 of a too long line the reader skipped whole (None: no newline yet, or judged
    from its bytes)."""
    terminated: bool = True
    """False for a too long line that has no newline yet."""

    def __init__(
        self,
        reason: MalformedReason,
        detail: str,
        *,
        seq: int | None = None,
        offset: int | None = None,
        **facts: Any,
    ) -> None:
        super().__init__(detail, seq=seq, offset=offset)
        self.reason: MalformedReason = reason
        self.__dict__.update(facts)

    @classmethod
    def too_long(
        cls,
        size_bytes: int,
        limit_bytes: int,
        *,
        offset: int | None = None,
        line_sha256: bytes | None = None,
        terminated: bool = True,
    ) -> MalformedLine:
        """A line longer than `limit_bytes`, newline included; `terminated` False when it has no
        newline yet (then `size_bytes` is how much of it was met)."""
        at_least = "" if terminated else "at least "
        return cls(
            "line_too_long",
            f"line of {at_least}{size_bytes} bytes exceeds the limit of {limit_bytes} bytes",
            offset=offset,
            size_bytes=size_bytes,
            limit_bytes=limit_bytes,
            line_sha256=line_sha256,
            terminated=terminated,
        )

    @classmethod
    def nesting_too_deep(cls, depth: int, limit: int) -> MalformedLine:
        return cls("nesting_too_deep", f"nesting depth {depth} exceeds the limit of {limit}")

    @classmethod
    def duplicate_key(cls, key: str, *, seq: int | None) -> MalformedLine:
        """A key twice in one object: a parser silently keeps one of the values, so two readers
        could read two different lines."""
        return cls("duplicate_key", f"key {key[:40]!r} appears twice in one object", seq=seq)

    @classmethod
    def wrong_type(cls, field: str, expected: str, *, seq: int | None = None) -> MalformedLine:
        """A known field of the wrong type or an impossible value."""
        return cls("wrong_type", f"{field} must be {expected}", seq=seq, field=field)

    @classmethod
    def string_too_long(cls, field: str, limit_bytes: int, *, seq: int) -> MalformedLine:
        """A known field's string over its bound in UTF-8 bytes: the message names the field and
        the bound, never the value (it may be a book's data)."""
        return cls(
            "string_too_long",
            f"{field} must be at most {limit_bytes} bytes of UTF-8",
            seq=seq,
            field=field,
            limit_bytes=limit_bytes,
        )

    @classmethod
    def money_not_integer(cls, field: str, found: str, *, seq: int) -> MalformedLine:
        """Money that is not a non-negative JSON integer of micro-USD (a float, a string, null, a
        bool, a negative number: never read as zero). The message names the field and the JSON
        type found, never the amount."""
        return cls(
            "money_not_integer",
            f"money field {field} must be a non-negative JSON integer of micro-USD, found {found}",
            seq=seq,
            field=field,
        )

    @classmethod
    def integer_too_wide(cls, *, seq: int) -> MalformedLine:
        """An integer of the line, anywhere, past signed 64 bits: no reader could hold it as the
        integer it is (a JSON library reads it as a float, a bigint column refuses it)."""
        return cls(
            "integer_too_wide",
            "an integer of the line does not fit a signed 64-bit integer",
            seq=seq,
        )


class UnsupportedVersion(LineError):
    """A `hello` of a stream major this reader does not speak."""

    kind = "unsupported_version"
