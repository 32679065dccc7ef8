"""Typed configuration: loading YAML, errors naming file/field/reason, inheritance and cross checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_store.config import BrokerConfig, LocalClustersConfig, NamesrvConfig, load_yaml
from broker_store.protocol.errors import ConfigError
from broker_store.store import FlushMode, StoreConfig

CONF = Path(__file__).parents[2] / "conf"

LOCAL = """
clusters:
  - name: source
    namesrv: {listen: "127.0.0.1:9876"}
    brokers:
      - {broker_name: broker-a, listen: "127.0.0.1:10911", store_dir: /tmp/x/source/a}
      - {broker_name: broker-b, listen: "127.0.0.1:10921", store_dir: /tmp/x/source/b, flush_mode: SYNC_FLUSH}
  - name: target
    namesrv: {listen: "127.0.0.1:9877"}
    brokers:
      - {broker_name: broker-a, listen: "127.0.0.1:11911", store_dir: /tmp/x/target/a,
         auto_create_topic_enable: false}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf.yaml"
    path.write_text(text)
    return path


def test_local_clusters_brokers_inherit_cluster_and_namesrv(tmp_path: Path) -> None:
    cfg = load_yaml(_write(tmp_path, LOCAL), LocalClustersConfig)
    source = cfg.cluster("source").broker_configs()
    assert [(b.cluster_name, b.broker_name, b.namesrv_addrs) for b in source] == [
        ("source", "broker-a", ["127.0.0.1:9876"]),
        ("source", "broker-b", ["127.0.0.1:9876"]),
    ]
    assert source[1].store.flush_mode is FlushMode.SYNC_FLUSH
    target = cfg.cluster("target").broker_configs()[0]
    assert not target.auto_create_topic_enable and target.namesrv_addrs == ["127.0.0.1:9877"]
    assert target.heartbeat_interval_seconds == 1.0 and target.register_interval_seconds == 30.0


def test_unknown_key_names_file_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, LOCAL.replace("flush_mode: SYNC_FLUSH", "flush_mod: SYNC_FLUSH"))
    with pytest.raises(ConfigError) as info:
        load_yaml(path, LocalClustersConfig)
    msg = str(info.value)
    assert str(path) in msg and "clusters[0].brokers[1].flush_mod" in msg and "Extra inputs" in msg


def test_bad_enum_lists_allowed_values(tmp_path: Path) -> None:
    path = _write(tmp_path, LOCAL.replace("SYNC_FLUSH", "SOMETIMES"))
    with pytest.raises(ConfigError, match=r"flush_mode: Input should be 'ASYNC_FLUSH' or 'SYNC_FLUSH'"):
        load_yaml(path, LocalClustersConfig)


def test_duplicate_ports_and_store_dirs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="127.0.0.1:10911.*more than one process"):
        load_yaml(_write(tmp_path, LOCAL.replace("11911", "10911")), LocalClustersConfig)
    with pytest.raises(ConfigError, match="store_dir"):
        load_yaml(_write(tmp_path, LOCAL.replace("/tmp/x/target/a", "/tmp/x/source/a")), LocalClustersConfig)
    with pytest.raises(ConfigError, match="broker-a/0.*more than once"):
        load_yaml(_write(tmp_path, LOCAL.replace("broker-b", "broker-a")), LocalClustersConfig)


def test_yaml_syntax_error_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"conf.yaml: invalid YAML at line \d+"):
        load_yaml(_write(tmp_path, "clusters: [\n  {name: x"), LocalClustersConfig)
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_yaml(tmp_path / "nope.yaml", NamesrvConfig)
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_yaml(_write(tmp_path, "- 1\n- 2\n"), NamesrvConfig)


def test_broker_field_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listen: Value error, port of '127.0.0.1:99999'"):
        load_yaml(
            _write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nlisten: 127.0.0.1:99999\n"), BrokerConfig
        )
    with pytest.raises(ConfigError, match="store_dir: Field required"):
        load_yaml(_write(tmp_path, "broker_name: a\n"), BrokerConfig)
    with pytest.raises(ConfigError, match="max_message_size"):
        load_yaml(
            _write(
                tmp_path,
                "broker_name: a\nstore_dir: /tmp/a\ncommit_log_segment_size: 1048576\n"
                "max_message_size: 1048576\n",
            ),
            BrokerConfig,
        )


