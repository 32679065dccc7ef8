"""Python client for RocketMQ-compatible clusters (ours and Apache RocketMQ 4.x/5.x).

``Producer``, ``PullConsumer`` and ``Admin`` are synchronous and thread-safe: they run on a
shared background event loop (see ``runtime``) and are what Spark connectors use on executors.
``AsyncProducer``, ``AsyncPullConsumer`` and ``AsyncAdmin`` are the same clients for asyncio code.
Errors are the classes of ``broker_store.protocol.errors``.

Time: every client that keeps a deadline or a TTL (route cache, fault isolation, send and admin deadlines) takes
``clock: Callable[[], float]``, a monotonic reading in seconds, default ``time.monotonic``, not a
``broker_store.clock.Clock``. A reading is all the client uses of a clock, and it keeps the client below the
clock module (client imports only net, protocol and acl: tests/unit/test_broker_store_layout.py). Callers holding
the one clock pass its reading, ``clock.monotonic`` (a ``ManualClock``'s in tests, which then drives the TTLs and
isolation with no sleep). The client's waits (a send's back-off while its topic's route lists no primary,
``wait_for_route``'s polls) go through ``sleep: Callable[[float], Awaitable[None]]`` of ``AsyncProducer`` /
``AsyncAdmin`` (and their synchronous fronts), default ``asyncio.sleep``: callers holding the one clock pass
``clock.sleep``, and tests a sleep that advances their ``ManualClock``. The wire's own request timeouts stay real
time (``net.client``: a server's answer takes real time).
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
