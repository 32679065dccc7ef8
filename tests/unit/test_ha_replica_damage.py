"""A replica refuses a damaged record its HA link brings (docs/operations.md, "Damaged files and a full disk"): the
records before it are written and served, the damaged one is neither acked (the write fails, so the link sends no report
past it) nor served, and the good bytes are taken when they come again. Real stores in tmp_path, fed through the calls
the HA replica client makes (``write_commit_log`` then ``index_commit_log``: ``ha.replica_client``); the pure walk is
``record_check.check_arrival``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker_store.protocol.errors import RefusedRecordError
from broker_store.protocol.message import STORED_HEADER_SIZE, decode_stored_messages, encode_stored_message
from broker_store.store import MessageStore
from broker_store.store.record_check import check_arrival, claimed_end
from tests.unit.test_store import SEG, make_store, pull_all, put

TOPIC = "Dmg"


def records(n: int, start: int = 0) -> list[bytes]:
    out: list[bytes] = []
    pos = start
    for i in range(n):
        record = encode_stored_message(topic=TOPIC.encode(), queue_id=0, queue_offset=i, physical_offset=pos,
                                       body=bytes([i]) * (100 + i), properties=b"")
        out.append(record)
        pos += len(record)
    return out


def flipped(data: bytes, at: int) -> bytes:
    raw = bytearray(data)
    raw[at] ^= 0x5A
    return bytes(raw)


def test_check_arrival_walks_whole_records_and_names_the_damaged_one() -> None:
    recs = records(4, start=SEG)
    data = b"".join(recs)
    assert check_arrival(data, SEG, SEG) == (SEG + len(data), None)
    cut = len(data) - 10  # the last record arrives in part: checked once it is whole
    assert check_arrival(data[:cut], SEG, SEG) == (SEG + len(data) - len(recs[-1]), None)
    third = SEG + len(recs[0]) + len(recs[1])
    at, problem = check_arrival(flipped(data, third - SEG + STORED_HEADER_SIZE), SEG, SEG)
    assert at == third and problem is not None and "BODYCRC" in problem, problem
    at, problem = check_arrival(flipped(data, third - SEG + 5), SEG, SEG)  # its MAGICCODE
    assert at == third and problem is not None and "MAGICCODE" in problem, problem
    assert claimed_end(data, SEG, third, SEG) == third + len(recs[2])  # where its TOTALSIZE says it ends
    assert claimed_end(flipped(data, third - SEG), SEG, third, SEG) == third + 8  # a TOTALSIZE not to believe


def follow(replica: MessageStore, primary: MessageStore, chunk: int, damage_at: int | None = None) -> None:
    """Ship the primary's log to the replica as the HA link does, flipping the byte at ``damage_at`` in transit."""
    while replica.max_physical_offset < primary.max_physical_offset:
        offset = replica.max_physical_offset
        data = primary.read_commit_log(offset, chunk)
        if damage_at is not None and offset <= damage_at < offset + len(data):
            data = flipped(data, damage_at - offset)
        replica.write_commit_log(offset, data)
        replica.index_commit_log()


@pytest.mark.parametrize("chunk", [64 * 1024, 777], ids=["whole-record", "record-split-across-reads"])
def test_replica_refuses_a_damaged_record_and_takes_it_when_it_comes_again(tmp_path: Path, chunk: int) -> None:
    primary = make_store(tmp_path / "p")
    replica = make_store(tmp_path / "r")
    try:
        for i in range(60):
            put(primary, TOPIC, 0, os.urandom(200 + i * 7))
        wanted = decode_stored_messages(pull_all(primary, TOPIC, 0))
        victim = wanted[30].commit_log_offset
        with pytest.raises(RefusedRecordError, match=f"refused a damaged record from the primary at commit log "
                                                     f"offset {victim} .*BODYCRC") as refused:
            follow(replica, primary, chunk, damage_at=victim + STORED_HEADER_SIZE + 3)
        # where it ends (by its TOTALSIZE): the replica's log reaching there means it came intact
        assert (refused.value.offset, refused.value.end) == (victim, wanted[31].commit_log_offset)
        # nothing of it is kept (a part received earlier is cut off again), so nothing past it is acked ...
        assert replica.max_physical_offset == victim
        replica.index_commit_log()  # what the link's next write is followed by
        # ... or served: the records before it are, it is not
        assert [m.queue_offset for m in decode_stored_messages(pull_all(replica, TOPIC, 0))] == list(range(30))
        assert replica.read_record(victim) is None
        follow(replica, primary, chunk)  # the link reconnects: the primary sends it again, intact
        assert pull_all(replica, TOPIC, 0) == pull_all(primary, TOPIC, 0)
    finally:
        replica.shutdown()
        primary.shutdown()
