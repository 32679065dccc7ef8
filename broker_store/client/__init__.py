"""Python client for RocketMQ-compatible clusters (ours and Apache RocketMQ 4.x/5.x).

``Producer``, ``PullConsumer`` and ``Admin`` are synchronous and thread-safe: they run on a
shared background event loop (see ``runtime``) and are what Spark connectors use on executors.
``AsyncProducer``, ``AsyncPullConsumer`` and ``AsyncAdmin`` are the same clients for asyncio code.
Errors are the classes of ``broker_store.protocol.errors``.

Time: every client takes ``clock: broker_store.clock.Clock`` (default ``SYSTEM_CLOCK``) and every timer it runs
reads it: the route cache's TTLs, fault isolation, send and admin deadlines, a send's back-off while its topic's
route lists no primary, ``wait_for_route``'s polls, the consumer's heartbeat rounds, the wire's request timeouts and
connect wait (the ``net.client.RemotingClient`` a client makes, or the synchronous runtime's one per clock), born
timestamps and subscription versions (UNIQ_KEYs carry their generator's: ``UniqueIdGenerator(clock=...)``). A test
passes a ``ManualClock`` and moves time instead of sleeping. A ``RemotingClient`` passed in carries its own clock.
"""

from broker_store.client.admin import Admin, AsyncAdmin
from broker_store.client.consumer import AsyncPullConsumer, PullConsumer, Subscription
from broker_store.client.producer import AsyncProducer, Producer, QueueSelector, new_message
from broker_store.client.records import MessageQueue, PullResult, PullStatus, SendResult, SendStatus
from broker_store.client.route_cache import DEFAULT_TOPIC, RouteCache
from broker_store.client.unique_id import UniqueIdGenerator, create_unique_id
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.message import Message, StoredMessage
from broker_store.protocol.topic import TopicConfig

__all__ = [
    "DEFAULT_TOPIC",
    "Admin",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "Message",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "QueueSelector",
    "RouteCache",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "StoredMessage",
    "Subscription",
    "TlsClientSettings",
    "TopicConfig",
    "UniqueIdGenerator",
    "create_unique_id",
    "new_message",
]
