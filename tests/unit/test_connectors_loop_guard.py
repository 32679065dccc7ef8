"""Loop guard: the ROCKETMQ_REPLICATOR_SOURCE chain across A <-> B and A -> B -> C."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.replication.loop_guard import CHAIN_PROPERTY, format_chain, parse_chain, should_skip, stamp


def replicate(props: dict[str, str], source: str, target: str) -> dict[str, str] | None:
    """What a link source -> target does with one message: skip it, or the properties it writes."""
    if should_skip(props, target, source):
        return None
    return stamp(props, source)


def test_a_to_b_and_back_stops() -> None:
    produced_on_a = {"KEYS": "k1"}
    on_b = replicate(produced_on_a, "A", "B")
    assert on_b == {"KEYS": "k1", CHAIN_PROPERTY: "A"}
    assert replicate(on_b, "B", "A") is None          # link B -> A: A is in the chain
    assert produced_on_a == {"KEYS": "k1"}            # stamp copies


def test_message_produced_on_b_goes_to_a_once() -> None:
    on_a = replicate({}, "B", "A")
    assert on_a == {CHAIN_PROPERTY: "B"}
    assert replicate(on_a, "A", "B") is None


def test_chain_order_through_three_clusters() -> None:
    on_b = replicate({}, "A", "B")
    assert on_b is not None
    on_c = replicate(on_b, "B", "C")
    assert on_c is not None and parse_chain(on_c[CHAIN_PROPERTY]) == ("A", "B")
    assert replicate(on_c, "C", "A") is None and replicate(on_c, "C", "B") is None
    assert replicate(on_c, "C", "D") == {CHAIN_PROPERTY: "A,B,C"}


def test_stamp_is_idempotent_for_the_same_source() -> None:
    once = stamp({}, "A")
    assert stamp(once, "A") == once


def test_parse_tolerates_blanks_and_format_rejects_separator() -> None:
    assert parse_chain(None) == parse_chain("") == ()
    assert parse_chain(" A, ,B,") == ("A", "B")
    with pytest.raises(ValueError, match="cannot be written"):
        format_chain(["A,B"])


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True)


@given(st.lists(names, max_size=6))
def test_chain_round_trip(chain: list[str]) -> None:
    assert parse_chain(format_chain(chain)) == tuple(chain)
