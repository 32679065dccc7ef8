"""Encoding of the records a put appends to the CommitLog (the V1 layout of ``protocol.message``).

Called by ``MessageStore``'s put path under the store lock, once the write offset and queue offset are
known. Records are byte-identical to ``protocol.message.encode_stored_message``'s.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, chain, count, repeat
from operator import add, and_
from zlib import crc32

from broker_store.protocol.message import MAGIC_V1, STORED_HEADER, STORED_HEADER_SIZE, stored_fields_struct
from broker_store.store.consume_queue import CQ_ENTRY

# STORED_HEADER split for the batch put: the fields every record of one put shares (SYSFLAG at byte 36
# through PREPARED_TX_OFFSET, 48 bytes) are packed once per put and passed as one "48s" field.
RECORD_MIDDLE = stored_fields_struct("SYSFLAG", "PREPARED_TX_OFFSET")
_RECORD_HEAD = struct.Struct(f"{stored_fields_struct('TOTALSIZE', 'PHYSICALOFFSET').format}{RECORD_MIDDLE.size}s"
                             f"{stored_fields_struct('BODYLEN', 'BODYLEN').format[1:]}")
assert _RECORD_HEAD.size == STORED_HEADER_SIZE and RECORD_MIDDLE.size == 48
_PROPS_LEN = struct.Struct(">H")  # PROPERTIESLEN


def encode_record(body: bytes | memoryview, props: bytes, topic_tail: bytes, total: int, queue_id: int,
                  flag: int, queue_offset: int, wrote: int, sys_flag: int, born_timestamp: int,
                  born: tuple[bytes, int], store_ts: int, store: tuple[bytes, int],
                  reconsume_times: int) -> bytes:
    """One record of ``total`` bytes stored at ``wrote`` (``topic_tail`` = TOPICLEN + topic)."""
    return b"".join((
        STORED_HEADER.pack(total, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, wrote,
                           sys_flag, born_timestamp, born[0], born[1], store_ts, store[0], store[1],
                           reconsume_times, 0, len(body)),
        body, topic_tail, len(props).to_bytes(2, "big"), props))


def encode_records(bodies: Sequence[bytes | memoryview], props_list: Sequence[bytes], flags: Sequence[int],
                   tags_codes: Sequence[int], body_lens: list[int], props_lens: list[int], fixed: int,
                   topic_tail: bytes, middle: bytes, queue_id: int, queue_offset: int,
                   wrote: int) -> tuple[bytes, list[int], bytes]:
    """(records, their CommitLog offsets, ConsumeQueue entries) of a batch stored back to back at ``wrote``.

    Column-wise on purpose: every step is a map/zip over whole columns, so the per-message work (CRC,
    struct packing, the join) is driven from C, not by a bytecode loop; the header fields a batch shares
    are packed once (``middle``, ``RECORD_MIDDLE``).
    """
    sizes = list(map(add, map(add, body_lens, props_lens), repeat(fixed)))
    offsets = list(accumulate(sizes, initial=wrote))
    offsets.pop()  # the end of the last record
    heads = map(_RECORD_HEAD.pack, sizes, repeat(MAGIC_V1), map(and_, map(crc32, bodies), repeat(0x7FFFFFFF)),
                repeat(queue_id), flags, count(queue_offset), offsets, repeat(middle), body_lens)
    props_len_fields = map(_PROPS_LEN.pack, props_lens)
    # one join of the pieces beats slice-assigning into a bytearray (benchmarks/MEASUREMENTS.md)
    records = b"".join(chain.from_iterable(zip(heads, bodies, repeat(topic_tail), props_len_fields, props_list)))
    return records, offsets, b"".join(map(CQ_ENTRY.pack, offsets, sizes, tags_codes))
