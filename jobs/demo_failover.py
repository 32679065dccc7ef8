"""`make demo DEMO_ARGS=--failover`: the demo's source cluster in controller mode, and its primary killed once
under the load.

Used by ``jobs/demo.py`` only. ``ControlledSource`` starts the source cluster as separate processes (the
product launcher's ``ManagedProcess``): a name server with the embedded controller (RocketMQ's
enableControllerInNamesrv; 2 s heartbeat timeout, 200 ms scans) and one broker group of three brokers in
controller mode, SYNC_MASTER with ``in_sync_replicas`` 2, so a send the producer saw acknowledged is on two
brokers and survives the kill. ``Nemesis`` kills the group's primary with SIGKILL once, ``kill_after``
seconds into the load. The election time is measured as the load sees it: from the kill to the first
acknowledged send started after it (``election_seconds``).

(``python -m broker_store up`` does not start controller-mode groups yet, hence this class; the target
cluster still comes from ``up``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from broker_store.client import Admin
from broker_store.config import BrokerConfig, ClusterConfig, ControllerLinkSettings, NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.ha.settings import HASettings
from broker_store.launcher import HOST, ManagedProcess, broker_listen_port
from broker_store.protocol.errors import RocketMQError

GROUP = "source-a"
MEMBERS = 3
HEARTBEAT_TIMEOUT_MS, SCAN_INTERVAL_MS = 2000, 200
"""The embedded controller: a dead primary is noticed within ~2 s (RocketMQ's 10 s would make a demo of it)."""
HA = {"role": "SYNC_MASTER", "total_replicas": MEMBERS, "in_sync_replicas": 2, "min_in_sync_replicas": 2,
      "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000,
      "ha_max_time_slave_not_catchup_ms": 5000, "metadata_sync_interval_ms": 500}
"""Every acknowledged send is on two of the three brokers; replicas copy topics and consumer offsets every
0.5 s, so the one elected holds the group's committed offsets."""


class ControlledSource:
    """The source cluster ``cluster`` of the demo's cluster config, in controller mode: its name server's
    address, one group ``GROUP`` of ``MEMBERS`` brokers on free ports, stores under ``data_dir``."""

    def __init__(self, cluster: ClusterConfig, data_dir: Path) -> None:
        run_dir = data_dir / "source-run"
        run_dir.mkdir(parents=True, exist_ok=True)
        namesrv = NamesrvConfig(listen=cluster.namesrv.listen, broker_expiry_seconds=3.0,
                                controller=ControllerSettings(heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                                                              scan_interval_ms=SCAN_INTERVAL_MS,
                                                              state_dir=data_dir / "controller"))
        self.name = cluster.name
        self.namesrv = ManagedProcess("namesrv", namesrv, run_dir, f"{cluster.name}-namesrv")
        self.brokers = [ManagedProcess("broker", BrokerConfig(
            cluster_name=cluster.name, broker_name=GROUP, listen=f"{HOST}:{broker_listen_port()}",
            store_dir=data_dir / f"{GROUP}-{i}", namesrv_addrs=[namesrv.listen], enable_controller_mode=True,
            controller=ControllerLinkSettings(controller_addrs=[namesrv.listen], replica_info_poll_interval_ms=500),
            ha=HASettings.model_validate(HA)),
            run_dir, f"{GROUP}-{i}") for i in range(1, MEMBERS + 1)]

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.config.listen

    def start(self, timeout: float = 60.0) -> ControlledSource:
        """Every process, then until the name server lists the whole group with a primary; on failure
        everything started is stopped before the error propagates."""
        try:
            self.namesrv.start(timeout)
            for broker in self.brokers:
                broker.start(timeout)
            self._wait_listed(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listed(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with Admin(self.namesrv_addr) as admin:
            while True:
                listed = _group_addrs(admin)
                if 0 in listed and sorted(listed.values()) == sorted(b.config.listen for b in self.brokers):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"source cluster {self.name}: group {GROUP} not complete after {timeout}s "
                                       f"(name server lists {listed}); see {self.namesrv.log_file or 'stderr'}")
                time.sleep(0.2)

    def primary(self) -> ManagedProcess | None:
        """The member the name server lists as the group's primary now, or None."""
        with Admin(self.namesrv_addr) as admin:
            addr = _group_addrs(admin).get(0)
        return next((b for b in self.brokers if b.config.listen == addr), None)

    def stop(self) -> None:
        """SIGTERM to the brokers, then to the name server (a killed member is already gone)."""
        for process in [*self.brokers, self.namesrv]:
            process.stop()


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
        self.killed: ManagedProcess | None = None
        self.killed_at: float | None = None
        """``time.monotonic()`` of the kill."""
        self.new_primary: ManagedProcess | None = None
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
            print(f"failover: killed the source primary {victim.name} ({victim.config.listen}) with SIGKILL",
                  flush=True)
            while not self.stop.is_set() and time.monotonic() - self.killed_at < self.timeout:
                new = self.source.primary()
                if new is not None and new is not victim:
                    self.new_primary, self.listed_after = new, time.monotonic() - self.killed_at
                    print(f"failover: {new.name} ({new.config.listen}) listed as the new primary "
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
