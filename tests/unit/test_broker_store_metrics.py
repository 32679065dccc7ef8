"""The brokers' and controllers' Prometheus endpoint (docs/operations.md, "Monitoring"): what ``broker.metrics``
and ``controller.metrics`` export, read through ``net.metrics_http.render`` (no socket), and the endpoint itself
answering GET /metrics on a loopback port. A real broker scraped by a real Prometheus while its disk fills and its
group loses its primary is tests/integration/test_monitoring.py."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from unittest import mock

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from broker_store.broker.metrics import BrokerMetrics, disk_used_ratio
from broker_store.broker.role import RoleState
from broker_store.clock import ManualClock
from broker_store.config import LocalClustersConfig
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.metrics import ControllerMetrics
from broker_store.controller.service import Controller
from broker_store.controller.state_store import StateStoreError
from broker_store.net.metrics_http import Collect, MetricsServer, render
from broker_store.store import MessageStore, PutStatus
from tests.unit.test_controller_service import SETTINGS, beat, join
from tests.unit.test_store_recovery import open_store

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


async def _samples_async(collect: Collect) -> Samples:
    """Metric name -> sorted labels -> value, from the exposition text."""
    out: Samples = {}
    for family in text_string_to_metric_families((await render(collect))[0].decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def samples(collect: Collect) -> Samples:
    return asyncio.run(_samples_async(collect))


BROKER = (("broker", "127.0.0.1:10911"), ("cluster", "c"), ("group", "g"))


def broker_metrics(role: RoleState, store: MessageStore | None, store_dir: Path) -> BrokerMetrics:
    return BrokerMetrics("c", "g", lambda: "127.0.0.1:10911", role, lambda: store, store_dir)


def test_a_broker_before_its_store_opens_exports_its_role_only(tmp_path: Path) -> None:
    got = samples(broker_metrics(RoleState(0), None, tmp_path).collect)
    assert got["rmq_broker_is_primary"] == {BROKER: 1.0}
    assert got["rmq_broker_master_epoch"] == {BROKER: 0.0}
    assert {dict(k)["stage"]: v for k, v in got["rmq_broker_role"].items()} == {
        "primary": 1.0, "replica": 0.0, "promoting": 0.0, "demoting": 0.0}
    assert "rmq_broker_disk_full" not in got and "rmq_broker_commit_log_max_offset" not in got


def test_a_replica_with_a_store_exports_offsets_and_disk(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        r = store.put_message("T", 0, b"x" * 100, b"", tags_code=0, born_timestamp=1, born_host="127.0.0.1:1")
        assert r.status is PutStatus.PUT_OK
        got = samples(broker_metrics(RoleState(2, epoch=3), store, tmp_path).collect)
        assert got["rmq_broker_is_primary"] == {BROKER: 0.0}
        assert got["rmq_broker_master_epoch"] == {BROKER: 3.0}
        assert got["rmq_broker_commit_log_max_offset"] == {BROKER: float(store.max_physical_offset)}
        assert store.max_physical_offset > 0
        assert got["rmq_broker_disk_full"] == {BROKER: 0.0}
        assert got["rmq_broker_store_writable"] == {BROKER: 1.0}
        assert 0.0 < got["rmq_broker_disk_used_ratio"][BROKER] <= 1.0
    finally:
        store.shutdown()


def test_disk_full_is_exported_while_puts_are_refused_and_cleared_after(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    collect = broker_metrics(RoleState(0), store, tmp_path).collect

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    try:
        with mock.patch("broker_store.store.commit_log.os.pwrite", full):
            for _ in range(2):
                r = store.put_message("T", 0, b"x", b"", tags_code=0, born_timestamp=1, born_host="127.0.0.1:1")
                assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
            got = samples(collect)
            assert got["rmq_broker_disk_full"] == {BROKER: 1.0}
            assert got["rmq_broker_disk_full_refused_sends"] == {BROKER: 2.0}
        assert store.put_message("T", 0, b"x", b"", tags_code=0, born_timestamp=1,
                                 born_host="127.0.0.1:1").status is PutStatus.PUT_OK
        got = samples(collect)
        assert got["rmq_broker_disk_full"] == {BROKER: 0.0}
        assert got["rmq_broker_disk_full_refused_sends"] == {BROKER: 0.0}
    finally:
        store.shutdown()


def test_the_disk_ratio_is_used_over_used_and_available_as_df_counts_it(tmp_path: Path) -> None:
    stat = os.statvfs_result((4096, 4096, 1000, 300, 200, 0, 0, 0, 0, 255))  # 700 used, 200 available to users
    with mock.patch("broker_store.broker.metrics.os.statvfs", return_value=stat):
        assert disk_used_ratio(tmp_path) == 700 / 900
    assert disk_used_ratio(tmp_path / "missing") is None


def test_the_controller_exports_per_group_whether_it_has_a_live_primary(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=clock)
        await join(controller, 1)
        group_labels = (("cluster", "c"), ("group", "g"))
        got = await _samples_async(ControllerMetrics(controller).collect)
        assert got["rmq_controller_up"] == {(): 1.0}
        assert got["rmq_controller_group_has_primary"] == {group_labels: 0.0}  # registered, not elected yet
        assert (await controller.elect_master("g", requester=1)).ok
        got = await _samples_async(ControllerMetrics(controller).collect)
        assert got["rmq_controller_group_has_primary"] == {group_labels: 1.0}
        assert got["rmq_controller_group_master_epoch"] == {group_labels: 1.0}
        assert got["rmq_controller_group_alive_brokers"] == {group_labels: 1.0}
        assert got["rmq_controller_is_leader"] == {(): 1.0}
        controller.broker_closed("127.0.0.1:20001")  # the primary's connection closed (kill -9)
        got = await _samples_async(ControllerMetrics(controller).collect)
        assert got["rmq_controller_group_has_primary"] == {group_labels: 0.0}
        assert got["rmq_controller_group_alive_brokers"] == {group_labels: 0.0}
        beat(controller, 1)
        got = await _samples_async(ControllerMetrics(controller).collect)
        assert got["rmq_controller_group_has_primary"] == {group_labels: 1.0}

    asyncio.run(scenario())


def test_an_unreadable_controller_state_says_so_and_nothing_of_the_groups(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=ManualClock())
        await join(controller, 1)
        with mock.patch.object(controller, "groups", side_effect=StateStoreError("etcd: no answer")):
            got = await _samples_async(ControllerMetrics(controller).collect)
        assert got["rmq_controller_up"] == {(): 0.0}
        assert "rmq_controller_group_has_primary" not in got

    asyncio.run(scenario())


def test_the_endpoint_answers_get_metrics_and_nothing_else(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = MetricsServer(broker_metrics(RoleState(0), None, tmp_path).collect, "127.0.0.1", 0)
        await server.start()
        try:
            async def ask(request: bytes) -> bytes:
                reader, writer = await asyncio.open_connection(server.host, server.port)
                writer.write(request)
                await writer.drain()
                answer = await reader.read()
                writer.close()
                return answer

            ok = await ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"text/plain; version=" in ok
            assert b'rmq_broker_is_primary{broker="127.0.0.1:10911",cluster="c",group="g"} 1.0' in ok
            assert (await ask(b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404 ")
            assert (await ask(b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_metrics_port_another_process_listens_on_is_refused_in_a_clusters_file(tmp_path: Path) -> None:
    broker = {"broker_name": "b", "listen": "127.0.0.1:10911", "store_dir": str(tmp_path / "b")}
    clusters = {"clusters": [{"name": "a", "namesrv": {"listen": "127.0.0.1:9876"},
                              "brokers": [{**broker, "metrics_port": 9876}]}]}
    with pytest.raises(ValidationError, match=r"127\.0\.0\.1:9876.*and metrics_port"):
        LocalClustersConfig.model_validate(clusters)
    clusters["clusters"][0]["brokers"] = [{**broker, "metrics_port": 5557}]
    assert LocalClustersConfig.model_validate(clusters).clusters[0].brokers[0].metrics_port == 5557