def test_namesrv_defaults() -> None:
    cfg = NamesrvConfig()
    assert (cfg.listen, cfg.broker_expiry_seconds, cfg.scan_interval_seconds) == ("127.0.0.1:9876", 5.0, 1.0)


def test_to_store_config(tmp_path: Path) -> None:
    # The flat store keys are raw input (folded into ``store`` by a validator), so they go through model_validate.
    cfg = BrokerConfig.model_validate({
        "broker_name": "a",
        "store_dir": tmp_path,
        "flush_mode": "SYNC_FLUSH",
        "flush_timeout_ms": 1234,
        "max_commit_log_bytes": 10 * 1024 * 1024,
    })
    sc = cfg.to_store_config()
    assert sc.store_dir == tmp_path and sc.flush_mode is FlushMode.SYNC_FLUSH and sc.flush_timeout_ms == 1234
    assert sc.max_commit_log_bytes == 10 * 1024 * 1024 and sc.max_message_size == cfg.store.max_message_size


def test_store_section_nested_or_flat_is_one_definition(tmp_path: Path) -> None:
    nested = load_yaml(_write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nstore:\n  flush_mode: SYNC_FLUSH\n"
                                        "  consume_queue_segment_entries: 1000\n  max_open_files: 64\n"
                                        "  retention_interval_ms: 0\n"), BrokerConfig)
    flat = load_yaml(_write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nflush_mode: SYNC_FLUSH\n"
                                      "consume_queue_segment_entries: 1000\nmax_open_files: 64\n"
                                      "retention_interval_ms: 0\n"), BrokerConfig)
    assert nested == flat
    sc = nested.to_store_config()
    assert (sc.flush_mode, sc.consume_queue_segment_entries, sc.max_open_files, sc.retention_interval_ms) == (
        FlushMode.SYNC_FLUSH, 1000, 64, 0)
    defaults = BrokerConfig(broker_name="a", store_dir=tmp_path).to_store_config()
    assert defaults == StoreConfig(store_dir=tmp_path)  # the broker adds no defaults of its own


def test_store_errors_name_file_field_and_allowed_values(tmp_path: Path) -> None:
    path = _write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nstore:\n  max_open_files: 2\n")
    with pytest.raises(ConfigError, match=r"conf.yaml: store.max_open_files: Input should be greater than or "
                                          r"equal to 4 \(got 2\)"):
        load_yaml(path, BrokerConfig)
    path = _write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nstore: {flush_mode: NEVER}\n")
    with pytest.raises(ConfigError, match=r"conf.yaml: store.flush_mode: Input should be 'ASYNC_FLUSH' or "
                                          r"'SYNC_FLUSH'"):
        load_yaml(path, BrokerConfig)
    path = _write(tmp_path, "broker_name: a\nstore_dir: /tmp/a\nflush_mode: SYNC_FLUSH\n"
                            "store: {flush_mode: ASYNC_FLUSH}\n")
    with pytest.raises(ConfigError, match=r"conf.yaml: .*\['flush_mode'\] given both"):
        load_yaml(path, BrokerConfig)
    with pytest.raises(ConfigError, match=r"StoreConfig.commit_log_segment_size: Input should be greater"):
        StoreConfig(store_dir=tmp_path, commit_log_segment_size=10)


def test_ha_port_counts_in_the_duplicate_port_check(tmp_path: Path) -> None:
    # broker-b listening on broker-a's HA port (listen + 1)
    with pytest.raises(ConfigError, match=r"127.0.0.1:10912.*more than one process \(HA ports included"):
        load_yaml(_write(tmp_path, LOCAL.replace("10921", "10912")), LocalClustersConfig)
    ha_port_set = LOCAL.replace("store_dir: /tmp/x/source/a}",
                                "store_dir: /tmp/x/source/a, ha: {ha_listen_port: 10921}}")
    with pytest.raises(ConfigError, match=r"127.0.0.1:10921.*more than one process"):
        load_yaml(_write(tmp_path, ha_port_set), LocalClustersConfig)


