"""Client registry requests: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP.

Called by ``BrokerServer``, with a ``ClientContext``. A consumer group seen for the first time gets its retry topic
%RETRY%<group> created (RocketMQ does this on heartbeat so send-back always has a target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from broker_store.broker.client_registry import decode_heartbeat
from broker_store.broker.send_processor import RETRY_QUEUE_NUMS
from broker_store.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader
from broker_store.protocol.topic import retry_topic

if TYPE_CHECKING:
    from broker_store.broker.client_registry import ClientRegistry
    from broker_store.broker.role import RoleState
    from broker_store.broker.topic_config import TopicConfigManager
    from broker_store.net.server import Connection


@dataclass(frozen=True)
class ClientContext:
    """What the client-registry requests need of their broker."""

    clients: ClientRegistry
    topic_configs: TopicConfigManager
    role: RoleState
    """Only a primary creates retry topics for the consumer groups it hears of."""


class ClientProcessor:
    def __init__(self, ctx: ClientContext) -> None:
        self.ctx = ctx

    async def heart_beat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            hb = decode_heartbeat(cmd.body)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad HeartbeatData: {exc}")
        self.ctx.clients.heartbeat(hb, conn)
        if self.ctx.role.is_primary:
            for consumer in hb.consumers:
                self.ctx.topic_configs.create_in_send_back(
                    retry_topic(consumer.group_name), RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE
                )
        return cmd.response(ResponseCode.SUCCESS)

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(cmd.ext_fields)
        self.ctx.clients.unregister(
            h.client_id, producer_group=h.producer_group, consumer_group=h.consumer_group
        )
        return cmd.response(ResponseCode.SUCCESS)

    async def get_consumer_list_by_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext(cmd.ext_fields)
        info = self.ctx.clients.consumer_group(h.consumer_group)
        if info is not None and info.channels:
            return cmd.response(
                ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": info.client_ids()})
            )
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
