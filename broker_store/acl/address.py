"""Remote-address patterns of plain_acl.yml (``globalWhiteRemoteAddresses``, an account's
``whiteRemoteAddress``), as RocketMQ's RemoteAddressStrategyFactory reads them. Pure; used by ``decision``.

Forms (``parse_address_pattern`` picks the first that applies)::

    ""  (blank or absent)             matches nothing
    *   *.*.*.*   *:*:*:*:*:*:*:*     matches every address
    192.168.1.{1,2,3}  1:2::{a,b}     a set: the prefix followed by each listed last part
    10.0.0.1,10.0.0.2                 a set of exact addresses (IPv4 or IPv6)
    192.168.*.*  192.168.1.10-20      a range: the parts before the first '*' or 'a-b' part are compared
    2::ac5:78:1-200:*  2::ac5:78:*    exactly, that one part must fall in the range (0-255, or 0-ffff
                                      for IPv6); later parts are not compared, as in RocketMQ
    10.0.0.1   ::1                    one exact address (IPv6 compared in expanded form)

A pattern that fits none of them raises ValueError naming it; the file model turns that into a refusal
that names the field.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


@lru_cache(maxsize=4096)
def _ipv4(text: str) -> str | None:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        return None


def _ipv6(text: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def _exact(text: str, pattern: str) -> str:
    """The canonical form of the exact address ``text`` (IPv4 as written, IPv6 exploded)."""
    text = text.strip()
    v4 = _ipv4(text)
    if v4 is not None and v4 == text:
        return v4
    v6 = _ipv6(text)
    if v6 is not None:
        return v6.exploded
    raise ValueError(f"{text!r} in remote address pattern {pattern!r} is not an IPv4 or IPv6 address")


@lru_cache(maxsize=4096)  # asked for every request's peer, and peers are few
def _canonical_host(host: str) -> str | None:
    v4 = _ipv4(host)
    if v4 is not None:
        return v4
    v6 = _ipv6(host)
    return v6.exploded if v6 is not None else None


@dataclass(frozen=True)
class AddressPattern:
    """One parsed pattern; ``matches(host)`` takes a peer's host without its port."""

    text: str
    """The pattern as written."""
    everything: bool = False
    """Matches every address."""
    exact: frozenset[str] = frozenset()
    """Canonical addresses matched exactly (one, a list, or a braces set)."""
    range_head: tuple[str, ...] | tuple[int, ...] = ()
    """Range patterns: the parts compared exactly (IPv4 strings, IPv6 group values)."""
    range_low: int = 0
    range_high: int = -1
    """Range patterns: the bounds of the part after ``range_head``."""
    ipv6_range: bool = False

    def matches(self, host: str | None) -> bool:
        if self.everything:
            return True
        if not host:
            return False
        if self.exact:
            canonical = _canonical_host(host)
            return canonical is not None and canonical in self.exact
        if self.range_high < 0:
            return False
        index = len(self.range_head)
        if self.ipv6_range:
            v6 = _ipv6(host)
            if v6 is None:
                return False
            groups = tuple(int(g, 16) for g in v6.exploded.split(":"))
            return groups[:index] == self.range_head and self.range_low <= groups[index] <= self.range_high
        if _ipv4(host) != host:
            return False
        parts = host.split(".")
        return tuple(parts[:index]) == self.range_head and self.range_low <= int(parts[index]) <= self.range_high


NOTHING = AddressPattern("")


def parse_address_pattern(text: str | None) -> AddressPattern:
    """The pattern ``text`` (see the module docstring); ValueError naming it when malformed."""
    if text is None or not text.strip():
        return NOTHING
    text = text.strip()
    if text in _ALL:
        return AddressPattern(text, everything=True)
    if text.endswith("}"):
        return _braces(text)
    if "," in text:
        return AddressPattern(text, exact=frozenset(_exact(t, text) for t in text.split(",") if t.strip()))
    if "*" in text or "-" in text:
        return _ipv6_range(text) if ":" in text else _ipv4_range(text)
    return AddressPattern(text, exact=frozenset({_exact(text, text)}))


