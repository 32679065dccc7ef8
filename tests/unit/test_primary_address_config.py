"""The ``primary_address`` setting: the group's, the same on every member, a port of its own, controller mode only;
every refusal names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_store.config import BrokerConfig, LocalClustersConfig, load_yaml
from broker_store.protocol.errors import ConfigError

GROUP = """
clusters:
  - name: source
    namesrv: {listen: "127.0.0.1:9876", controller: {}}
    brokers:
      - {broker_name: broker-a, listen: "127.0.0.1:10911", store_dir: /tmp/x/a0, enable_controller_mode: true,
         primary_address: "127.0.0.1:10901"}
      - {broker_name: broker-a, listen: "127.0.0.1:10921", store_dir: /tmp/x/a1, enable_controller_mode: true,
         primary_address: "127.0.0.1:10901"}
      - {broker_name: broker-a, listen: "127.0.0.1:10931", store_dir: /tmp/x/a2, enable_controller_mode: true,
         primary_address: "127.0.0.1:10901"}
"""


def _load(tmp_path: Path, text: str) -> LocalClustersConfig:
    path = tmp_path / "conf.yaml"
    path.write_text(text)
    return load_yaml(path, LocalClustersConfig)


def _broker(tmp_path: Path, **options: object) -> BrokerConfig:
    return BrokerConfig(broker_name="g", listen="127.0.0.1:10911", store_dir=tmp_path, namesrv_addrs=["127.0.0.1:1"],
                        **options)


def test_a_group_shares_one_primary_address_and_its_fast_port_moves_with_it(tmp_path: Path) -> None:
    brokers = _load(tmp_path, GROUP).cluster("source").broker_configs()
    assert {b.primary_address for b in brokers} == {"127.0.0.1:10901"}
    assert brokers[0].primary_addresses() == ["127.0.0.1:10901", "127.0.0.1:10899"]
    assert brokers[0].model_copy(update={"fast_listen_enable": False}).primary_addresses() == ["127.0.0.1:10901"]
    assert _broker(tmp_path, enable_controller_mode=True).primary_addresses() == []


def test_members_giving_different_primary_addresses_are_refused(tmp_path: Path) -> None:
    last = 'store_dir: /tmp/x/a2, enable_controller_mode: true,\n         primary_address: "127.0.0.1:10901"'
    text = GROUP.replace(last, "store_dir: /tmp/x/a2, enable_controller_mode: true")
    with pytest.raises(ConfigError, match=r"groups \['broker-a'\] give different primary_address"):
        _load(tmp_path, text)


def test_a_primary_address_on_another_process_port_is_refused(tmp_path: Path) -> None:
    text = GROUP + '  - name: other\n    namesrv: {listen: "127.0.0.1:10901"}\n' \
        '    brokers: [{broker_name: o, listen: "127.0.0.1:11911", store_dir: /tmp/x/o}]\n'
    with pytest.raises(ConfigError, match=r"listen addresses \['127.0.0.1:10901'\] used by more than one process"):
        _load(tmp_path, text)


@pytest.mark.parametrize(("options", "error"), [
    ({"primary_address": "127.0.0.1:10901"}, "needs enable_controller_mode: true"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:0"}, "port 0 is no address"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:10911"}, "also this broker's own address"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:10912"}, "also this broker's own address"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:10911", "fast_listen_enable": False},
     "also this broker's own address"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:10913"}, r"\['127.0.0.1:10911'\] is also"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:2"}, "its port - 2 is served too"),
    ({"enable_controller_mode": True, "primary_address": "127.0.0.1:10901", "ha": {"ha_listen_port": 20000}},
     "leave ha.ha_listen_port out"),
    ({"enable_controller_mode": True, "primary_address": "nohost"}, "primary_address"),
])
def test_a_primary_address_that_cannot_work_is_refused_naming_why(tmp_path: Path, options: dict[str, object],
                                                                  error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        _broker(tmp_path, **options)
