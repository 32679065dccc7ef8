"""The etcd store's pure parts, without etcd: the key range a prefix lists, the constructor's checks, and the retry
deadline on the store's clock (against refusing ports). The store itself is tested against real etcd members in
tests/integration/test_etcd_store.py."""

from __future__ import annotations

from typing import Any

import pytest

from broker_store.controller.etcd_store import EtcdStateStore, prefix_end
from broker_store.controller.state_store import StateStoreError
from broker_store.deploy.launcher import free_port
from tests.support.clocks import MillisClock


@pytest.mark.parametrize(("prefix", "end"), [
    (b"rocketmq/state/", b"rocketmq/state0"),
    (b"a", b"b"),
    (b"a\xff", b"b"),
    (b"a\xfe\xff\xff", b"a\xff"),
])
def test_prefix_end_is_the_first_key_past_the_prefix(prefix: bytes, end: bytes) -> None:
    assert prefix_end(prefix) == end
    assert prefix < end and not end.startswith(prefix)
    assert prefix + b"\xff" * 8 < end  # every key under the prefix sorts before it


@pytest.mark.parametrize("prefix", [b"", b"\xff\xff"])
def test_prefix_end_has_no_answer_for_everything(prefix: bytes) -> None:
    with pytest.raises(ValueError, match="no key range"):
        prefix_end(prefix)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"endpoints": []}, "at least one endpoint"),
    ({"endpoints": ["127.0.0.1:2379"]}, "http"),
    ({"member_id": ""}, "member_id"),
    ({"prefix": ""}, "prefix"),
    ({"lease_ttl_s": 0}, "lease_ttl_s"),
    ({"timeout_s": 0}, "timeout_s"),
])
def test_the_constructor_names_a_bad_argument(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"endpoints": ["http://127.0.0.1:2379"], "member_id": "c1", **kwargs}
    with pytest.raises(ValueError, match=message):
        EtcdStateStore(args.pop("endpoints"), args.pop("member_id"), **args)


def test_the_retry_deadline_and_the_pause_between_rounds_run_on_the_stores_clock() -> None:
    """Two endpoints that refuse at once: rounds of both, a 0.1 s pause of the store's clock after each, until
    ``timeout_s`` of that clock has passed (no real sleep: the test clock moves by each pause)."""
    clock = MillisClock()
    start = clock.now_ms
    store = EtcdStateStore([f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"], "c1",
                           timeout_s=1.0, clock=clock)
    try:
        with pytest.raises(StateStoreError, match=r"no endpoint answered within 1 s \(http://127\.0\.0\.1:\d+: "):
            store.get("k")
    finally:
        store.close()
    assert clock.now_ms - start == 1_000  # ten pauses of 100 ms, each after a round of both endpoints
