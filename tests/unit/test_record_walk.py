"""A replica's arrival check in C (``broker_store/store/_record_walk.c``) and in Python
(``record_check.walk_arrival``, the owner of the rules and messages) find the same damaged record in any log,
and the C file's layout #defines are the protocol's. The walk's behaviour itself: test_ha_replica_damage."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MIN_RECORD_SIZE,
    STORED_HEADER_SIZE,
    STORED_OFFSETS,
    encode_stored_message,
)
from broker_store.store import record_check
from broker_store.store.record_check import check_arrival, walk_arrival
from tests.support import c_extensions

SEG = 4096
START = 2 * SEG  # the log starts at the third segment, so offsets are not segment-relative


def test_c_walk_reads_the_stored_layout_of_the_protocol() -> None:
    """_record_walk.c cannot import the layout, so its #defines are compared with the one owner
    (``protocol.message.STORED_FIELDS``): a layout change fails here until the C file follows."""
    source = (Path(record_check.__file__).parent / "_record_walk.c").read_text()
    defines = dict(re.findall(r"^#define (\w+) (.+?)\s*(?:/\*.*)?$", source, re.MULTILINE))
    offsets = {name[len("OFF_"):]: int(value) for name, value in defines.items() if name.startswith("OFF_")}
    assert offsets.keys() == {"TOTALSIZE", "MAGICCODE", "BODYCRC", "PHYSICALOFFSET", "BODYLEN"}
    assert offsets == {name: STORED_OFFSETS[name] for name in offsets}
    assert int(defines["HEADER_SIZE"]) == STORED_HEADER_SIZE
    assert int(defines["MAGIC_V1"].strip("()")) == MAGIC_V1
    assert int(defines["BLANK_MAGIC"].strip("()")) == BLANK_MAGIC
    assert int(defines["MIN_RECORD_SIZE"]) == MIN_RECORD_SIZE
    assert int(defines["BLANK_HEAD"]) == 8


def build_log(shapes: list[tuple[int, int, int]]) -> bytes:
    """CommitLog bytes from START: records of (body size, topic size, properties size) back to back; a record
    that does not fit its segment's rest ends the segment (a blank end record, or padding under 8 bytes)."""
    out = bytearray()
    for i, (body, topic, props) in enumerate(shapes):
        pos = START + len(out)
        record = encode_stored_message(topic=b"t" * topic, queue_id=i % 3, queue_offset=i, physical_offset=pos,
                                       body=bytes([i % 251]) * body, properties=b"p" * props)
        room = SEG - pos % SEG
        if len(record) > room:
            out += struct.pack(">ii", room, BLANK_MAGIC) + bytes(room - 8) if room >= 8 else bytes(room)
            pos = START + len(out)
            record = encode_stored_message(topic=b"t" * topic, queue_id=i % 3, queue_offset=i, physical_offset=pos,
                                           body=bytes([i % 251]) * body, properties=b"p" * props)
        out += record
    return bytes(out)


shapes = st.lists(st.tuples(st.integers(0, 700), st.integers(0, 20), st.integers(0, 60)), max_size=30)


@settings(max_examples=400, deadline=None)
@given(shapes, st.data())
def test_c_and_python_walks_stop_at_the_same_record(shape: list[tuple[int, int, int]], data: st.DataObject) -> None:
    c_extensions.skip_without("broker_store.store._record_walk")
    log = bytearray(build_log(shape))
    if log and data.draw(st.booleans(), label="damage"):
        at = data.draw(st.integers(0, len(log) - 1), label="damaged byte")
        log[at] ^= data.draw(st.integers(1, 255), label="xor")
    cut = data.draw(st.integers(0, len(log)), label="bytes arrived")
    arrived = bytes(log[:cut])
    expected = walk_arrival(arrived, START, SEG)
    assert record_check._walk_arrival_c is not None
    pos, intact = record_check._walk_arrival_c(arrived, START, SEG)
    assert (pos, intact) == (expected[0], expected[1] is None)
    assert check_arrival(arrived, START, SEG) == expected


def test_an_intact_log_walks_to_its_last_whole_record() -> None:
    log = build_log([(600, 5, 10)] * 20)  # 20 records over several segments, each ended by a blank record
    assert check_arrival(log, START, SEG) == (START + len(log), None)
    assert check_arrival(log[:-1], START, SEG)[0] < START + len(log)
    assert len(log) > 2 * SEG and BLANK_MAGIC.to_bytes(4, "big", signed=True) in log


def test_a_damaged_body_is_named_by_the_python_rules() -> None:
    log = bytearray(build_log([(300, 4, 0)] * 3))
    second = len(encode_stored_message(topic=b"tttt", queue_id=0, queue_offset=0, physical_offset=0,
                                       body=bytes(300), properties=b""))
    log[second + STORED_HEADER_SIZE + 7] ^= 1
    at, problem = check_arrival(bytes(log), START, SEG)
    assert at == START + second and problem is not None and "BODYCRC" in problem, problem
