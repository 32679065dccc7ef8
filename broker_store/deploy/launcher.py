"""Supervised child processes on loopback: the one process manager of ``python -m broker_store up``
(``broker_store.deploy.up``), the etcd members it starts (``deploy.etcd_members``), the tests' harness
(tests/support/processes.py) and the benchmarks.

``ChildProcess`` runs one command and knows when it is ready through a ``Readiness`` probe: ``ReadyLine`` for
``python -m broker_store`` servers, which print ``READY <addr>`` on stdout once they serve (``ManagedProcess``
writes such a child's config file and starts it), an HTTP health check for etcd. ``stop_together`` stops many
at once (SIGTERM, then SIGKILL after a grace period).

Benchmarks and tools that must kill and restart single members (the replication benchmark) use
``ClusterProcesses``: one ``ManagedProcess`` per child of a static ``LocalClusterConfig`` (whose replicas follow their
group's primary), started in order and waited for until registered and in sync; ``loopback_cluster`` builds
such a config on free loopback ports (``free_port``, ``broker_listen_port``).
"""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import yaml

from broker_store.config import (
    BrokerConfig,
    BrokerSettings,
    ControllerConfig,
    LocalClusterConfig,
    NamesrvConfig,
)
from broker_store.ha.settings import HARole
from broker_store.protocol.errors import RocketMQError

HOST = "127.0.0.1"

LOG_TAIL_CHARS = 3000


def write_config(run_dir: Path, name: str, model: NamesrvConfig | BrokerConfig | ControllerConfig) -> Path:
    """``run_dir/<name>.yaml``: the file a child is started from."""
    path = run_dir / f"{name}.yaml"
    # A controller-mode broker's id is the controller's to assign: written out, it would be refused on load.
    controlled = isinstance(model, BrokerConfig) and model.enable_controller_mode
    dump = model.model_dump(mode="json", exclude={"broker_id"} if controlled else None)
    path.write_text(yaml.safe_dump(dump, sort_keys=False))
    return path


def member_name(broker: BrokerSettings) -> str:
    """A static group member's process name: the group name for broker_id 0, ``<group>-<id>`` for replicas.
    (``up`` names controller-mode members by position, see ``broker_store.deploy.up``: they have no fixed id.)"""
    return broker.broker_name if broker.broker_id == 0 else f"{broker.broker_name}-{broker.broker_id}"


class Readiness(Protocol):
    """How a ``ChildProcess`` knows its child serves."""

    def check(self, proc: subprocess.Popen[bytes], wait: float) -> str | None:
        """The address the child serves once it is ready, else None; may block up to ``wait`` seconds (a probe
        that finds nothing to wait on sleeps instead, so callers can loop on it)."""
        ...


class ReadyLine:
    """Ready when the child prints ``READY <address>`` on stdout (every ``python -m broker_store`` server)."""

    needs_stdout = True

    def check(self, proc: subprocess.Popen[bytes], wait: float) -> str | None:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], wait)
        if not readable:
            return None
        line = proc.stdout.readline().decode(errors="replace").strip()
        if not line:  # end of file: the child exited (the caller's next check sees it)
            time.sleep(wait)
            return None
        return line.split()[1] if line.startswith("READY ") and len(line.split()) > 1 else None


class ChildProcess:
    """One supervised child process: spawned from a fixed command, ready when its ``Readiness`` says so.

    ``start()`` = ``spawn()`` + ``wait_ready()``; ``spawn()`` alone lets a caller start several children that
    become ready only together (an etcd member needs a quorum). ``kill()`` is SIGKILL (a crash), ``stop()``
    SIGTERM then SIGKILL after ``grace``, ``pause()``/``resume()`` SIGSTOP/SIGCONT; ``start()`` again restarts
    the same command. The child's stderr (and stdout, unless the readiness probe reads it) goes to
    ``log_file``, appended across restarts; ``log_file`` None leaves stderr on this process's own.
    """

    def __init__(self, name: str, command: Sequence[str], log_file: Path | None, readiness: Readiness) -> None:
        self.name = name
        self.command = list(command)
        self.log_file = log_file
        self.readiness = readiness
        self.proc: subprocess.Popen[bytes] | None = None
        self.addr: str | None = None
        """What the readiness probe returned the last time the child became ready."""
        self.paused = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> None:
        """Start the child (again) without waiting for it."""
        self.addr = None
        self.paused = False
        pipe = getattr(self.readiness, "needs_stdout", False)
        if self.log_file is None:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE if pipe else None)
            return
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE if pipe else log, stderr=log)

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Until the child is ready; returns its address. A child that exits first, or is not ready within
        ``timeout``, is killed and RuntimeError names it with the tail of its log."""
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout
        while self.running():
            addr = self.readiness.check(self.proc, max(0.0, min(0.2, deadline - time.monotonic())))
            if addr is not None:
                self.addr = addr
                return addr
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} did not become ready in {timeout:g}s{self._log_hint()}")
        raise RuntimeError(f"{self.name} exited with code {self.proc.poll()} before it was ready{self._log_hint()}")

    def start(self, timeout: float = 30.0) -> str:
        self.spawn()
        return self.wait_ready(timeout)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        self.paused = False

    def terminate(self) -> None:
        """SIGTERM without waiting (``stop_together`` stops many children at once)."""
        if self.running():
            assert self.proc is not None
            self.resume()  # a stopped process would sit on SIGTERM until the grace period ends
            self.proc.terminate()

    def stop(self, grace: float = 10.0) -> None:
        stop_together([self], grace)

    def pause(self) -> None:
        """SIGSTOP: the child keeps its sockets and answers nothing (a hung or partitioned server)."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.running():
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        if self.log_file is None:
            return "(logged to the launcher's stderr)"
        if not self.log_file.exists():
            return "(no log yet)"
        return self.log_file.read_text(errors="replace")[-chars:]

    def _log_hint(self) -> str:
        if self.log_file is None:
            return " (its log is on stderr above)"
        return f"; see {self.log_file}:\n{self.log_tail()}"


