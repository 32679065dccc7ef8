"""PULL_MESSAGE with long polling, tag filtering and offset commit (RocketMQ's PullMessageProcessor).

Called by ``BrokerServer``, with a ``PullContext``. A pull that finds nothing new and carries
FLAG_SUSPEND is held (up to ``suspendTimeoutMillis`` with long polling, ``short_polling_time_ms``
without) and re-run when the store reports an arrival on its queue; the held request answers
PULL_NOT_FOUND at the deadline.

Checks before the store is read, in RocketMQ's order: the consumer group (``SubscriptionGroupManager.find_or_create``:
an unknown group is created when ``auto_create_subscription_group`` is on or it is a CID_RMQ_SYS_ group, else
SUBSCRIPTION_GROUP_NOT_EXIST; a group with consumeEnable false: NO_PERMISSION), then the topic (TOPIC_NOT_EXIST,
NO_PERMISSION when not readable, SYSTEM_ERROR for a queue id out of range), then the subscription. A replica
applies the same group checks to its copy of the primary's table (``metadata_sync``); a group it would create is
used with the defaults but not stored there (the next copy would replace it).

Store status -> response code (as RocketMQ)::

    FOUND                                     SUCCESS (body = the stored records, byte for byte)
    NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING  PULL_RETRY_IMMEDIATELY
    OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY   PULL_OFFSET_MOVED (replica: PULL_RETRY_IMMEDIATELY, suggest 0)
    OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL    PULL_NOT_FOUND
    NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE  PULL_OFFSET_MOVED if offset != 0 else PULL_NOT_FOUND

Reads from replicas (``ha.replica_read``): a replica without ``ha.slave_read_enable`` answers every pull that
passes those checks PULL_RETRY_IMMEDIATELY with suggestWhichBrokerId 0 (nothing held). Otherwise, with
slave_read_enable, each response's suggestWhichBrokerId is the consumer group's whichBrokerWhenConsumeSlowly
when the pulled data lies more than ``HASettings.max_in_memory_gap()`` behind the max physical offset, else the
group's brokerId (a group created on first use has RocketMQ's defaults, 1 and 0); without slave_read_enable it
is 0.

A fenced broker (``role.RoleStage`` PROMOTING / DEMOTING: changing role) serves pulls whatever
slave_read_enable says, but only records that end at or below its confirm offset (``cut_at_offset``): what
lies past it may still be truncated. It neither commits offsets nor answers PULL_OFFSET_MOVED (as a
replica), and a pull it holds re-reads when the broker is unfenced. The store keeps no confirm offset yet,
so the broker passes its max physical offset: today the bound cuts nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_store.broker.role import RoleStage
from broker_store.broker.subscription import EXPRESSION_TYPE_TAG, SubscriptionParseError, build_subscription
from broker_store.ha.replica_read import consuming_slowly, route_pull
from broker_store.protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    ResponseCode,
)
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import PullMessageRequestHeader
from broker_store.protocol.message import stored_header_view
from broker_store.protocol.route import MASTER_ID
from broker_store.protocol.topic import is_readable
from broker_store.store import GetResult, GetStatus

if TYPE_CHECKING:
    from broker_store.broker.client_registry import ClientRegistry
    from broker_store.broker.consumer_offset import ConsumerOffsetManager
    from broker_store.broker.long_polling import PullWaiters
    from broker_store.broker.role import RoleState
    from broker_store.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
    from broker_store.broker.topic_config import TopicConfigManager
    from broker_store.clock import Clock
    from broker_store.net.server import Connection
    from broker_store.store import MessageStore

_RECORD_PLACE = stored_header_view("TOTALSIZE", "QUEUEOFFSET", "PHYSICALOFFSET")
_STATUS_CODE = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.MESSAGE_DAMAGED: ResponseCode.SYSTEM_ERROR,
}


def cut_at_offset(result: GetResult, limit: int) -> GetResult:
    """``result`` without its records that end past CommitLog offset ``limit`` (a fenced broker's confirm
    offset). The records are the stored ones, in CommitLog order, so the first that ends past the limit cuts
    the rest; the next pull starts at its queue offset. Nothing left: OFFSET_OVERFLOW_ONE at the pulled
    offset (PULL_NOT_FOUND), as if the queue ended there."""
    if result.status is not GetStatus.FOUND:
        return result
    body, pos, kept = result.body, 0, 0
    while pos < len(body):
        size, queue_offset, physical_offset = _RECORD_PLACE.unpack_from(body, pos)
        if physical_offset + size > limit:
            if kept == 0:
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, result.min_offset, result.max_offset)
            return dataclasses.replace(result, body=body[:pos], count=kept, next_begin_offset=queue_offset)
        pos += size
        kept += 1
    return result


def pull_response_code(status: GetStatus, requested_offset: int) -> ResponseCode:
    """RocketMQ's mapping of a GetMessageStatus to the pull response code."""
    if status is GetStatus.NO_MATCHED_LOGIC_QUEUE or status is GetStatus.NO_MESSAGE_IN_QUEUE:
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS_CODE[status]


