"""Which peers may connect to a port that only its own cluster should reach: the HA port and the controller.

Pure: no socket, no clock. ``PeerAllowList`` is an address allow-list (``ha.ha_allowed_peers``,
``controller.allowed_peers``); ``decide_peer`` the rule both servers apply before they read a byte of a peer's
request. The HA port's shared-secret proof is ``ha.wire_auth`` (bytes and HMAC), decided together with the
address in ``ha.peer_auth``.

Entries, each one of::

    10.0.0.7          one IPv4 address          ::1 / fe80::1     one IPv6 address
    10.0.0.0/24       an IPv4 network (CIDR)    fd00::/8          an IPv6 network
    *                 every address (an explicit "anyone", e.g. to keep the key while opening a port)

An IPv4-mapped IPv6 peer (``::ffff:10.0.0.7``, a dual-stack listener's view of an IPv4 client) is compared
as its IPv4 address. A host that is not an IP address (a name, "?") is never allowed: the servers see the
socket's peer address, which is always numeric, so anything else means the address is unknown.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_peer_entry(text: str) -> _Network | None:
    """One allow-list entry as a network (an address is a /32 or /128); None for ``*`` (everyone).
    ValueError naming the entry when it is neither."""
    entry = text.strip()
    if entry == "*":
        return None
    try:
        return ipaddress.ip_network(entry, strict=True)
    except ValueError as exc:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not an IP address, a CIDR network (10.0.0.0/24, fd00::/8) or '*'") \
                from None
        raise ValueError(f"{text!r} has host bits set past its prefix length ({exc}); write the network "
                         "address, e.g. 10.0.0.0/24") from None


def _host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    host = host.strip().strip("[]")
    if "%" in host:  # a scope id (fe80::1%eth0) is not part of the address compared
        host = host.split("%", 1)[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class PeerAllowList:
    """The addresses a port accepts. Build with ``parse``; ``allows(host)`` takes a peer's host without port."""

    entries: tuple[str, ...]
    """The entries as configured (for messages)."""
    networks: tuple[_Network, ...]
    everyone: bool = False
    """The list holds ``*``."""

    @classmethod
    def parse(cls, entries: Iterable[str]) -> PeerAllowList:
        """ValueError naming the first bad entry (the settings prefix it with the field's name)."""
        texts = tuple(entries)
        networks: list[_Network] = []
        everyone = False
        for text in texts:
            network = parse_peer_entry(text)
            if network is None:
                everyone = True
            else:
                networks.append(network)
        return cls(texts, tuple(networks), everyone)

    def allows(self, host: str) -> bool:
        if self.everyone:
            return True
        address = _host_address(host)
        if address is None:
            return False
        return any(address.version == net.version and address in net for net in self.networks)


def checked_peer_list(value: list[str] | None, *, key: str, members: str) -> list[str] | None:
    """An allow-list setting as configured, checked: None (anyone) stays None; an empty list is refused (it would
    refuse every peer, ``members`` saying whom: leave ``key`` out instead); a bad entry raises ValueError naming it.
    The one validator of ``ha.ha_allowed_peers`` and ``controller.allowed_peers``."""
    if value is not None:
        if not value:
            raise ValueError(f"an empty list would refuse every {members}; leave {key} out to accept anyone, "
                             f"or list the {members}' addresses")
        PeerAllowList.parse(value)  # raises, naming the bad entry and the forms allowed
    return value


@dataclass(frozen=True)
class PeerDecision:
    """Whether a peer may go on; ``reason`` says why not in words an operator can act on (names the setting)."""

    allowed: bool
    reason: str = ""


ALLOWED = PeerDecision(True)


def decide_peer(host: str, allow_list: PeerAllowList | None, *, setting: str) -> PeerDecision:
    """The address rule: no list (None) lets everyone in, as RocketMQ does; a list lets in the hosts it names.
    ``setting`` is the configuration key named in the refusal (``ha.ha_allowed_peers``)."""
    if allow_list is None or allow_list.allows(host):
        return ALLOWED
    return PeerDecision(False, f"peer {host} is not in {setting} {list(allow_list.entries)}")