def test_ha_role_must_fit_broker_id(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"ha.role ASYNC_MASTER does not fit broker_id 1.*\['SLAVE'\]"):
        BrokerConfig(broker_name="b", broker_id=1, store_dir=tmp_path)
    with pytest.raises(ValidationError, match=r"ha.role SLAVE does not fit broker_id 0.*'ASYNC_MASTER', 'SYNC_MASTER'"):
        BrokerConfig(broker_name="b", store_dir=tmp_path, ha={"role": "SLAVE", "ha_primary_address": "h:1"})
    with pytest.raises(ValidationError, match="SLAVE needs ha.ha_primary_address .* or namesrv_addrs"):
        BrokerConfig(broker_name="b", broker_id=1, store_dir=tmp_path, ha={"role": "SLAVE"})
    # with name servers it learns the primary's HA address from their registration answer
    BrokerConfig(broker_name="b", broker_id=1, store_dir=tmp_path, ha={"role": "SLAVE"}, namesrv_addrs=["h:9876"])
    with pytest.raises(ValidationError, match=r"in_sync_replicas <= total_replicas"):
        BrokerConfig(broker_name="b", store_dir=tmp_path, ha={"in_sync_replicas": 2})


def test_controller_mode_has_no_fixed_role_or_id(tmp_path: Path) -> None:
    """enable_controller_mode relaxes the role/id pairing: the controller assigns both at runtime."""
    cfg = BrokerConfig(broker_name="b", store_dir=tmp_path, enable_controller_mode=True, ha={"role": "SYNC_MASTER"},
                       namesrv_addrs=["h:9876"])
    assert cfg.enable_controller_mode and cfg.broker_id == 0  # unused: the id comes from brokerIdentity
    with pytest.raises(ValidationError, match=r"broker_id \(0\) is assigned by the controller.*leave it out"):
        BrokerConfig(broker_name="b", broker_id=0, store_dir=tmp_path, enable_controller_mode=True)
    with pytest.raises(ValidationError, match=r"broker_id \(2\) is assigned by the controller"):
        BrokerConfig(broker_name="b", broker_id=2, store_dir=tmp_path, enable_controller_mode=True)
    with pytest.raises(ValidationError, match="ha.role SLAVE does not fit enable_controller_mode.*ASYNC_MASTER or"):
        BrokerConfig(broker_name="b", store_dir=tmp_path, enable_controller_mode=True, ha={"role": "SLAVE"})


def test_controller_section_names_the_controllers_and_is_checked(tmp_path: Path) -> None:
    """The controllers default to the name servers (the embedded controller); the section is validated and
    refused on a static broker; a controller-mode broker with nobody to ask is refused."""
    base = {"broker_name": "b", "store_dir": tmp_path, "enable_controller_mode": True}
    embedded = BrokerConfig(**base, namesrv_addrs=["h:9876"])
    assert embedded.controller_addresses() == ["h:9876"]
    link = embedded.controller
    assert (link.heartbeat_interval_ms, link.replica_info_poll_interval_ms) == (1000, 1000)
    assert link.election_priority == 2**31 - 1 and link.heartbeat_timeout_ms is None
    own = BrokerConfig(**base, namesrv_addrs=["h:9876"],
                       controller={"controller_addrs": ["c1:9878", "c2:9878"], "election_priority": 1})
    assert own.controller_addresses() == ["c1:9878", "c2:9878"] and own.controller.election_priority == 1
    assert BrokerConfig(**base, controller={"controller_addrs": ["c:1"]}).controller_addresses() == ["c:1"]
    with pytest.raises(ValidationError, match="enable_controller_mode needs controller.controller_addrs or namesrv"):
        BrokerConfig(**base)
    with pytest.raises(ValidationError, match=r"controller .* is only allowed with enable_controller_mode"):
        BrokerConfig(broker_name="b", store_dir=tmp_path, controller={"election_priority": 1})
    with pytest.raises(ValidationError, match=r"heartbeat_timeout_ms \(1000\) must be greater than heartbeat_interval"):
        BrokerConfig(**base, controller={"controller_addrs": ["c:1"], "heartbeat_timeout_ms": 1000})
    with pytest.raises(ValidationError, match=r"controller_addrs lists \['c:1'\] more than once"):
        BrokerConfig(**base, controller={"controller_addrs": ["c:1", "c:1"]})
    with pytest.raises(ValidationError, match=r"controller.election_priority"):
        BrokerConfig(**base, controller={"controller_addrs": ["c:1"], "election_priority": -1})
    with pytest.raises(ValidationError, match=r"controller.polling"):
        BrokerConfig(**base, controller={"controller_addrs": ["c:1"], "polling": 1})


