"""Reading a broker's CommitLog from its files after the processes stopped: which keys it stored, and whether
two members' logs diverge. The one checker of the fault checker (benchmarks/failover.py) and the partition
tests: what counts as lost and as divergent is decided here.

A member's log is read as segment start offset -> the file's bytes (``commitlog_image``). Records are decoded
with the protocol's ``decode_stored_message`` until a segment's blank end record, a torn tail or its
preallocated zero tail.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.message import decode_stored_message

KEY_PROPERTY = "KEYS"

Image = dict[int, bytes]


def commitlog_image(store_dir: Path) -> Image:
    """A member's CommitLog: segment start offset -> the file's bytes."""
    return {int(p.name): p.read_bytes() for p in sorted((Path(store_dir) / "commitlog").glob("[0-9]" * 20))}


def stored_keys(image: Image, topic: str) -> Counter[str]:
    """How often each ``KEYS`` value of ``topic``'s messages is stored in the image."""
    keys: Counter[str] = Counter()
    for data in image.values():
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            if size <= 0 or pos + size > len(data):
                break
            try:
                msg = decode_stored_message(data, pos)
            except RocketMQError:
                break  # a blank end-of-segment record or a torn tail
            if msg.topic == topic:
                keys[msg.properties.get(KEY_PROPERTY, "")] += 1
            pos += size
    return keys


def diverges(image: Image, reference: Image) -> bool:
    """Bytes differ anywhere both hold (segment by segment, over the shorter written length; a preallocated
    zero tail counts as not written)."""
    for start, data in image.items():
        other = reference.get(start)
        if other is None:
            continue
        n = min(len(data.rstrip(b"\0")), len(other.rstrip(b"\0")))
        if data[:n] != other[:n]:
            return True
    return False
