"""`make demo DEMO_ARGS=--failover`: the demo's source cluster in controller mode, and its primary killed once
under the load.

Used by ``jobs/demo.py`` only. ``controlled_clusters`` rewrites the demo's local-clusters file so that its source
cluster is a controller-mode one, which ``python -m broker_store up`` then starts with the others: a name server
with the embedded controller (RocketMQ's enableControllerInNamesrv; 2 s heartbeat timeout, 200 ms scans) and one
broker group of three brokers in controller mode, SYNC_MASTER with ``in_sync_replicas`` 2, so a send the
producer saw acknowledged is on two brokers and survives the kill. ``ControlledSource`` finds the group's members
in ``up``'s run directory (their processes are ``up``'s children; their pids in ``<run_dir>/<name>.pid``).
``Nemesis`` kills the group's primary with SIGKILL once, ``kill_after`` seconds into the load. The election time
is measured as the load sees it: from the kill to the first acknowledged send started after it
(``election_seconds``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_store.client import Admin
from broker_store.config import BrokerSettings, ControllerLinkSettings, LocalClusterConfig, LocalClustersConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.launcher import HOST, broker_listen_port
from broker_store.deploy.up import broker_process_names
from broker_store.ha.settings import HASettings
from broker_store.protocol.errors import RocketMQError

SOURCE = "source"
GROUP = "source-a"
MEMBERS = 3
HEARTBEAT_TIMEOUT_MS, SCAN_INTERVAL_MS = 2000, 200
"""The embedded controller: a dead primary is noticed within ~2 s (RocketMQ's 10 s would make a demo of it)."""
HA = {"role": "SYNC_MASTER", "total_replicas": MEMBERS, "in_sync_replicas": 2, "min_in_sync_replicas": 2,
      "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000,
      "ha_max_time_slave_not_catchup_ms": 5000, "metadata_sync_interval_ms": 500}
"""Every acknowledged send is on two of the three brokers; replicas copy topics and consumer offsets every
0.5 s, so the one elected holds the group's committed offsets."""


def controlled_clusters(config: LocalClustersConfig) -> LocalClustersConfig:
    """``config`` with its ``source`` cluster replaced by the controller-mode one (same name and name server
    address; the group ``GROUP`` of ``MEMBERS`` brokers on free ports, their stores wherever ``up`` puts them)."""
    def controlled(cluster: LocalClusterConfig) -> LocalClusterConfig:
        if cluster.name != SOURCE:
            return cluster
        namesrv = cluster.namesrv.model_copy(update={"controller": ControllerSettings(
            heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS, scan_interval_ms=SCAN_INTERVAL_MS)})
        brokers = [BrokerSettings(
            broker_name=GROUP, listen=f"{HOST}:{broker_listen_port()}", store_dir=Path(f"{GROUP}-{i}"),
            enable_controller_mode=True,
            controller=ControllerLinkSettings(controller_addrs=[namesrv.listen], replica_info_poll_interval_ms=500),
            ha=HASettings.model_validate(HA)) for i in range(1, MEMBERS + 1)]
        return LocalClusterConfig(name=cluster.name, namesrv=namesrv, brokers=brokers)

    if not any(c.name == SOURCE for c in config.clusters):
        raise ValueError(f"the demo's clusters file has no cluster named {SOURCE!r} to run in controller mode")
    return LocalClustersConfig(clusters=[controlled(c) for c in config.clusters], controllers=config.controllers)


@dataclass(frozen=True)
class Member:
    """One broker of the controller-mode group, started by ``up``."""

    name: str
    """Its process name under ``up`` (``<group>.<i>``): ``<run_dir>/<name>.pid`` holds its pid."""
    listen: str
    pid_file: Path

    def kill(self) -> None:
        """SIGKILL the member's process (the pid ``up`` wrote for it)."""
        os.kill(int(self.pid_file.read_text()), signal.SIGKILL)


class ControlledSource:
    """The controller-mode source cluster of ``config`` (``controlled_clusters``' output) as ``up`` runs it with
    ``run_dir``: its name server's address and its group's members."""

    def __init__(self, config: LocalClustersConfig, run_dir: Path) -> None:
        names = iter(broker_process_names(config))
        self.brokers: list[Member] = []
        for cluster in config.clusters:
            for broker in cluster.brokers:
                name = next(names)
                if cluster.name == SOURCE:
                    self.brokers.append(Member(name, broker.listen, run_dir / f"{name}.pid"))
            if cluster.name == SOURCE:
                self.namesrv_addr = cluster.namesrv.listen

    def primary(self) -> Member | None:
        """The member the name server lists as the group's primary now, or None."""
        with Admin(self.namesrv_addr) as admin:
            addr = _group_addrs(admin).get(0)
        return next((b for b in self.brokers if b.listen == addr), None)


def _group_addrs(admin: Admin) -> dict[int, str]:
    try:
        data = admin.cluster_info().broker_addr_table.get(GROUP)
    except RocketMQError:
        return {}
    return {} if data is None else dict(data.broker_addrs)


class Nemesis(threading.Thread):
    """Kills the source group's primary with SIGKILL once, ``kill_after`` seconds after ``start()``, then
    waits (up to ``timeout``) until the name server lists another member as primary."""

    def __init__(self, source: ControlledSource, kill_after: float, timeout: float = 60.0) -> None:
        super().__init__(name="demo-nemesis", daemon=True)
        self.source, self.kill_after, self.timeout = source, kill_after, timeout
        self.stop = threading.Event()
        self.killed: Member | None = None
        self.killed_at: float | None = None
        """``time.monotonic()`` of the kill."""
        self.new_primary: Member | None = None
        self.listed_after: float | None = None
        """Seconds from the kill until the name server listed the new primary."""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.stop.wait(self.kill_after):
                return
            victim = self.source.primary()
            if victim is None:
                raise RuntimeError("no primary of the source group listed: nothing to kill")
            victim.kill()
            self.killed, self.killed_at = victim, time.monotonic()
            print(f"failover: killed the source primary {victim.name} ({victim.listen}) with SIGKILL",
                  flush=True)
            while not self.stop.is_set() and time.monotonic() - self.killed_at < self.timeout:
                new = self.source.primary()
                if new is not None and new != victim:
                    self.new_primary, self.listed_after = new, time.monotonic() - self.killed_at
                    print(f"failover: {new.name} ({new.listen}) listed as the new primary "
                          f"{self.listed_after:.2f} s after the kill", flush=True)
                    return
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def election_seconds(killed_at: float, acked: Sequence[tuple[float, float]]) -> float | None:
    """Seconds from the kill to the first acknowledged send that started after it (``acked``: (started, acked)
    monotonic times of every acknowledged send); None when there is none. A send started before the kill may
    have been answered by the old primary just before it died, so it proves nothing about the new one (the
    rule of benchmarks/failover.py's recovery time)."""
    after = [done for started, done in acked if started >= killed_at]
    return min(after) - killed_at if after else None
