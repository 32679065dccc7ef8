"""`python -m broker_store up`: every process of a local-clusters file as supervised children.

Start order, each phase ready before the next: the etcd members of the file's ``controllers`` section (when it
names etcd and ``start_etcd``: one member per endpoint on loopback, data under ``etcd_data_dir``), the standalone
controllers (``python -m broker_store controller``), the name servers (one per cluster; a name server with
``controller:`` embeds the controller), the brokers. Every process of a phase is spawned at once and then waited
for: a ``python -m broker_store`` child is ready when it prints ``READY <addr>``, an etcd member when its
``/health`` says so. Once every name server lists all its brokers (a controller-mode group: a primary and every
member, whatever ids the controller gave them) ``up`` prints one line ``READY <namesrv addr> [...]`` (cluster
order) and waits. SIGINT/SIGTERM stop everything in reverse order (brokers first, so they unregister; etcd last).
A child that dies during start-up aborts it (exit code 1). Afterwards ``up_supervisor`` watches them: a broker or
name server that exits with a code other than 0 is restarted with back-off (its ``restart`` setting, "on-failure"
by default, "no" to leave it down; ``restart_policy``), controllers and etcd members are left down, and
``python -m broker_store restart-member --run-dir <run_dir> <name>`` restarts any member at once.

Process names, which name the generated ``<run_dir>/<name>.yaml`` files and, under ``--data-dir``, the stores: a
static broker is ``<group>`` (broker_id 0) or ``<group>-<id>``; a controller-mode broker has no fixed id (the
controller assigns it and ``brokerIdentity`` in its store keeps it), so it is ``<group>.<i>``, i its position
among its group's members in the file (from 0); controllers are ``controller-<i>``, etcd members ``etcd-<i>``
(logs in ``run_dir``). The brokers', controllers' and name servers' logs go to ``up``'s stderr. Each child's pid
is in ``<run_dir>/<name>.pid``, rewritten on each restart (to kill -9 or SIGSTOP one member by hand; a member
started by hand outside ``up`` is not supervised: use ``restart-member``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from broker_store.config import BrokerConfig, ControllersConfig, LocalClustersConfig, NamesrvConfig, load_yaml
from broker_store.deploy.etcd_members import EtcdCluster
from broker_store.deploy.launcher import (
    ChildProcess,
    ManagedProcess,
    clusters_registered,
    member_name,
    poll_until,
    stop_together,
)
from broker_store.deploy.up_supervisor import Supervisor, write_pid
from broker_store.restart_policy import RestartPolicy


class StopRequested(BaseException):
    """SIGINT/SIGTERM arrived: unwind whatever wait is running and stop the children."""


@dataclass
class UpPlan:
    """The children of one ``up``, by phase (see the module docstring); nothing runs until ``start``."""

    config: LocalClustersConfig
    run_dir: Path
    etcd: EtcdCluster | None = None
    controllers: list[ManagedProcess] = field(default_factory=list)
    namesrvs: list[ManagedProcess] = field(default_factory=list)
    brokers: list[ManagedProcess] = field(default_factory=list)

    def children(self) -> Iterator[ChildProcess]:
        yield from self.etcd.members if self.etcd is not None else ()
        yield from self.controllers
        yield from self.namesrvs
        yield from self.brokers

    def start(self, timeout: float) -> None:
        """Start phase after phase; raise RuntimeError naming the first child that dies or is not ready, or
        TimeoutError when the brokers are not all registered within ``timeout`` (counted from the start)."""
        deadline = time.monotonic() + timeout
        if self.etcd is not None:
            try:
                self.etcd.start(timeout)
            finally:
                self._write_pids(self.etcd.members)
            for member in self.etcd.members:
                _announce(member.name, member.client_url)
        for phase in (self.controllers, self.namesrvs, self.brokers):
            for child in phase:
                child.spawn()
            self._write_pids(phase)
            for child in phase:
                _announce(child.name, child.wait_ready(max(1.0, deadline - time.monotonic())))

        def registered() -> bool:
            dead = [c.name for c in self.children() if not c.running()]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} died during start-up")
            return clusters_registered(self.config.clusters)

        poll_until(registered, max(1.0, deadline - time.monotonic()), "every broker registered with its name server",
                   interval=0.2)

    def _write_pids(self, children: Sequence[ChildProcess]) -> None:
        for child in children:
            write_pid(self.run_dir, child)

    def restart_policies(self) -> dict[str, RestartPolicy]:
        """Each broker's and name server's ``restart`` setting as a policy, by child name (controllers and etcd
        members have none: left down)."""
        policies = {b.name: RestartPolicy(b.config.restart) for b in self.brokers
                    if isinstance(b.config, BrokerConfig)}
        policies.update({n.name: RestartPolicy(n.config.restart) for n in self.namesrvs
                         if isinstance(n.config, NamesrvConfig)})
        return policies

    def stop(self, grace: float = 10.0) -> None:
        """Brokers first (they unregister from the name servers), then name servers, controllers, etcd."""
        for phase in (self.brokers, self.namesrvs, self.controllers):
            stop_together(phase, grace)
        if self.etcd is not None:
            self.etcd.stop(grace)


def _announce(name: str, addr: str) -> None:
    print(f"{name} ready at {addr}", file=sys.stderr, flush=True)


def broker_process_names(config: LocalClustersConfig) -> list[str]:
    """Each broker's process name, clusters and brokers in file order (see the module docstring)."""
    names = []
    for cluster in config.clusters:
        position: dict[str, int] = {}
        for broker in cluster.brokers:
            if broker.enable_controller_mode:
                i = position[broker.broker_name] = position.get(broker.broker_name, -1) + 1
                names.append(f"{broker.broker_name}.{i}")
            else:
                names.append(member_name(broker))
    return names


