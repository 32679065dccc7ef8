"""The controller-mode HA link format: golden bytes (RocketMQ's sizes), decoding under any split, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.ha.errors import HAProtocolError
from broker_store.ha.wire_epoch import (
    EPOCH_ENTRY_SIZE,
    PRIMARY_HANDSHAKE_SIZE,
    REPLICA_ACK_SIZE,
    REPLICA_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    LinkState,
    PrimaryHandshake,
    PrimaryStreamDecoder,
    ReplicaHandshake,
    ReplicaStreamDecoder,
    TransferFrame,
    encode_primary_handshake,
    encode_replica_ack,
    encode_replica_handshake,
    encode_transfer,
)
from broker_store.store.epoch_cache import EpochCache, EpochEntry


def test_sizes_are_rocketmqs() -> None:
    assert (REPLICA_HANDSHAKE_SIZE, REPLICA_ACK_SIZE, PRIMARY_HANDSHAKE_SIZE, EPOCH_ENTRY_SIZE,
            TRANSFER_HEADER_SIZE) == (16, 12, 20, 12, 36)


def test_golden_bytes() -> None:
    assert encode_replica_handshake(ReplicaHandshake(3, sync_from_last_file=True)) == bytes.fromhex(
        "00000001" "0001" "0000" "0000000000000003")
    assert encode_replica_ack(0x1000) == bytes.fromhex("00000002" "0000000000001000")
    cache = EpochCache([EpochEntry(1, 0), EpochEntry(2, 0x100)])
    assert encode_primary_handshake(0x200, cache) == bytes.fromhex(
        "00000001" "00000018" "0000000000000200" "00000002"
        "00000001" "0000000000000000" "00000002" "0000000000000100")
    assert encode_transfer(0x180, b"ab", EpochEntry(2, 0x100), 0x170) == bytes.fromhex(
        "00000002" "00000002" "0000000000000180" "00000002" "0000000000000100" "0000000000000170") + b"ab"


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


_entries = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 10**6)), max_size=6).map(
    lambda pairs: EpochCache(EpochEntry(sum(e for e, _ in pairs[:i + 1]), sum(s for _, s in pairs[:i + 1]))
                             for i in range(len(pairs))))
_frames = st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**31 - 1), st.integers(0, 2**40),
                             st.integers(0, 2**40), st.binary(max_size=40)), max_size=6)


@given(_entries, st.integers(0, 2**40), _frames, st.lists(st.integers(0, 10_000), max_size=20))
def test_primary_stream_survives_any_split(epochs: EpochCache, extra: int,
                                           frames: list[tuple[int, int, int, int, bytes]], cuts: list[int]) -> None:
    last = epochs.last_entry
    max_offset = (last.start_offset if last else 0) + extra
    expected = [TransferFrame(start + gap, epoch, start, confirm, data) for start, epoch, gap, confirm, data in frames]
    stream = encode_primary_handshake(max_offset, epochs) + b"".join(
        encode_transfer(f.offset, f.data, EpochEntry(f.epoch, f.epoch_start_offset), f.confirm_offset)
        for f in expected)
    decoder = PrimaryStreamDecoder()
    out: list[PrimaryHandshake | TransferFrame] = []
    for chunk in _chunks(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == [PrimaryHandshake(max_offset, epochs), *expected]
    assert decoder.buffered == 0


@given(st.integers(0, 2**63 - 1), st.booleans(), st.booleans(), st.lists(st.integers(0, 2**63 - 1), max_size=10),
       st.lists(st.integers(0, 1000), max_size=10))
def test_replica_stream_survives_any_split(broker_id: int, last_file: bool, learner: bool, acks: list[int],
                                           cuts: list[int]) -> None:
    handshake = ReplicaHandshake(broker_id, last_file, learner)
    stream = encode_replica_handshake(handshake) + b"".join(map(encode_replica_ack, acks))
    decoder = ReplicaStreamDecoder()
    out: list[ReplicaHandshake | int] = []
    for chunk in _chunks(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == [handshake, *acks]
    assert decoder.buffered == 0


def test_heartbeat_frame() -> None:
    decoder = PrimaryStreamDecoder()
    decoder.feed(encode_primary_handshake(10, EpochCache([EpochEntry(1, 0)])))
    [hb] = decoder.feed(encode_transfer(10, b"", EpochEntry(1, 0), 7))
    assert hb == TransferFrame(10, 1, 0, 7, b"")  # a heartbeat: no bytes, at the next offset


@pytest.mark.parametrize("raw", [
    bytes.fromhex("00000002" "0000" "0000" "0000000000000001"),  # an ack where the handshake belongs
    bytes.fromhex("00000001" "0002" "0000" "0000000000000001"),  # a flag that is not 0/1
    bytes.fromhex("00000001" "0000" "0000" "ffffffffffffffff"),  # negative broker id
])
def test_replica_stream_refuses_a_bad_handshake(raw: bytes) -> None:
    with pytest.raises(HAProtocolError):
        ReplicaStreamDecoder().feed(raw)


def test_replica_stream_refuses_a_bad_ack() -> None:
    decoder = ReplicaStreamDecoder()
    decoder.feed(encode_replica_handshake(ReplicaHandshake(1)))
    with pytest.raises(HAProtocolError, match="HANDSHAKE, expected TRANSFER"):
        decoder.feed(bytes.fromhex("00000001" "0000000000000010"))
    with pytest.raises(HAProtocolError, match="negative"):
        ReplicaStreamDecoder().feed(encode_replica_handshake(ReplicaHandshake(1)) + bytes.fromhex("00000002")
                                    + b"\xff" * 8)


@pytest.mark.parametrize("raw,match", [
    (bytes.fromhex("00000002" "00000000" "0000000000000000" "00000000"), "expected HANDSHAKE"),
    (bytes.fromhex("00000001" "00000005" "0000000000000000" "00000000"), "whole 12-byte entries"),
    (bytes.fromhex("00000001" "0000000c" "0000000000000000" "00000001" "00000001" "0000000000000010"),
     "starts past the max offset"),
    (bytes.fromhex("00000001" "0000000c" "0000000000000100" "00000002" "00000001" "0000000000000010"),
     "names epoch 2"),
    (bytes.fromhex("00000001" "00000018" "0000000000000100" "00000001" "00000002" "0000000000000010"
                   "00000001" "0000000000000020"), "invalid epoch entries"),
])
def test_primary_stream_refuses_a_bad_handshake(raw: bytes, match: str) -> None:
    with pytest.raises(HAProtocolError, match=match):
        PrimaryStreamDecoder().feed(raw)


def test_primary_stream_refuses_bad_transfer_headers_before_the_body() -> None:
    decoder = PrimaryStreamDecoder(max_batch_bytes=100)
    decoder.feed(encode_primary_handshake(0, EpochCache()))
    with pytest.raises(HAProtocolError, match="malformed transfer header"):
        decoder.feed(bytes.fromhex("00000002" "00000065" "0000000000000000" "00000001" "0000000000000000"
                                   "0000000000000000"))
    decoder = PrimaryStreamDecoder()
    decoder.feed(encode_primary_handshake(0, EpochCache()))
    with pytest.raises(HAProtocolError, match="malformed transfer header"):  # epoch start past the offset
        decoder.feed(bytes.fromhex("00000002" "00000000" "0000000000000010" "00000001" "0000000000000020"
                                   "0000000000000000"))
    decoder = PrimaryStreamDecoder()
    decoder.feed(encode_primary_handshake(0, EpochCache()))
    with pytest.raises(HAProtocolError, match="expected TRANSFER"):
        decoder.feed(bytes.fromhex("00000004" "00000000" "0000000000000010" "00000001" "0000000000000000"
                                   "0000000000000000"))


def test_link_states_are_rocketmqs_ordinals() -> None:
    assert [s.name for s in LinkState] == ["READY", "HANDSHAKE", "TRANSFER", "SUSPEND", "SHUTDOWN"]