@dataclass(frozen=True)
class PullContext:
    """What the pull path needs of its ctx."""

    store: MessageStore
    topic_configs: TopicConfigManager
    clients: ClientRegistry
    consumer_offsets: ConsumerOffsetManager
    pull_waiters: PullWaiters
    role: RoleState
    """A replica neither commits offsets carried by pulls nor answers PULL_OFFSET_MOVED."""
    stopping: Callable[[], bool]
    """True once the broker is stopping: held pulls stop waiting."""
    clock: Clock
    """Times held pulls (long and short polling)."""
    max_pull_msg_nums: int
    long_polling_enable: bool
    short_polling_time_ms: int
    subscription_groups: SubscriptionGroupManager
    """The consumer groups' settings (on a replica, the metadata sync's copy): the group checks, and
    whichBrokerWhenConsumeSlowly and brokerId steer the suggestions."""
    slave_read_enable: bool = False
    """``ha.slave_read_enable``: replicas serve pulls, and slow consumers are pointed at one."""
    max_in_memory_gap: int = 2**62
    """``HASettings.max_in_memory_gap()``: a pull further behind the max physical offset is consuming slowly."""
    confirm_offset: Callable[[], int] = lambda: 2**62
    """The CommitLog offset a fenced broker serves pulls up to (the broker passes its max physical offset
    until the store keeps a confirm offset); unbounded by default."""


