"""The broker's request routing table: which processor answers each request code, and the answer to a code
nobody handles.

Built by ``broker.server.BrokerServer`` once its parts are open (store, tables, pull waiters); until then, and
again from the start of a stop, the table is empty and every request is answered SERVICE_NOT_AVAILABLE. Each
processor gets its narrow context (``SendContext``, ``PullContext``...), never the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_store.broker.acl_processor import AclAdminContext, AclAdminProcessor
from broker_store.broker.admin_processor import AdminContext, AdminProcessor
from broker_store.broker.client_processor import ClientContext, ClientProcessor
from broker_store.broker.client_registry import ClientRegistry
from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.controller_agent import ControllerAgent
from broker_store.broker.controller_client import decode_role_notification
from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.delayed_send import DelayedSend
from broker_store.broker.long_polling import PullWaiters
from broker_store.broker.offset_processor import OffsetContext, OffsetProcessor
from broker_store.broker.primary_lease import PrimaryLease
from broker_store.broker.pull_processor import PullContext, PullProcessor
from broker_store.broker.role import RoleState
from broker_store.broker.send_processor import SendContext, SendProcessor
from broker_store.broker.subscription_group import SubscriptionGroupManager
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import Clock
from broker_store.config import BrokerConfig
from broker_store.net.server import Connection, HandlerResult
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.store import MessageStore
from broker_store.store.delay_levels import DelayLevels

Processor = Callable[[RemotingCommand, Connection], HandlerResult]
"""Returns the response, or an awaitable of it when the request must wait (see ``net.server``)."""


@dataclass(frozen=True, slots=True)
class BrokerParts:
    """What the processors serve from: the broker's open parts and the callables that read its runtime state."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    role: RoleState
    clients: ClientRegistry
    consumer_offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetTable
    subscription_groups: SubscriptionGroupManager
    pull_waiters: PullWaiters
    delay_levels: DelayLevels
    clock: Clock
    stopping: Callable[[], bool]
    """Whether the broker is stopping (held pulls answer at once)."""
    ha_status: Callable[[], bytes]
    """GET_BROKER_HA_STATUS's body."""
    controller_agent: Callable[[], ControllerAgent | None]
    """Controller mode: the agent NOTIFY_BROKER_ROLE_CHANGED is handed to (None while it does not run)."""
    epoch_cache: Callable[[], bytes | None]
    """Controller mode: GET_BROKER_EPOCH_CACHE's body (None while the epoch file is not open)."""
    acl_admin: AclAdminContext
    """The ACL admin requests' context (50-54)."""
    lease: PrimaryLease | None = None
    """Controller mode: the primary's lease the send path checks before appending."""


