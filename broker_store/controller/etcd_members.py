"""etcd members as child processes on loopback ports, for the replicated controller store: `python -m broker_store
up` starts them when its configuration names etcd, and the etcd tests start theirs the same way.

The binary is Debian's ``etcd-server`` (3.4; ``make etcd`` installs it where missing). Each member gets a client
port and a peer port from ``launcher.free_port`` and a data directory of its own; the cluster is bootstrapped
with a static ``--initial-cluster`` (``--initial-cluster-state new``; on a restart etcd reads its data
directory and ignores the bootstrap flags). A member is ready when its ``/health`` says so, which needs a
quorum, so ``EtcdCluster.start`` spawns every member before waiting for any.

``launcher.ManagedProcess`` runs ``python -m broker_store`` children that print READY; etcd prints no such line,
so ``EtcdMember`` is its own small process holder with the same verbs (start, kill, stop, plus pause/resume).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import requests

from broker_store.launcher import HOST, free_port, poll_until

LOG_TAIL_CHARS = 3000

INSTALL_HINT = "install Debian's etcd-server 3.4 (`make etcd`, or apt-get install etcd-server)"


def find_etcd() -> str | None:
    """The etcd binary on PATH, or None."""
    return shutil.which("etcd")


class EtcdMember:
    """One etcd member: a child process on ``HOST`` with its own ports, data directory and log file.

    ``start()`` only spawns (a member of a 3-member cluster cannot be healthy alone); ``healthy()`` asks its
    ``/health``; ``kill()`` is SIGKILL (a crash), ``stop()`` SIGTERM then SIGKILL after ``grace``,
    ``pause()``/``resume()`` SIGSTOP/SIGCONT. ``start()`` again restarts it on the same ports and data.
    """

    def __init__(self, name: str, client_port: int, peer_port: int, data_dir: Path, log_file: Path) -> None:
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self, binary: str, initial_cluster: str, token: str, heartbeat_ms: int,
                election_ms: int) -> list[str]:
        return [
            binary, "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
            # Two clusters bootstrapped on this machine at once must never join each other.
            "--initial-cluster-token", token,
            "--heartbeat-interval", str(heartbeat_ms), "--election-timeout", str(election_ms),
            "--logger", "zap", "--log-outputs", "stderr",
        ]

    def start(self, command: list[str]) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.paused = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self, timeout: float = 1.0) -> bool:
        """``/health`` answers ``{"health": "true"}`` (this member sees a leader and can read through it)."""
        if not self.running():
            return False
        try:
            response = requests.get(f"{self.client_url}/health", timeout=timeout)
            return response.ok and response.json().get("health") == "true"
        except (requests.RequestException, ValueError):  # not listening yet, or no quorum yet
            return False

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        self.paused = False

    def stop(self, grace: float = 10.0) -> None:
        if self.running():
            assert self.proc is not None
            self.resume()  # a stopped process would sit on SIGTERM until the grace period ends
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the member keeps its sockets and answers nothing (a hung or partitioned member)."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.running():
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        if not self.log_file.exists():
            return "(no log yet)"
        return self.log_file.read_text(errors="replace")[-chars:]


class EtcdCluster:
    """``size`` etcd members (1 or 3 in practice) on free loopback ports, files under ``root``: member i is
    ``etcd-<i>`` with data directory ``root/etcd-<i>.data`` and log ``root/etcd-<i>.log``.

    ``start()`` spawns every member and returns once each is healthy; a member that exits first, or a
    timeout, kills them all and raises RuntimeError with the logs' tails. ``stop()`` (also ``__exit__``)
    stops every member (SIGTERM, then SIGKILL). ``heartbeat_ms`` / ``election_ms`` are etcd's Raft timers
    (its defaults: 100 / 1000 ms).
    """

    def __init__(self, root: Path, size: int = 3, *, binary: str | None = None, heartbeat_ms: int = 100,
                 election_ms: int = 1000) -> None:
        if size < 1:
            raise ValueError(f"an etcd cluster needs at least one member, not {size}")
        found = binary or find_etcd()
        if found is None:
            raise RuntimeError(f"etcd is not installed: {INSTALL_HINT}")
        self.binary = found
        self.root = root
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.members: list[EtcdMember] = []
        for i in range(size):
            client_port = free_port(2)  # client P, peer P + 1
            self.members.append(EtcdMember(f"etcd-{i}", client_port, client_port + 1, root / f"etcd-{i}.data",
                                           root / f"etcd-{i}.log"))
        self.token = f"rocketmq-{os.getpid()}-{self.members[0].client_port}"
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        """Every member's client URL, in member order."""
        return [m.client_url for m in self.members]

    def start_member(self, member: EtcdMember) -> None:
        """Spawn ``member`` (again) without waiting; see ``wait_healthy``."""
        member.start(member.command(self.binary, self.initial_cluster, self.token, self.heartbeat_ms,
                                    self.election_ms))

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
        for member in self.members:
            member.stop(grace)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
