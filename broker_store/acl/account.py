"""One ACL 1.0 account (RocketMQ's PlainAccessConfig): an entry of plain_acl.yml (``acl.plain_file``) and the body
of the ACL admin requests (``broker.acl_processor`` answers them, ``client.acl_admin`` sends them), validated
field by field. Pure; the client imports this module of ``acl`` and no other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from broker_store.acl.address import parse_address_pattern
from broker_store.acl.permission import Permission, parse_perm

KEY_MIN_LENGTH = 7
"""Access and secret keys must be longer than 6 characters (RocketMQ's ACCESS_KEY_MIN_LENGTH 6)."""


def split_resource_perm(entry: str) -> tuple[str, Permission]:
    """``name=PERM`` of a topicPerms / groupPerms entry; ValueError when it is not one name and one
    permission word."""
    items = [item.strip() for item in entry.split("=") if item.strip()]
    if len(items) != 2:
        raise ValueError(f"{entry!r} is not of the form name=PERM (for example topicA=SUB)")
    return items[0], parse_perm(items[1])


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PlainAccount(_Model):
    """One account (RocketMQ's PlainAccessConfig)."""

    access_key: str = Field(alias="accessKey", min_length=KEY_MIN_LENGTH)
    """Sent in clear by clients as the ``AccessKey`` extField."""
    secret_key: str = Field(alias="secretKey", min_length=KEY_MIN_LENGTH)
    """HMAC key of the account's signatures."""
    white_remote_address: str | None = Field(default=None, alias="whiteRemoteAddress")
    """Address pattern (``acl.address``) whose peers skip the signature and permission checks."""
    admin: bool = False
    """May send every request, admin ones (topic/group creation and deletion, ACL changes) included."""
    default_topic_perm: str | None = Field(default=None, alias="defaultTopicPerm")
    """Permission on topics ``topic_perms`` does not name; absent = DENY."""
    default_group_perm: str | None = Field(default=None, alias="defaultGroupPerm")
    """Permission on consumer groups ``group_perms`` does not name; absent = DENY."""
    topic_perms: list[str] = Field(default_factory=list, alias="topicPerms")
    """``topic=PERM`` entries."""
    group_perms: list[str] = Field(default_factory=list, alias="groupPerms")
    """``group=PERM`` entries."""

    @field_validator("white_remote_address")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        parse_address_pattern(value)
        return value

    @field_validator("default_topic_perm", "default_group_perm")
    @classmethod
    def _perm(cls, value: str | None) -> str | None:
        if value is not None:
            parse_perm(value)
        return value

    @field_validator("topic_perms", "group_perms", mode="before")
    @classmethod
    def _null_list(cls, value: object) -> object:
        return [] if value is None else value

    @field_validator("topic_perms", "group_perms")
    @classmethod
    def _resource_perms(cls, value: list[str]) -> list[str]:
        for entry in value:
            split_resource_perm(entry)
        return value
