"""The decoder: one journal line in, one `Line` or one typed refusal out.

It reads what any 1.x writer may produce (a newer minor's unknown fields and event types are kept
as they are and ignored by the effects) and refuses everything else with a `LineRefused` subclass
that carries the seq when the line has a readable one. It holds no state: which stream a line
belongs to, and whether it comes in order, is the pass's business (`book_pass`).

Money is read only as a non-negative JSON integer of micro-USD that fits a Postgres bigint; a float
(even `12.0`), a string (`"null"`, `"12"`), null, a bool or a negative number is refused, never
read as zero.

Everything a line may hold must be storable in Postgres: no U+0000 in any string or key (text and
jsonb cannot hold it), the strings of known fields within their byte bounds. And a line is one
compact object with the keys seq, type, time, data in that order, no key twice in any object (the
JSON parser would silently keep the last one). Those four are all its keys, except in a stream of
a minor newer than this reader knows, whose envelope may go on with keys it ignores
(`decode_stream_line`).

A line as the emitter writes it takes a fast path, a few checks of its parsed value; any other line
is judged rule by rule, so that its refusal is that of the first rule it breaks (`decode_line`).
The usual lines of a stream (progress, unit_done, spend) take a shorter path still once a line of
the same skeleton (its bytes with every digit read as 0) has been judged: see `_SKELETONS`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import msgspec
import orjson

from ..errors import (
    DuplicateKey,
    HelloNotFirst,
    InvalidJson,
    InvalidUtf8,
    LineRefused,
    LineTooLong,
    MalformedLine,
    MoneyNotInteger,
    NestingTooDeep,
    NotAnObject,
    NotCompact,
    NulCharacter,
    StringTooLong,
    UnsupportedVersion,
    WrongKeys,
    WrongType,
)

LINE_BYTES_MAX = 1024 * 1024
"""The longest line a reader accepts, newline included (docs/reference/stream-format.md, "The 1 MiB limit")."""

NESTING_DEPTH_MAX = 64
"""The deepest nesting of arrays and objects a line may have (stream 1.3 needs 4)."""

STREAM_MAJOR = 1
"""The one stream major this reader speaks; any minor of it is read."""
STREAM_MINOR_KNOWN = 4
"""The newest minor of `STREAM_MAJOR` this reader knows (1.4). A stream of a newer minor may carry
envelope keys after `data` that this reader does not know: they are ignored (`decode_stream_line`)."""
SUPPORTED_MAJORS: frozenset[int] = frozenset({STREAM_MAJOR})
"""The stream majors this platform reads. A stream of any other major is refused, nothing of it
applied; a pass re-reads it on its own once the platform is upgraded to read its major."""

BIGINT_MAX = 2**63 - 1
"""Money and counts must fit a Postgres bigint."""

IDENTIFIER_BYTES_MAX = 255
"""The longest identifier-like string, in UTF-8 bytes: `engine_run_id`, `book_id`,
`chunker_version`, `stream_version`, `unit`, a phase name, `ceiling.scope`, `finished.outcome`,
`finished.refusal`. They land in indexed columns. (The engine keeps its own copy of the number.)"""

TEXT_BYTES_MAX = 4096
"""The longest free-text string, in UTF-8 bytes: `bank_stop.signature`."""

_FITS_ANY_BOUND = IDENTIFIER_BYTES_MAX // 4
"""A string of at most this many characters fits every bound without being measured in bytes:
a character is at most 4 bytes of UTF-8."""

_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_CLOCK = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z")
"""What follows a real day in `time` (from its 12th character): a real time of that day."""
_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")
_BOM = b"\xef\xbb\xbf"
_JSON_TYPES = {bool: "a bool", int: "an integer", float: "a float", str: "a string"}
_FRAME_KEYS = ("seq", "type", "time", "data")
_STRING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string token, escapes included (`\\"` does not end it, `\\\\` is one escape)."""
_WHITESPACE = re.compile(rb"[ \t\n\r]")
# Bound once for the fast path of `decode_line`, which uses them on every line.
_loads = orjson.loads
_dumps = orjson.dumps
_AS_LINE = orjson.OPT_APPEND_NEWLINE

