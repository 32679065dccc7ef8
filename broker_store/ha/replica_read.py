"""Reads from replicas: which broker of the group a consumer should pull a queue from next.

Pure decisions; the broker's pull processor (``broker.pull_processor``) judges "slow" with the store's
max physical offset and the furthest physical offset the pull returned (``consuming_slowly``'s rule),
then calls ``route_pull`` with the broker's runtime role, ``ha.slave_read_enable`` and the consumer's
subscription group's whichBrokerWhenConsumeSlowly / brokerId, and writes the result into the response
(``suggestWhichBrokerId``; PULL_RETRY_IMMEDIATELY from a replica that must not serve). Clients follow
the suggestion (the project client in ``client/consumer.py``; Apache RocketMQ's clients do too, the C++
client checked by tests/integration/test_wire_compat.py).

RocketMQ's rules (DefaultMessageStore.getMessage, PullMessageProcessor), written out::

    slow      = store max offset - furthest pulled offset > access_message_in_memory_max_ratio % of
                the memory basis (the data is probably no longer in page cache)
    suggested = slave_read_enable ? (slow ? whichBrokerWhenConsumeSlowly : group brokerId) : 0
    a replica with slave_read_enable off answers PULL_RETRY_IMMEDIATELY (and suggests 0)
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_store.protocol.route import MASTER_ID

DEFAULT_WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1
"""RocketMQ's SubscriptionGroupConfig default: the first replica."""


@dataclass(frozen=True)
class PullRouting:
    """Where the next pull of a queue should go, and whether this broker serves this one."""

    suggest_which_broker_id: int
    """Broker id within the group for the consumer's next pull of this queue (0 = the primary)."""
    retry_immediately: bool
    """True: answer PULL_RETRY_IMMEDIATELY without messages (a replica that may not serve reads)."""


def consuming_slowly(max_physical_offset_lag: int, max_in_memory_gap: int) -> bool:
    """True when the pulled data lies more than ``max_in_memory_gap`` bytes (``HASettings.max_in_memory_gap``)
    behind the store's max physical offset (``max_physical_offset_lag``: store max offset - furthest
    physical offset the pull returned), i.e. the consumer reads data likely evicted from page cache."""
    return max_physical_offset_lag > max_in_memory_gap


def route_pull(*, is_replica: bool, slave_read_enable: bool, slow: bool,
               which_broker_when_consume_slowly: int = DEFAULT_WHICH_BROKER_WHEN_CONSUME_SLOWLY,
               group_broker_id: int = MASTER_ID) -> PullRouting:
    """The suggestion for one pull response, from this broker's runtime role and the group's settings."""
    if not slave_read_enable:
        return PullRouting(MASTER_ID, retry_immediately=is_replica)
    return PullRouting(which_broker_when_consume_slowly if slow else group_broker_id, retry_immediately=False)
