"""Metadata sync on a replica: topics, consumer offsets, subscription groups and delay offsets copied from the
group's primary on a period.

Run by ``BrokerServer`` while the broker is a REPLICA (RocketMQ's SlaveSynchronize, every 10 s by
default: ``ha.metadata_sync_interval_ms``, timed by the broker's clock). Each round asks the primary's
remoting address (learnt from the name server's registration answer, ``NamesrvRegistration.master_addr``)
with RocketMQ's own codes, replaces the local copy when it differs from the primary's (topics and
subscription groups: table or data version; consumer and delay offsets: the table), and persists it so a
restarted replica (or one that becomes primary) starts from the last copy:

    GET_ALL_TOPIC_CONFIG (21)               -> topics.json               (TopicConfigSerializeWrapper JSON)
    GET_ALL_CONSUMER_OFFSET (43)            -> consumer_offsets.json     (ConsumerOffsetSerializeWrapper JSON)
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)  -> subscription_groups.json  (SubscriptionGroupWrapper JSON)
    GET_ALL_DELAY_OFFSET (45)               -> delayOffset.json          (DelayOffsetSerializeWrapper JSON)

With ACL on (``acl_enable``: the broker has an ``AclGuard``) the round also copies the primary's plain_acl.yml, so
a replica enforces the same accounts now and after a promotion (RocketMQ leaves each broker's file to the operator):

    GET_BROKER_CLUSTER_ACL_INFO (52)       -> the file's dataVersion         together: plain_acl.yml (``acl_file``),
    GET_BROKER_CLUSTER_ACL_CONFIG (54)     -> accounts and global whitelist  written only when it differs

The copy is validated as a whole file (a bad one fails the round, the accounts in force stay), written through
``AclGuard.store`` (temp file, fsync, rename, fsync of the directory) and in force at once. Both are admin
requests. Asked last, after the delay offsets.

A primary with ACL checks every metadata-sync request like any other: a replica with ``acl_credentials_file``
signs them with its account (an admin one, for the ACL copy); one without sends them unsigned, as RocketMQ's
slave sync does, and the primary refuses them ("No accessKey is configured") unless its
``globalWhiteRemoteAddresses`` names the replica's address.

Early rounds: a replica that dispatches a message of a topic its table does not list (created on the primary after
the last round) asks for a round at once instead of at the next period (``arrival_listener``, a store arrival
listener, any thread; ``broker.unknown_topics`` decides and rate-limits: one request per unknown topic until the
table changes). Early rounds are at least ``EARLY_ROUND_GAP`` apart, counted from the start of the round before;
one skipped for want of the primary's address is tried again (``EARLY_RETRIES_WITHOUT_PRIMARY``).
``request_round`` asks for one from any thread. So a topic created just before its primary fails is known here in
about a round trip, not up to ``metadata_sync_interval_ms`` later; what a promotion does with a topic that still
did not arrive is ``broker.orphan_topics``' business, which reads ``table_log_offset``.

Delay offsets are the progress of the primary's schedule service over SCHEDULE_TOPIC_XXXX
(``broker.schedule``, which never runs on a replica): a replica that becomes primary delivers from its copy,
so messages due since the last round are delivered again, none is skipped. They are asked after the tables, so
a primary that does not answer code 45 still gets the other tables copied (the round then fails, logged).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from broker_store.acl.plain_file import plain_acl_from_broker
from broker_store.broker.acl_guard import AclGuard
from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.broker.unknown_topics import UnknownTopicTrigger
from broker_store.clock import Clock
from broker_store.net.client import RemotingClient
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.delay_offset import decode_delay_offsets
from broker_store.protocol.errors import ConfigError, ProtocolError, RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.route import loads_rocketmq
from broker_store.protocol.topic import DataVersion, TopicConfigTable

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 3.0
EARLY_ROUND_GAP = 1.0
"""Seconds at least between the start of a round and an early round after it (capped by the interval)."""
EARLY_RETRIES_WITHOUT_PRIMARY = 3
"""Early rounds tried again (one gap apart) when the primary's address was not known yet: learning it takes one
registration with the name servers, which the skipped round asked for."""


class MetadataSync:
    """One replica's periodic copy of its primary's metadata (see the module docstring).

    ``primary_addr`` is read each round (None: not known yet, the round is skipped); ``on_topics_changed``
    runs after the topic table was replaced (the server re-registers, so routes list the replica's queues).
    Without ``delay_offsets`` the round does not ask for them; without ``acl`` it does not copy the ACL file.
    With ``credentials`` (the broker's ``acl_credentials_file``) every request is signed (ACL 1.0). ``log_end``
    (the store's max physical offset) is read before each round asks for the topic table (``table_log_offset``).
    """

    def __init__(self, client: RemotingClient, primary_addr: Callable[[], str | None], topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, groups: SubscriptionGroupManager, *, interval: float, clock: Clock,
                 on_topics_changed: Callable[[], None] = lambda: None,
                 delay_offsets: DelayOffsetTable | None = None, acl: AclGuard | None = None,
                 credentials: SessionCredentials | None = None, log_end: Callable[[], int] | None = None,
                 early_round_gap: float = EARLY_ROUND_GAP) -> None:
        self._client = client
        self._primary_addr = primary_addr
        self._topics = topics
        self._offsets = offsets
        self._groups = groups
        self.interval = interval
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._delay_offsets = delay_offsets
        self._acl = acl
        self._credentials = credentials
        self._log_end = log_end
        self.early_round_gap = min(early_round_gap, interval)
        self.rounds = 0
        """Rounds completed against a primary (tests, admin)."""
        self.table_log_offset: int | None = None
        """This broker's log end (``log_end``) when the round whose topic table is in force asked for it: every
        message of a topic created on the primary after that answer lies at or past it. None before the first
        such round since start, after ``forget_table_log_offset`` and without ``log_end``."""
        self._log_cuts = 0
        self._trigger = UnknownTopicTrigger(topics)
        self._early = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    async def run(self) -> None:
        """Sync now, then every ``interval`` seconds or sooner when an early round is asked for, until cancelled;
        failures wait for the next round."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        try:
            retries = 0
            while True:
                started = self._clock.monotonic()
                early = self._early.is_set()
                self._early.clear()  # what was asked before this round is answered by it
                asked = True
                try:
                    asked = await self.sync_once()
                except RocketMQError as exc:
                    log.warning("metadata sync from the primary failed (next try in %.1f s): %s", self.interval, exc)
                if early and not asked and retries < EARLY_RETRIES_WITHOUT_PRIMARY:
                    retries += 1  # the primary's address is being asked for (a registration): try again soon
                    self._early.set()
                elif asked:
                    retries = 0
                self._trigger.refresh()
                await self._next_round(started)
        finally:
            self._loop = None

    async def _next_round(self, started: float) -> None:
        """Return when the next round is due: ``interval`` after ``started``, or ``early_round_gap`` after it once
        an early round is asked for."""
        clock = self._clock
        while True:
            now = clock.monotonic()
            if self._early.is_set():
                if started + self.early_round_gap > now:
                    await clock.sleep(started + self.early_round_gap - now)
                return
            if now >= started + self.interval:
                return
            await clock.wait_for(self._early.wait(), started + self.interval - now)

    def request_round(self) -> None:
        """Ask for a round soon (at most ``early_round_gap`` after the last one started). Any thread; no effect
        while the sync does not run."""
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._early.set()
        else:
            loop.call_soon_threadsafe(self._early.set)

    def arrival_listener(self, topic: str, _queue_id: int, _max_offset: int) -> None:
        """Store arrival listener (any thread, cheap for a listed topic): a message of a topic the table does not
        list asks for an early round while the sync runs."""
        loop = self._loop
        if loop is None or topic in self._trigger.quiet:
            return
        if threading.get_ident() == self._loop_thread:
            self._unknown_topic(topic)
        else:
            loop.call_soon_threadsafe(self._unknown_topic, topic)

    def _unknown_topic(self, topic: str) -> None:
        if self._loop is not None and self._trigger.dispatched(topic):
            log.info("metadata sync: messages of topic %s arrived but its config did not: asking the primary now",
                     topic)
            self._early.set()

    def forget_table_log_offset(self) -> None:
        """The log was cut: offsets past the cut may hold records the last table did not cover (on the loop)."""
        self.table_log_offset = None
        self._log_cuts += 1

    async def sync_once(self) -> bool:
        """One round; False when the primary's address is not known yet."""
        addr = self._primary_addr()
        if not addr:
            return False
        log_end, cuts = (self._log_end() if self._log_end is not None else None), self._log_cuts
        topics = TopicConfigTable.from_json(await self._get_json(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        if self._topics.replace_all(topics):
            self._on_topics_changed()
        if cuts == self._log_cuts:  # a cut during the request leaves the offset unknown
            self.table_log_offset = log_end
        offsets = await self._get_json(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        try:
            table = {str(key): {int(q): int(o) for q, o in queues.items()}
                     for key, queues in (offsets.get("offsetTable") or {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise ProtocolError(f"GET_ALL_CONSUMER_OFFSET from {addr}: malformed offset table: {exc}") from exc
        self._offsets.replace_all(table)
        self._offsets.persist()
        wrapper = await self._get_json(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        try:
            groups = {str(name): SubscriptionGroupConfig.from_json(cfg)
                      for name, cfg in (wrapper.get("subscriptionGroupTable") or {}).items()}
            groups_version = DataVersion.from_json(wrapper.get("dataVersion"))
        except (AttributeError, TypeError, ValueError, ProtocolError) as exc:
            raise ProtocolError(f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG from {addr}: malformed table: {exc}") from exc
        self._groups.replace_all(groups, groups_version)
        if self._delay_offsets is not None:
            delay = decode_delay_offsets(await self._get_json(addr, RequestCode.GET_ALL_DELAY_OFFSET), addr)
            self._delay_offsets.replace_all(delay)
            self._delay_offsets.persist()
        if self._acl is not None:
            await self._sync_acl(addr, self._acl)
        self.rounds += 1
        return True

    async def _sync_acl(self, addr: str, acl: AclGuard) -> None:
        """Copy the primary's ACL file when it differs from the one in force (see the module docstring)."""
        info = await self._invoke(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        version = loads_rocketmq(info.ext_fields["version"]) if info.ext_fields.get("version") else None
        config = await self._get_json(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        try:
            copy = plain_acl_from_broker(config, version if isinstance(version, dict) else None,
                                         f"the ACL file of the primary {addr}")
        except ConfigError as exc:
            raise ProtocolError(str(exc)) from exc
        if copy == acl.acl_file:
            return
        acl.store(copy)  # StoreError (a RocketMQError) fails the round; the accounts in force stay
        log.info("metadata sync: ACL file %s copied from the primary %s (%d accounts)", acl.path, addr,
                 len(copy.accounts))

    async def _invoke(self, addr: str, code: RequestCode) -> RemotingCommand:
        cmd = RemotingCommand(code=code)
        if self._credentials is not None:
            sign(cmd, self._credentials)
        resp = await self._client.invoke(addr, cmd, REQUEST_TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise ProtocolError(f"{code.name} to the primary {addr}: code {resp.code} {resp.remark or ''}")
        return resp

    async def _get_json(self, addr: str, code: RequestCode) -> dict[str, Any]:
        resp = await self._invoke(addr, code)
        body = loads_rocketmq(resp.body) if resp.body else {}
        if not isinstance(body, dict):
            raise ProtocolError(f"{code.name} from the primary {addr}: the body is not a JSON object")
        return body
