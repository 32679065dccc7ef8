"""Network partitions for tests: every node in a network namespace of its own, on one private LAN.

``Lan`` builds, with ``ip`` only (iproute2, present on every Linux), a switch namespace holding a bridge, and
one namespace per node joined to it by a veth pair, each node with an address of a private /24 (10.213.N.0,
N chosen free on this machine). The test process itself joins the LAN from the root namespace as ``.1``, so
it can reach every node (its clients and admin calls), while processes run inside a node's namespace through
``Lan.wrap(node)`` (``ip netns exec NS``, which execs the command: the pid is the process's own, so SIGKILL
and SIGSTOP reach it). No traffic leaves these interfaces: nothing routes the /24 anywhere else.

``partition(node, away_from)`` cuts a node off from some peers both ways with blackhole routes in their
namespaces (the cut node's connections to them stall and new ones fail), leaving it reachable by everyone
else, the test's clients included: the shape of an old primary that lost the controller and its replicas but
still hears producers (apache/rocketmq#6662). ``heal()`` removes every cut.

``Lan.available()`` says whether namespaces can be made here (root, iproute2, a kernel that allows them),
with the reason when not; tests skip with that reason. ``close()`` (and interpreter exit) deletes every
namespace and link it made.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import subprocess
from collections.abc import Sequence

_PREFIX = f"rt{os.getpid() % 100000}"
_counter = itertools.count()
_open: list[Lan] = []


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(("-n", netns) if netns else ()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _free_subnet() -> ipaddress.IPv4Network:
    used = _ip("-4", "-o", "addr", "show").stdout
    for n in range(1, 255):
        net = ipaddress.IPv4Network(f"10.213.{n}.0/24")
        if f"10.213.{n}." not in used:
            return net
    raise RuntimeError("no free 10.213.N.0/24 subnet for a test LAN")


class Lan:
    """A private LAN of network namespaces; see the module docstring."""

    @staticmethod
    def available() -> str | None:
        """None when namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        name = f"{_PREFIX}probe"
        try:
            _ip("netns", "add", name)
        except (OSError, RuntimeError) as exc:
            return f"cannot create a network namespace: {exc}"
        _ip("netns", "del", name, check=False)
        return None

    def __init__(self) -> None:
        self.tag = f"{_PREFIX}x{next(_counter)}"
        self.subnet = _free_subnet()
        hosts = self.subnet.hosts()
        self.client_addr = str(next(hosts))
        """The test process's address on the LAN (the root namespace's end)."""
        self._hosts = hosts
        self.switch = f"{self.tag}sw"
        self.nodes: dict[str, tuple[str, str]] = {}
        """node -> (namespace, address)."""
        self._cuts: list[tuple[str, str]] = []
        self._links = 0
        _open.append(self)
        _ip("netns", "add", self.switch)
        _ip("link", "add", "br0", "type", "bridge", netns=self.switch)
        _ip("link", "set", "br0", "up", netns=self.switch)
        self._join(None, self.client_addr)

    def _join(self, netns: str | None, addr: str) -> None:
        n = self._links
        self._links += 1
        outer, inner = f"{self.tag}a{n}", f"{self.tag}b{n}"  # <= 15 characters
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", outer, "netns", self.switch)
        _ip("link", "set", outer, "master", "br0", netns=self.switch)
        _ip("link", "set", outer, "up", netns=self.switch)
        if netns is not None:
            _ip("link", "set", inner, "netns", netns)
            _ip("link", "set", "lo", "up", netns=netns)
        _ip("addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", inner, netns=netns)
        _ip("link", "set", inner, "up", netns=netns)

    def add_node(self, node: str) -> str:
        """A namespace for ``node`` on the LAN; returns its address."""
        if node in self.nodes:
            raise ValueError(f"node {node} exists")
        netns, addr = f"{self.tag}n{len(self.nodes)}", str(next(self._hosts))
        _ip("netns", "add", netns)
        self.nodes[node] = (netns, addr)
        self._join(netns, addr)
        return addr

    def addr(self, node: str) -> str:
        return self.nodes[node][1]

    def wrap(self, node: str) -> Sequence[str]:
        """The command prefix that runs a process inside ``node``'s namespace."""
        return ("ip", "netns", "exec", self.nodes[node][0])

    def partition(self, node: str, away_from: Sequence[str]) -> None:
        """Cut ``node`` off from each of ``away_from`` (node names), both ways."""
        netns, addr = self.nodes[node]
        for other in away_from:
            other_ns, other_addr = self.nodes[other]
            for where, target in ((netns, other_addr), (other_ns, addr)):
                _ip("route", "add", "blackhole", f"{target}/32", netns=where)
                self._cuts.append((where, target))

    def heal(self) -> None:
        for where, target in self._cuts:
            _ip("route", "del", "blackhole", f"{target}/32", netns=where, check=False)
        self._cuts.clear()

    def close(self) -> None:
        """Delete every namespace (their veth ends go with them; the root end's peer goes too)."""
        for netns, _ in self.nodes.values():
            _ip("netns", "del", netns, check=False)
        _ip("netns", "del", self.switch, check=False)
        _ip("link", "del", f"{self.tag}b0", check=False)  # the root namespace's end, if still there
        self.nodes.clear()
        if self in _open:
            _open.remove(self)

    def __enter__(self) -> Lan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for lan in list(_open):
        lan.close()
