"""What the decoder remembers between lines, so that the next line of the same shape takes a
shorter path. Only the path: any state of it, empty, full or raced between threads, gives the same
verdict for every line (tests/platform/test_decoder.py holds that the fast lanes and the precise
judge agree, with the memo empty and filled).

One process-wide `DecoderMemo` (`MEMO` in `decode`) serves every pass: the lines of one stream
share their few skeletons and their times across passes and books. `forget` empties it in place.
"""

from __future__ import annotations

import re
from typing import Any

from engine_events.grammar import TimeMemo

DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else byte for byte in range(256))
"""`bytes.translate` table of a line's skeleton: every ASCII digit read as `0`."""
_NAME_DIGITS_AS_ZERO = {code: 0x30 for code in range(0x30, 0x3A)}
"""The same for a `str` (a phase name): only the ASCII digits, as in the line's bytes."""
SKELETONS_MAX = 1024
"""How many skeletons the memo holds before it empties its map (about a mebibyte at most)."""
_SKELETON_BYTES_MAX = 1024
COMPARE_COUNTS = 1
"""Bit 0 of a skeleton's entry: its phases' `done <= total` must still be compared."""
PHASES_SHIFT = 1
"""The bits above it, when not 0: the number of phases a line of the skeleton must have."""
LEARNED_KINDS = frozenset({"progress", "unit_done", "spend"})
"""The types whose skeletons are remembered: the usual lines of a stream."""
_LONG_DIGIT_RUN = re.compile(rb"[0-9]{19}")


class DecoderMemo(TimeMemo):
    """The skeletons of lines judged valid, and the last valid time, its day and its minute.

    `skeletons` maps the skeleton of a line (its bytes with every digit read as 0) that the fast
    path accepted to what a line of that skeleton still needs judged: bit 0 (`COMPARE_COUNTS`)
    set, its phases' `done <= total` compared; the bits above it (`PHASES_SHIFT`), when not 0, the
    number of phases it must have.

    A line of progress, unit_done or spend that the fast path accepted as closed (only known
    fields), with no backslash, no run of 19 digits and at most 1024 bytes is remembered by its
    skeleton. A line with the same skeleton differs from it only in which digits stand where
    digits stood. Outside its strings those digits are its numbers: the same numbers of the same
    width, so each a non-negative integer below 10**18 (a leading zero is not JSON and fails the
    parse). Its strings keep their bounds (only ASCII digits changed, so their UTF-8 length is the
    same), stay non-empty and hold no U+0000 (without a backslash there is no escape); its keys,
    its order, its compactness and its nesting are the remembered line's; its time has the
    remembered shape, digits where digits are. What is left to judge: a seq of 0, the time's
    instant, `done <= total` in a phase whose `done` was written with as many digits as its
    `total` or more (fewer digits: it is below `total`), and, when two phase names of the
    remembered line read the same with their digits as 0 (`phase-1`, `phase-2`), that no name is
    written twice: the parsed phases must be as many as the remembered line's (the parser keeps
    one of two equal keys). Every other key is fixed text without digits.

    `last_time` is the last time found valid (the lines of one commit share it), `day` its day
    (`YYYY-MM-DDT`: the commits of one day share it) and `minute` its minute (`YYYY-MM-DDTHH:MM:`,
    for a line whose skeleton already proves the time's shape: only the tens of its second are
    left to judge). Each is equal to no JSON value until a valid time is seen.
    """

    __slots__ = ("skeletons",)

    def __init__(self) -> None:
        super().__init__()
        self.skeletons: dict[bytes, int] = {}

    def forget(self) -> None:
        """Empty the memo in place (the decoder holds its map bound once)."""
        super().forget()
        self.skeletons.clear()

    def remember_skeleton(self, raw: bytes, kind: str, data: dict[str, Any]) -> None:
        """Remember the skeleton of a closed line the fast path accepted, when it can stand for
        every line of that skeleton (the class's docstring says why each condition is needed)."""
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
                still_to_judge = len(phases) << PHASES_SHIFT
            if any(
                len(str(counts["done"])) >= len(str(counts["total"])) for counts in phases.values()
            ):
                still_to_judge |= COMPARE_COUNTS
        skeletons = self.skeletons
        if len(skeletons) >= SKELETONS_MAX:
            skeletons.clear()
        skeletons[raw.translate(DIGITS_AS_ZERO)] = still_to_judge
