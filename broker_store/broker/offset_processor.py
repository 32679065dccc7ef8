"""Consumer offsets and queue offsets: QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET, GET_MAX_OFFSET,
GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_TOPIC_STATS_INFO.

Called by ``BrokerServer``, with an ``OffsetContext``; semantics of RocketMQ's ConsumerManageProcessor and
AdminBrokerProcessor for these codes (RocketMQ serves the queue-offset codes from its admin processor; here
they sit with the other reads of queue offsets, which need the store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from broker_store.protocol.message_queue import MessageQueue
from broker_store.protocol.topic_stats import TopicOffset, TopicStatsTable

if TYPE_CHECKING:
    from broker_store.broker.consumer_offset import ConsumerOffsetManager
    from broker_store.broker.delay_offsets import DelayOffsetTable
    from broker_store.broker.topic_config import TopicConfigManager
    from broker_store.net.server import Connection
    from broker_store.store import MessageStore


def _offset(cmd: RemotingCommand, offset: int) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=offset).to_ext())


@dataclass(frozen=True)
class OffsetContext:
    """What the offset requests need of their broker."""

    store: MessageStore
    topic_configs: TopicConfigManager
    consumer_offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetTable
    broker_name: str
    """The group name GET_TOPIC_STATS_INFO writes into each queue key."""


class OffsetProcessor:
    def __init__(self, ctx: OffsetContext) -> None:
        self.ctx = ctx

    async def query_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The committed offset; when none: 0 if the queue still starts at 0 (RocketMQ's "boot first"
        rule, unless setZeroIfNotFound=false), else QUERY_NOT_FOUND."""
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        offset = self.ctx.consumer_offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return _offset(cmd, offset)
        if h.set_zero_if_not_found is False:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first"
            )
        if self.ctx.store.get_min_offset(h.topic, h.queue_id) <= 0:
            return _offset(cmd, 0)
        return cmd.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    async def update_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        if h.topic not in self.ctx.topic_configs:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {h.topic} not exist!")
        if h.queue_id < 0:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"queueId[{h.queue_id}] is illegal")
        self.ctx.consumer_offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(ResponseCode.SUCCESS)

    async def get_max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueueRequestHeader.from_ext(cmd.ext_fields)
        return _offset(cmd, self.ctx.store.get_max_offset(h.topic, h.queue_id))

    async def get_min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueueRequestHeader.from_ext(cmd.ext_fields)
        return _offset(cmd, self.ctx.store.get_min_offset(h.topic, h.queue_id))

    async def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        return _offset(cmd, self.ctx.store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp))

    async def get_all_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.consumer_offsets.encode_wrapper())

    async def get_all_delay_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The schedule service's progress per level (a replica answers with its copy of its primary's)."""
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.delay_offsets.encode_wrapper())

    async def get_topic_stats_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Every queue of the topic's config (ids below max(read, write) queue nums): min and max offset as
        GET_MIN_OFFSET / GET_MAX_OFFSET answer them, and the store time of the last message. TOPIC_NOT_EXIST
        without a config (RocketMQ's AdminBrokerProcessor.getTopicStatsInfo)."""
        h = TopicRequestHeader.from_ext(cmd.ext_fields)
        config = self.ctx.topic_configs.select(h.topic)
        if config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = self.ctx.store
        offsets = {}
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            high = store.get_max_offset(h.topic, queue_id)
            stored = store.get_store_timestamp(h.topic, queue_id, high - 1) if high > 0 else None
            offsets[MessageQueue(h.topic, self.ctx.broker_name, queue_id)] = TopicOffset(
                store.get_min_offset(h.topic, queue_id), high, stored or 0)
        return cmd.response(ResponseCode.SUCCESS, body=TopicStatsTable(offsets).encode())
