"""The replicated controller state store (``EtcdStateStore``) against real etcd members (Debian's etcd-server 3.4)
started as child processes on loopback ports by ``deploy.etcd_members``: the same contract cases as the file
store (tests/support/state_store_contract.py), then what only a replicated store must do: keep working when the
member a client talks to is killed or hung, keep its data when every member restarts, elect exactly one leader
and replace one that stops renewing its lease, and refuse a compare-and-set on a stale version from a second
controller. Each member's log is ``<tmp>/etcd/etcd-<i>.log``.

Skipped only when the etcd binary is missing (``make tools`` installs it, and ``make test`` runs that first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_store.controller.etcd_store import EtcdStateStore
from broker_store.controller.state_store import StateStore, StateStoreError
from broker_store.deploy.etcd_members import INSTALL_HINT, EtcdCluster, find_etcd
from broker_store.deploy.launcher import HOST, free_port
from tests.support.state_store_contract import CONTRACT, OpenStore, contract_id
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

needs_etcd = pytest.mark.skipif(find_etcd() is None, reason=f"etcd is not installed: {INSTALL_HINT}")

LEASE_TTL_S = 2
TIMEOUT_S = 10.0
"""Generous for a loaded test machine: one call may wait out a Raft election after a member dies."""


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """One 3-member cluster for the tests that do not harm it; each uses its own key prefix."""
    if find_etcd() is None:
        pytest.skip(f"etcd is not installed: {INSTALL_HINT}")
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), 3) as cluster:
        yield cluster


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A 3-member cluster of this test's own, for tests that kill or pause members."""
    cluster = EtcdCluster(tmp_path / "etcd", 3).start()
    try:
        yield cluster
    finally:
        cluster.kill()


def store_on(endpoints: list[str], member_id: str, prefix: str) -> EtcdStateStore:
    return EtcdStateStore(endpoints, member_id, prefix=prefix, lease_ttl_s=LEASE_TTL_S, timeout_s=TIMEOUT_S)


@needs_etcd
@pytest.mark.parametrize("case", CONTRACT, ids=contract_id)
def test_contract(case: Callable[[OpenStore], None], shared_etcd: EtcdCluster) -> None:
    def open_etcd_store() -> StateStore:
        return store_on(shared_etcd.endpoints, "controller-1", f"contract/{case.__name__}/")

    case(open_etcd_store)


@needs_etcd
def test_keys_live_under_the_prefix(shared_etcd: EtcdCluster) -> None:
    one, other = (store_on(shared_etcd.endpoints, "c", f"prefixes/{name}/") for name in ("one", "other"))
    try:
        assert one.compare_and_set("k", None, b"one")
        assert other.get("k") is None and other.list("") == {}
        assert other.compare_and_set("k", None, b"other")
        assert [v.value for v in (one.get("k"), other.get("k")) if v is not None] == [b"one", b"other"]
    finally:
        one.close()
        other.close()


@needs_etcd
def test_the_member_in_use_killed_reads_and_writes_go_elsewhere(etcd: EtcdCluster) -> None:
    # Worst case: the member the client talks to is also the Raft leader, so the others must elect first.
    leader = etcd.leader()
    assert leader is not None
    endpoints = [leader.client_url] + [e for e in etcd.endpoints if e != leader.client_url]
    store = store_on(endpoints, "controller-1", "failover/")
    try:
        assert store.compare_and_set("controller/groups/c/g", None, b"epoch 1")
        assert store.campaign()
        before = store.get("controller/groups/c/g")
        assert before is not None and store.endpoint == leader.client_url

        leader.kill()

        assert store.get("controller/groups/c/g") == before
        assert store.endpoint != leader.client_url
        assert store.compare_and_set("controller/groups/c/g", before.version, b"epoch 2")
        assert store.list("controller/") == {"controller/groups/c/g": store.get("controller/groups/c/g")}
        assert store.campaign()  # the lease lives on in the surviving majority
        assert store.leader() == "controller-1"

        # The killed member comes back, catches up and serves what was written while it was down.
        etcd.start_member(leader)
        etcd.wait_healthy([leader])
        restarted_only = store_on([leader.client_url], "reader", "failover/")
        try:
            after = restarted_only.get("controller/groups/c/g")
            assert after is not None and after.value == b"epoch 2"
        finally:
            restarted_only.close()
    finally:
        store.close()


@needs_etcd
def test_a_hung_member_in_use_is_passed_over(etcd: EtcdCluster) -> None:
    leader = etcd.leader()
    assert leader is not None
    endpoints = [leader.client_url] + [e for e in etcd.endpoints if e != leader.client_url]
    store = store_on(endpoints, "controller-1", "hung/")
    try:
        assert store.compare_and_set("k", None, b"v1")
        assert store.campaign()
        leader.pause()  # SIGSTOP: connections are accepted and never answered
        v1 = store.get("k")
        assert v1 is not None and v1.value == b"v1"
        assert store.endpoint != leader.client_url
        assert store.compare_and_set("k", v1.version, b"v2")
        assert store.campaign()
    finally:
        leader.resume()
        store.close()


