"""Topic routes from the name servers, cached with a TTL, plus the queue lists derived from them.

Used by every client on the driver and on executors alike. There is no refresh timer: a route is
fetched on first use, again once it is older than ``ttl``, and at once after a caller reports an
error flagged ``invalid_route``. When a name server cannot be reached, a stale route is served
rather than failing (as Java clients keep their last route). Producers that may auto-create topics
fall back to the default topic's (TBW102) route, cut to ``default_topic_queue_nums`` queues per
broker, exactly like the Java client; the broker then creates the topic on the first send.

All methods run on the client's event loop; nothing here is thread-safe on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from broker_store.client.records import MessageQueue
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.call_order import CallOrder
from broker_store.net.client import RemotingClient
from broker_store.protocol.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from broker_store.protocol.errors import (
    ConfigError,
    ServiceNotAvailableError,
    TopicNotExistError,
    TransportError,
    error_for_response,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import Header, TopicRequestHeader
from broker_store.protocol.route import MASTER_ID, BrokerData, TopicRouteData

DEFAULT_TOPIC = "TBW102"
"""AUTO_CREATE_TOPIC_KEY_TOPIC: the template topic brokers with autoCreateTopicEnable advertise."""
DEFAULT_TOPIC_QUEUE_NUMS = 4


def parse_namesrv_addrs(namesrv_addr: str | Sequence[str]) -> tuple[str, ...]:
    """'a:9876;b:9876' (RocketMQ's syntax), 'a:9876,b:9876' or a list -> tuple of host:port."""
    items = [namesrv_addr] if isinstance(namesrv_addr, str) else list(namesrv_addr)
    addrs: list[str] = []
    for item in items:
        for part in item.replace(",", ";").split(";"):
            part = part.strip()
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"namesrv_addr: {part!r} is not host:port")
            addrs.append(part)
    if not addrs:
        raise ConfigError("namesrv_addr: no name server address given")
    return tuple(addrs)


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues, in Java's order: broker groups by name, then queue id. Only broker groups
    with a primary are writable. An ``orderTopicConf`` ('broker-a:4;broker-b:4') takes precedence."""
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            if name and nums.isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return queues
    masters = {b.broker_name for b in route.broker_datas if b.master_addr}
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in masters:
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return queues


def awaiting_primary(route: TopicRouteData) -> bool:
    """A writable queue of the route belongs to a broker group that has no primary registered (a failover in
    progress), as opposed to a topic that is not writable at all."""
    masters = {b.broker_name for b in route.broker_datas if b.master_addr}
    return any(qd.perm & PERM_WRITE and qd.broker_name not in masters for qd in route.queue_datas)


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues, sorted (any broker of the group may serve reads)."""
    present = {b.broker_name for b in route.broker_datas if b.broker_addrs}
    queues = {MessageQueue(topic, qd.broker_name, i)
              for qd in route.queue_datas if qd.perm & PERM_READ and qd.broker_name in present
              for i in range(qd.read_queue_nums)}
    return sorted(queues)