class PullProcessor:
    """Serves PULL_MESSAGE. One instance per ctx."""

    def __init__(self, ctx: PullContext) -> None:
        self.ctx = ctx

    def pull_message(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """The response, or an awaitable of it when the pull is held (long polling)."""
        h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        ctx = self.ctx
        try:
            group_config = ctx.subscription_groups.find_or_create(h.consumer_group, store=ctx.role.is_primary)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{h.consumer_group}] does not exist and cannot be created: {exc}")
        if group_config is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist; create it first "
                "(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) or turn auto_create_subscription_group on",
            )
        if not group_config.consume_enable:
            return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
        tc = ctx.topic_configs.select(h.topic)
        if tc is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not is_readable(tc.perm):
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                f"[{tc.read_queue_nums}] consumer:[{conn.remote_addr}]",
            )
        if h.sys_flag & PULL_FLAG_SUBSCRIPTION:
            try:
                sub = build_subscription(h.topic, h.subscription, h.expression_type, h.sub_version)
            except SubscriptionParseError as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        else:
            group = ctx.clients.consumer_group(h.consumer_group)
            if group is None:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {h.consumer_group}",
                )
            registered = group.subscriptions.get(h.topic)
            if registered is None:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {h.consumer_group} topic: {h.topic}",
                )
            if registered.sub_version < h.sub_version:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            if registered.expression_type != EXPRESSION_TYPE_TAG:
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {registered.expression_type}",
                )
            sub = registered
        tags_codes = sub.tags_codes
        max_nums = min(h.max_msg_nums, ctx.max_pull_msg_nums)
        max_bytes = h.max_msg_bytes if h.max_msg_bytes and h.max_msg_bytes > 0 else None

        result = self._get(h, max_nums, tags_codes, max_bytes)
        code = pull_response_code(result.status, h.queue_offset)
        if not ctx.slave_read_enable and ctx.role.stage is RoleStage.REPLICA:
            # A replica that may not serve reads: back to the primary at once, nothing held.
            return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY, "slave read is disabled on this broker", {
                "suggestWhichBrokerId": str(MASTER_ID), "nextBeginOffset": str(h.queue_offset),
                "minOffset": str(result.min_offset), "maxOffset": str(result.max_offset)})

        if h.sys_flag & PULL_FLAG_COMMIT_OFFSET and ctx.role.is_primary:
            ctx.consumer_offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

        if code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & PULL_FLAG_SUSPEND:
            return self._hold_and_respond(cmd, h, group_config, max_nums, tags_codes, max_bytes, result, code)
        return self._respond(cmd, h, group_config, result, code)

    async def _hold_and_respond(
        self,
        cmd: RemotingCommand,
        h: PullMessageRequestHeader,
        group_config: SubscriptionGroupConfig,
        max_nums: int,
        tags_codes: frozenset[int] | None,
        max_bytes: int | None,
        result: GetResult,
        code: ResponseCode,
    ) -> RemotingCommand:
        result, code = await self._hold(h, max_nums, tags_codes, max_bytes, result, code)
        return self._respond(cmd, h, group_config, result, code)

    def _get(
        self,
        h: PullMessageRequestHeader,
        max_nums: int,
        tags_codes: frozenset[int] | None,
        max_bytes: int | None,
    ) -> GetResult:
        ctx = self.ctx
        store = ctx.store
        if max_bytes is None:
            result = store.get_messages(h.topic, h.queue_id, h.queue_offset, max_nums, tags_codes=tags_codes)
        else:
            result = store.get_messages(
                h.topic, h.queue_id, h.queue_offset, max_nums, tags_codes=tags_codes, max_bytes=max_bytes
            )
        if ctx.role.fenced:
            return cut_at_offset(result, ctx.confirm_offset())
        return result

    async def _hold(
        self,
        h: PullMessageRequestHeader,
        max_nums: int,
        tags_codes: frozenset[int] | None,
        max_bytes: int | None,
        result: GetResult,
        code: ResponseCode,
    ) -> tuple[GetResult, ResponseCode]:
        ctx = self.ctx
        if not ctx.long_polling_enable:
            await ctx.clock.sleep(ctx.short_polling_time_ms / 1000)
            result = self._get(h, max_nums, tags_codes, max_bytes)
            return result, pull_response_code(result.status, h.queue_offset)
        clock = ctx.clock
        deadline = clock.monotonic() + max(h.suspend_timeout_millis, 0) / 1000
        waiters = self.ctx.pull_waiters
        store = self.ctx.store
        while code == ResponseCode.PULL_NOT_FOUND and not ctx.stopping():
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                break
            fut = waiters.add(h.topic, h.queue_id, h.queue_offset)
            try:
                # Re-read after registering: an arrival between the first read and now is not lost. While
                # fenced the queue may hold more than a pull may see: wait (unfencing wakes every waiter).
                if store.get_max_offset(h.topic, h.queue_id) <= h.queue_offset or ctx.role.fenced:
                    await clock.wait_for(fut, remaining)
            finally:
                waiters.discard(h.topic, h.queue_id, fut)
            result = self._get(h, max_nums, tags_codes, max_bytes)
            code = pull_response_code(result.status, h.queue_offset)
        return result, code

    def _respond(
        self, cmd: RemotingCommand, h: PullMessageRequestHeader, group: SubscriptionGroupConfig,
        result: GetResult, code: ResponseCode
    ) -> RemotingCommand:
        ctx = self.ctx
        routing = route_pull(
            is_replica=not ctx.role.is_primary, slave_read_enable=ctx.slave_read_enable,
            slow=result.count > 0 and consuming_slowly(result.max_physical_offset_lag, ctx.max_in_memory_gap),
            which_broker_when_consume_slowly=group.which_broker_when_consume_slowly,
            group_broker_id=group.broker_id)
        suggest = routing.suggest_which_broker_id
        if code == ResponseCode.PULL_OFFSET_MOVED and not ctx.role.is_primary:
            # A replica does not judge offsets (offsetCheckInSlave=false): retry against the primary.
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        ext = {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        if code == ResponseCode.SUCCESS:
            return cmd.response(code, None, ext, result.body)
        return cmd.response(code, result.remark or result.status.name, ext)
