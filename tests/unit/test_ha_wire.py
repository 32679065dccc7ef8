"""The classic HA shipping format: golden bytes, incremental decoding under any split, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.ha.errors import HAProtocolError
from broker_store.ha.wire import (
    BATCH_HEADER_SIZE,
    BatchDecoder,
    ReportDecoder,
    TransferBatch,
    encode_batch,
    encode_batch_header,
    encode_heartbeat,
    encode_report,
)
from broker_store.protocol.errors import ProtocolError


def test_golden_bytes() -> None:
    assert encode_report(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert encode_batch(16, b"ab") == bytes.fromhex("0000000000000010" "00000002") + b"ab"
    assert encode_heartbeat(4096) == bytes.fromhex("0000000000001000" "00000000")
    assert BATCH_HEADER_SIZE == 12


def test_heartbeat_is_an_empty_batch() -> None:
    [hb] = BatchDecoder().feed(encode_heartbeat(77))
    assert hb == TransferBatch(77, b"")
    assert hb.is_heartbeat and hb.end_offset == 77
    [batch] = BatchDecoder().feed(encode_batch(77, b"xyz"))
    assert not batch.is_heartbeat and batch.end_offset == 80


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=40)), max_size=8),
       st.lists(st.integers(0, 10_000), max_size=20))
def test_batches_survive_any_split(batches: list[tuple[int, bytes]], cuts: list[int]) -> None:
    stream = b"".join(encode_batch(o, d) for o, d in batches)
    decoder = BatchDecoder()
    out: list[TransferBatch] = []
    for chunk in _chunks(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == [TransferBatch(o, d) for o, d in batches]
    assert decoder.buffered == 0


@given(st.lists(st.integers(0, 2**63 - 1), max_size=10), st.lists(st.integers(0, 1000), max_size=10))
def test_reports_survive_any_split(offsets: list[int], cuts: list[int]) -> None:
    stream = b"".join(map(encode_report, offsets))
    decoder = ReportDecoder()
    out: list[int] = []
    for chunk in _chunks(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == offsets
    assert decoder.buffered == 0


def test_partial_unit_stays_buffered() -> None:
    decoder = BatchDecoder()
    data = encode_batch(5, b"hello")
    assert decoder.feed(data[:11]) == []
    assert decoder.feed(data[11:15]) == []
    assert decoder.buffered == 15
    assert decoder.feed(data[15:] + data[:3]) == [TransferBatch(5, b"hello")]
    assert decoder.buffered == 3
    reports = ReportDecoder()
    assert reports.feed(encode_report(9)[:5]) == []
    assert reports.feed(encode_report(9)[5:] + encode_report(10)) == [9, 10]


@pytest.mark.parametrize("header", [
    (-1).to_bytes(8, "big", signed=True) + (0).to_bytes(4, "big"),    # negative offset
    (0).to_bytes(8, "big") + (-5).to_bytes(4, "big", signed=True),    # negative size
    (0).to_bytes(8, "big") + (1025).to_bytes(4, "big"),               # over the cap
])
def test_malformed_batch_header_is_rejected_before_its_data(header: bytes) -> None:
    with pytest.raises(HAProtocolError) as info:
        BatchDecoder(max_batch_bytes=1024).feed(header)
    assert isinstance(info.value, ProtocolError)


def test_negative_report_is_rejected() -> None:
    with pytest.raises(HAProtocolError, match="negative"):
        ReportDecoder().feed((-3).to_bytes(8, "big", signed=True))


def test_encoders_refuse_out_of_range_values() -> None:
    with pytest.raises(HAProtocolError):
        encode_report(-1)
    with pytest.raises(HAProtocolError):
        encode_batch_header(-1, 0)
    with pytest.raises(HAProtocolError):
        encode_batch_header(0, 2**31 - 1)
