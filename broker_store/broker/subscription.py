"""Consumer subscriptions and tag filtering (RocketMQ's FilterAPI / SubscriptionData).

Used by the pull processor (expression from the request, or the one a consumer registered with
HEART_BEAT) and the client registry. A TAG expression is ``*`` (everything) or tags joined with
``||``; filtering compares ConsumeQueue tags hash codes (Java ``String.hashCode``), exactly as the
store indexes them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import tags_hash_code

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"


class SubscriptionParseError(ProtocolError):
    """An expression this broker cannot filter by (e.g. SQL92)."""


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription of a consumer group."""

    topic: str
    sub_string: str
    """The expression as given: ``*`` or ``TagA || TagB``."""
    tags: tuple[str, ...] = ()
    codes: frozenset[int] = frozenset()
    """Tags hash codes; empty for ``*``."""
    sub_version: int = 0
    """Client timestamp of the subscription; pulls carrying an older one are told to refresh."""
    expression_type: str = EXPRESSION_TYPE_TAG

    @property
    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL

    @property
    def tags_codes(self) -> frozenset[int] | None:
        """What ``MessageStore.get_messages`` filters by: None = no filter."""
        return None if self.matches_all else self.codes


@functools.lru_cache(maxsize=1024)
def _parse_tags(expression: str) -> tuple[tuple[str, ...], frozenset[int]]:
    tags = tuple(dict.fromkeys(t.strip() for t in expression.split("||") if t.strip()))
    return tags, frozenset(tags_hash_code(t) for t in tags)


def build_subscription(
    topic: str, expression: str | None, expression_type: str | None = None, sub_version: int = 0
) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData: blank or ``*`` subscribes to everything."""
    etype = (expression_type or EXPRESSION_TYPE_TAG).upper()
    if etype != EXPRESSION_TYPE_TAG:
        raise SubscriptionParseError(f"The broker does not support consumer to filter message by {etype}")
    expr = (expression or "").strip()
    if not expr or expr == SUB_ALL:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL, sub_version=sub_version)
    tags, codes = _parse_tags(expr)
    if not tags:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL, sub_version=sub_version)
    return SubscriptionData(topic=topic, sub_string=expr, tags=tags, codes=codes, sub_version=sub_version)


def subscription_from_json(d: Mapping[str, Any]) -> SubscriptionData:
    """One entry of a HeartbeatData subscriptionDataSet."""
    try:
        topic = str(d["topic"])
        sub_string = d.get("subString")
        sub_version = int(d.get("subVersion") or 0)
        etype = d.get("expressionType")
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed subscription data: {exc!r}") from exc
    if etype and str(etype).upper() != EXPRESSION_TYPE_TAG:
        # Kept as registered; pulls relying on it are refused with the reason (no SQL92 filtering here).
        return SubscriptionData(
            topic=topic,
            sub_string=str(sub_string or ""),
            sub_version=sub_version,
            expression_type=str(etype).upper(),
        )
    return build_subscription(topic, sub_string, etype, sub_version)
