"""What every client holds: name server addresses, a route cache and a RemotingClient to talk
through, plus the request helper that turns non-success responses into ``protocol.errors``.

``AsyncProducer``, ``AsyncPullConsumer`` and ``AsyncAdmin`` each own one session. The remoting
client is either passed in (shared, e.g. the sync facade's runtime) or created and owned here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from broker_store.client.route_cache import (
    DEFAULT_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    RouteCache,
    parse_namesrv_addrs,
)
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.acl import sign as acl_sign
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ConfigError, error_for_response, is_acl_refusal
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import Header

_SUCCESS_ONLY = frozenset({int(ResponseCode.SUCCESS)})


def require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name}: must be > 0, got {value!r}")


class ClientSession:
    """One client's view of a cluster. Methods run on the client's event loop."""

    def __init__(self, namesrv_addr: str | Sequence[str], *, remoting: RemotingClient | None = None,
                 request_timeout: float = 3.0, route_ttl: float = 30.0,
                 clock: Clock = SYSTEM_CLOCK, default_topic: str = DEFAULT_TOPIC,
                 default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 credentials: SessionCredentials | None = None, tls: TlsClientSettings | None = None) -> None:
        require_positive("request_timeout", request_timeout)
        self.credentials = credentials
        """ACL identity every request of this client is signed with (``protocol.acl``); None = no ACL."""
        require_positive("route_ttl", route_ttl)
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addr)
        self.request_timeout = request_timeout
        self.clock = clock
        self._owns_remoting = remoting is None
        # ``tls`` applies to a remoting client made here; a passed one carries its own (``runtime.remoting_for``).
        self.remoting = remoting if remoting is not None else RemotingClient(tls=tls, clock=clock)
        self.routes = RouteCache(self.namesrv_addrs, remoting=self.remoting, ttl=route_ttl,
                                 request_timeout=request_timeout, clock=clock, default_topic=default_topic,
                                 default_topic_queue_nums=default_topic_queue_nums,
                                 sign=self.sign if credentials is not None else None)

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """``cmd`` with this client's ACL fields (unchanged without credentials). Every request a client
        sends goes through here, the name server's included, as Java's RPCHook sees them all: brokers
        through ``send`` / ``send_oneway``, name servers through the route cache."""
        if self.credentials is not None:
            acl_sign(cmd, self.credentials)
        return cmd

    async def send(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """A prepared request, signed, and its response whatever its code (the caller interprets it), except
        an ACL refusal: ``AclPermissionError`` naming this client's access key, raised at once (it is not
        retriable and says nothing about routes, so no caller may retry it elsewhere)."""
        resp = await self.remoting.invoke(addr, self.sign(cmd), timeout)
        if is_acl_refusal(resp.code, resp.remark):
            raise error_for_response(resp.code, resp.remark, addr=addr, access_key=self.access_key)
        return resp

    @property
    def access_key(self) -> str | None:
        return None if self.credentials is None else self.credentials.access_key

    async def send_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """A prepared request, signed, without waiting for (or getting) a response."""
        await self.remoting.invoke_oneway(addr, self.sign(cmd))

    async def invoke(self, addr: str, code: int, header: Header | None = None, body: bytes = b"", *,
                     timeout: float | None = None, names: dict[str, str] | None = None,
                     accept: Collection[int] = _SUCCESS_ONLY) -> RemotingCommand:
        """Request/response to a broker; codes outside ``accept`` raise ``error_for_response``."""
        cmd = RemotingCommand(code=code, ext_fields=header.to_ext(names) if header else {}, body=body)
        resp = await self.send(addr, cmd, self.request_timeout if timeout is None else timeout)
        if resp.code not in accept:
            raise error_for_response(resp.code, resp.remark, addr=addr)
        return resp

    async def invoke_oneway(self, addr: str, code: int, header: Header | None = None, body: bytes = b"", *,
                            names: dict[str, str] | None = None) -> None:
        cmd = RemotingCommand(code=code, ext_fields=header.to_ext(names) if header else {}, body=body)
        await self.send_oneway(addr, cmd)

    async def close(self) -> None:
        if self._owns_remoting:
            await self.remoting.close()
