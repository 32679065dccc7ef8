"""Splitting a byte stream into remoting frames (``net.framing.FrameReader``): decoded a few at a time when asked,
the rest held as bytes (what a held server connection keeps; docs/security.md, "Connection hygiene"), and what is held
described without decoding it."""

from __future__ import annotations

import pytest

from broker_store.net.framing import FrameReader
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand, encode_frame


def frames(opaques: range) -> bytes:
    return b"".join(encode_frame(RemotingCommand(code=11, opaque=i, ext_fields={"topic": "T"})) for i in opaques)


def test_whole_frames_in_one_feed_and_a_partial_one_kept_for_the_next() -> None:
    reader, data = FrameReader(), frames(range(3))
    cut = len(data) - 5
    assert [c.opaque for c in reader.feed(data[:cut])] == [0, 1]
    assert reader.partial and not reader.ready and reader.whole_frames() == 0
    assert [c.opaque for c in reader.feed(data[cut:])] == [2]
    assert reader.buffered == 0 and not reader.partial


@pytest.mark.parametrize("held_first", [False, True], ids=["fed", "kept"])
def test_at_most_max_frames_are_decoded_and_the_rest_stay_bytes_in_order(held_first: bool) -> None:
    reader, data = FrameReader(), frames(range(40))
    if held_first:
        reader.keep(data[:100])
        got = reader.feed(data[100:], 16)
    else:
        got = reader.feed(data, 16)
    assert [c.opaque for c in got] == list(range(16))
    assert reader.whole_frames() == 24 and reader.ready and not reader.partial
    reader.keep(frames(range(40, 41))[:7])  # a frame begun behind them
    assert reader.partial and reader.whole_frames() == 24
    rest = [c.opaque for c in reader.feed(max_frames=16)] + [c.opaque for c in reader.feed(max_frames=16)]
    assert rest == list(range(16, 40)) and not reader.ready and reader.partial


def test_bytes_kept_undecoded_are_checked_when_decoded() -> None:
    reader = FrameReader()
    reader.keep(frames(range(1)) + b"\x7f\xff\xff\xff" + b"x" * 10)  # then a frame length past the limit
    assert reader.ready and reader.whole_frames() == 1
    assert [c.opaque for c in reader.feed(max_frames=1)] == [0]
    assert reader.ready  # a bad length is reported by the next feed, not waited for
    with pytest.raises(ProtocolError):
        reader.feed()
