"""Message properties: the one owner of the ``name \\x01 value \\x02`` format.

Used by the message codec (``protocol.message``), the store (TAGS and WAIT scans) and the broker's send
path (CLUSTER, WAIT). Fast paths work on the raw bytes without decoding them.
"""

from __future__ import annotations

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def find_property(props: bytes, key: bytes) -> int:
    """Start of ``key`` (``NAME\\x01`` or a whole ``NAME\\x01value\\x02``) as a whole property in ``props``,
    or -1: a match must start the properties or follow a ``\\x02``."""
    pos = props.find(key)
    while pos > 0 and props[pos - 1] != 2:
        pos = props.find(key, pos + 1)
    return pos