def test_a_written_controller_mode_config_loads_again(tmp_path: Path) -> None:
    """The launcher's per-process file leaves the broker id out (the controller assigns it; written, it would be
    refused) and keeps the controller section."""
    from broker_store.deploy.launcher import write_config

    cfg = BrokerConfig(broker_name="b", store_dir=tmp_path, enable_controller_mode=True, namesrv_addrs=["h:9876"],
                       controller={"election_priority": 3})
    loaded = load_yaml(write_config(tmp_path, "b", cfg), BrokerConfig)
    assert loaded == cfg and "broker_id" not in loaded.model_fields_set


CONTROLLED = """
clusters:
  - name: source
    namesrv: {listen: "127.0.0.1:9876", controller: {}}
    brokers:
      - {broker_name: broker-a, listen: "127.0.0.1:10911", store_dir: /tmp/x/a0, enable_controller_mode: true}
      - {broker_name: broker-a, listen: "127.0.0.1:10921", store_dir: /tmp/x/a1, enable_controller_mode: true}
      - {broker_name: broker-a, listen: "127.0.0.1:10931", store_dir: /tmp/x/a2, enable_controller_mode: true}
"""


def test_a_controlled_group_needs_no_ids_and_is_not_mixed_with_static_brokers(tmp_path: Path) -> None:
    cfg = load_yaml(_write(tmp_path, CONTROLLED), LocalClustersConfig)
    brokers = cfg.cluster("source").broker_configs()
    assert [b.enable_controller_mode for b in brokers] == [True, True, True]
    assert all("broker_id" not in b.model_fields_set for b in brokers)  # not invented when filled in
    mixed = CONTROLLED.replace("store_dir: /tmp/x/a2, enable_controller_mode: true", "store_dir: /tmp/x/a2")
    with pytest.raises(ConfigError, match=r"groups \['broker-a'\] mix brokers with and without enable_controller"):
        load_yaml(_write(tmp_path, mixed), LocalClustersConfig)
    with pytest.raises(ConfigError, match=r"store_dir .* shared by more than one broker"):
        load_yaml(_write(tmp_path, CONTROLLED.replace("/tmp/x/a2", "/tmp/x/a1")), LocalClustersConfig)


def test_cluster_replicas_yaml_replicas_follow_their_group_primary() -> None:
    cfg = load_yaml(CONF / "cluster-replicas.yaml", LocalClustersConfig)
    assert [c.name for c in cfg.clusters] == ["source", "target"]
    for cluster in cfg.clusters:
        brokers = cluster.broker_configs()
        groups = {b.broker_name for b in brokers}
        assert len(groups) == 2 and len(brokers) == 4
        for b in brokers:
            if b.broker_id == 0:
                assert b.ha.role.value == "SYNC_MASTER" and b.ha.in_sync_replicas == 2
            else:  # no HA address configured: the name server's registration answer names the primary's
                assert b.ha.role.value == "SLAVE" and b.ha.ha_primary_address is None
                assert b.namesrv_addrs == [cluster.namesrv.listen]
            assert b.ha.ha_housekeeping_interval_ms <= 3000


def test_replica_without_a_primary_in_its_group_is_refused(tmp_path: Path) -> None:
    text = LOCAL.replace("store_dir: /tmp/x/source/b,", "store_dir: /tmp/x/source/b, broker_id: 1, ha: {role: SLAVE},")
    with pytest.raises(ConfigError, match=r"replicas \['broker-b/1'\] have no broker_id 0"):
        load_yaml(_write(tmp_path, text), LocalClustersConfig)


def test_up_plans_one_child_per_member_of_cluster_replicas_yaml(tmp_path: Path) -> None:
    from broker_store.deploy.up import plan_up

    cfg = load_yaml(CONF / "cluster-replicas.yaml", LocalClustersConfig)
    plan = plan_up(cfg, tmp_path / "run", tmp_path / "data", console=False)
    assert plan.etcd is None and plan.controllers == []
    brokers = plan.brokers
    assert [c.name for c in brokers][:2] == ["source-a", "source-a-1"] and len(brokers) == 8
    files = [load_yaml(c.config_file, BrokerConfig) for c in brokers]
    assert len({f.store_dir for f in files}) == 8 and len({c.config_file for c in brokers}) == 8
    assert files[1].ha.role.value == "SLAVE" and files[1].ha.ha_primary_address is None
    assert files[1].store_dir == tmp_path / "data" / "source-a-1"