def _braces(text: str) -> AddressPattern:
    open_at = text.find("{")
    sep = ":" if ":" in text else "."
    if open_at <= 0 or text[open_at - 1] != sep or text.count("{") != 1:
        raise ValueError(f"remote address pattern {text!r}: a braces set must be the last part")
    if sep == "." and len([p for p in text[:open_at].split(".") if p]) != 3:
        raise ValueError(f"remote address pattern {text!r}: an IPv4 braces set needs three parts before it")
    prefix = text[:open_at]
    items = [item for item in text[open_at + 1:-1].split(",") if item.strip()]
    if not items:
        raise ValueError(f"remote address pattern {text!r}: the braces set is empty")
    return AddressPattern(text, exact=frozenset(_exact(prefix + item.strip(), text) for item in items))


def _range_bounds(part: str, text: str, *, top: int, base: int) -> tuple[int, int]:
    if part == "*":
        return 0, top
    low_text, _, high_text = part.partition("-")
    try:
        low, high = int(low_text, base), int(high_text, base)
    except ValueError:
        raise ValueError(f"remote address pattern {text!r}: {part!r} is not a range a-b") from None
    if not 0 <= low <= high <= top or high == 0 or low_text.strip() != low_text or not low_text:
        top_text = f"{top:x}" if base == 16 else str(top)
        raise ValueError(f"remote address pattern {text!r}: range {part!r} must lie within 0-{top_text} "
                         "with start <= end and end > 0")
    return low, high


def _ipv4_range(text: str) -> AddressPattern:
    parts = [p.strip() for p in text.split(".") if p.strip()]
    if len(parts) != 4:
        raise ValueError(f"remote address pattern {text!r} does not have four parts")
    index = next((i for i in (1, 2, 3) if parts[i] == "*" or "-" in parts[i]), None)
    if index is None:
        raise ValueError(f"remote address pattern {text!r}: the range ('*' or a-b) must be in part 2, 3 or 4")
    for head in parts[:index]:
        if not head.isdigit() or not 0 <= int(head) <= 255:
            raise ValueError(f"remote address pattern {text!r}: {head!r} is not a number 0-255")
    low, high = _range_bounds(parts[index], text, top=255, base=10)
    return AddressPattern(text, range_head=tuple(parts[:index]), range_low=low, range_high=high)


def _ipv6_range(text: str) -> AddressPattern:
    tokens = text.split(":")
    trailing_any = tokens[-1] == "*"
    body = tokens[:-1] if trailing_any else tokens
    if any("*" in t for t in body):
        raise ValueError(f"remote address pattern {text!r}: '*' may only be the last group")
    if any("-" in t for t in body[:-1]):
        raise ValueError(f"remote address pattern {text!r}: a range a-b must be the last group (or before a last '*')")
    if "-" in body[-1]:
        range_token, head_tokens, width = body[-1], body[:-1], 6 if trailing_any else 7
    else:
        range_token, head_tokens, width = "*", body, 7
    head = _expand_groups(":".join(head_tokens), width, text)
    low, high = _range_bounds(range_token, text, top=0xFFFF, base=16)
    return AddressPattern(text, range_head=head, range_low=low, range_high=high, ipv6_range=True)


def _expand_groups(head: str, width: int, text: str) -> tuple[int, ...]:
    """The ``width`` leading IPv6 groups ``head`` spells ('::' filled with zeros)."""
    if "::" in head:
        left, _, right = head.partition("::")
        left_groups = [g for g in left.split(":") if g] if left else []
        right_groups = [g for g in right.split(":") if g] if right else []
        fill = width - len(left_groups) - len(right_groups)
        if fill < 1 or "::" in right:
            raise ValueError(f"remote address pattern {text!r}: cannot expand {head!r} to {width} groups")
        groups = left_groups + ["0"] * fill + right_groups
    else:
        groups = head.split(":")
    if len(groups) != width:
        raise ValueError(f"remote address pattern {text!r}: {head!r} is not {width} groups before the range")
    try:
        values = tuple(int(g, 16) for g in groups)
    except ValueError:
        raise ValueError(f"remote address pattern {text!r}: {head!r} is not hexadecimal groups") from None
    if any(not 0 <= v <= 0xFFFF or len(g) > 4 for v, g in zip(values, groups, strict=True)):
        raise ValueError(f"remote address pattern {text!r}: a group of {head!r} is out of range")
    return values
