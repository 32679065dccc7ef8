"""Whether bytes read from the CommitLog hold the record they should, and if not, what is wrong with them.

The one statement of "a damaged record" outside the recovery scan (``CommitLog.scan`` applies the same checks
inline, for speed): ``QueueReader`` checks every record before serving it, recovery calls ``record_problem``
to say why its scan stopped, and a replica checks what its HA link brings before writing it
(``check_arrival``). Pure functions over bytes; callers name the file.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from broker_store.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MIN_RECORD_SIZE,
    STORED_HEADER_SIZE,
    STORED_OFFSETS,
    stored_header_view,
)

_CHECKED = stored_header_view("BODYCRC", "PHYSICALOFFSET", "BODYLEN")


def record_problem(record: bytes | memoryview, offset: int, expected_size: int | None = None) -> str | None:
    """Why ``record`` (bytes read at CommitLog ``offset``) is not one whole valid V1 record, or None if it is.

    Checked: the length of what was read, MAGICCODE, TOTALSIZE (against ``expected_size`` too, the size a
    ConsumeQueue entry gives), PHYSICALOFFSET (the record's own position), the body, topic and properties
    lengths adding up to TOTALSIZE, and BODYCRC. The V1 layout has no checksum over the other fields (as in
    RocketMQ), so a flipped byte in a header timestamp or in the properties goes unseen.
    """
    n = len(record)
    if n < 8:
        return f"only {n} bytes where a record should start"
    total = int.from_bytes(record[0:4], "big", signed=True)
    magic = int.from_bytes(record[4:8], "big", signed=True)
    if magic == BLANK_MAGIC:
        return "a segment's blank end record where a message should be"
    if magic != MAGIC_V1:
        return f"bad MAGICCODE {magic:#x} (expected {MAGIC_V1 & 0xFFFFFFFF:#x})"
    if total < MIN_RECORD_SIZE or (expected_size is not None and total != expected_size):
        want = f"its index says {expected_size}" if expected_size is not None else f"at least {MIN_RECORD_SIZE}"
        return f"bad TOTALSIZE {total} ({want})"
    if n < total:
        return f"record of {total} bytes cut short at {n} bytes"
    crc, phys, body_len = _CHECKED.unpack_from(record)
    if phys != offset:
        return f"PHYSICALOFFSET says {phys}"
    t = STORED_HEADER_SIZE + body_len
    if body_len < 0 or t + 3 > total:
        return f"BODYLEN {body_len} does not fit in TOTALSIZE {total}"
    p = t + 1 + record[t]
    if p + 2 > total or p + 2 + int.from_bytes(record[p:p + 2], "big") != total:
        return f"topic and properties lengths do not add up to TOTALSIZE {total}"
    actual = zlib.crc32(record[STORED_HEADER_SIZE:t]) & 0x7FFFFFFF
    if actual != crc:
        return f"BODYCRC {crc} does not match the body's CRC {actual}"
    return None


_HEAD = struct.Struct(">iii")  # TOTALSIZE, MAGICCODE, BODYCRC (a blank end record has the first two only)
_PHYS = struct.Struct(">q")  # PHYSICALOFFSET, at byte 28
_BODY_LEN = struct.Struct(">i")  # BODYLEN, at byte 84
_PHYS_AT, _BODY_LEN_AT, _BLANK_HEAD = STORED_OFFSETS["PHYSICALOFFSET"], STORED_OFFSETS["BODYLEN"], 8

_walk_arrival_c: Callable[[bytes | memoryview, int, int], tuple[int, bool]] | None
try:  # the walk in C (broker_store/store/_record_walk.c)
    from broker_store.store._record_walk import walk_arrival as _walk_arrival_c
except ImportError:  # pragma: no cover - depends on the build
    _walk_arrival_c = None


def check_arrival(data: bytes | memoryview, start: int, segment_size: int) -> tuple[int, str | None]:
    """Walk the records of ``data``, CommitLog bytes from offset ``start`` (a record boundary) within one
    segment, as a replica's HA link delivers them (the last record may be cut short: the rest comes next).

    Returns (the boundary after the last whole valid record, None) when every whole record checks out, or
    (the offset of the first damaged one, what is wrong with it: ``record_problem``'s checks, the first
    three inline, as this runs for every record a replica receives). A blank end record must fill its
    segment; a tail shorter than a blank record's header is padding.

    The walk runs in C (``_record_walk.walk_arrival``, built by pip install when a compiler is there) and
    says which record is damaged; ``walk_arrival`` below, the same walk in Python, says what is wrong with it
    (and runs everything where the C extension was not built).
    """
    if _walk_arrival_c is None:  # pragma: no cover - depends on the build
        return walk_arrival(data, start, segment_size)
    pos, intact = _walk_arrival_c(data, start, segment_size)
    if intact:
        return pos, None
    return walk_arrival(memoryview(data)[pos - start:], pos, segment_size)


def walk_arrival(data: bytes | memoryview, start: int, segment_size: int) -> tuple[int, str | None]:
    """``check_arrival`` in Python: the owner of its rules and messages."""
    view = memoryview(data)
    pos, end = start, start + len(view)
    crc32 = zlib.crc32
    while pos < end:
        room = segment_size - pos % segment_size
        if room < _BLANK_HEAD:  # the segment's padding
            if end < pos + room:
                break
            pos += room
            continue
        if end - pos < _BLANK_HEAD:
            break
        rel = pos - start
        total, magic = _HEAD.unpack_from(view, rel)[:2] if end - pos >= _HEAD.size else \
            (int.from_bytes(view[rel:rel + 4], "big", signed=True), int.from_bytes(view[rel + 4:rel + 8], "big",
                                                                                  signed=True))
        if magic == BLANK_MAGIC:
            if total != room:
                return pos, f"a blank end record of {total} bytes where the segment has {room} left"
            if end < pos + room:
                break
            pos += room
            continue
        if magic == MAGIC_V1 and MIN_RECORD_SIZE <= total <= room:
            if end < pos + total:
                break  # cut short: checked when the rest arrives
            crc = _HEAD.unpack_from(view, rel)[2]
            body_len = _BODY_LEN.unpack_from(view, rel + _BODY_LEN_AT)[0]
            t = rel + STORED_HEADER_SIZE + body_len
            if (0 <= body_len and t + 3 <= rel + total and _PHYS.unpack_from(view, rel + _PHYS_AT)[0] == pos
                    and crc32(view[rel + STORED_HEADER_SIZE:t]) & 0x7FFFFFFF == crc):
                p = t + 1 + view[t]
                if p + 2 <= rel + total and p + 2 + int.from_bytes(view[p:p + 2], "big") == rel + total:
                    pos += total
                    continue
        elif magic == MAGIC_V1 and total > room:
            return pos, f"TOTALSIZE {total} runs past the segment's end ({room} bytes left)"
        return pos, record_problem(view[rel:rel + max(total, _BLANK_HEAD)], pos) or "not a valid record"
    return pos, None


def claimed_end(data: bytes | memoryview, start: int, at: int, segment_size: int) -> int:
    """Where the record at offset ``at`` of ``data`` (CommitLog bytes from offset ``start``) ends by its TOTALSIZE,
    when that fits its segment; else ``at`` + 8 (the bytes ``check_arrival`` needs to judge a record)."""
    rel = at - start
    total = int.from_bytes(bytes(data[rel:rel + 4]), "big", signed=True) if len(data) - rel >= 4 else 0
    return at + total if _BLANK_HEAD <= total <= segment_size - at % segment_size else at + _BLANK_HEAD