def plan_up(config: LocalClustersConfig, run_dir: Path, data_dir: Path | None = None, *,
            console: bool = True) -> UpPlan:
    """Every child of ``config`` with its config file written to ``run_dir``. Relative store and state paths are
    resolved against the working directory; ``data_dir`` puts every store (and the etcd data) under it instead.
    ``console``: the ``python -m broker_store`` children log to this process's stderr (else to
    ``run_dir/<name>.log``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = UpPlan(config, run_dir)
    if config.controllers is not None:
        plan.etcd = _plan_etcd(config.controllers, run_dir, data_dir)
        plan.controllers = [ManagedProcess("controller", cfg, run_dir, f"controller-{i}", console=console)
                            for i, cfg in enumerate(config.controllers.controller_configs())]
    names = iter(broker_process_names(config))
    for cluster in config.clusters:
        namesrv = cluster.namesrv
        if namesrv.controller is not None:
            state_dir = data_dir / f"{cluster.name}-controller" if data_dir is not None \
                else (namesrv.controller.state_dir or Path("controller")).resolve()
            namesrv = namesrv.model_copy(update={"controller": namesrv.controller.model_copy(
                update={"state_dir": state_dir})})
        plan.namesrvs.append(ManagedProcess("namesrv", namesrv, run_dir, f"{cluster.name}-namesrv", console=console))
        for broker in config.broker_configs(cluster):
            name = next(names)
            store_dir = data_dir / name if data_dir is not None else Path(broker.store_dir).resolve()
            located: BrokerConfig = broker.model_copy(update={"store_dir": store_dir})
            plan.brokers.append(ManagedProcess("broker", located, run_dir, name, console=console))
    return plan


def _plan_etcd(controllers: ControllersConfig, run_dir: Path, data_dir: Path | None) -> EtcdCluster | None:
    ports = controllers.etcd_client_ports()
    if not ports:
        return None
    data_root = data_dir / "etcd" if data_dir is not None else controllers.etcd_data_dir.resolve()
    # A fixed token: on a restart etcd reads its data directory and ignores the bootstrap flags anyway.
    return EtcdCluster(run_dir, len(ports), client_ports=ports, data_root=data_root,
                       token=f"rocketmq-up-{ports[0]}")


def run_up(config_path: Path, run_dir: Path | None = None, data_dir: Path | None = None,
           start_timeout: float = 60.0) -> int:
    """Run ``up`` until SIGINT/SIGTERM; the exit code (0, or 1 when start-up failed)."""
    config = load_yaml(config_path, LocalClustersConfig)
    run_dir = run_dir or Path("run") / f"up-{os.getpid()}"
    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise StopRequested(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    plan: UpPlan | None = None
    try:
        try:
            plan = plan_up(config, run_dir, data_dir)  # RuntimeError: no etcd binary
            plan.start(start_timeout)
        except (RuntimeError, TimeoutError) as exc:
            print(f"error: start-up failed, stopping every process: {exc}", file=sys.stderr, flush=True)
            return 1
        print("READY " + " ".join(c.namesrv.listen for c in config.clusters), flush=True)
        supervisor = Supervisor(list(plan.children()), plan.restart_policies(), run_dir,
                                ready_timeout=start_timeout)
        while True:
            supervisor.round()
            time.sleep(0.2)
    except StopRequested:
        return 0
    finally:
        stopping = True  # a second signal while stopping must not cut the shutdown short
        if plan is not None:
            plan.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
