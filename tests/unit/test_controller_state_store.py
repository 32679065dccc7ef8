"""The embedded controller state store (``FileStateStore``): the state-store contract shared with the etcd store
(tests/support/state_store_contract.py; tests/integration/test_etcd_store.py runs it against etcd), then what
only a file has: a corrupt or foreign file is refused naming it, an interrupted write leaves the old state, and
a second process cannot open the same file."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_store.controller.file_store import FILE_VERSION, FileStateStore
from broker_store.controller.state_store import StateStore, StateStoreError
from tests.support.state_store_contract import CONTRACT, OpenStore, contract_id


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "controller" / "state.json"


@pytest.fixture
def open_store(state_file: Path) -> OpenStore:
    def open_file_store() -> StateStore:
        return FileStateStore(state_file)

    return open_file_store


@pytest.mark.parametrize("case", CONTRACT, ids=contract_id)
def test_contract(case: Callable[[OpenStore], None], open_store: OpenStore) -> None:
    case(open_store)


def test_versions_keep_growing_across_reopen(state_file: Path) -> None:
    with_store = FileStateStore(state_file)
    assert with_store.compare_and_set("k", None, b"a")
    first = with_store.get("k")
    with_store.close()
    reopened = FileStateStore(state_file)
    try:
        assert first is not None and reopened.compare_and_set("k", first.version, b"b")
        second = reopened.get("k")
        assert second is not None and second.version > first.version
    finally:
        reopened.close()


def test_the_file_holds_the_documented_layout(state_file: Path) -> None:
    store = FileStateStore(state_file)
    try:
        assert store.compare_and_set("controller/groups/c/b", None, b"\x00\xff")
    finally:
        store.close()
    doc = json.loads(state_file.read_bytes())
    assert doc == {"version": FILE_VERSION,
                   "keys": {"controller/groups/c/b": {"v": 1, "b64": base64.b64encode(b"\x00\xff").decode()}}}


@pytest.mark.parametrize("content", [
    b"{not json",
    b'{"version": 99, "keys": {}}',
    b'{"version": 1}',
    b'{"version": 1, "keys": {"k": {"v": 1}}}',
    b'{"version": 1, "keys": {"k": {"v": "x", "b64": ""}}}',
    b'{"version": 1, "keys": {"k": {"v": 1, "b64": "abc"}}}',
    b'{"version": 1, "keys": []}',
    b"[]",
], ids=["not-json", "unknown-version", "no-keys", "no-value", "bad-version", "bad-base64", "keys-not-object",
        "not-object"])
def test_a_corrupt_file_is_refused_naming_it(state_file: Path, content: bytes) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_bytes(content)
    with pytest.raises(StateStoreError, match="corrupt") as info:
        FileStateStore(state_file)
    assert str(state_file) in str(info.value)


def test_an_interrupted_write_leaves_the_old_state(state_file: Path) -> None:
    store = FileStateStore(state_file)
    assert store.compare_and_set("k", None, b"committed")
    committed = store.get("k")
    store.close()
    # A crash between writing the temp file and renaming it leaves the temp file behind, half written.
    state_file.with_name(state_file.name + ".tmp").write_bytes(b'{"version": 1, "keys": {"k": {"v": 2, "b')
    reopened = FileStateStore(state_file)
    try:
        assert reopened.get("k") == committed
        assert committed is not None and reopened.compare_and_set("k", committed.version, b"next")
    finally:
        reopened.close()
    assert json.loads(state_file.read_bytes())["keys"]["k"]["v"] == 2


def test_a_second_store_on_the_same_file_is_refused(state_file: Path) -> None:
    store = FileStateStore(state_file)
    try:
        with pytest.raises(StateStoreError, match="in use by another process") as info:
            FileStateStore(state_file)
        assert str(state_file) in str(info.value)
        # A second process (a second controller started by mistake) is refused the same way.
        other = subprocess.run(
            [sys.executable, "-c", "import sys; from broker_store.controller.file_store import FileStateStore; "
                                   "FileStateStore(sys.argv[1])", str(state_file)],
            capture_output=True, text=True, timeout=60)
        assert other.returncode != 0
        assert "StateStoreError" in other.stderr and "in use by another process" in other.stderr
    finally:
        store.close()
    FileStateStore(state_file).close()  # released on close


def test_an_unreadable_file_is_a_state_store_error(state_file: Path) -> None:
    state_file.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(StateStoreError, match="cannot read") as info:
        FileStateStore(state_file)
    assert str(state_file) in str(info.value)


def test_a_failed_write_changes_nothing(state_file: Path) -> None:
    store = FileStateStore(state_file)
    try:
        assert store.compare_and_set("k", None, b"v1")
        before = store.get("k")
        state_file.with_name(state_file.name + ".tmp").mkdir()  # the temp file cannot be created
        assert before is not None
        with pytest.raises(StateStoreError, match="cannot write") as info:
            store.compare_and_set("k", before.version, b"v2")
        assert str(state_file) in str(info.value)
        assert store.get("k") == before
    finally:
        store.close()


def test_the_embedded_member_always_leads(state_file: Path) -> None:
    store = FileStateStore(state_file, member_id="namesrv-1")
    try:
        assert store.campaign() is True
        assert store.leader() == "namesrv-1"
        store.resign()
        assert store.leader() == "namesrv-1"  # the only member: nobody to hand over to
    finally:
        store.close()
