"""Which source topics a link replicates, and the target topic each one is written to.

Built on the driver from a link's ``TopicMappingConfig``; the source reader calls ``select`` with the
source cluster's topic list on every topic refresh (so topics created later that match an ``include``
rule or ``all_topics`` are picked up), and the sink uses the resulting source -> target map. Pure and
deterministic: the same config and topic set always give the same mapping, whatever the input order.

Resolution of one source topic, first rule that applies wins:

0. it is the heartbeat topic (``HEARTBEAT_TOPIC``) -> the same name, on every link whatever its rules:
                                                 its arrival on the target measures the link's whole
                                                 path (``connectors.heartbeat``); config loading
                                                 rejects an explicit entry renaming it
1. an ``explicit`` entry names it            -> its target (explicit entries may name system topics,
                                                 e.g. the replicator's heartbeat topic; config
                                                 loading rejects explicit topics that match an exclude)
2. an ``exclude`` regex fully matches it      -> not replicated (exclusion wins over 3, 5 and 6)
3. it is the retry or dead-letter topic of a group the link checkpoints by name or pattern (``%RETRY%<group>``,
   ``%DLQ%<group>``; ``group_topics``, on by default; not with the default selection of every group, which
   would take every group's of the cluster) -> the same name: a group moved to the target
                                                 finds its pending retries and dead letters there
4. it is a system topic (``is_system_topic``) -> not replicated
5. the first ``include`` rule, in file order, whose regex fully matches it -> its target template
6. ``all_topics: true``                       -> the same name
7. otherwise                                  -> not replicated

Groups keep their names across a link (the checkpoint connector commits a source group's offsets under the
same group on the target), so a group topic keeps its name too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import validate_topic
from broker_store.protocol.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from connectors.core.errors import TopicMappingError
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.core.topic_settings import TopicMappingConfig

SYSTEM_TOPIC_PREFIXES: tuple[str, ...] = (
    "rmq_sys_",        # TopicValidator.SYSTEM_TOPIC_PREFIX: revive logs, wheel timer, heartbeats, ...
    "RMQ_SYS_",        # transactional half / op-half, trace topics
    "%RETRY%",         # per-group retry topics
    "%DLQ%",           # per-group dead-letter topics
    "%LMQ%",           # light message queues
)
SYSTEM_TOPICS: frozenset[str] = frozenset({
    "TBW102",                           # AUTO_CREATE_TOPIC_KEY_TOPIC (default topic of auto-create)
    "SCHEDULE_TOPIC_XXXX",              # delayed messages before their due time
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "BenchmarkTest",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "DefaultCluster",                   # the default cluster name, auto-created as a topic
    "DefaultHeartBeatSyncerTopic",
})
"""Topic names RocketMQ creates for itself (TopicValidator). Besides these, brokers create one topic
per cluster name and one per broker name (clusterTopicEnable / brokerTopicEnable); those names are
only known at run time and are passed to ``TopicMapper`` as ``reserved_names``."""


def is_system_topic(topic: str, reserved_names: Iterable[str] = ()) -> bool:
    """True for RocketMQ's internal topics and for the cluster / broker names in ``reserved_names``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES) or topic in set(reserved_names)


GROUP_TOPIC_PREFIXES: tuple[str, ...] = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
"""Prefixes of the per-group topics that travel with their group (rule 3 of the module docstring)."""


def group_of_group_topic(topic: str) -> str | None:
    """The consumer group of a retry or dead-letter topic (``%RETRY%g`` / ``%DLQ%g`` -> ``g``), else None."""
    for prefix in GROUP_TOPIC_PREFIXES:
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return topic[len(prefix):]
    return None


class TopicMapper:
    """Source topic -> target topic for one link. Immutable; safe to pickle to executors."""

    def __init__(self, mapping: TopicMappingConfig, *, reserved_names: Iterable[str] = ()) -> None:
        """``reserved_names``: the source cluster's name and broker names (treated as system topics)."""
        self._explicit: dict[str, str] = {}
        for entry in mapping.explicit:
            for topic in entry.source:
                self._explicit[topic] = entry.target or topic
        self._include = tuple((re.compile(rule.pattern), rule.target) for rule in mapping.include)
        self._exclude = tuple(re.compile(pattern) for pattern in mapping.exclude)
        self._all_topics = mapping.all_topics
        self._reserved = frozenset(reserved_names)
        self._groups = mapping.checkpointed_groups

    @property
    def explicit_topics(self) -> frozenset[str]:
        """Source topics named explicitly; the reader may report those missing on the source."""
        return frozenset(self._explicit)

    def target_for(self, topic: str) -> str | None:
        """The target topic of ``topic``, or ``None`` when the link does not replicate it.

        Raises ``TopicMappingError`` when an include template yields an invalid topic name (e.g. too
        long): a matching topic is never skipped silently.
        """
        if topic == HEARTBEAT_TOPIC:
            return topic
        explicit = self._explicit.get(topic)
        if explicit is not None:
            return explicit
        if any(pattern.fullmatch(topic) for pattern in self._exclude):
            return None
        if self._groups is not None and not self._groups.selects_all:
            group = group_of_group_topic(topic)
            if group is not None and self._groups.selects(group):
                return topic
        if is_system_topic(topic, self._reserved):
            return None
        for pattern, template in self._include:
            if pattern.fullmatch(topic):
                target = template.replace("{topic}", topic)
                try:
                    validate_topic(target)
                except ProtocolError as exc:
                    raise TopicMappingError(f"include {pattern.pattern!r} maps {topic!r} to an invalid "
                                            f"target: {exc}") from exc
                return target
        if self._all_topics:
            return topic
        return None

    def select(self, source_topics: Iterable[str]) -> dict[str, str]:
        """Source -> target for every replicated topic among ``source_topics``, sorted by source topic."""
        selected: dict[str, str] = {}
        for topic in sorted(set(source_topics)):
            target = self.target_for(topic)
            if target is not None:
                selected[topic] = target
        return selected

    def missing_explicit(self, source_topics: Iterable[str]) -> list[str]:
        """Explicit source topics that do not exist (yet) on the source cluster, sorted."""
        return sorted(self.explicit_topics - set(source_topics))
