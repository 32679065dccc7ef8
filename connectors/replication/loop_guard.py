"""Loop prevention: the chain of clusters a message has passed, carried in one message property.

Called by the sink on executors for every message before it is sent (``should_skip`` then
``stamp``), and by ``config`` to reject cluster names that could not be written into the chain.
Pure functions over property mappings; nothing here touches the network.

Property format (``ROCKETMQ_REPLICATOR_SOURCE``)::

    ROCKETMQ_REPLICATOR_SOURCE = <cluster> [ "," <cluster> ]*     in the order the message passed them

    e.g. a message produced on A, replicated A->B, then B->C carries "A,B" when it arrives on C.

A cluster name matches ``CLUSTER_NAME_PATTERN`` (letters, digits, ``_``, ``-``, ``.``), so it never
contains the separator; config loading rejects other names rather than escaping them. When parsing,
empty segments and surrounding blanks are ignored (a foreign writer's "A, B," still means A then B):
a malformed chain must not stop the stream, and ignoring blanks can only make the guard skip more.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_store.protocol.message import PROPERTY_REPLICATOR_SOURCE
from connectors.core.config import CLUSTER_NAME_PATTERN, CLUSTER_NAME_SEPARATOR

CHAIN_PROPERTY = PROPERTY_REPLICATOR_SOURCE
CHAIN_SEPARATOR = CLUSTER_NAME_SEPARATOR
"""Cluster names (``CLUSTER_NAME_PATTERN``, owned by the config) never contain it."""


def parse_chain(value: str | None) -> tuple[str, ...]:
    """The clusters named in a chain value, in order; ``None`` or "" is the empty chain."""
    if not value:
        return ()
    return tuple(part.strip() for part in value.split(CHAIN_SEPARATOR) if part.strip())


def format_chain(chain: tuple[str, ...] | list[str]) -> str:
    """The property value for ``chain``; raises ``ValueError`` for a name the format cannot carry."""
    for name in chain:
        if not CLUSTER_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"cluster name {name!r} cannot be written into {CHAIN_PROPERTY} "
                             f"(must match {CLUSTER_NAME_PATTERN.pattern})")
    return CHAIN_SEPARATOR.join(chain)


def chain_of(properties: Mapping[str, str]) -> tuple[str, ...]:
    """The chain a message carries (empty when it was produced on its current cluster)."""
    return parse_chain(properties.get(CHAIN_PROPERTY))


def should_skip(properties: Mapping[str, str], target_cluster: str,
                source_cluster: str | None = None) -> bool:
    """True when writing the message to ``target_cluster`` would close a loop.

    The message has been on every cluster in its chain, and (when given) on ``source_cluster``,
    where it is being read now. The sink counts a skip as ``skipped_loop``, never as a failure.
    """
    if source_cluster is not None and source_cluster == target_cluster:
        return True
    return target_cluster in chain_of(properties)


def stamp(properties: Mapping[str, str], source_cluster: str) -> dict[str, str]:
    """A copy of ``properties`` with ``source_cluster`` appended to the chain (input left untouched).

    Appending is skipped when the chain already ends with ``source_cluster``, so stamping twice (a
    retried send that reuses the stamped copy) does not grow the chain.
    """
    chain = chain_of(properties)
    if not chain or chain[-1] != source_cluster:
        chain = (*chain, source_cluster)
    stamped = dict(properties)
    stamped[CHAIN_PROPERTY] = format_chain(chain)
    return stamped
