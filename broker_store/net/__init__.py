"""asyncio transport for remoting frames: length-prefixed framing and opaque correlation, nothing else.

``RemotingServer`` hands each decoded request to an async handler and writes back what it returns;
``RemotingClient`` keeps one multiplexed connection per address and matches responses by opaque.
``tls`` / ``tls_settings``: RocketMQ's TLS modes on both sides (stdlib ``ssl``).
"""

from broker_store.net.client import RemotingClient
from broker_store.net.server import Connection, RemotingServer

__all__ = ["Connection", "RemotingClient", "RemotingServer"]
