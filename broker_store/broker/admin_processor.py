"""Topic and subscription-group administration and broker metadata: UPDATE_AND_CREATE_TOPIC,
GET_ALL_TOPIC_CONFIG, DELETE_TOPIC_IN_BROKER, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG, DELETE_SUBSCRIPTIONGROUP, GET_BROKER_HA_STATUS.

Called by ``BrokerServer``, with an ``AdminContext``. A topic change is persisted by
``TopicConfigManager`` and triggers an immediate re-registration with the name servers (the server
listens for changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_store.broker.subscription_group import SubscriptionGroupConfig
from broker_store.protocol.codes import PERM_INHERIT, PERM_PRIORITY, PERM_READ, PERM_WRITE, ResponseCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    TopicRequestHeader,
)
from broker_store.protocol.message import validate_topic
from broker_store.protocol.route import loads_rocketmq
from broker_store.protocol.topic import DEFAULT_TOPIC, TopicConfig

if TYPE_CHECKING:
    from broker_store.broker.consumer_offset import ConsumerOffsetManager
    from broker_store.broker.subscription_group import SubscriptionGroupManager
    from broker_store.broker.topic_config import TopicConfigManager
    from broker_store.net.server import Connection

MAX_QUEUE_NUMS = 1024
_ALL_PERMS = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT


def parse_attributes(raw: str | None) -> dict[str, str]:
    """RocketMQ's ``+key=value,+key2=value2`` attribute string (``-key`` deletes: ignored on create)."""
    out: dict[str, str] = {}
    if not raw:
        return out
    for item in raw.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            continue
        key, sep, value = item.lstrip("+").partition("=")
        if not sep or not key:
            raise ProtocolError(f"attribute {item!r} is not +key=value")
        out[key] = value
    return out


@dataclass(frozen=True)
class AdminContext:
    """What topic administration needs of its broker."""

    topic_configs: TopicConfigManager
    consumer_offsets: ConsumerOffsetManager
    """A deleted topic's group offsets go with it."""
    subscription_groups: SubscriptionGroupManager
    cluster_name: str
    """A topic may not take the cluster's name (RocketMQ's reserved words)."""
    broker_name: str
    """Nor the broker group's name (it cannot be deleted either)."""
    auto_create_topic_enable: bool
    ha_status: Callable[[], bytes] = lambda: b"{}"
    """The GET_BROKER_HA_STATUS body (``protocol.ha_status.HAStatus.to_json``)."""


class AdminProcessor:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    async def update_and_create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        try:
            validate_topic(h.topic)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if h.topic == self.ctx.cluster_name:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is conflict with system reserved words."
            )
        if h.topic == DEFAULT_TOPIC and not self.ctx.auto_create_topic_enable:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"the topic[{h.topic}] is conflict with system topic; "
                "it exists only with auto_create_topic_enable",
            )
        for name, value in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
            if not 0 <= value <= MAX_QUEUE_NUMS:
                return cmd.response(
                    ResponseCode.INVALID_PARAMETER,
                    f"{name} {value} is out of the allowed range 0..{MAX_QUEUE_NUMS}",
                )
        if h.perm & ~_ALL_PERMS:
            return cmd.response(
                ResponseCode.INVALID_PARAMETER, f"perm {h.perm} has bits outside {_ALL_PERMS}"
            )
        try:
            attributes = parse_attributes(h.attributes)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(exc))
        tc = TopicConfig(
            h.topic,
            read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums,
            perm=h.perm,
            topic_filter_type=h.topic_filter_type or "SINGLE_TAG",
            topic_sys_flag=h.topic_sys_flag or 0,
            order=bool(h.order),
            attributes=attributes,
        )
        self.ctx.topic_configs.update(tc)
        return cmd.response(ResponseCode.SUCCESS)

    async def get_all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.topic_configs.table().encode())

    async def delete_topic_in_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Remove the topic's config (its messages age out with retention); the broker re-registers, so
        the topic leaves its route. The default topic and the cluster's own name cannot be deleted."""
        h = TopicRequestHeader.from_ext(cmd.ext_fields)
        if h.topic in (DEFAULT_TOPIC, self.ctx.cluster_name, self.ctx.broker_name):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is a system topic")
        self.ctx.topic_configs.delete(h.topic)
        for group in self.ctx.consumer_offsets.groups_of(h.topic):
            self.ctx.consumer_offsets.remove_group(group, h.topic)
        return cmd.response(ResponseCode.SUCCESS)

    async def update_and_create_subscription_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_json(loads_rocketmq(cmd.body or b"{}"))
            validate_topic(config.group_name)  # group names follow the topic name rules
        except ProtocolError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(exc))
        self.ctx.subscription_groups.update(config)
        return cmd.response(ResponseCode.SUCCESS)

    async def get_all_subscription_group_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.subscription_groups.encode_wrapper())

    async def delete_subscription_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext(cmd.ext_fields)
        self.ctx.subscription_groups.delete(h.group_name)
        return cmd.response(ResponseCode.SUCCESS)

    async def get_broker_ha_status(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.ha_status())