_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else byte for byte in range(256))
"""`bytes.translate` table of a line's skeleton: every ASCII digit read as `0`."""
_NAME_DIGITS_AS_ZERO = {code: 0x30 for code in range(0x30, 0x3A)}
"""The same for a `str` (a phase name): only the ASCII digits, as in the line's bytes."""
_SKELETONS: dict[bytes, int] = {}
"""The skeletons of lines judged valid by the fast path, each with what a line of that skeleton
still needs judged: bit 0 set, its phases' `done <= total` compared; the bits above it, when not 0,
the number of phases it must have (`_PHASES_SHIFT`).

A line of progress, unit_done or spend that the fast path accepted as closed (only known fields),
with no backslash, no run of 19 digits and at most `_SKELETON_BYTES_MAX` bytes is remembered by its
skeleton. A line
with the same skeleton differs from it only in which digits stand where digits stood. Outside its
strings those digits are its numbers: the same numbers of the same width, so each a non-negative
integer below 10**18 (a leading zero is not JSON and fails the parse). Its strings keep their
bounds (only ASCII digits changed, so their UTF-8 length is the same), stay non-empty and hold no
U+0000 (without a backslash there is no escape); its keys, its order, its compactness and its
nesting are the remembered line's; its time has the remembered shape, digits where digits are.
What is left to judge: a seq of 0, the time's instant, `done <= total` in a phase whose `done`
was written with as many digits as its `total` or more (fewer digits: it is below `total`), and,
when two phase names of the remembered line read the same with their digits as 0 (`phase-1`,
`phase-2`), that no name is written twice: the parsed phases must be as many as the remembered
line's (the parser keeps one of two equal keys). Every other key is fixed text without digits.

Lines of one stream share few skeletons (numbers grow a digit now and then); the map is emptied
when it holds `_SKELETONS_MAX` of them, so it holds about a mebibyte at most. It is a cache: any
state of it gives the same verdicts, and a lost or raced entry only sends a line down the longer
path."""
_SKELETONS_MAX = 1024
_SKELETON_BYTES_MAX = 1024
_COMPARE_COUNTS = 1
_PHASES_SHIFT = 1
_LEARNED_KINDS = frozenset({"progress", "unit_done", "spend"})
_LONG_DIGIT_RUN = re.compile(rb"[0-9]{19}")


