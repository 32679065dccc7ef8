"""etcd members as child processes on loopback ports, for the replicated controller store: `python -m broker_store
up` starts them when its configuration names etcd, and the etcd tests start theirs the same way.

The binary is Debian's ``etcd-server`` (3.4; ``make tools`` installs it where missing). Each member gets a client
port and a peer port from ``launcher.free_port`` and a data directory of its own; the cluster is bootstrapped
with a static ``--initial-cluster`` (``--initial-cluster-state new``; on a restart etcd reads its data
directory and ignores the bootstrap flags). A member is ready when its ``/health`` says so, which needs a
quorum, so ``EtcdCluster.start`` spawns every member before waiting for any.

Each member is a ``launcher.ChildProcess`` (the one process manager, also of ``python -m broker_store`` children)
whose readiness probe is that health check instead of a READY line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from broker_store.deploy.launcher import HOST, LOG_TAIL_CHARS, ChildProcess, free_port, poll_until, stop_together

INSTALL_HINT = "install Debian's etcd-server 3.4 (`make tools`, or apt-get install etcd-server)"


def find_etcd() -> str | None:
    """The etcd binary on PATH, or None."""
    return shutil.which("etcd")


class EtcdHealth:
    """An etcd member is ready when its ``/health`` answers ``{"health": "true"}`` (it sees a leader and can read
    through it: a quorum is up)."""

    def __init__(self, client_url: str) -> None:
        self.client_url = client_url

    def check(self, proc: subprocess.Popen[bytes], wait: float) -> str | None:
        started = time.monotonic()
        if healthy(self.client_url, timeout=max(wait, 0.2)):
            return self.client_url
        time.sleep(max(0.0, wait - (time.monotonic() - started)))  # refused at once: do not spin
        return None


def healthy(client_url: str, timeout: float = 1.0) -> bool:
    """Whether the etcd member at ``client_url`` answers ``/health`` with ``{"health": "true"}``."""
    try:
        response = requests.get(f"{client_url}/health", timeout=timeout)
        return response.ok and response.json().get("health") == "true"
    except (requests.RequestException, ValueError):  # not listening yet, or no quorum yet
        return False


class EtcdMember(ChildProcess):
    """One etcd member: a ``ChildProcess`` on ``HOST`` with its own ports, data directory and log file, ready
    when healthy. ``spawn()`` alone starts it (a member of a 3-member cluster cannot be healthy alone);
    ``start()`` again restarts it on the same ports and data."""

    def __init__(self, name: str, client_port: int, peer_port: int, data_dir: Path, log_file: Path,
                 command: Sequence[str]) -> None:
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        super().__init__(name, command, log_file, EtcdHealth(f"http://{HOST}:{client_port}"))

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    def spawn(self) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        super().spawn()

    def healthy(self, timeout: float = 1.0) -> bool:
        """Running, not paused, and its ``/health`` says so."""
        return self.running() and not self.paused and healthy(self.client_url, timeout)


def member_command(binary: str, name: str, client_url: str, peer_url: str, data_dir: Path, initial_cluster: str,
                   token: str, heartbeat_ms: int, election_ms: int) -> list[str]:
    """The etcd command line of one member of a statically bootstrapped cluster."""
    return [
        binary, "--name", name, "--data-dir", str(data_dir),
        "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
        # Two clusters bootstrapped on this machine at once must never join each other.
        "--initial-cluster-token", token,
        "--heartbeat-interval", str(heartbeat_ms), "--election-timeout", str(election_ms),
        "--logger", "zap", "--log-outputs", "stderr",
    ]


class EtcdCluster:
    """``size`` etcd members (1 or 3 in practice) on free loopback ports, files under ``root``: member i is
    ``etcd-<i>`` with data directory ``root/etcd-<i>.data`` and log ``root/etcd-<i>.log``.

    ``start()`` spawns every member and returns once each is healthy; a member that exits first, or a
    timeout, kills them all and raises RuntimeError with the logs' tails. ``stop()`` (also ``__exit__``)
    stops every member (SIGTERM, then SIGKILL). ``heartbeat_ms`` / ``election_ms`` are etcd's Raft timers
    (its defaults: 100 / 1000 ms).
    """

    def __init__(self, root: Path, size: int = 3, *, binary: str | None = None, heartbeat_ms: int = 100,
                 election_ms: int = 1000, client_ports: Sequence[int] | None = None, data_root: Path | None = None,
                 token: str | None = None) -> None:
        if size < 1:
            raise ValueError(f"an etcd cluster needs at least one member, not {size}")
        if client_ports is not None and len(client_ports) != size:
            raise ValueError(f"{len(client_ports)} client ports for {size} etcd members")
        found = binary or find_etcd()
        if found is None:
            raise RuntimeError(f"etcd is not installed: {INSTALL_HINT}")
        self.binary = found
        self.root = root
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        # Member i: client port P (given, or free with P + 1), peer port P + 1.
        ports = list(client_ports) if client_ports is not None else [free_port(2) for _ in range(size)]
        names = [f"etcd-{i}" for i in range(size)]
        data = data_root or root
        self.token = token or f"rocketmq-{os.getpid()}-{ports[0]}"
        self.initial_cluster = ",".join(f"{n}=http://{HOST}:{p + 1}" for n, p in zip(names, ports, strict=True))
        self.members: list[EtcdMember] = []
        for name, port in zip(names, ports, strict=True):
            command = member_command(found, name, f"http://{HOST}:{port}", f"http://{HOST}:{port + 1}",
                                     data / f"{name}.data", self.initial_cluster, self.token, heartbeat_ms,
                                     election_ms)
            self.members.append(EtcdMember(name, port, port + 1, data / f"{name}.data", root / f"{name}.log",
                                           command))

    @property
    def endpoints(self) -> list[str]:
        """Every member's client URL, in member order."""
        return [m.client_url for m in self.members]

    def start_member(self, member: EtcdMember) -> None:
        """Spawn ``member`` (again) without waiting; see ``wait_healthy``."""
        member.spawn()

    def wait_healthy(self, members: list[EtcdMember] | None = None, timeout: float = 30.0) -> None:
        """Until each of ``members`` (default: all) is healthy; RuntimeError if one exits or time runs out."""
        waiting = list(self.members if members is None else members)

        def ready() -> bool:
            dead = [m for m in waiting if not m.running()]
            if dead:
                raise RuntimeError(f"etcd member {dead[0].name} exited with code {dead[0].proc and dead[0].proc.poll()}"
                                   f"; its log ends:\n{dead[0].log_tail()}")
            return all(m.healthy() for m in waiting)

        try:
            poll_until(ready, timeout, lambda: "etcd members healthy: " + ", ".join(
                f"{m.name}={'yes' if m.healthy() else 'no'}" for m in waiting), interval=0.1)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n{self.logs()}") from exc

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            for member in self.members:
                self.start_member(member)
            self.wait_healthy(timeout=timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def leader(self, timeout: float = 2.0) -> EtcdMember | None:
        """The member Raft currently has as leader (``/v3/maintenance/status`` of a live member), or None."""
        for member in self.members:
            if not member.running() or member.paused:
                continue
            try:
                status = requests.post(f"{member.client_url}/v3/maintenance/status", json={}, timeout=timeout).json()
                leader_id = status.get("leader")
                if leader_id is None:  # this member sees no leader now: ask the next one
                    continue
                if leader_id == status.get("header", {}).get("member_id"):
                    return member
                listing = requests.post(f"{member.client_url}/v3/cluster/member/list", json={},
                                        timeout=timeout).json()
            except (requests.RequestException, ValueError, AttributeError):  # down or not answering JSON
                continue
            names = {info.get("ID"): info.get("name") for info in listing.get("members", [])}
            return next((m for m in self.members if m.name == names.get(leader_id)), None)
        return None

    def logs(self, chars: int = LOG_TAIL_CHARS) -> str:
        return "\n".join(f"--- {m.name} ({m.log_file}) ---\n{m.log_tail(chars)}" for m in self.members)

    def kill(self) -> None:
        for member in self.members:
            member.kill()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the members one after another (SIGKILL one still running after ``grace``).

        Not all at once: a leader that is told to stop first hands Raft leadership to the peer it has been
        connected to longest and waits for that peer to take it, up to etcd's request timeout (5 s plus two
        election timeouts, ~7 s). With every member stopping together that peer is going away too, so the
        leader waited the whole timeout (benchmarks/MEASUREMENTS.md). One at a time, the transfer goes
        to a member that stays up (milliseconds), and the last member has no peer to hand over to."""
        for member in self.members:
            stop_together([member], grace)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