def test_up_plans_etcd_controllers_and_controlled_groups_of_cluster_ha_yaml(tmp_path: Path) -> None:
    """Controller-mode brokers have no fixed id: each still gets a process, config file and store of its own (named
    by its position in its group), and reports to the file's three controllers, which share three etcd members."""
    from broker_store.config import ControllerConfig
    from broker_store.deploy.up import plan_up

    cfg = load_yaml(CONF / "cluster-ha.yaml", LocalClustersConfig)
    plan = plan_up(cfg, tmp_path / "run", tmp_path / "data", console=False)
    assert [c.name for c in plan.children()] == [
        "etcd-0", "etcd-1", "etcd-2", "controller-0", "controller-1", "controller-2", "source-namesrv",
        "target-namesrv", "source-a.0", "source-a.1", "source-a.2", "target-a.0", "target-a.1", "target-a.2"]
    assert plan.etcd is not None
    endpoints = [m.client_url for m in plan.etcd.members]
    assert [m.data_dir for m in plan.etcd.members] == [tmp_path / "data" / "etcd" / f"etcd-{i}.data" for i in range(3)]
    controllers = [load_yaml(c.config_file, ControllerConfig) for c in plan.controllers]
    assert {c.listen for c in controllers} == {"127.0.0.1:9878", "127.0.0.1:9879", "127.0.0.1:9880"}
    for controller in controllers:
        assert controller.controller.etcd is not None
        assert [str(u).rstrip("/") for u in controller.controller.etcd.endpoints] == endpoints
        assert (controller.controller.heartbeat_timeout_ms, controller.controller.scan_interval_ms) == (2000, 500)
    files = [load_yaml(c.config_file, BrokerConfig) for c in plan.brokers]
    assert len({f.store_dir for f in files}) == 6 and len({c.config_file for c in plan.brokers}) == 6
    assert files[1].store_dir == tmp_path / "data" / "source-a.1"
    for f in files:
        assert f.enable_controller_mode and "broker_id" not in f.model_fields_set
        assert f.controller_addresses() == ["127.0.0.1:9878", "127.0.0.1:9879", "127.0.0.1:9880"]
        assert f.ha.in_sync_replicas == 2 and not f.ha.enable_auto_in_sync_replicas


def test_up_gives_standalone_controllers_the_controllers_tls_section(tmp_path: Path) -> None:
    """``controllers.tls`` reaches every controller's config file: it serves and dials with TLS (up used to drop it,
    so controllers served plain while the brokers dialing them used TLS)."""
    from broker_store.config import ControllerConfig
    from broker_store.deploy.up import plan_up

    for name in ("server.pem", "server.key", "ca.pem"):
        (tmp_path / name).write_text("not read when planned\n")
    text = (CONF / "cluster-ha.yaml").read_text().replace(
        "  etcd_data_dir: data/etcd\n",
        f"  etcd_data_dir: data/etcd\n  tls: {{server: {{mode: enforcing, certPath: {tmp_path}/server.pem, "
        f"keyPath: {tmp_path}/server.key}}, enable: true, client: {{trustCertPath: {tmp_path}/ca.pem}}}}\n")
    cfg = load_yaml(_write(tmp_path, text), LocalClustersConfig)
    plan = plan_up(cfg, tmp_path / "run", tmp_path / "data", console=False)
    controllers = [load_yaml(c.config_file, ControllerConfig) for c in plan.controllers]
    assert len(controllers) == 3
    for controller in controllers:
        assert controller.tls.server.mode.value == "enforcing"
        assert controller.tls.server.cert_path == tmp_path / "server.pem"
        client = controller.tls.client_settings()
        assert client is not None and client.trust_cert_path == tmp_path / "ca.pem"


CONTROLLERS = CONTROLLED.replace('namesrv: {listen: "127.0.0.1:9876", controller: {}}',
                                 'namesrv: {listen: "127.0.0.1:9876"}') + """
controllers:
  listen: ["127.0.0.1:9878", "127.0.0.1:9879", "127.0.0.1:9880"]
  controller:
    etcd: {endpoints: ["http://127.0.0.1:2379", "http://127.0.0.1:2381", "http://127.0.0.1:2383"]}
"""


