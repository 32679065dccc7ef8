"""Whether bytes read from the CommitLog hold the record they should, and if not, what is wrong with them.

The one statement of "a damaged record" outside the recovery scan (``CommitLog.scan`` applies the same checks
inline, for speed): ``QueueReader`` checks every record before serving it, and recovery calls
``record_problem`` to say why its scan stopped. Pure functions over bytes; callers name the file.
"""

from __future__ import annotations

import zlib

from broker_store.protocol.message import BLANK_MAGIC, MAGIC_V1, STORED_HEADER, STORED_HEADER_SIZE

MIN_RECORD_SIZE = STORED_HEADER_SIZE + 1 + 2
"""An empty body, an empty topic, no properties."""


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
    fields = STORED_HEADER.unpack_from(record)
    crc, phys, body_len = fields[2], fields[6], fields[16]
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