def route_from_default(default_route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """The route a Java producer assumes for a new topic: TBW102's, at most ``queue_nums`` queues each."""
    queue_datas = []
    for qd in default_route.queue_datas:
        nums = min(queue_nums, qd.read_queue_nums)
        queue_datas.append(replace(qd, read_queue_nums=nums, write_queue_nums=nums))
    return replace(default_route, queue_datas=tuple(queue_datas))


@dataclass(slots=True)
class _Entry:
    route: TopicRouteData
    fetched_at: float
    from_default: bool
    stale: bool = False


class RouteCache:
    """topic -> TopicRouteData, fetched from the first name server that answers."""

    def __init__(self, namesrv_addrs: Sequence[str], *, remoting: RemotingClient | None = None,
                 ttl: float = 30.0, default_route_ttl: float = 5.0, request_timeout: float = 3.0,
                 default_topic: str = DEFAULT_TOPIC, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 clock: Clock = SYSTEM_CLOCK,
                 sign: Callable[[RemotingCommand], RemotingCommand] | None = None) -> None:
        self.namesrv_addrs = tuple(namesrv_addrs)
        self.remoting = remoting
        self._sign = sign
        """Adds ACL fields to each name-server request (the session's credentials), or None."""
        self.ttl = ttl
        self.default_route_ttl = default_route_ttl
        """A route borrowed from TBW102 is re-asked sooner: the broker registers the real one."""
        self.request_timeout = request_timeout
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[tuple[str, bool], asyncio.Task[_Entry]] = {}
        self._call_order: CallOrder[str] = CallOrder()
        """Per topic: ``get`` calls return in call order (see ``get``)."""
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._preferred_namesrv = 0

    # -- name server requests -------------------------------------------------------------------

    async def invoke_namesrv(self, code: int, header: Header | None = None, body: bytes = b"",
                             timeout: float | None = None) -> RemotingCommand:
        """Send one request to the name servers, trying each until one answers; raises the broker
        error of a non-SUCCESS answer, or the last TransportError when none answers."""
        if self.remoting is None:
            raise RuntimeError("RouteCache used before its client was started")
        last: TransportError | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            idx = (self._preferred_namesrv + i) % n
            addr = self.namesrv_addrs[idx]
            cmd = RemotingCommand(code=code, ext_fields=header.to_ext() if header else {}, body=body)
            if self._sign is not None:
                cmd = self._sign(cmd)
            try:
                resp = await self.remoting.invoke(addr, cmd, timeout or self.request_timeout)
            except TransportError as exc:
                last = exc
                continue
            self._preferred_namesrv = idx
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_response(resp.code, resp.remark, addr=addr)
            return resp
        assert last is not None
        raise last

    async def fetch(self, topic: str) -> TopicRouteData:
        """The topic's route straight from a name server (no cache); TopicNotExistError if none."""
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, TopicRequestHeader(topic=topic))
        if not resp.body:
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"empty route body for topic {topic}")
        route = TopicRouteData.decode(resp.body)
        self._remember_brokers(route.broker_datas)
        return route

    # -- cache ----------------------------------------------------------------------------------

    async def get(self, topic: str, *, allow_default: bool = False) -> TopicRouteData:
        """The cached route, fetched when missing, expired or invalidated. With ``allow_default``,
        a topic the name servers do not know gets the default topic's route (producers only).

        Calls for one topic return in call order (a failed call raises as soon as it fails). Callers that
        miss the cache together share one fetch, and a call that finds the route cached while an earlier
        call still waits returns after it: the fetched route is cached a few loop turns before its waiters
        resume, and a send started in that gap would otherwise leave before the sends started ahead of it
        (a producer's sends to one queue would be stored out of call order)."""
        entry = self._entries.get(topic)
        cached = entry.route if entry is not None and self._fresh(entry, allow_default) else None
        if cached is not None and not self._call_order.waiting(topic):
            return cached
        turn = self._call_order.enter(topic)
        try:
            route = cached
            if route is None:
                route = (await asyncio.shield(self._fetch_task(topic, allow_default, entry))).route
            await turn.wait_ahead()
            return route
        finally:
            turn.end()

    def _fresh(self, entry: _Entry, allow_default: bool) -> bool:
        if entry.stale or (entry.from_default and not allow_default):
            return False
        return self._clock.monotonic() - entry.fetched_at < (self.default_route_ttl if entry.from_default else self.ttl)

    def _fetch_task(self, topic: str, allow_default: bool, entry: _Entry | None) -> asyncio.Task[_Entry]:
        """The fetch of ``topic`` in flight, started if none is. One fetch per topic at a time, in its own
        task: a caller that is cancelled (a sync caller's wait ran out) does not cancel the fetch other
        callers are waiting on."""
        key = (topic, allow_default)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._refresh(topic, allow_default, entry))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._fetch_done(key, t))
        return task

    def _fetch_done(self, key: tuple[str, bool], task: asyncio.Task[_Entry]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter re-raises it itself

    async def _refresh(self, topic: str, allow_default: bool, old: _Entry | None) -> _Entry:
        try:
            route = await self.fetch(topic)
            entry = _Entry(route, self._clock.monotonic(), from_default=False)
        except TopicNotExistError:
            if not allow_default or topic == self.default_topic:
                self._entries.pop(topic, None)
                raise
            default = await self.fetch(self.default_topic)
            entry = _Entry(route_from_default(default, self.default_topic_queue_nums), self._clock.monotonic(),
                           from_default=True)
        except TransportError:
            if old is not None and (allow_default or not old.from_default):
                return old  # name servers unreachable: keep serving the last route we had
            raise
        self._entries[topic] = entry
        return entry

    def invalidate(self, topic: str) -> None:
        """Force the next ``get`` to ask the name servers (after an ``invalid_route`` error)."""
        entry = self._entries.get(topic)
        if entry is not None:
            entry.stale = True

    def cached(self, topic: str) -> TopicRouteData | None:
        entry = self._entries.get(topic)
        return entry.route if entry else None

    # -- broker addresses -----------------------------------------------------------------------

    def _remember_brokers(self, broker_datas: Iterable[BrokerData]) -> None:
        for b in broker_datas:
            self._broker_addrs[b.broker_name] = dict(b.broker_addrs)

    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        """Addresses by broker id from the newest route that listed this broker group."""
        return dict(self._broker_addrs.get(broker_name, {}))

    def master_addr(self, broker_name: str) -> str | None:
        return self._broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def read_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, int] | None:
        """(address, broker id) for reads: the wanted id if listed, else the primary, else the
        lowest listed replica (Java's findBrokerAddressInSubscribe with onlyThisBroker=false)."""
        addrs = self._broker_addrs.get(broker_name) or {}
        for bid in (broker_id, MASTER_ID):
            if bid in addrs:
                return addrs[bid], bid
        if addrs:
            bid = min(addrs)
            return addrs[bid], bid
        return None

    async def require_master_addr(self, topic: str, broker_name: str, *, allow_default: bool = False) -> str:
        """Primary address of a broker group, refreshing the topic's route once if unknown."""
        addr = self.master_addr(broker_name)
        if addr is None:
            self.invalidate(topic)
            await self.get(topic, allow_default=allow_default)
            addr = self.master_addr(broker_name)
        if addr is None:
            raise ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE,
                                           f"no primary of broker {broker_name} in the route of {topic}")
        return addr

    async def require_read_addr(self, topic: str, broker_name: str,
                                broker_id: int = MASTER_ID) -> tuple[str, int]:
        found = self.read_addr(broker_name, broker_id)
        if found is None:
            self.invalidate(topic)
            await self.get(topic)
            found = self.read_addr(broker_name, broker_id)
        if found is None:
            raise ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE,
                                           f"no address of broker {broker_name} in the route of {topic}")
        return found