class Line(msgspec.Struct, frozen=True, gc=False):
    """One decoded line. `data` is the line's `data` object as parsed (unknown fields kept).

    A struct rather than a named tuple so that a line whose skeleton is remembered is parsed
    straight into it (`_parse_as_line`), its four members typed on the way. Not tracked by the
    cycle collector: a decoded line refers to nothing that could refer back to it."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]


_parse_as_line = msgspec.json.Decoder(Line).decode
"""Parse a line into a `Line`, refusing with a `ValueError` (`msgspec.DecodeError`) a value that is
not JSON or whose members are not of their types. Only used on a line whose skeleton is remembered:
its keys, their order and their types are already proven by it (a leading zero, which is not
JSON, is what it can still find)."""


class _TimeMemo:
    """The last time found valid (the lines of one commit share it), its day (`YYYY-MM-DDT`: the
    commits of one day share it) and its minute (`YYYY-MM-DDTHH:MM:`, for a line whose skeleton
    already proves the time's shape: only the tens of its second are left to judge). Each is equal
    to no JSON value until a valid time is seen."""

    __slots__ = ("day", "last", "minute")

    def __init__(self) -> None:
        self.last: object = object()
        self.day: object = object()
        self.minute: object = object()


_TIME_MEMO = _TimeMemo()


def decode_line(raw: bytes) -> Line:
    """Decode one complete line (its bytes end with `\\n`) or raise a `LineRefused` subclass.

    The error's `offset` is left for the caller, who knows where the line starts.

    A line whose skeleton is remembered (`_SKELETONS`: a progress, unit_done or spend line of the
    same shape was judged valid before) is accepted after its parse, a look at its seq and time
    and, for some progress lines, at each phase's counts: the skeleton proves the rest.

    Any other line as the emitter writes it is accepted after one parse and a few checks of the
    parsed value. It is exactly what orjson writes back from that value, newline included, which
    proves it UTF-8 and compact, without a key twice, a byte-order mark or a carriage return. The
    check of its type returns whether its data is closed (only known fields, their strings free of
    U+0000): a closed line holds U+0000 nowhere and nests 4 deep at most, so only the bytes of
    another line are searched for the escape `\\u0000` and counted for depth. A line not so
    accepted, valid or not, is judged rule by rule by `_decode_precisely`: a refusal is always
    that of the first rule the line breaks.
    """
    # One pass over the bytes, unbounded: a line over the limit is copied once here, as the parse
    # below would copy its strings, before the precise judge refuses it.
    still_to_judge = _SKELETONS.get(raw.translate(_DIGITS_AS_ZERO))
    if still_to_judge is not None:
        try:
            line = _parse_as_line(raw)
        except ValueError:  # a number with a leading zero is not JSON
            return _decode_precisely(raw)
        time = line.time
        if time != _TIME_MEMO.last:
            if time[:17] == _TIME_MEMO.minute and time[17] < "6":
                _TIME_MEMO.last = time  # the lines after it in its commit share it
            elif not _is_time(time):
                return _decode_precisely(raw)
        if line.seq:  # any width of digits but a lone 0 is a valid seq
            if not still_to_judge:
                return line
            phases = line.data["phases"]
            expected = still_to_judge >> _PHASES_SHIFT
            if expected and len(phases) != expected:
                return _decode_precisely(raw)  # a phase named twice
            if not still_to_judge & _COMPARE_COUNTS:
                return line
            for counts in phases.values():
                if counts["done"] > counts["total"]:
                    break
            else:
                return line
        return _decode_precisely(raw)
    if len(raw) <= LINE_BYTES_MAX:
        try:
            value = _loads(raw)  # the newline is JSON whitespace: no copy without it
            first, second, third, fourth = value  # ValueError: not four members
            canonical = (
                type(value) is dict
                and first == "seq"
                and second == "type"
                and third == "time"
                and fourth == "data"
                and _dumps(value, option=_AS_LINE) == raw
            )
        except (ValueError, TypeError):  # also orjson's: not JSON, or nested past its limit
            canonical = False
        if canonical:
            seq, kind, time, data = value.values()
            if (
                type(seq) is int
                and 0 < seq <= BIGINT_MAX
                and type(kind) is str
                and (time == _TIME_MEMO.last or _is_time(time))
                and type(data) is dict
            ):
                check = _CHECKS.get(kind)
                try:
                    closed = check is not None and check(data, seq)
                except LineRefused:  # maybe not the first rule the line breaks: judged below
                    pass
                else:
                    if closed:
                        if kind in _LEARNED_KINDS:
                            _remember_skeleton(raw, kind, data)
                        return Line(seq, kind, time, data)
                    if (
                        kind
                        and raw.count(b"[") + raw.count(b"{") <= NESTING_DEPTH_MAX
                        and raw.find(b"\\u0000") == -1
                    ):
                        return Line(seq, kind, time, data)
    return _decode_precisely(raw)


def _remember_skeleton(raw: bytes, kind: str, data: dict[str, Any]) -> None:
    """Remember the skeleton of a closed line the fast path accepted, when it can stand for every
    line of that skeleton (see `_SKELETONS` for why each condition is needed)."""
    if (
        len(raw) > _SKELETON_BYTES_MAX
        or raw.find(b"\\") != -1
        or _LONG_DIGIT_RUN.search(raw) is not None
    ):
        return
    still_to_judge = 0
    if kind == "progress":
        phases: dict[str, dict[str, int]] = data["phases"]
        if len({name.translate(_NAME_DIGITS_AS_ZERO) for name in phases}) != len(phases):
            # "p1" and "p2": a line of this skeleton could name one phase twice
            still_to_judge = len(phases) << _PHASES_SHIFT
        if any(len(str(counts["done"])) >= len(str(counts["total"])) for counts in phases.values()):
            still_to_judge |= _COMPARE_COUNTS
    if len(_SKELETONS) >= _SKELETONS_MAX:
        _SKELETONS.clear()
    _SKELETONS[raw.translate(_DIGITS_AS_ZERO)] = still_to_judge


def decode_stream_line(raw: bytes, stream_version: str | None) -> Line:
    """`decode_line` for a line of a stream of `stream_version` (None: not known; a hello names
    its own). A stream of a minor newer than this reader knows may carry keys after `data` in
    its envelope: they are ignored, as unknown `data` fields are, and every other rule holds for
    them (compact, no key twice, no U+0000, the nesting bound). A stream of a minor this reader
    knows keeps the envelope exactly seq, type, time, data."""
    try:
        return decode_line(raw)
    except WrongKeys as strict:
        newer = stream_version is not None and is_newer_minor(stream_version)
        try:
            line = _decode_precisely(raw, newer_minor=True)
        except LineRefused:
            if newer:
                raise
            raise strict from None
        if line.type == "hello":
            version = line.data["stream_version"]  # a hello names its own stream's version
            newer = type(version) is str and is_newer_minor(version)
        if newer:
            return line
        raise strict from None


def is_newer_minor(version: str) -> bool:
    """Whether `version` is of this reader's major and of a minor newer than it knows."""
    match = _VERSION.fullmatch(version)
    return (
        match is not None
        and int(match.group(1)) == STREAM_MAJOR
        and int(match.group(2)) > STREAM_MINOR_KNOWN
    )


def _decode_precisely(raw: bytes, *, newer_minor: bool = False) -> Line:
    """Judge a line rule by rule, in this order, and raise the refusal of the first it breaks.
    With `newer_minor`, keys after `data` in the envelope are allowed (and ignored)."""
    if len(raw) > LINE_BYTES_MAX:
        raise LineTooLong(len(raw), LINE_BYTES_MAX)
    if raw[-1:] != b"\n":
        raise InvalidJson("the line does not end with a newline")
    if raw.startswith(_BOM):
        raise InvalidJson("the line starts with a byte-order mark")
    if raw.find(b"\r") != -1:  # find, not `in`: `in` first tries the bytes as an integer
        raise InvalidJson("the line contains a carriage return")
    if raw.count(b"[") + raw.count(b"{") > NESTING_DEPTH_MAX:
        depth = _nesting_depth(raw)
        if depth > NESTING_DEPTH_MAX:
            raise NestingTooDeep(depth, NESTING_DEPTH_MAX)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            raise InvalidUtf8(f"not UTF-8 at byte {utf8_error.start}") from error
        raise InvalidJson(f"not JSON: {error}") from error
    if type(value) is not dict:
        raise NotAnObject("the line is not a JSON object")
    # What orjson writes back from the value (the newline aside) is compact, with no key twice;
    # another writer's escapes or number forms get the precise look.
    body = raw[:-1]
    if orjson.dumps(value) != body:
        _check_compact(body, value)
    keys = tuple(value)
    if keys != _FRAME_KEYS and not (newer_minor and keys[:4] == _FRAME_KEYS):
        raise WrongKeys(
            "the line's keys must be exactly seq, type, time, data, in that order",
            seq=_seq_of(value),
        )
    # U+0000 can only arrive as the escape; an escaped backslash followed by `u0000` is not it.
    if raw.find(b"\\u0000") != -1 and _contains_nul(value):
        raise NulCharacter(
            "the line contains U+0000, which Postgres cannot store", seq=_seq_of(value)
        )
    seq = value["seq"]
    if type(seq) is not int or seq < 1 or seq > BIGINT_MAX:
        raise WrongType("seq", "an integer >= 1")
    kind = value["type"]
    if type(kind) is not str or not kind:
        raise WrongType("type", "a non-empty string", seq=seq)
    time: Any = value["time"]
    if time != _TIME_MEMO.last and not _is_time(time):
        raise WrongType("time", "a real instant, RFC 3339 UTC with milliseconds and Z", seq=seq)
    data = value["data"]
    if type(data) is not dict:
        raise WrongType("data", "a JSON object", seq=seq)
    check = _CHECKS.get(kind)
    if check is not None:
        check(data, seq)
    return Line(seq, kind, time, data)


def _seq_of(value: dict[str, Any]) -> int | None:
    """The line's seq when it has a valid one, for a refusal found before the seq is judged."""
    seq = value.get("seq")
    return seq if type(seq) is int and 1 <= seq <= BIGINT_MAX else None


def _check_compact(body: bytes, value: dict[str, Any]) -> None:
    """Refuse whitespace outside strings and a key repeated in any object (the slow path)."""
    if _WHITESPACE.search(_STRING_TOKEN.sub(b"", body)) is not None:
        raise NotCompact("the line is not compact: whitespace outside strings", seq=_seq_of(value))

    def refuse_duplicates(pairs: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key, seq=_seq_of(value))
            seen.add(key)

    try:
        json.loads(body, object_pairs_hook=refuse_duplicates)
    except MalformedLine:
        raise
    except ValueError as error:  # orjson read it; only a limit of the json module can fail here
        raise InvalidJson(f"not JSON: {error}") from error


def _contains_nul(value: object) -> bool:
    """Whether U+0000 is in any string of a parsed value, keys included, at any depth."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _contains_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_contains_nul(item) for item in value)
    return False


def _is_time(time: object) -> bool:
    """Whether `time` is RFC 3339 UTC with milliseconds and Z, in ASCII digits, naming a real
    instant (no 30 February, no hour 24); remembered when it is, and its day with it."""
    if type(time) is not str:
        return False
    if time[:11] == _TIME_MEMO.day:  # a day found real: only the clock is left to judge
        if _CLOCK.fullmatch(time, 11) is None:
            return False
    else:
        if _TIME.fullmatch(time) is None:
            return False
        try:
            dt.datetime.fromisoformat(time[:-1])
        except ValueError:
            return False
        _TIME_MEMO.day = time[:11]
    _TIME_MEMO.last = time
    _TIME_MEMO.minute = time[:17]
    return True


def _nesting_depth(body: bytes) -> int:
    """The deepest nesting of `[` and `{` outside strings (only called on suspicious lines)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), "an array or object")


