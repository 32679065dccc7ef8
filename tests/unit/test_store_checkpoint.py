"""The store checkpoint file (store.checkpoint): version 2 with the confirm offset, version 1 still read."""

from __future__ import annotations

import struct
import zlib

from broker_store.store.checkpoint import CHECKPOINT_V1_BODY, Checkpoint


def test_checkpoint_version_2_round_trip() -> None:
    cp = Checkpoint(commit_log_flushed=4096, dispatch_flushed=4000, commit_log_min=0, written_at_ms=7,
                    confirm_offset=3900)
    raw = cp.encode()
    assert len(raw) == 56 and raw[4:6] == b"\x00\x02"
    assert Checkpoint.decode(raw) == cp
    unknown = Checkpoint(1, 1, 0, 0)
    assert Checkpoint.decode(unknown.encode()) == unknown and unknown.confirm_offset is None
    damaged = bytearray(raw)
    damaged[45] ^= 1  # inside CONFIRM_OFFSET: the CRC covers it
    assert Checkpoint.decode(bytes(damaged)) is None


def v1_bytes(flushed: int, dispatched: int, cl_min: int, written: int, version: int = 1) -> bytes:
    """A checkpoint as version 1 wrote it (48 bytes), built from that layout, not from the current code."""
    body = struct.pack(">4sHHqqqq", b"RMQK", version, 0, flushed, dispatched, cl_min, written)
    return body + struct.pack(">Ii", zlib.crc32(body), 0)


def test_checkpoint_version_1_still_read() -> None:
    assert CHECKPOINT_V1_BODY.size == 40
    assert Checkpoint.decode(v1_bytes(4096, 4000, 0, 7)) == Checkpoint(4096, 4000, 0, 7, None)
    assert Checkpoint.decode(v1_bytes(4096, 4000, 0, 7, version=2)) is None  # size and version must agree
    assert Checkpoint.decode(v1_bytes(4096, 4000, 0, 7)[:47]) is None
    v2_marked_1 = bytearray(Checkpoint(1, 1, 0, 0, 5).encode())
    v2_marked_1[5] = 1
    assert Checkpoint.decode(bytes(v2_marked_1)) is None