@needs_etcd
def test_every_member_killed_and_restarted_keeps_the_state(etcd: EtcdCluster) -> None:
    store = store_on(etcd.endpoints, "controller-1", "restart/")
    try:
        for i in range(10):
            assert store.compare_and_set(f"k{i}", None, str(i).encode())
        written = store.list("")
        etcd.kill()
        impatient = EtcdStateStore(etcd.endpoints, "controller-2", prefix="restart/", timeout_s=1.0)
        with pytest.raises(StateStoreError, match="no endpoint answered"):
            impatient.get("k0")
        impatient.close()
        for member in etcd.members:
            etcd.start_member(member)
        etcd.wait_healthy()
        assert store.list("") == written
        assert store.compare_and_set("k0", written["k0"].version, b"after restart")
    finally:
        store.close()


@needs_etcd
def test_exactly_one_of_two_campaigning_controllers_leads(shared_etcd: EtcdCluster) -> None:
    stores = [store_on(shared_etcd.endpoints, f"controller-{i}", "election/one/") for i in range(2)]
    try:
        start = threading.Barrier(len(stores))
        results: dict[str, bool] = {}

        def campaign(store: EtcdStateStore) -> None:
            start.wait()
            results[store.member_id] = store.campaign()

        threads = [threading.Thread(target=campaign, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [member for member, leads in results.items() if leads]
        assert len(winners) == 1, results
        winner = next(s for s in stores if s.member_id == winners[0])
        loser = next(s for s in stores if s is not winner)
        for _ in range(3):  # renewing keeps it so
            assert winner.campaign() and not loser.campaign()
        assert winner.leader() == loser.leader() == winner.member_id
    finally:
        for store in stores:
            store.close()


@needs_etcd
def test_resign_hands_leadership_over_at_once(shared_etcd: EtcdCluster) -> None:
    a, b = (store_on(shared_etcd.endpoints, member, "election/resign/") for member in ("a", "b"))
    try:
        assert a.campaign() and not b.campaign()
        a.resign()
        assert b.leader() is None
        assert b.campaign()
        assert a.leader() == "b" and not a.campaign()
    finally:
        a.close()
        b.close()


@needs_etcd
def test_a_leader_that_stops_renewing_is_replaced_when_its_lease_ends(shared_etcd: EtcdCluster) -> None:
    a, b = (store_on(shared_etcd.endpoints, member, "election/expiry/") for member in ("a", "b"))
    try:
        assert a.campaign()
        renewing_until = time.monotonic() + 2 * LEASE_TTL_S  # longer than a lease: renewals keep it
        while time.monotonic() < renewing_until:
            assert a.campaign() and not b.campaign()
            time.sleep(LEASE_TTL_S / 4)
        last_renewal = time.monotonic()
        a.campaign()
        # a stops renewing, as a crashed or hung controller would; its lease is not revoked.
        eventually(b.campaign, timeout=4 * LEASE_TTL_S + TIMEOUT_S, what="b leading after a's lease ended")
        assert time.monotonic() - last_renewal >= LEASE_TTL_S / 2  # not before a's lease could have ended
        assert b.leader() == "b"
        assert not a.campaign()  # a's lease ended: it finds b holding the key, and a new lease changes nothing
        assert a.leader() == "b"
    finally:
        a.close()
        b.close()


@needs_etcd
def test_a_second_controller_cannot_write_over_a_version_it_did_not_see(shared_etcd: EtcdCluster) -> None:
    a, b = (store_on(shared_etcd.endpoints, member, "stale/") for member in ("a", "b"))
    try:
        assert a.compare_and_set("controller/groups/c/g", None, b"epoch 1")
        seen_by_a, seen_by_b = a.get("controller/groups/c/g"), b.get("controller/groups/c/g")
        assert seen_by_a is not None and seen_by_a == seen_by_b
        assert a.compare_and_set("controller/groups/c/g", seen_by_a.version, b"epoch 2 by a")
        assert not b.compare_and_set("controller/groups/c/g", seen_by_b.version, b"epoch 2 by b")
        current = b.get("controller/groups/c/g")
        assert current is not None and current.value == b"epoch 2 by a"

        # Read-modify-write loops racing from two controllers lose no update.
        assert a.compare_and_set("counter", None, b"0")

        def increment(store: EtcdStateStore, times: int) -> None:
            for _ in range(times):
                while True:
                    seen = store.get("counter")
                    assert seen is not None
                    if store.compare_and_set("counter", seen.version, str(int(seen.value) + 1).encode()):
                        break

        threads = [threading.Thread(target=increment, args=(s, 25)) for s in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        counter = a.get("counter")
        assert counter is not None and counter.value == b"50"
    finally:
        a.close()
        b.close()


def test_no_reachable_endpoint_is_a_state_store_error() -> None:
    """Nothing listens on these ports: every call fails as StateStoreError within its budget, never a requests
    exception; close() still returns."""
    store = EtcdStateStore([f"http://{HOST}:{free_port()}", f"http://{HOST}:{free_port()}"], "c", timeout_s=0.5)
    calls: list[Callable[[], object]] = [lambda: store.get("k"), lambda: store.list(""),
                                         lambda: store.compare_and_set("k", None, b"v"), store.campaign, store.leader]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(StateStoreError, match="no endpoint answered within 0.5 s"):
            call()
        assert time.monotonic() - started < 5
    store.close()
