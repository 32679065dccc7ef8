"""`python -m broker_store up`: run every process of the local clusters as supervised children.

Each child is `python -m broker_store namesrv|broker --config <generated file>` and prints
`READY <addr>` on stdout once it serves. When every child is ready and each name server knows all
of its brokers, the launcher prints one line `READY <namesrv addr> [<namesrv addr> ...]` (cluster
order) and then waits; SIGINT/SIGTERM stop the children (SIGTERM, then SIGKILL after a grace period).
A child that dies before it is ready aborts the start; one that dies later is reported and left down.

Benchmarks and tools that must kill and restart single members (the replication benchmark) use
``ClusterProcesses`` instead: one ``ManagedProcess`` per child of a ``ClusterConfig`` (whose replicas
follow their group's primary), started in order and waited for until registered and in sync;
``loopback_cluster`` builds such a config on free loopback ports (``free_port``, ``broker_listen_port``).
The tests' harness (tests/support/processes.py) builds on the same ``ManagedProcess`` and ports.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from broker_store.config import (
    BrokerConfig,
    BrokerSettings,
    ClusterConfig,
    LocalClustersConfig,
    NamesrvConfig,
    load_yaml,
)
from broker_store.ha.settings import HARole
from broker_store.protocol.errors import ConfigError, RocketMQError

HOST = "127.0.0.1"


@dataclass
class Child:
    name: str
    config_file: Path
    kind: str
    proc: subprocess.Popen[bytes] | None = None
    ready_addr: str | None = None
    reported_exit: bool = False
    buffer: bytearray = field(default_factory=bytearray)


def _write_config(run_dir: Path, name: str, model: NamesrvConfig | BrokerConfig) -> Path:
    path = run_dir / f"{name}.yaml"
    # A controller-mode broker's id is the controller's to assign: written out, it would be refused on load.
    controlled = isinstance(model, BrokerConfig) and model.enable_controller_mode
    dump = model.model_dump(mode="json", exclude={"broker_id"} if controlled else None)
    path.write_text(yaml.safe_dump(dump, sort_keys=False))
    return path


def plan_children(config: LocalClustersConfig, run_dir: Path, data_dir: Path | None = None) -> list[Child]:
    """One namesrv then the brokers of each cluster, with generated per-process config files."""
    run_dir.mkdir(parents=True, exist_ok=True)
    children = []
    for cluster in config.clusters:
        children.append(Child(f"{cluster.name}-namesrv", _write_config(run_dir, f"{cluster.name}-namesrv",
                                                                       cluster.namesrv), "namesrv"))
        for broker in cluster.broker_configs():
            # A group's replicas are <group>-<id>: own config file, own store under --data-dir.
            member = member_name(broker)
            if data_dir is not None:
                broker = broker.model_copy(update={"store_dir": data_dir / member})
            else:
                broker = broker.model_copy(update={"store_dir": Path(broker.store_dir).resolve()})
            children.append(Child(member, _write_config(run_dir, member, broker), "broker"))
    return children


def member_name(broker: BrokerSettings) -> str:
    """A group member's process name: the group name for broker_id 0, ``<group>-<id>`` for replicas."""
    return broker.broker_name if broker.broker_id == 0 else f"{broker.broker_name}-{broker.broker_id}"


