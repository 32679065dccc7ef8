"""brokerIdentity / brokerIdentity-temp: RocketMQ's layouts, the registration state they show, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.broker.identity_file import (
    AssignedIdentity,
    BrokerIdentityFiles,
    RegisterState,
    register_check_code,
)
from broker_store.protocol.errors import StoreError


def files(tmp_path: Path, cluster: str = "c1", broker: str = "broker-a") -> BrokerIdentityFiles:
    return BrokerIdentityFiles(tmp_path, cluster, broker)


def test_layouts_are_rocketmqs() -> None:
    assert AssignedIdentity("c1", "broker-a", 3).encode() == b"c1#broker-a#3"
    code = register_check_code("10.0.0.5:10911", 1700000000123)
    assert code == "10.0.0.5:10911;1700000000123"
    assert AssignedIdentity("c1", "broker-a", 3, code).encode() == b"c1#broker-a#3#10.0.0.5:10911;1700000000123"
    assert AssignedIdentity.decode("c1#broker-a#3\n", temp=False, source="f") == AssignedIdentity("c1", "broker-a", 3)
    assert AssignedIdentity.decode("c1#broker-a#3#a:1;2", temp=True, source="f").register_check_code == "a:1;2"


def test_the_registration_walks_initial_temp_then_identity(tmp_path: Path) -> None:
    f = files(tmp_path)
    assert f.load() == (RegisterState.INITIAL, None)
    pending = f.write_temp(2, "127.0.0.1:10911;5")
    assert f.temp_path.read_text() == "c1#broker-a#2#127.0.0.1:10911;5"
    assert f.load() == (RegisterState.CREATE_TEMP_METADATA_FILE_DONE, pending)
    assert f.confirm() == AssignedIdentity("c1", "broker-a", 2)
    assert f.path.read_text() == "c1#broker-a#2" and not f.temp_path.exists()
    assert f.load() == (RegisterState.CREATE_METADATA_FILE_DONE, AssignedIdentity("c1", "broker-a", 2))


def test_a_crash_between_the_two_writes_keeps_the_identity_file(tmp_path: Path) -> None:
    f = files(tmp_path)
    f.path.write_text("c1#broker-a#4")
    f.temp_path.write_text("c1#broker-a#4#127.0.0.1:10911;5")
    assert f.load() == (RegisterState.CREATE_METADATA_FILE_DONE, AssignedIdentity("c1", "broker-a", 4))


def test_a_refused_apply_clears_the_temp_file(tmp_path: Path) -> None:
    f = files(tmp_path)
    f.write_temp(2, "a:1;2")
    f.clear_temp()
    f.clear_temp()  # nothing left: no error
    assert f.load() == (RegisterState.INITIAL, None)
    with pytest.raises(StoreError, match="no .*brokerIdentity-temp to confirm"):
        f.confirm()


@pytest.mark.parametrize(("name", "text", "error"), [
    ("brokerIdentity", "c1#broker-a", r"holds 'c1#broker-a', not <clusterName>#<brokerName>#<brokerId>;"),
    ("brokerIdentity", "c1#broker-a#x", r"holds broker id 'x', not an integer of at least 1"),
    ("brokerIdentity", "c1#broker-a#0", r"holds broker id '0'"),
    ("brokerIdentity-temp", "c1#broker-a#2", r"not <clusterName>#<brokerName>#<brokerId>#<registerCheckCode>"),
    ("brokerIdentity", "c2#broker-a#2", r"belongs to c2/broker-a, but this broker is configured as c1/broker-a"),
    ("brokerIdentity-temp", "c1#broker-b#2#a:1;2", r"belongs to c1/broker-b"),
])
def test_a_foreign_or_malformed_file_is_refused_not_overwritten(tmp_path: Path, name: str, text: str,
                                                                error: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(StoreError, match=error):
        files(tmp_path).load()
    assert (tmp_path / name).read_text() == text
