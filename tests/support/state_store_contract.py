"""The controller state store's contract (broker_store/controller/state_store.py) as test functions that every
implementation must pass: tests/unit/test_controller_state_store.py runs them against ``FileStateStore`` and
tests/integration/test_etcd_store.py against ``EtcdStateStore`` on a real 3-member etcd cluster.

Each case takes ``open_store``: a callable returning a new store over the same backing state (the same file,
the same etcd cluster and key prefix) that the case closes itself; a case closes one store before opening the
next, as a restarted controller would (the file store refuses a second open store on one file).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_store.controller.state_store import StateStore

OpenStore = Callable[[], StateStore]

BINARY = bytes(range(256))
"""Values are bytes, not text: every byte value, the non-UTF-8 ones included."""


def absent_key_reads_none(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.get("controller/groups/c/absent") is None
        assert store.list("controller/") == {}
        assert store.list("") == {}
    finally:
        store.close()


def create_only_succeeds_once(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("k", None, b"first") is True
        first = store.get("k")
        assert first is not None and first.value == b"first"
        assert store.compare_and_set("k", None, b"second") is False  # it exists now: nothing written
        assert store.get("k") == first
    finally:
        store.close()


def cas_with_current_version_writes_and_changes_version(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("k", None, b"v1")
        v1 = store.get("k")
        assert v1 is not None
        assert store.compare_and_set("k", v1.version, b"v2") is True
        v2 = store.get("k")
        assert v2 is not None and v2.value == b"v2" and v2.version != v1.version
        assert store.compare_and_set("k", v2.version, b"v2") is True  # the same bytes again: still a write
        v3 = store.get("k")
        assert v3 is not None and v3.value == b"v2" and v3.version not in (v1.version, v2.version)
    finally:
        store.close()


def cas_with_stale_version_is_refused(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("k", None, b"v1")
        stale = store.get("k")
        assert stale is not None
        assert store.compare_and_set("k", stale.version, b"v2")
        current = store.get("k")
        assert store.compare_and_set("k", stale.version, b"lost update") is False
        assert store.get("k") == current  # neither value nor version moved
    finally:
        store.close()


def cas_expecting_a_version_of_an_absent_key_is_refused(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("k", 1, b"x") is False
        assert store.get("k") is None
    finally:
        store.close()


def values_are_bytes(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("bin", None, BINARY)
        assert store.compare_and_set("empty", None, b"")
        binary, empty = store.get("bin"), store.get("empty")
        assert binary is not None and binary.value == BINARY
        assert empty is not None and empty.value == b""
    finally:
        store.close()


def list_returns_exactly_the_prefix_with_versions(open_store: OpenStore) -> None:
    store = open_store()
    try:
        for key in ("controller/groups/c1/a", "controller/groups/c1/b", "controller/groups/c10/a",
                    "controller/ids/c1", "other"):
            assert store.compare_and_set(key, None, key.encode())
        listed = store.list("controller/groups/c1/")
        assert set(listed) == {"controller/groups/c1/a", "controller/groups/c1/b"}
        for key, versioned in listed.items():
            assert versioned == store.get(key)
        assert set(store.list("controller/groups/c1")) == {"controller/groups/c1/a", "controller/groups/c1/b",
                                                           "controller/groups/c10/a"}  # a string prefix
        assert set(store.list("")) == {"controller/groups/c1/a", "controller/groups/c1/b",
                                       "controller/groups/c10/a", "controller/ids/c1", "other"}
    finally:
        store.close()


def writes_survive_reopening(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.compare_and_set("k", None, b"v1")
        written = store.get("k")
    finally:
        store.close()
    assert written is not None
    store = open_store()
    try:
        assert store.get("k") == written
        assert store.list("") == {"k": written}
        assert store.compare_and_set("k", written.version, b"v2")  # the version read before still counts
        after = store.get("k")
        assert after is not None and after.version != written.version
    finally:
        store.close()


def a_lone_member_leads(open_store: OpenStore) -> None:
    store = open_store()
    try:
        assert store.campaign() is True
        assert store.campaign() is True  # staying the leader
        assert store.leader() == store.member_id
    finally:
        store.close()


CONTRACT: list[Callable[[OpenStore], None]] = [
    absent_key_reads_none,
    create_only_succeeds_once,
    cas_with_current_version_writes_and_changes_version,
    cas_with_stale_version_is_refused,
    cas_expecting_a_version_of_an_absent_key_is_refused,
    values_are_bytes,
    list_returns_exactly_the_prefix_with_versions,
    writes_survive_reopening,
    a_lone_member_leads,
]


def contract_id(case: Callable[[OpenStore], None]) -> str:
    return case.__name__