def _spawn(child: Child) -> None:
    child.proc = subprocess.Popen(
        [sys.executable, "-m", "broker_store", child.kind, "--config", str(child.config_file)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)


def _stop_all(children: list[Child], grace: float = 10.0) -> None:
    """Brokers first (they unregister from the name servers), then the name servers."""
    for kind in ("broker", "namesrv"):
        live = [c.proc for c in children if c.kind == kind and c.proc is not None and c.proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _cluster_complete(config: LocalClustersConfig) -> bool:
    from broker_store.client import Admin  # noqa: PLC0415 - the client is only needed once children run

    for cluster in config.clusters:
        with Admin(cluster.namesrv.listen) as admin:
            try:
                info = admin.cluster_info()
            except Exception:  # noqa: BLE001 - not up yet; the caller polls until its deadline
                return False
            names = set(info.cluster_addr_table.get(cluster.name, ()))
            if names != {b.broker_name for b in cluster.brokers}:
                return False
            members = {(name, broker_id) for name in names if name in info.broker_addr_table
                       for broker_id in info.broker_addr_table[name].broker_addrs}
            if members != {(b.broker_name, b.broker_id) for b in cluster.brokers}:
                return False
    return True


def run_up(config_path: Path, run_dir: Path | None = None, data_dir: Path | None = None,
           start_timeout: float = 60.0) -> int:
    config = load_yaml(config_path, LocalClustersConfig)
    run_dir = run_dir or Path("run") / f"up-{os.getpid()}"
    children = plan_children(config, run_dir, data_dir)
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    selector = selectors.DefaultSelector()
    try:
        def spawn(kind: str) -> None:
            for child in children:
                if child.kind == kind:
                    _spawn(child)
                    assert child.proc is not None and child.proc.stdout is not None
                    os.set_blocking(child.proc.stdout.fileno(), False)
                    selector.register(child.proc.stdout, selectors.EVENT_READ, child)

        # Name servers first, so brokers register on their first attempt.
        spawn("namesrv")
        brokers_spawned = False
        deadline = time.monotonic() + start_timeout
        announced = False
        while not stopping:
            for key, _ in selector.select(timeout=0.2):
                child = key.data
                chunk = key.fileobj.read()  # type: ignore[union-attr]
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                child.buffer += chunk
                while b"\n" in child.buffer:
                    line, _, rest = bytes(child.buffer).partition(b"\n")
                    child.buffer = bytearray(rest)
                    text = line.decode(errors="replace").strip()
                    if text.startswith("READY ") and child.ready_addr is None:
                        child.ready_addr = text.split()[1]
                        print(f"{child.name} ready at {child.ready_addr}", file=sys.stderr, flush=True)
                    elif text:
                        print(f"[{child.name}] {text}", file=sys.stderr, flush=True)
            if not brokers_spawned and all(c.ready_addr for c in children if c.kind == "namesrv"):
                spawn("broker")
                brokers_spawned = True
            for child in children:
                if child.proc is None:
                    continue
                code = child.proc.poll()
                if code is not None and not child.reported_exit:
                    child.reported_exit = True
                    print(f"{child.name} exited with code {code}", file=sys.stderr, flush=True)
                    if not announced:
                        print(f"error: {child.name} died during start-up; stopping the cluster", file=sys.stderr)
                        return 1
            if not announced and all(c.ready_addr for c in children):
                if _cluster_complete(config):
                    print("READY " + " ".join(c.namesrv.listen for c in config.clusters), flush=True)
                    announced = True
            if not announced and time.monotonic() > deadline:
                waiting = [c.name for c in children if not c.ready_addr] or ["broker registration"]
                print(f"error: not ready after {start_timeout}s, waiting for {', '.join(waiting)}", file=sys.stderr)
                return 1
        return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        _stop_all(children)
        selector.close()


class ManagedProcess:
    """One namesrv/broker child started from a config model; used by tests and benchmarks.

    ``start()`` blocks until the child prints READY; ``kill()`` sends SIGKILL (crash), ``stop()``
    SIGTERM (clean shutdown); ``start()`` again restarts it from the same config file.
    """

    def __init__(self, kind: str, config: NamesrvConfig | BrokerConfig, run_dir: Path, name: str, *,
                 wrap: Sequence[str] = ()) -> None:
        self.kind = kind
        self.wrap = tuple(wrap)
        """A command prefix that execs the child (e.g. ``ip netns exec NS`` in partition tests)."""
        self.config = config
        self.name = name
        self.config_file = _write_config(run_dir, name, config)
        self.log_file = run_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.addr: str | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> str:
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [*self.wrap, sys.executable, "-m", "broker_store", self.kind, "--config", str(self.config_file)],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        assert self.proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if selector.select(timeout=0.2):
                    line = self.proc.stdout.readline().decode(errors="replace").strip()
                    if line.startswith("READY "):
                        self.addr = line.split()[1]
                        return self.addr
                    if not line and self.proc.poll() is not None:
                        break
            self.kill()
            raise RuntimeError(f"{self.name} did not become ready in {timeout}s; see {self.log_file}:\n"
                               + self.log_file.read_text(errors="replace")[-3000:])
        finally:
            selector.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()

    def stop(self, grace: float = 10.0) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- clusters of ManagedProcess children (benchmarks, tools) -------------------------------------------

# Ports this process handed out: a port is chosen before the child binds it, so without this two
# members configured in a row could be given the same one.
_handed_out: set[int] = set()

_LOWEST_PORT = 10000
"""Ports are drawn at or above this (below it live the well-known and registered services)."""

_random = random.Random()


def _ephemeral_range() -> range:
    """The kernel's ephemeral port range (Linux ``ip_local_port_range``; its default elsewhere). The kernel
    hands these to outgoing connections (Spark's, the clients'), so a port drawn from it could be taken
    between being chosen and the child binding it: ``free_port`` draws below it."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port(span: int = 1, host: str = HOST) -> int:
    """A port P on ``host`` such that P .. P + span - 1 are all free now and not handed out before by
    this process. P is drawn at random outside the kernel's ephemeral range (``_ephemeral_range``), so
    no outgoing connection takes it before the child that was given it binds it."""
    ephemeral = _ephemeral_range()
    candidates = range(_LOWEST_PORT, ephemeral.start - span + 1)
    if len(candidates) < 1000:  # an ephemeral range reaching down low: draw above it instead
        candidates = range(ephemeral.stop, 65536 - span + 1)
    if len(candidates) < 1000:  # it covers nearly every port: none is safe from it, draw from them all
        candidates = range(1024, 65536 - span + 1)
    for _ in range(200):
        base = _random.choice(candidates)
        ports = range(base, base + span)
        if _handed_out.intersection(ports):
            continue
        try:
            with ExitStack() as held:
                for port in ports:
                    held.enter_context(socket.socket()).bind((host, port))
        except OSError:  # one of them is taken: draw again
            continue
        _handed_out.update(ports)
        return base
    raise RuntimeError(f"no {span} consecutive free ports on {host} in {candidates} after 200 draws")


def broker_listen_port(fast_listen: bool = True, host: str = HOST) -> int:
    """A free listen port L for a broker, with the other ports it binds free too: the HA port L + 1 and,
    when ``fast_listen`` (``fast_listen_enable``, on by default), the fast remoting port L - 2."""
    return free_port(4, host) + 2 if fast_listen else free_port(2, host)


def loopback_cluster(name: str, groups: Mapping[str, Sequence[Mapping[str, Any]]], store_root: Path,
                     namesrv: Mapping[str, Any] | None = None, **broker_options: Any) -> ClusterConfig:
    """A ``ClusterConfig`` on free 127.0.0.1 ports: one name server and, per group, its members' overrides
    (member i is broker_id i; 1.. are replicas with ``ha.role`` SLAVE following member 0). Each member's
    settings are ``broker_options`` with its overrides on top (an ``ha`` mapping merged key by key); its
    store is ``store_root/<member>``."""
    brokers: list[BrokerSettings] = []
    for group, members in groups.items():
        for broker_id, overrides in enumerate(members):
            options = {**broker_options, **overrides,
                       "ha": {**broker_options.get("ha", {}), **overrides.get("ha", {})}}
            if broker_id > 0:
                options["ha"]["role"] = HARole.SLAVE.value
            listen = broker_listen_port(bool(options.get("fast_listen_enable", True)))
            settings = BrokerSettings(broker_name=group, broker_id=broker_id, listen=f"{HOST}:{listen}",
                                      store_dir=store_root / f"{group}-{broker_id}", **options)
            brokers.append(settings)
    return ClusterConfig(name=name, namesrv=NamesrvConfig(listen=f"{HOST}:{free_port()}", **(namesrv or {})),
                         brokers=brokers)


class ClusterProcesses:
    """One cluster of ``config`` as ``ManagedProcess`` children, each member controllable on its own.

    ``start()`` starts the name server, then the primaries, then the replicas, and returns once the name
    server lists every member and each primary counts its replicas in sync; any failure kills them all.
    ``stop()`` (also on ``__exit__``) SIGKILLs every child. Config files and ``<member>.log`` (stderr)
    live in ``run_dir``.
    """

    def __init__(self, config: ClusterConfig, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.namesrv = ManagedProcess("namesrv", config.namesrv, run_dir, f"{config.name}-namesrv")
        self.brokers: dict[tuple[str, int], ManagedProcess] = {
            (b.broker_name, b.broker_id): ManagedProcess("broker", b, run_dir, member_name(b))
            for b in config.broker_configs()}

    @property
    def namesrv_addr(self) -> str:
        return self.config.namesrv.listen

    def member(self, group: str, broker_id: int = 0) -> ManagedProcess:
        return self.brokers[(group, broker_id)]

    def start(self, timeout: float = 30.0) -> ClusterProcesses:
        try:
            self.namesrv.start(timeout)
            for _, broker in sorted(self.brokers.items(), key=lambda kv: kv[0][1] > 0):  # primaries first
                broker.start(timeout)
            deadline = time.monotonic() + timeout
            poll_until(lambda: _cluster_complete(LocalClustersConfig(clusters=[self.config])), timeout,
                       f"{self.config.name}: brokers registered with {self.namesrv_addr}")
            for (group, broker_id), primary in self.brokers.items():
                replicas = sum(1 for (g, i), b in self.brokers.items() if g == group and i > 0 and b.running())
                if broker_id == 0 and replicas:
                    wait_in_sync(primary.config.listen, replicas, deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in [*self.brokers.values(), self.namesrv]:
            proc.kill()

    def __enter__(self) -> ClusterProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def poll_until(predicate: Callable[[], bool], timeout: float, what: str | Callable[[], str],
               interval: float = 0.05) -> None:
    """Call ``predicate`` every ``interval`` s until it returns True (at least once, whatever the timeout).
    Raises TimeoutError after ``timeout`` s naming ``what``, the condition waited for; a callable is called
    then, so the message can carry the last state the predicate saw. For waits on real processes (this
    launcher, the tests' harness), whose progress no injected clock controls."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def wait_in_sync(primary_addr: str, replicas: int, timeout: float = 30.0) -> None:
    """Until the primary at ``primary_addr`` counts ``replicas`` replicas in sync (GET_BROKER_HA_STATUS):
    a replica started before its primary listened connects on its next retry, a second later. Raises
    TimeoutError naming the last count seen."""
    from broker_store.client import Admin  # noqa: PLC0415 - the client is only needed once children run

    seen: object = None
    with Admin(primary_addr) as admin:
        def in_sync() -> bool:
            nonlocal seen
            try:
                seen = admin.ha_status(primary_addr).get("inSyncSlaveNums")
            except RocketMQError as exc:  # still starting: poll until the deadline
                seen = exc
            return seen == replicas

        poll_until(in_sync, timeout, lambda: f"{primary_addr}: {replicas} replica(s) in sync (last seen: {seen})")