@pytest.mark.parametrize(("old", "new", "error"), [
    ('etcd: {endpoints: ["http://127.0.0.1:2379", "http://127.0.0.1:2381", "http://127.0.0.1:2383"]}',
     "scan_interval_ms: 500", r"controllers: Value error, 3 controllers need controller.etcd"),
    ('namesrv: {listen: "127.0.0.1:9876"}', 'namesrv: {listen: "127.0.0.1:9876", controller: {}}',
     r"clusters\[0\].namesrv.controller and controllers are both set"),
    ("http://127.0.0.1:2381", "http://10.0.0.1:2381", r"http://10.0.0.1:2381/ is not http://127.0.0.1:<port>"),
    (', "http://127.0.0.1:2383"', "", r"2 members; up starts 1, 3 or 5"),
    ("http://127.0.0.1:2381", "http://127.0.0.1:2380", r"listen addresses \['127.0.0.1:2380'\] used by more than one"),
    ('"127.0.0.1:9879"', '"127.0.0.1:9876"', r"listen addresses \['127.0.0.1:9876'\] used by more than one"),
])
def test_standalone_controllers_are_checked_when_loaded(tmp_path: Path, old: str, new: str, error: str) -> None:
    assert load_yaml(_write(tmp_path, CONTROLLERS), LocalClustersConfig).controllers is not None
    assert old in CONTROLLERS
    with pytest.raises(ConfigError, match=error):
        load_yaml(_write(tmp_path, CONTROLLERS.replace(old, new)), LocalClustersConfig)


def test_a_controlled_group_without_any_controller_is_refused(tmp_path: Path) -> None:
    text = CONTROLLED.replace('namesrv: {listen: "127.0.0.1:9876", controller: {}}',
                              'namesrv: {listen: "127.0.0.1:9876"}')
    with pytest.raises(ConfigError, match=r"controller-mode groups \['broker-a'\] have no controller"):
        load_yaml(_write(tmp_path, text), LocalClustersConfig)
    with_addrs = text.replace("enable_controller_mode: true}",
                              'enable_controller_mode: true, controller: {controller_addrs: ["127.0.0.1:9999"]}}')
    assert load_yaml(_write(tmp_path, with_addrs), LocalClustersConfig).controllers is None




def test_up_runs_the_embedded_controller_in_the_name_server_with_its_state_under_the_data_dir(tmp_path: Path) -> None:
    from broker_store.deploy.up import plan_up

    cfg = load_yaml(_write(tmp_path, CONTROLLED), LocalClustersConfig)
    plan = plan_up(cfg, tmp_path / "run", tmp_path / "data", console=False)
    assert plan.etcd is None and plan.controllers == []
    namesrv = load_yaml(plan.namesrvs[0].config_file, NamesrvConfig)
    assert namesrv.controller is not None and namesrv.controller.state_dir == tmp_path / "data" / "source-controller"
    assert [b.name for b in plan.brokers] == ["broker-a.0", "broker-a.1", "broker-a.2"]
    for broker in plan.brokers:
        loaded = load_yaml(broker.config_file, BrokerConfig)
        assert loaded.controller_addresses() == ["127.0.0.1:9876"]  # the name server, where it is embedded
        assert loaded.store_dir == tmp_path / "data" / broker.name


def test_controlled_brokers_get_their_controllers_heartbeat_timeout_as_the_length_of_their_lease(
        tmp_path: Path) -> None:
    """A primary's lease must not outlast the heartbeat timeout its controllers go by: `up`'s brokers send theirs."""
    ha = load_yaml(CONF / "cluster-ha.yaml", LocalClustersConfig)
    for cluster in ha.clusters:
        assert {b.controller.heartbeat_timeout_ms for b in ha.broker_configs(cluster)} == {2000}  # the controllers'
    embedded = load_yaml(_write(tmp_path, CONTROLLED.replace("controller: {}", "controller: {heartbeat_timeout_ms: "
                                                                                 "1500}")), LocalClustersConfig)
    assert [b.controller.primary_lease_ms() for b in embedded.broker_configs(embedded.clusters[0])] == [1500] * 3
    own = CONTROLLED.replace("enable_controller_mode: true}", "enable_controller_mode: true, "
                                                              "controller: {heartbeat_timeout_ms: 4000}}", 1)
    mixed = load_yaml(_write(tmp_path, own), LocalClustersConfig)
    assert [b.controller.heartbeat_timeout_ms for b in mixed.broker_configs(mixed.clusters[0])] == [4000, 3000, 3000]
    assert all("heartbeat_timeout_ms" not in b.controller.model_fields_set  # static groups: nothing added
               for c in load_yaml(CONF / "cluster-local.yaml", LocalClustersConfig).clusters
               for b in c.broker_configs())
