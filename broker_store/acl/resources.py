"""Which resources a request touches and the permission it needs on each: the resource map of RocketMQ
5.x's ACL 1.0 (PlainAccessResource.parse). Pure; used by ``decision``.

Resources are keyed as RocketMQ keys them: a topic by its name, a consumer group by its retry topic
``%RETRY%<group>`` (so a send to a retry topic is a group's permission)::

    SEND_MESSAGE (topic), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (b)   PUB on the topic; SUB when the
                                                                     topic is a retry topic
    CONSUMER_SEND_MSG_BACK (group)                                   SUB on the group
    PULL_MESSAGE (topic, consumerGroup)                              SUB on the topic and on the group
    QUERY_MESSAGE (topic)                                            SUB on the topic
    HEART_BEAT (body: consumerDataSet)                               SUB on each consumer group and on
                                                                     each topic it subscribes
    UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP (consumerGroup)    SUB on the group
    UPDATE_CONSUMER_OFFSET (consumerGroup, topic)                    SUB on the group and the topic
    anything else (QUERY_CONSUMER_OFFSET included, as in RocketMQ)   no resource: the signature only

Admin requests (``ADMIN_CODES``) need an admin account whatever their resources. RocketMQ lists
topic and subscription-group creation/deletion, UPDATE_BROKER_CONFIG, static topics and ACL requests
50-52; here 53 (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG) and 54 (GET_BROKER_CLUSTER_ACL_CONFIG, which returns
every secret key) need admin too, where RocketMQ only checks the signature.
"""

from __future__ import annotations

from broker_store.acl.permission import Permission
from broker_store.protocol.codes import RequestCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.route import loads_rocketmq
from broker_store.protocol.topic import RETRY_GROUP_TOPIC_PREFIX, retry_topic

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
"""Message traces: sends to it pass without a permission check (RocketMQ's exception)."""

ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
    RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
})


class ResourceParseError(ValueError):
    """The request does not say which resources it touches (a HEART_BEAT body that does not decode)."""


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def describe_resource(resource: str) -> str:
    """``topic:<name>`` or ``group:<name>``, as RocketMQ's refusals name resources."""
    if is_group_resource(resource):
        return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}"
    return f"topic:{resource}"


def needed_resources(cmd: RemotingCommand) -> dict[str, Permission]:
    """The permission ``cmd`` needs on each resource, in the order the request names them (a resource
    named twice keeps the last permission, as RocketMQ's map does). Raises ResourceParseError."""
    ext = cmd.ext_fields
    need: dict[str, Permission] = {}

    def add(resource: str | None, perm: Permission) -> None:
        if resource is not None:
            need[resource] = perm

    def group(name: str | None) -> str | None:
        return None if name is None else retry_topic(name)

    def send(topic: str | None) -> None:
        add(topic, Permission.SUB if topic is not None and is_group_resource(topic) else Permission.PUB)

    code = cmd.code
    if code == RequestCode.SEND_MESSAGE:
        send(ext.get("topic"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        send(ext.get("b"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(group(ext.get("group")), Permission.SUB)
    elif code == RequestCode.PULL_MESSAGE:
        add(ext.get("topic"), Permission.SUB)
        add(group(ext.get("consumerGroup")), Permission.SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(ext.get("topic"), Permission.SUB)
    elif code == RequestCode.HEART_BEAT:
        for group_name, topics in _heartbeat_consumers(cmd.body):
            add(group(group_name), Permission.SUB)
            for topic in topics:
                add(topic, Permission.SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add(group(ext.get("consumerGroup")), Permission.SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        add(group(ext.get("consumerGroup")), Permission.SUB)
        add(ext.get("topic"), Permission.SUB)
    return need


def _heartbeat_consumers(body: bytes) -> list[tuple[str, list[str]]]:
    """(group, subscribed topics) of each consumerDataSet entry of a HeartbeatData body (the broker's
    client registry decodes the rest; only these names matter here)."""
    try:
        data = loads_rocketmq(body)
    except ProtocolError as exc:
        raise ResourceParseError(f"HeartbeatData does not decode: {exc}") from exc
    if not isinstance(data, dict):
        raise ResourceParseError("HeartbeatData is not a JSON object")
    out = []
    try:
        for consumer in data.get("consumerDataSet") or []:
            topics = [str(sub["topic"]) for sub in consumer.get("subscriptionDataSet") or []]
            out.append((str(consumer["groupName"]), topics))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ResourceParseError(f"malformed HeartbeatData: missing or invalid {exc}") from exc
    return out
