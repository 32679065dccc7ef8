"""Permissions of ACL 1.0 (RocketMQ's ``Permission``): the four flags, their spelling in plain_acl.yml and
the one rule that says whether an owned permission covers a needed one. Pure; used by ``decision``.

Flags (one byte, as RocketMQ)::

    DENY 0b0001   ANY 0b0010   PUB 0b0100   SUB 0b1000

``ANY`` is only ever *needed* (a route query: either PUB or SUB will do); an owned DENY refuses
everything, whatever else is set.
"""

from __future__ import annotations

from enum import IntFlag


class Permission(IntFlag):
    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_DENY, _ANY, _PUB_SUB = int(Permission.DENY), int(Permission.ANY), int(Permission.PUB | Permission.SUB)

PERM_SPELLINGS: dict[str, Permission] = {
    "DENY": Permission.DENY,
    "PUB": Permission.PUB,
    "SUB": Permission.SUB,
    "PUB|SUB": Permission.PUB | Permission.SUB,
    "SUB|PUB": Permission.PUB | Permission.SUB,
}
"""The values plain_acl.yml may hold for a permission. RocketMQ reads any other word as DENY while loading
(and refuses it in an update request); here a file with another word is refused, naming the field."""


def parse_perm(text: str) -> Permission:
    """The permission spelled ``text`` (surrounding blanks ignored); ValueError listing the allowed words."""
    perm = PERM_SPELLINGS.get(text.strip())
    if perm is None:
        raise ValueError(f"permission {text!r} is not one of {', '.join(PERM_SPELLINGS)}")
    return perm


def covers(needed: Permission, owned: Permission) -> bool:
    """True when ``owned`` grants ``needed``: never with DENY owned; ANY needs PUB or SUB; otherwise the
    needed and owned flags must share one."""
    need, own = int(needed), int(owned)  # plain ints: IntFlag's operators run in Python, this is per request
    if own & _DENY:
        return False
    if need & _ANY:
        return bool(own & _PUB_SUB)
    return bool(need & own)