def stop_together(children: Iterable[ChildProcess], grace: float = 10.0) -> None:
    """SIGTERM every running child at once, then wait for each; SIGKILL those still running after ``grace``."""
    live = [c for c in children if c.running()]
    for child in live:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in live:
        assert child.proc is not None
        try:
            child.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
        child.paused = False


class ManagedProcess(ChildProcess):
    """One ``python -m broker_store namesrv|broker|controller`` child started from a config model (written to
    ``run_dir/<name>.yaml``), ready when it prints READY; used by ``up``, tests and benchmarks.

    Its stderr goes to ``run_dir/<name>.log``, or with ``console`` to this process's stderr (``up``).
    """

    def __init__(self, kind: str, config: NamesrvConfig | BrokerConfig | ControllerConfig, run_dir: Path,
                 name: str, *, console: bool = False, wrap: Sequence[str] = ()) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.kind = kind
        self.config = config
        self.config_file = write_config(run_dir, name, config)
        # wrap: a command prefix that execs the child (``ip netns exec NS`` in the partition tests)
        super().__init__(name, [*wrap, sys.executable, "-m", "broker_store", kind, "--config", str(self.config_file)],
                         None if console else run_dir / f"{name}.log", ReadyLine())


def clusters_registered(clusters: Iterable[LocalClusterConfig]) -> bool:
    """Whether each cluster's name server lists every broker group of its config with all its members: a static
    group's members under their configured ids; a controller-mode group (ids assigned by the controller) with a
    primary (id 0) and as many members as configured. False while a name server does not answer."""
    from broker_store.client import Admin  # the client is only needed once children run

    for cluster in clusters:
        # The name server's own client side (tls.enable) is how up reaches it: needed when it enforces TLS.
        with Admin(cluster.namesrv.listen, tls=cluster.namesrv.tls.client_settings()) as admin:
            try:
                info = admin.cluster_info()
            except RocketMQError:  # not up yet; the caller polls until its deadline
                return False
        if set(info.cluster_addr_table.get(cluster.name, ())) != {b.broker_name for b in cluster.brokers}:
            return False
        for name in {b.broker_name for b in cluster.brokers}:
            configured = [b for b in cluster.brokers if b.broker_name == name]
            group = info.broker_addr_table.get(name)
            listed = dict(group.broker_addrs) if group is not None else {}
            if configured[0].enable_controller_mode:
                if 0 not in listed or len(listed) != len(configured):
                    return False
            elif set(listed) != {b.broker_id for b in configured}:
                return False
    return True


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
                     namesrv: Mapping[str, Any] | None = None, **broker_options: Any) -> LocalClusterConfig:
    """A ``LocalClusterConfig`` on free 127.0.0.1 ports: one name server and, per group, its members' overrides
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
    return LocalClusterConfig(name=name, namesrv=NamesrvConfig(listen=f"{HOST}:{free_port()}", **(namesrv or {})),
                         brokers=brokers)


class ClusterProcesses:
    """One cluster of ``config`` as ``ManagedProcess`` children, each member controllable on its own.

    ``start()`` starts the name server, then the primaries, then the replicas, and returns once the name
    server lists every member and each primary counts its replicas in sync; any failure kills them all.
    ``stop()`` (also on ``__exit__``) SIGKILLs every child. Config files and ``<member>.log`` (stderr)
    live in ``run_dir``.
    """

    def __init__(self, config: LocalClusterConfig, run_dir: Path) -> None:
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
            poll_until(lambda: clusters_registered([self.config]), timeout,
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
    from broker_store.client import Admin  # the client is only needed once children run

    seen: object = None
    with Admin(primary_addr) as admin:
        def in_sync() -> bool:
            nonlocal seen
            try:
                seen = admin.ha_status(primary_addr).in_sync_replicas
            except RocketMQError as exc:  # still starting: poll until the deadline
                seen = exc
            return seen == replicas

        poll_until(in_sync, timeout, lambda: f"{primary_addr}: {replicas} replica(s) in sync (last seen: {seen})")
