"""broker_store.protocol.properties: the raw-byte fast paths agree with decode_properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.protocol.message import tags_hash_code
from broker_store.protocol.properties import (
    any_has_property,
    append_properties,
    decode_properties,
    dropped_entries_pattern,
    encode_properties,
    find_property,
    first_value,
    last_value_start,
    property_entry,
    property_key,
    put_property,
    strip_properties,
    tags_code_of_properties,
)

_PIECES = st.sampled_from([
    b"", b"\x02", b"\x01", b"TAGS\x01", b"TAGS\x01a\x02", b"XTAGS\x01b\x02", b"CLUSTER\x01old\x02", b"K\x01v",
    b"WAIT\x01false\x02", b"XWAIT\x01false\x02", b"UNIQ_KEY\x01AB\x02", b"UNIQ_KEY\x01\x02", b"a\x02TAGS\x01z",
    b"MSG_REGION\x01r\x02", b"v", b"\xff",
])
_PROPS = st.lists(_PIECES, max_size=6).map(b"".join)


def _decoded(props: bytes) -> dict[str, str] | None:
    try:
        return decode_properties(props)
    except Exception:  # noqa: BLE001 - non-UTF-8: the byte paths still run, decoding cannot compare
        return None


def test_put_property_appends_or_replaces() -> None:
    props = encode_properties({"TAGS": "a", "XCLUSTER": "keep"})
    assert decode_properties(put_property(props, "CLUSTER", "c1")) == {"TAGS": "a", "XCLUSTER": "keep", "CLUSTER": "c1"}
    replaced = put_property(encode_properties({"CLUSTER": "old", "K": "v"}), "CLUSTER", "new")
    assert decode_properties(replaced) == {"CLUSTER": "new", "K": "v"}
    assert put_property(b"", "A", "1") == b"A\x011\x02"
    assert put_property(b"K\x01v", "A", "1") == b"K\x01v\x02A\x011\x02"


@settings(max_examples=400, deadline=None)
@given(_PROPS, st.sampled_from(["TAGS", "CLUSTER", "UNIQ_KEY", "WAIT", "K"]))
def test_byte_paths_agree_with_decoding(props: bytes, name: str) -> None:
    decoded = _decoded(props)
    key = property_key(name)
    if decoded is not None:
        assert (find_property(props, key) >= 0) == (name in decoded)
        start = last_value_start(props, key)
        assert (start >= 0) == (name in decoded)
        if start >= 0:
            end = props.find(b"\x02", start)
            assert (props[start:] if end < 0 else props[start:end]).decode() == decoded[name]  # the last wins
        appended = _decoded(append_properties(props, property_entry("NEW", "x")))
        assert appended is not None and appended == {**decoded, "NEW": "x"}
        stripped = _decoded(strip_properties(props, dropped_entries_pattern([name, "MSG_REGION"])))
        assert stripped == {k: v for k, v in decoded.items() if k not in (name, "MSG_REGION")}
    value = first_value(props, b"TAGS\x01")
    expected = 0 if value is None else tags_hash_code(value.decode(errors="strict")) if _utf8(value) else 0
    assert tags_code_of_properties(props, tags_hash_code) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPS, min_size=1, max_size=6))
def test_any_has_property_is_one_message_at_a_time(props_list: list[bytes]) -> None:
    entry = property_entry("WAIT", "false")
    assert any_has_property(props_list, entry) is any(find_property(p, entry) >= 0 for p in props_list)


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True
