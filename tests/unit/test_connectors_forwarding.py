"""Stored records -> batch entries (connectors.replication.forwarding) against the exact rules of
``connectors.replication.forwarding.target_properties`` applied to the decoded messages."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from broker_store.protocol.codes import MSG_FLAG_BORNHOST_V6, MSG_FLAG_COMPRESSED, MSG_FLAG_STOREHOST_V6
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import (
    BATCH_HEADER,
    MAGIC_V1,
    MAX_PROPERTIES_LENGTH,
    STORED_FIELDS,
    STORED_HEADER,
    STORED_HEADER_SIZE,
    STORED_OFFSETS,
    decode_properties,
    decode_stored_messages,
    encode_properties,
    encode_stored_message,
    iter_batch,
    stored_fields_struct,
    stored_header_view,
)
from broker_store.protocol.properties import dropped_entries_pattern
from connectors.replication import forwarding, loop_guard
from connectors.replication.forwarding import (
    DROPPED_PROPERTIES,
    SKIP,
    ForwardedPull,
    RecordForwarder,
    Skip,
    Stamp,
    target_properties,
)
from tests.support import c_extensions

STORE_IP, STORE_PORT = b"\x0a\x00\x00\x07", 10911


def record(offset: int, props: bytes, body: bytes = b"body", *, topic: bytes = b"T", queue_id: int = 3,
           sys_flag: int = 0, flag: int = 0) -> bytes:
    return encode_stored_message(topic=topic, queue_id=queue_id, queue_offset=offset, physical_offset=1000 * offset,
                                 body=body, properties=props, flag=flag, sys_flag=sys_flag,
                                 born_timestamp=1_700_000_000_000 + offset, store_timestamp=1_700_000_001_000 + offset,
                                 store_ip=STORE_IP, store_port=STORE_PORT)


def stamp_for(source: str | None, target: str = "dst") -> Stamp:
    def stamp(chain: str | None) -> str | None | Skip:
        props = {loop_guard.CHAIN_PROPERTY: chain} if chain is not None else {}
        if loop_guard.should_skip(props, target, source):
            return SKIP
        return loop_guard.stamp(props, source)[loop_guard.CHAIN_PROPERTY] if source else chain
    return stamp


def expected(buf: bytes, source: str | None = "src", target: str = "dst",
             broker: str | None = None) -> list[tuple[bytes, dict[str, str], int]]:
    """What the decoding path sends for ``buf``: (body, properties, flag) per message, loops skipped; with a
    ``broker``, each carries its position on it."""
    out = []
    for m in decode_stored_messages(buf):
        chain = {loop_guard.CHAIN_PROPERTY: m.properties[loop_guard.CHAIN_PROPERTY]} \
            if loop_guard.CHAIN_PROPERTY in m.properties else {}
        if loop_guard.should_skip(chain, target, source):
            continue
        position = (MessageQueue(m.topic, broker, m.queue_id), m.queue_offset) if broker else None
        out.append((m.body, target_properties(m.properties, source, m.offset_msg_id, position), m.flag))
    return out


def sent(entries: list[bytes]) -> list[tuple[bytes, dict[str, str], int]]:
    return [(e.body, decode_properties(e.properties), e.flag) for e in iter_batch(b"".join(entries))]


def test_common_records_match_the_decoding_path_and_keep_offsets_times_and_positions() -> None:
    props = [{"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "user": "v", "CLUSTER": "src"},
             {"CLUSTER": "src", "UNIQ_KEY": "U2", "MSG_REGION": "r", "TRACE_ON": "true", "x": ""},
             {"UNIQ_KEY": "U3"}, {}]
    recs = [record(100 + i, encode_properties(p), bytes([i]) * (i + 1), flag=i) for i, p in enumerate(props)]
    buf = b"".join(recs)
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src")).forward(buf, "T", 3)
    assert sent(out.entries) == expected(buf)
    assert out.offsets == [100, 101, 102, 103]
    assert out.sizes == [1, 2, 3, 4]
    assert out.borns == [1_700_000_000_100 + i for i in range(4)]
    assert out.starts == [sum(len(r) for r in recs[:i]) for i in range(4)]
    assert (out.skipped, out.next_offset, out.oldest_store_ms, out.refused) == (0, 104, 1_700_000_001_100, [])
    # no UNIQ_KEY: the source offset message id, as the decoding path gives it
    assert decode_properties(next(iter_batch(out.entries[3])).properties)["UNIQ_KEY"] == \
        decode_stored_messages(recs[3])[0].offset_msg_id


def test_records_with_a_chain_are_stamped_or_skipped() -> None:
    chain = loop_guard.CHAIN_PROPERTY
    recs = [record(1, encode_properties({chain: "a", "UNIQ_KEY": "U"})),      # a -> src -> dst: stamped
            record(2, encode_properties({chain: "dst,src", "UNIQ_KEY": "V"})),  # been on dst: skipped
            record(3, encode_properties({chain: "src", "UNIQ_KEY": "W"}))]     # stamped once, not twice
    buf = b"".join(recs)
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src")).forward(buf, "T", 3)
    assert sent(out.entries) == expected(buf)
    assert [p[chain] for _, p, _ in sent(out.entries)] == ["a,src", "src"]
    assert (out.skipped, out.offsets, out.next_offset) == (1, [1, 3], 4)


def test_every_record_is_skipped_when_source_and_target_are_one_cluster() -> None:
    buf = record(1, encode_properties({"UNIQ_KEY": "U"})) + record(2, b"")
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("dst")).forward(buf, "T", 3)
    assert (out.entries, out.skipped, out.next_offset) == ([], 2, 3)


def test_compressed_bodies_are_inflated() -> None:
    body = b"x" * 5000
    buf = record(7, encode_properties({"UNIQ_KEY": "U"}), zlib.compress(body), sys_flag=MSG_FLAG_COMPRESSED)
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src")).forward(buf, "T", 3)
    assert sent(out.entries) == expected(buf) and sent(out.entries)[0][0] == body
    assert out.sizes == [5000]


def test_no_source_cluster_copies_the_chain_unchanged() -> None:
    chain = loop_guard.CHAIN_PROPERTY
    buf = record(1, encode_properties({chain: "a", "UNIQ_KEY": "U"})) + record(2, encode_properties({"UNIQ_KEY": "V"}))
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for(None)).forward(buf, "T", 3)
    assert sent(out.entries) == expected(buf, source=None)
    assert chain not in sent(out.entries)[1][1]


def test_bounds_leave_out_records_outside_the_range() -> None:
    buf = b"".join(record(o, b"UNIQ_KEY\x01u\x02") for o in range(10, 16))
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src")).forward(buf, "T", 3, 11, 14)
    assert out.offsets == [11, 12, 13] and out.next_offset == 14


def test_every_record_carries_its_source_position_after_the_chain() -> None:
    """The position property names this hop's source (an upstream hop's value is replaced), follows the chain,
    and leaves every other byte as the forwarding without it would."""
    position = "ROCKETMQ_REPLICATOR_POSITION"
    chain = loop_guard.CHAIN_PROPERTY
    recs = [record(41, encode_properties({"UNIQ_KEY": "U", "user": "v"})),
            record(42, encode_properties({"UNIQ_KEY": "V", position: "up/T/b/0/7", chain: "up"})),
            record(43, b"TAGS\x01t")]  # no closing separator: the position still starts a whole property
    buf = b"".join(recs)
    with_position = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src"), "src").forward(buf, "T", 3, broker="bk")
    without = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src"), "src").forward(buf, "T", 3)
    got = sent(with_position.entries)
    assert [p[position] for _, p, _ in got] == ["src/T/bk/3/41", "src/T/bk/3/42", "src/T/bk/3/43"]
    assert [list(p)[-1] for _, p, _ in got] == [position] * 3
    assert got == expected(buf, broker="bk")
    for entry, plain in zip(with_position.entries, without.entries, strict=True):
        a, b = next(iter_batch(entry)), next(iter_batch(plain))
        assert (a.body, a.flag) == (b.body, b.flag)
        assert a.properties.startswith(b.properties) and decode_properties(a.properties[len(b.properties):]).keys() \
            == {position}  # appended after every other byte, which stays as it was
    assert (with_position.offsets, with_position.sizes) == (without.offsets, without.sizes)


def test_properties_too_long_once_stamped_are_refused_not_sent() -> None:
    long_value = "v" * (MAX_PROPERTIES_LENGTH - 40)
    ok = record(1, encode_properties({"UNIQ_KEY": "U"}))
    long_rec = record(2, encode_properties({"UNIQ_KEY": "U", "p": long_value}))
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src")).forward(ok + long_rec, "T", 3)
    assert out.offsets == [1] and len(out.refused) == 1
    start, reason = out.refused[0]
    assert start == len(ok) and "exceed" in reason and out.next_offset == 3


def test_malformed_or_foreign_records_raise() -> None:
    good = record(1, b"")
    forwarder = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src"))
    with pytest.raises(ProtocolError):
        forwarder.forward(good[:-1], "T", 3)
    with pytest.raises(ProtocolError, match="queue"):
        forwarder.forward(good, "T", 4)
    with pytest.raises(ProtocolError):
        forwarder.forward(record(1, b"", topic=b"U"), "T", 3)
    broken = bytearray(good)
    broken[4:8] = b"\0\0\0\0"  # magic
    with pytest.raises(ProtocolError, match="magic"):
        forwarder.forward(bytes(broken), "T", 3)


def test_dropped_entries_pattern_removes_whole_entries_only() -> None:
    drop = dropped_entries_pattern({"CLUSTER", "DELAY"})

    def apply(props: bytes) -> bytes:
        return drop.sub(b"", b"\x02" + props)[1:]

    assert apply(b"CLUSTER\x01a\x02X\x01b\x02") == b"X\x01b\x02"
    assert apply(b"X\x01b\x02CLUSTER\x01a") == b"X\x01b"
    assert apply(b"XCLUSTER\x01a\x02CLUSTERX\x01b\x02") == b"XCLUSTER\x01a\x02CLUSTERX\x01b\x02"
    assert apply(b"DELAY\x013\x02CLUSTER\x01a\x02") == b""


names = st.text(alphabet="ABCKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)
values = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.one_of(names, st.sampled_from(sorted(DROPPED_PROPERTIES | {"UNIQ_KEY"}))),
                                values, max_size=6), min_size=1, max_size=5),
       st.sampled_from(["src", None]), st.sampled_from([None, "broker-a", "b/x"]))
def test_any_properties_match_the_decoding_path(props: list[dict[str, str]], source: str | None,
                                                broker: str | None) -> None:
    buf = b"".join(record(i, encode_properties(p)) for i, p in enumerate(props))
    out = RecordForwarder(DROPPED_PROPERTIES, stamp_for(source), source).forward(buf, "T", 3, broker=broker)
    assert sent(out.entries) == expected(buf, source=source, broker=broker if source else None)


uniq_values = st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32)
any_props = st.dictionaries(st.one_of(names, st.sampled_from(sorted(DROPPED_PROPERTIES | {"UNIQ_KEY"}))), values,
                            max_size=5)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(any_props, st.one_of(st.none(), uniq_values), st.booleans(), st.binary(max_size=40),
                          st.integers(0, 7), st.sampled_from([0, 0, 0, MSG_FLAG_COMPRESSED])),
                min_size=1, max_size=6),
       st.sampled_from(["src", None]), st.integers(0, 3), st.integers(3, 9), st.booleans(),
       st.sampled_from([None, "broker-a"]))
def test_the_c_loop_equals_the_python_loop(messages: list[tuple[dict[str, str], str | None, bool, bytes, int, int]],
                                           source: str | None, first: int, stop: int, chained: bool,
                                           broker: str | None) -> None:
    """``forward`` (the C loop of connectors.replication._forward for plain pulls) returns exactly what ``forward_each``
    returns, field by field, for any pull; the C loop takes every plain pull and declines the others."""
    recs = []
    plain_ones = []  # per record: would the C loop take it
    for i, (props, uniq, uniq_first, body, flag, sys_flag) in enumerate(messages):
        if uniq is not None:
            props = {"UNIQ_KEY": uniq, **props} if uniq_first else {**props, "UNIQ_KEY": uniq}
        if chained and i == len(messages) - 1:
            props = {**props, loop_guard.CHAIN_PROPERTY: "x"}
        if sys_flag:
            body = zlib.compress(body)
        recs.append(record(i, encode_properties(props), body, flag=flag, sys_flag=sys_flag))
        plain_ones.append(not sys_flag and props.get("UNIQ_KEY") != "" and loop_guard.CHAIN_PROPERTY not in props)
    buf = b"".join(recs)
    forwarder = RecordForwarder(DROPPED_PROPERTIES, stamp_for(source), source)
    each = forwarder.forward_each(buf, "T", 3, first, stop, broker)
    assert forwarder.forward(buf, "T", 3, first, stop, broker) == each
    c_extensions.skip_without("connectors.replication._forward")
    assert forwarding._forward_plain is not None
    plain = forwarding._forward_plain(buf, b"T", 3, first, stop, forwarder._dropped_names,
                                      forwarder._suffix_for_unchained(), MAX_PROPERTIES_LENGTH,
                                      forwarder.position_prefix("T", broker, 3))
    if all(plain_ones[first:stop]) and not each.refused:
        assert plain is not None
    if plain is not None:
        assert ForwardedPull(*plain[:5], [], 0, *plain[5:]) == each


def test_the_c_loop_declines_foreign_and_broken_records() -> None:
    c_extensions.skip_without("connectors.replication._forward")
    forward_plain = forwarding._forward_plain
    assert forward_plain is not None
    forwarder = RecordForwarder(DROPPED_PROPERTIES, stamp_for("src"))
    plain = record(0, encode_properties({"UNIQ_KEY": "U0"}))

    def c_loop(buf: bytes) -> object:
        return forward_plain(buf, b"T", 3, 0, (1 << 63) - 1, forwarder._dropped_names,
                             forwarder._suffix_for_unchained(), MAX_PROPERTIES_LENGTH, b"")

    assert c_loop(plain) is not None and c_loop(b"") is not None
    for bad in (record(1, encode_properties({"UNIQ_KEY": "U1"}), topic=b"Other"),
                record(1, encode_properties({"UNIQ_KEY": "U1"}), topic=b"TT"),
                record(1, encode_properties({"UNIQ_KEY": "U1"}), queue_id=4),
                record(1, encode_properties({"UNIQ_KEY": ""})), plain[:-1], plain[:40], b"\0" * 200):
        assert c_loop(plain + bad) is None


def test_c_loop_reads_the_stored_layout_of_the_protocol() -> None:
    """_forward.c cannot import the layout, so its #defines are compared with the one owner
    (``protocol.message.STORED_FIELDS``): a layout change fails here until the C file follows."""
    source = (Path(forwarding.__file__).parent / "_forward.c").read_text()
    defines = dict(re.findall(r"^#define (\w+) (.+?)\s*(?:/\*.*)?$", source, re.MULTILINE))
    offsets = {name[len("OFF_"):]: int(value) for name, value in defines.items() if name.startswith("OFF_")}
    assert offsets, "no OFF_ field offsets found in _forward.c"
    assert offsets == {name: STORED_OFFSETS[name] for name in offsets}
    assert int(defines["HEADER_SIZE"]) == STORED_HEADER_SIZE
    assert int(defines["MAGIC_V1"].strip("()")) == MAGIC_V1
    assert int(defines["ENTRY_HEADER"]) == BATCH_HEADER.size
    unusual = 0
    for flag in re.findall(r"0x[0-9a-fA-F]+", defines["FLAG_UNUSUAL"]):
        unusual |= int(flag, 16)
    assert unusual == MSG_FLAG_COMPRESSED | MSG_FLAG_BORNHOST_V6 | MSG_FLAG_STOREHOST_V6


def test_stored_layout_views_are_the_owner_s_fields() -> None:
    """The structs built from ``STORED_FIELDS`` read the same values as the full header."""
    rec = record(5, b"K\x01v\x02", body=b"payload", flag=9)
    full = dict(zip((name for name, _code in STORED_FIELDS), STORED_HEADER.unpack_from(rec), strict=True))
    names = ("QUEUEID", "FLAG", "PHYSICALOFFSET", "STOREHOST", "STOREHOST_PORT", "BODYLEN")
    assert stored_header_view(*names).unpack_from(rec) == tuple(full[n] for n in names)
    assert stored_fields_struct("SYSFLAG", "PREPARED_TX_OFFSET").unpack_from(rec, STORED_OFFSETS["SYSFLAG"]) == tuple(
        full[n] for n in ("SYSFLAG", "BORNTIMESTAMP", "BORNHOST", "BORNHOST_PORT", "STORETIMESTAMP", "STOREHOST",
                          "STOREHOST_PORT", "RECONSUMETIMES", "PREPARED_TX_OFFSET"))
    with pytest.raises(ValueError, match="NOPE"):
        stored_header_view("NOPE")