def _money(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> int:
    value = data.get(key)
    name = field or key
    if type(value) is not int:
        found = "nothing" if key not in data else _json_type(value)
        raise MoneyNotInteger(name, found, seq=seq)
    if value < 0:
        raise MoneyNotInteger(name, "a negative integer", seq=seq)
    if value > BIGINT_MAX:
        raise MoneyNotInteger(name, "an integer beyond 64 bits", seq=seq)
    return value


def _bounded(value: str, field: str, limit_bytes: int, seq: int) -> None:
    # A character is at most 4 bytes of UTF-8: most strings need no encoding to be measured.
    if len(value) * 4 > limit_bytes and len(value.encode()) > limit_bytes:
        raise StringTooLong(field, limit_bytes, seq=seq)


def _string(
    data: dict[str, Any],
    key: str,
    seq: int,
    *,
    nullable: bool = False,
    limit_bytes: int = IDENTIFIER_BYTES_MAX,
) -> None:
    value = data.get(key)
    if value is None and nullable:
        return
    if type(value) is not str:
        raise WrongType(key, "a string" + (" or null" if nullable else ""), seq=seq)
    if len(value) * 4 > limit_bytes and len(value.encode()) > limit_bytes:
        raise StringTooLong(key, limit_bytes, seq=seq)


def _count(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> None:
    value = data.get(key)
    if type(value) is not int or value < 0 or value > BIGINT_MAX:
        raise WrongType(field or key, "a non-negative integer", seq=seq)


def _object(data: dict[str, Any], key: str, seq: int) -> dict[str, Any]:
    value = data.get(key)
    if type(value) is not dict:
        raise WrongType(key, "a JSON object", seq=seq)
    return value


def stream_major(version: str) -> int | None:
    """The major of a `MAJOR.MINOR` version string, or None when it is not one."""
    match = _VERSION.fullmatch(version)
    return None if match is None else int(match.group(1))


def reads_major(version: str) -> bool:
    """True when this platform reads streams of `version`'s major (`SUPPORTED_MAJORS`)."""
    major = stream_major(version)
    return major is not None and major in SUPPORTED_MAJORS


# Each check refuses data that breaks a rule of its type and returns whether the data is closed:
# only its known fields, none of their strings holding U+0000. A closed line can hold U+0000
# nowhere and nests 4 deep at most, so the fast path of `decode_line` searches its bytes for
# neither. The types a stream carries once (hello, bank_stop, ceiling, finished) prove nothing:
# their bytes are searched.


def _check_hello(data: dict[str, Any], seq: int) -> bool:
    # The version and the stream id are kept even from another major's hello (its refusal names
    # the stream), so their bounds apply before the major is judged.
    _string(data, "stream_version", seq)
    major = stream_major(data["stream_version"])
    if major is None:
        raise WrongType("stream_version", "MAJOR.MINOR", seq=seq)
    run_id = data.get("engine_run_id")
    if type(run_id) is not str or not run_id:
        raise WrongType("engine_run_id", "a non-empty string", seq=seq)
    _bounded(run_id, "engine_run_id", IDENTIFIER_BYTES_MAX, seq)
    if major not in SUPPORTED_MAJORS:
        book = data.get("book_id")
        if not isinstance(book, str) or len(book.encode()) > IDENTIFIER_BYTES_MAX:
            book = ""  # nothing else of another major's hello is judged; an unfit id is not kept
        raise UnsupportedVersion(
            data["stream_version"],
            engine_run_id=run_id,
            book_id=book,
            seq=seq,
        )
    _string(data, "book_id", seq)
    _string(data, "chunker_version", seq)
    if "pid" in data:  # since 1.4, optional; checked whatever minor the hello names
        pid = data["pid"]
        if type(pid) is not int or not 1 <= pid <= BIGINT_MAX:
            raise WrongType("pid", "an integer from 1 to 2**63 - 1", seq=seq)
    if seq != 1:
        raise HelloNotFirst(
            f"a hello must carry seq 1, found seq {seq}", seq=seq, engine_run_id=run_id
        )
    return False


def _check_progress(data: dict[str, Any], seq: int) -> bool:
    phases = data.get("phases")
    if type(phases) is not dict:
        raise WrongType("phases", "a JSON object", seq=seq)
    closed = len(data) == 1
    for name, counts in phases.items():  # every phase of every snapshot: the usual case inline
        try:
            done, total = counts["done"], counts["total"]
        except (KeyError, TypeError):  # a count missing, or not an object: judged below
            done = total = None
        if not (
            type(done) is int
            and type(total) is int
            and 0 <= done <= total <= BIGINT_MAX
            and len(name) <= _FITS_ANY_BOUND
            and len(counts) == 2
            and "\x00" not in name
        ):
            _check_phase(name, counts, seq)
            closed = False
    return closed


def _check_phase(name: str, counts: Any, seq: int) -> None:
    """Refuse a phase that breaks a rule; a long name within its bound, U+0000 in the name (the
    line's bytes are searched for it) or other fields beside the counts pass."""
    _bounded(name, "a phase name", IDENTIFIER_BYTES_MAX, seq)
    if type(counts) is not dict:
        raise WrongType(f"phases.{name}", "a JSON object", seq=seq)
    done, total = counts.get("done"), counts.get("total")
    if type(done) is int and type(total) is int and 0 <= done <= total <= BIGINT_MAX:
        return
    _count(counts, "done", seq, field=f"phases.{name}.done")
    _count(counts, "total", seq, field=f"phases.{name}.total")
    raise WrongType(f"phases.{name}.done", f"at most phases.{name}.total", seq=seq)


def _check_unit_done(data: dict[str, Any], seq: int) -> bool:
    try:
        unit, index = data["unit"], data["index"]
    except KeyError:  # judged below
        unit = index = None
    if (
        type(unit) is str
        and unit
        and len(unit) <= _FITS_ANY_BOUND
        and type(index) is int
        and 0 <= index <= BIGINT_MAX
    ):
        return len(data) == 2 and "\x00" not in unit
    _string(data, "unit", seq)  # refuses a wrong type, measures a long string's bytes
    if not data["unit"]:
        raise WrongType("unit", "a non-empty string", seq=seq)
    _count(data, "index", seq)
    return False


def _check_bank_stop(data: dict[str, Any], seq: int) -> bool:
    _string(data, "signature", seq, limit_bytes=TEXT_BYTES_MAX)
    return False


def _check_ceiling(data: dict[str, Any], seq: int) -> bool:
    if type(data.get("halted")) is not bool:
        raise WrongType("halted", "a bool", seq=seq)
    _string(data, "scope", seq)
    if "shortfall_micro_usd" in data:  # since 1.3; a 1.2 writer leaves it out
        _money(data, "shortfall_micro_usd", seq)
    return False


def _check_spend(data: dict[str, Any], seq: int) -> bool:
    try:
        money = data["committed_micro_usd"]
    except KeyError:
        money = None
    if type(money) is not int or not 0 <= money <= BIGINT_MAX:
        _money(data, "committed_micro_usd", seq)  # refuses it, naming what it found
    return len(data) == 1


def _check_finished(data: dict[str, Any], seq: int) -> bool:
    _string(data, "outcome", seq)
    code = data.get("exit_code")
    if type(code) is not int or not 0 <= code <= 255:
        raise WrongType("exit_code", "an integer 0-255", seq=seq)
    if data.get("stop") not in (None, "soft", "hard"):
        raise WrongType("stop", 'null, "soft" or "hard"', seq=seq)
    _string(data, "refusal", seq, nullable=True)
    volume = _object(data, "volume", seq)
    _count(volume, "units_done", seq, field="volume.units_done")
    _count(volume, "units_total", seq, field="volume.units_total")
    if "money" in data:  # since 1.3
        money = _object(data, "money", seq)
        _money(money, "committed_micro_usd", seq, field="money.committed_micro_usd")
    return False


_CHECKS = {
    "hello": _check_hello,
    "progress": _check_progress,
    "unit_done": _check_unit_done,
    "bank_stop": _check_bank_stop,
    "ceiling": _check_ceiling,
    "spend": _check_spend,
    "finished": _check_finished,
}
KNOWN_TYPES = frozenset(_CHECKS)
"""The event types of stream 1.3. Any other type of the same major is read and ignored."""
