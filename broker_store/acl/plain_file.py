"""plain_acl.yml, RocketMQ's ACL 1.0 account file: its model, validated when read, and its writer.

One account's format is ``acl.account``'s (also what the ACL admin requests carry). Read by ``broker.acl_guard``
(at start and whenever the file changes) and written by the ACL admin requests
(``broker.acl_processor``). Layout, RocketMQ's key names::

    globalWhiteRemoteAddresses:       # peers from these addresses pass without any check
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ           # more than 6 characters
        secretKey: 12345678           # more than 6 characters
        whiteRemoteAddress: 192.168.0.*   # this account's peers from here pass without signature or perms
        admin: false                  # admin: every request, topic and group creation/deletion included
        defaultTopicPerm: DENY        # DENY / PUB / SUB / PUB|SUB for topics not listed (absent = DENY)
        defaultGroupPerm: SUB         # the same for consumer groups
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]
    dataVersion:                      # written by RocketMQ (and here) on every admin update
      - counter: 1
        timestamp: 1700000000000

Where RocketMQ reads an unknown permission word as DENY and lets a bad address pattern fail at the first
request, this model refuses the whole file with the field path (``accounts[1].topicPerms[0]: ...``); the
broker then keeps the accounts it had. Access keys must be unique (RocketMQ warns and keeps one).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from broker_store.acl.account import PlainAccount
from broker_store.acl.address import parse_address_pattern
from broker_store.protocol.errors import ConfigError
from broker_store.validation import describe_validation_error


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class AclDataVersion(_Model):
    counter: int = Field(ge=0)
    timestamp: int = Field(ge=0)


class PlainAclFile(_Model):
    """The whole plain_acl.yml."""

    global_white_remote_addresses: list[str] = Field(default_factory=list, alias="globalWhiteRemoteAddresses")
    """Address patterns whose peers pass every request without any check."""
    accounts: list[PlainAccount] = Field(default_factory=list)
    data_version: list[AclDataVersion] = Field(default_factory=list, alias="dataVersion")
    """Bumped by every admin update (RocketMQ keeps one entry: counter and timestamp in ms)."""

    @field_validator("global_white_remote_addresses", "accounts", "data_version", mode="before")
    @classmethod
    def _null_list(cls, value: object) -> object:
        return [] if value is None else value

    @field_validator("global_white_remote_addresses")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            parse_address_pattern(pattern)
        return value

    @model_validator(mode="after")
    def _unique_keys(self) -> PlainAclFile:
        seen: set[str] = set()
        for account in self.accounts:
            if account.access_key in seen:
                raise ValueError(f"accounts: access key {account.access_key!r} appears more than once")
            seen.add(account.access_key)
        return self

    def account(self, access_key: str) -> PlainAccount | None:
        return next((a for a in self.accounts if a.access_key == access_key), None)

    def to_yaml(self) -> bytes:
        """The file's bytes in RocketMQ's key names (fields left at their defaults are omitted)."""
        data = self.model_dump(by_alias=True, exclude_defaults=True)
        for account in data.get("accounts", []):
            account.setdefault("admin", False)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def parse_plain_acl(text: bytes | str, source: str) -> PlainAclFile:
    """Validate the bytes of a plain_acl.yml; ConfigError naming ``source``, the field path and the reason
    (an empty file is an empty table)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{source}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: <root>: expected a mapping, got {type(data).__name__}")
    try:
        return PlainAclFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from exc


def read_plain_acl(path: Path) -> PlainAclFile:
    """``parse_plain_acl`` of the file at ``path``; a missing file is an empty table; ConfigError otherwise."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return PlainAclFile()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the ACL file: {exc.strerror or exc}") from exc
    return parse_plain_acl(text, str(path))


def plain_acl_from_broker(config: Mapping[str, Any], version: Mapping[str, Any] | None, source: str) -> PlainAclFile:
    """The file a broker describes over the wire: GET_BROKER_CLUSTER_ACL_CONFIG's body (``globalWhiteAddrs``,
    ``plainAccessConfigs``) with GET_BROKER_CLUSTER_ACL_INFO's ``version`` (counter 0 and timestamp 0: none
    recorded). Validated as a whole file; ConfigError naming ``source``, the field path and the reason. Used by a
    replica's metadata sync to copy its primary's file."""
    data: dict[str, Any] = {"globalWhiteRemoteAddresses": config.get("globalWhiteAddrs"),
                            "accounts": config.get("plainAccessConfigs")}
    if version and (version.get("counter") or version.get("timestamp")):
        data["dataVersion"] = [{"counter": version.get("counter"), "timestamp": version.get("timestamp")}]
    try:
        return PlainAclFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from exc