def processor_table(parts: BrokerParts) -> dict[int, Processor]:
    """Request code -> processor for a started broker (NOTIFY_BROKER_ROLE_CHANGED and GET_BROKER_EPOCH_CACHE only
    in controller mode)."""
    cfg, store, topics, role = parts.config, parts.store, parts.topics, parts.role
    send = SendProcessor(SendContext(
        store, topics, role, broker_name=cfg.broker_name, cluster_name=cfg.cluster_name,
        region_id=cfg.region_id, trace_on=cfg.trace_on, max_message_size=cfg.store.max_message_size,
        max_batch_size=cfg.store.max_batch_size,
        max_reconsume_times=cfg.max_reconsume_times, delayed_send=DelayedSend(parts.delay_levels),
        lease=parts.lease))
    pull = PullProcessor(PullContext(
        store, topics, parts.clients, parts.consumer_offsets, parts.pull_waiters, role,
        stopping=parts.stopping, clock=parts.clock, max_pull_msg_nums=cfg.max_pull_msg_nums,
        long_polling_enable=cfg.long_polling_enable, short_polling_time_ms=cfg.short_polling_time_ms,
        subscription_groups=parts.subscription_groups,
        slave_read_enable=cfg.ha.slave_read_enable, max_in_memory_gap=cfg.ha.max_in_memory_gap(),
        # The store keeps no confirm offset yet: a fenced broker serves everything it holds.
        confirm_offset=lambda: store.max_physical_offset))
    offsets = OffsetProcessor(OffsetContext(store, topics, parts.consumer_offsets, parts.delay_offsets,
                                            broker_name=cfg.broker_name))
    admin = AdminProcessor(AdminContext(topics, parts.consumer_offsets, parts.subscription_groups,
                                        cluster_name=cfg.cluster_name, broker_name=cfg.broker_name,
                                        auto_create_topic_enable=cfg.auto_create_topic_enable,
                                        ha_status=parts.ha_status))
    clients = ClientProcessor(ClientContext(parts.clients, topics, role))
    acl = AclAdminProcessor(parts.acl_admin)
    table: dict[int, Processor] = {
        RequestCode.SEND_MESSAGE: send.send_message,
        RequestCode.SEND_MESSAGE_V2: send.send_message,
        RequestCode.SEND_BATCH_MESSAGE: send.send_batch_message,
        RequestCode.CONSUMER_SEND_MSG_BACK: send.consumer_send_msg_back,
        RequestCode.PULL_MESSAGE: pull.pull_message,
        RequestCode.QUERY_CONSUMER_OFFSET: offsets.query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: offsets.update_consumer_offset,
        RequestCode.GET_MAX_OFFSET: offsets.get_max_offset,
        RequestCode.GET_MIN_OFFSET: offsets.get_min_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offsets.search_offset_by_timestamp,
        RequestCode.GET_ALL_CONSUMER_OFFSET: offsets.get_all_consumer_offset,
        RequestCode.GET_ALL_DELAY_OFFSET: offsets.get_all_delay_offset,
        RequestCode.GET_TOPIC_STATS_INFO: offsets.get_topic_stats_info,
        RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
        RequestCode.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
        RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic_in_broker,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_and_create_subscription_group,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group_config,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
        RequestCode.GET_BROKER_HA_STATUS: admin.get_broker_ha_status,
        RequestCode.HEART_BEAT: clients.heart_beat,
        RequestCode.UNREGISTER_CLIENT: clients.unregister_client,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: clients.get_consumer_list_by_group,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: acl.update_and_create_acl_config,
        RequestCode.DELETE_ACL_CONFIG: acl.delete_acl_config,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO: acl.get_broker_cluster_acl_info,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: acl.update_global_white_addrs_config,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: acl.get_broker_cluster_acl_config,
    }
    if cfg.enable_controller_mode:
        agent = parts.controller_agent
        table[RequestCode.NOTIFY_BROKER_ROLE_CHANGED] = lambda cmd, _conn: role_changed(agent(), cmd)
        epochs = parts.epoch_cache
        table[RequestCode.GET_BROKER_EPOCH_CACHE] = lambda cmd, _conn: epoch_cache(epochs(), cmd)
    return table


def epoch_cache(body: bytes | None, cmd: RemotingCommand) -> RemotingCommand:
    """GET_BROKER_EPOCH_CACHE (1007): the broker's epoch entries and max offset (RocketMQ's EpochEntryCache)."""
    if body is None:
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "the epoch file is not open yet")
    return cmd.response(ResponseCode.SUCCESS, body=body)


def role_changed(agent: ControllerAgent | None, cmd: RemotingCommand) -> RemotingCommand:
    """NOTIFY_BROKER_ROLE_CHANGED (1008) from the controller: answered at once, acted on in the background."""
    if agent is None:
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "the controller agent is not running")
    try:
        info = decode_role_notification(cmd)
    except ProtocolError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER, str(exc))
    agent.on_notification(info)
    return cmd.response(ResponseCode.SUCCESS)


def unrouted(cmd: RemotingCommand, *, broker_name: str, started: bool, stopping: bool) -> RemotingCommand:
    """The answer to a code without a processor: SERVICE_NOT_AVAILABLE while the broker starts or stops (its
    table is empty then), REQUEST_CODE_NOT_SUPPORTED otherwise."""
    if not started or stopping:
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"broker {broker_name} is {'stopping' if stopping else 'starting'}")
    return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
