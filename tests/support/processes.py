"""The one harness for real name server and broker processes in tests (every tier uses it).

``LocalCluster`` starts one name server and broker groups as separate processes on 127.0.0.1 and
always kills them: on ``__exit__``/``stop()``, and at interpreter exit for any a test left behind.
A group is several brokers sharing a ``broker_name``: broker_id 0 is the primary, 1.. the replicas,
each with its own store dir, config and log file under the cluster's directory (the test's tmp dir).
Every broker gets a listen port P with P + 1 free too: the HA port log shipping will use (RocketMQ's
listen + 1). Each member can be stopped (SIGTERM), killed (SIGKILL), paused (SIGSTOP) and restarted
at the same address. tests/conftest.py appends the logs of the clusters a failed test used to its
report (``failure_logs``).

Process control itself is ``broker_store.deploy.launcher.ManagedProcess`` and ports come from its
``free_port`` (product code, also used by the benchmarks); this module adds what tests need on top.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_store.client import Admin
from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.deploy.launcher import HOST, LOG_TAIL_CHARS, ManagedProcess, poll_until, wait_in_sync
from broker_store.deploy.launcher import broker_listen_port as broker_listen_port  # re-exported with free_port:
from broker_store.deploy.launcher import free_port as free_port  # the tests take ports from here
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.errors import RocketMQError


class ClusterProcess(ManagedProcess):
    """A name server or broker child on a fixed loopback address (a restart keeps it); stop, kill, pause and
    resume are ``launcher.ChildProcess``'s."""

    @property
    def listen(self) -> str:
        return self.config.listen

    def kill(self) -> None:
        super().kill()
        self._close_pipe()

    def stop(self, grace: float = 10.0) -> None:
        super().stop(grace)
        self._close_pipe()

    def restart(self, *, hard: bool = False, timeout: float = 30.0) -> str:
        """Stop (SIGTERM, or SIGKILL when ``hard``) and start again from the same config file."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    def _close_pipe(self) -> None:
        # ManagedProcess reads READY from stdout and never again; close it so restarts don't leak it.
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


class Broker(ClusterProcess):
    """One member of a broker group."""

    config: BrokerConfig

    @property
    def broker_name(self) -> str:
        return self.config.broker_name

    @property
    def broker_id(self) -> int:
        """0 for the group's primary, 1.. for its replicas (static groups only: in controller mode the
        controller assigns ids, and the primary is whichever member the name server lists as id 0)."""
        return self.config.broker_id

    @property
    def controlled(self) -> bool:
        """A controller-mode member (its role and id are the controller's)."""
        return self.config.enable_controller_mode

    @property
    def ha_port(self) -> int:
        """The HA port (listen port + 1, free when the broker was configured, unless ha.ha_listen_port)."""
        return self.config.ha_port()

    @property
    def store_dir(self) -> Path:
        return Path(self.config.store_dir)


@dataclass(frozen=True)
class GroupSpec:
    """One broker group: its members share ``name``; member i runs as broker_id i (0 = primary)."""

    name: str
    members: Sequence[Mapping[str, Any]] = ({},)
    """BrokerConfig overrides per member, applied over the cluster's broker options (an ``ha`` mapping is
    merged key by key). Members 1.. run with ``ha.role`` SLAVE following member 0's HA port."""

    @classmethod
    def replicated(cls, name: str, replicas: int) -> GroupSpec:
        """A primary and ``replicas - 1`` replicas, all with the cluster's broker options."""
        return cls(name, tuple({} for _ in range(replicas)))


@dataclass
class _Registry:
    """Clusters started in this process; closed ones are dropped when the next test starts."""

    clusters: list[LocalCluster] = field(default_factory=list)

    def forget_closed(self) -> None:
        self.clusters = [c for c in self.clusters if not c.closed]

    def kill_all(self) -> None:
        for cluster in self.clusters:
            cluster.stop()


_registry = _Registry()
atexit.register(_registry.kill_all)

DEFAULT_NAMESRV_OPTIONS: Mapping[str, Any] = {"broker_expiry_seconds": 3.0}
DEFAULT_CONTROLLER_OPTIONS: Mapping[str, Any] = {"heartbeat_timeout_ms": 2000, "scan_interval_ms": 200}
"""The embedded controller of a ``LocalCluster(controller=...)``: a dead primary is replaced within ~2-3 s."""
CONTROLLED_BROKER_OPTIONS: Mapping[str, Any] = {
    "ha": {"role": "SYNC_MASTER", "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000,
           "ha_max_time_slave_not_catchup_ms": 5000, "metadata_sync_interval_ms": 500},
}
"""What every member of a controller-mode group runs with (over the cluster's broker options): quick HA
heartbeats and metadata sync, so a member elected primary holds the topics and consumer offsets."""
DEFAULT_BROKER_OPTIONS: Mapping[str, Any] = {
    "fast_listen_enable": False,  # the VIP port (listen - 2) only where a test asks for it
    "commit_log_segment_size": 8 * 1024 * 1024,
    "max_message_size": 1024 * 1024,
}


class LocalCluster:
    """One name server and broker groups as separate processes on 127.0.0.1.

    ``brokers`` is a number of groups ``<name>-a``, ``<name>-b``... with ``replicas`` members each
    (1: a primary alone), or explicit ``GroupSpec``s. Files live in ``root/<name>``: ``<member>.yaml``,
    ``<member>.log`` (stderr) and the store dir ``<member>/``, where a member is ``<group>-<id>``.

    ``controller``: controller mode. The name server embeds the controller (these settings over
    ``DEFAULT_CONTROLLER_OPTIONS``, its state under ``root/<name>/controller``) and every member runs with
    ``enable_controller_mode`` (``CONTROLLED_BROKER_OPTIONS``): no fixed role or id, the controller elects
    the primary. ``<group>-<i>`` then names a member only; ``primary(group)`` asks the name server.
    """

    def __init__(self, root: Path, name: str = "test", brokers: int | Sequence[GroupSpec] = 1, *,
                 replicas: int = 1, namesrv: Mapping[str, Any] | None = None,
                 controller: Mapping[str, Any] | None = None, client_tls: TlsClientSettings | None = None,
                 **broker_options: Any) -> None:
        self.root = root / name
        self.client_tls = client_tls
        """How the harness's own admin calls connect (TLS for a name server in enforcing mode)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.closed = False
        self.controlled = controller is not None
        namesrv_options = {**DEFAULT_NAMESRV_OPTIONS, **(namesrv or {})}
        if controller is not None:
            namesrv_options["controller"] = {**DEFAULT_CONTROLLER_OPTIONS, "state_dir": str(self.root / "controller"),
                                             **controller}
        self.namesrv = ClusterProcess("namesrv", NamesrvConfig(listen=f"{HOST}:{free_port()}", **namesrv_options),
                                      self.root, f"{name}-namesrv")
        self.namesrv_addr = self.namesrv.listen
        if isinstance(brokers, int):
            specs: Sequence[GroupSpec] = [GroupSpec.replicated(f"{name}-{chr(ord('a') + i)}", replicas)
                                          for i in range(brokers)]
        else:
            specs = brokers
        options = {**DEFAULT_BROKER_OPTIONS, **broker_options}
        if controller is not None:
            options = {**options, "enable_controller_mode": True,
                       "controller": {"controller_addrs": [self.namesrv_addr], "replica_info_poll_interval_ms": 500,
                                      **options.get("controller", {})},
                       "ha": {**CONTROLLED_BROKER_OPTIONS["ha"], **options.get("ha", {})}}
        self.groups: dict[str, list[Broker]] = {}
        for spec in specs:
            members: list[Broker] = []
            for broker_id, overrides in enumerate(spec.members):
                member_options = {**options, **overrides, "ha": {**options.get("ha", {}), **overrides.get("ha", {})}}
                if broker_id > 0 and controller is None:  # a replica follows its primary (unless the test says)
                    member_options["ha"] = {"ha_primary_address": f"{HOST}:{members[0].ha_port}",
                                            **member_options["ha"], "role": "SLAVE"}
                    member_options["ha"].pop("ha_listen_port", None)
                members.append(self._broker(spec.name, broker_id, member_options))
            self.groups[spec.name] = members
        self.brokers = [b for members in self.groups.values() for b in members]
        """Every member of every group, group by group, primary first."""

    def _broker(self, group: str, broker_id: int, options: dict[str, Any]) -> Broker:
        listen = broker_listen_port(bool(options.get("fast_listen_enable")))
        member = f"{group}-{broker_id}"
        # a controller-mode broker's id is the controller's: a configured one is refused
        ids = {} if options.get("enable_controller_mode") else {"broker_id": broker_id}
        config = BrokerConfig(cluster_name=self.name, broker_name=group, listen=f"{HOST}:{listen}",
                              store_dir=self.root / member, namesrv_addrs=[self.namesrv_addr], **ids, **options)
        return Broker("broker", config, self.root, member)

    def primary(self, group: str) -> Broker:
        """The group's primary: member 0 of a static group; in controller mode the member the name server
        lists as id 0 now (RuntimeError when it lists none, e.g. during an election)."""
        if not self.controlled:
            return self.groups[group][0]
        found = self.listed_primary(group)
        if found is None:
            raise RuntimeError(f"{self.name}: the name server lists no primary of {group}")
        return found

    def listed_primary(self, group: str) -> Broker | None:
        """The member the name server lists as the group's id 0, or None (none listed, or no answer)."""
        try:
            with Admin(self.namesrv_addr, tls=self.client_tls) as admin:
                data = admin.cluster_info().broker_addr_table.get(group)
        except RocketMQError:
            return None
        addr = None if data is None else data.master_addr
        return next((b for b in self.groups[group] if b.listen == addr), None)

    def processes(self) -> list[ClusterProcess]:
        return [self.namesrv, *self.brokers]

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Name server first, then every broker at once; returns when all are registered. On failure
        every process is killed before the error propagates."""
        if self not in _registry.clusters:
            _registry.clusters.append(self)
        self.closed = False
        try:
            self.namesrv.start(timeout)
            with ThreadPoolExecutor(len(self.brokers) or 1) as pool:
                for _ in pool.map(lambda broker: broker.start(timeout), self.brokers):
                    pass
            self.wait_registered(timeout)
            self.wait_in_sync(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Until the name server lists every running member of every group at its address (in controller
        mode: at the id the controller gave it, one of them as id 0, the elected primary)."""
        expected = {group: {b.broker_id: b.listen for b in members if b.running()}
                    for group, members in self.groups.items()}
        running = {group: sorted(b.listen for b in members if b.running()) for group, members in self.groups.items()}
        seen: dict[str, dict[int, str]] = {}
        with Admin(self.namesrv_addr, tls=self.client_tls) as admin:
            def registered() -> bool:
                nonlocal seen
                try:
                    info = admin.cluster_info()
                    seen = {g: dict(info.broker_addr_table[g].broker_addrs) if g in info.broker_addr_table else {}
                            for g in expected}
                except RocketMQError:  # the name server may be the member being waited for
                    pass
                if self.controlled:
                    return all(0 in seen[g] and sorted(seen[g].values()) == running[g] for g in expected)
                return seen == expected

            try:
                poll_until(registered, timeout, lambda: f"brokers registered: expected "
                                                        f"{running if self.controlled else expected}, name server "
                                                        f"lists {seen}", interval=0.1)
            except TimeoutError as exc:
                raise RuntimeError(f"{self.name}: {exc}\n{self.logs()}") from exc

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        """Until every running primary counts each of its running replicas in sync (GET_BROKER_HA_STATUS):
        a replica started before its primary listened connects on its next retry, a second later."""
        deadline = time.monotonic() + timeout
        for group, members in self.groups.items():
            primary = self.primary(group) if self.controlled else members[0]
            running = sum(1 for r in members if r is not primary and r.running())
            if not running or not primary.running():
                continue
            try:
                wait_in_sync(primary.listen, running, max(0.0, deadline - time.monotonic()))
            except TimeoutError as exc:
                raise RuntimeError(f"{self.name}: {exc}\n{self.logs()}") from exc

    def stop(self) -> None:
        """SIGKILL every process (brokers first); safe to call twice."""
        for proc in [*self.brokers, self.namesrv]:
            proc.kill()
        self.closed = True

    def logs(self, chars: int = LOG_TAIL_CHARS) -> str:
        """Every process's log tail (``chars`` each), for a failure's report."""
        return "\n".join(f"--- {p.name} ({'running' if p.running() else 'down'}), {p.log_file}:\n{p.log_tail(chars)}"
                         for p in self.processes())

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def local_cluster(root: Path, name: str = "test", brokers: int | Sequence[GroupSpec] = 1,
                  **options: Any) -> Iterator[LocalCluster]:
    with LocalCluster(root, name, brokers, **options) as cluster:
        yield cluster


def forget_closed_clusters() -> None:
    """Called as each test starts, so ``failure_logs`` covers what that test used."""
    _registry.forget_closed()


def failure_logs() -> str:
    """Log tails of every cluster still running or closed during the current test."""
    return "\n".join(c.logs() for c in _registry.clusters)
