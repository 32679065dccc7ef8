"""The ``ha:`` settings section: RocketMQ defaults, cross-field rules, errors naming field and values."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_store.config import load_yaml
from broker_store.ha.settings import HARole, HASettings
from broker_store.protocol.errors import ConfigError


def test_defaults_are_rocketmqs() -> None:
    s = HASettings()
    assert s.role is HARole.ASYNC_MASTER
    assert (s.total_replicas, s.in_sync_replicas, s.min_in_sync_replicas) == (1, 1, 1)
    assert s.ha_transfer_batch_size == 32 * 1024
    assert s.ha_send_heartbeat_interval_ms == 5000
    assert s.ha_housekeeping_interval_ms == 20_000
    assert s.slave_timeout_ms == 3000
    assert s.ha_max_gap_not_in_sync == 256 * 1024 * 1024
    assert not s.enable_auto_in_sync_replicas and not s.all_ack_in_sync_state_set
    assert not s.slave_read_enable and s.access_message_in_memory_max_ratio == 40
    assert s.metadata_sync_interval_ms == 10_000
    assert s.ha_port(10911) == 10912 and s.ha_port(0) == 0
    assert HASettings(ha_listen_port=20000).ha_port(10911) == 20000


def test_memory_basis_is_configurable() -> None:
    s = HASettings(memory_basis_bytes=1000)
    assert s.memory_basis() == 1000 and s.max_in_memory_gap() == 400
    assert HASettings().memory_basis() > 0


@pytest.mark.parametrize(("counts", "ok"), [
    ((1, 1, 1), True), ((3, 2, 1), True), ((2, 2, 2), True),
    ((2, 3, 1), False), ((3, 1, 2), False), ((1, 1, 2), False),
])
def test_min_le_in_sync_le_total(counts: tuple[int, int, int], ok: bool) -> None:
    total, in_sync, min_in_sync = counts
    kwargs = {"total_replicas": total, "in_sync_replicas": in_sync, "min_in_sync_replicas": min_in_sync}
    if ok:
        HASettings.model_validate(kwargs)
        return
    with pytest.raises(ValidationError, match="min_in_sync_replicas <= in_sync_replicas <= total_replicas"):
        HASettings.model_validate(kwargs)


def test_errors_name_file_field_and_allowed_values(tmp_path: Path) -> None:
    path = tmp_path / "ha.yaml"
    path.write_text("role: MASTER\nin_sync_replicas: 2\nha_transfer_batch_sise: 1\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path, HASettings)
    text = str(info.value)
    assert f"{path}: role:" in text and "ASYNC_MASTER" in text and "SYNC_MASTER" in text and "SLAVE" in text
    assert "ha_transfer_batch_sise" in text and "Extra inputs are not permitted" in text
    path.write_text("role: SYNC_MASTER\ntotal_replicas: 2\nin_sync_replicas: 3\n")
    with pytest.raises(ConfigError, match="in_sync_replicas=3, total_replicas=2"):
        load_yaml(path, HASettings)


def test_role_specific_rules() -> None:
    HASettings(role=HARole.SLAVE, ha_primary_address="127.0.0.1:10912")
    with pytest.raises(ValidationError, match="port of '127.0.0.1:99999' must be an integer"):
        HASettings(role=HARole.SLAVE, ha_primary_address="127.0.0.1:99999")
    HASettings(role=HARole.SLAVE)  # learnt from the name server (the broker config checks it has one)
    with pytest.raises(ValidationError, match="only allowed with role SLAVE"):
        HASettings(role=HARole.SYNC_MASTER, ha_primary_address="127.0.0.1:10912")
    with pytest.raises(ValidationError, match="ha_housekeeping_interval_ms"):
        HASettings(ha_send_heartbeat_interval_ms=1000, ha_housekeeping_interval_ms=1000)
    with pytest.raises(ValidationError, match="ha_transfer_batch_size"):
        HASettings(ha_transfer_batch_size=0)
    with pytest.raises(ValidationError, match="access_message_in_memory_max_ratio"):
        HASettings(access_message_in_memory_max_ratio=101)


def test_ha_port_overflow_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ha_listen_port"):
        HASettings().ha_port(65535)
