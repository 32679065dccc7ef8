"""The ACL 1.0 decision: may this request from this address pass? A pure rule over an ``AclTable`` (the
accounts of one plain_acl.yml, compiled) and the request; the broker's guard (``broker.acl_guard``)
calls ``check`` before dispatching every request when ACL is on.

The rule, in RocketMQ's order (PlainAccessResource.parse, then PlainPermissionManager.validate and
PlainPermissionChecker.check); the first step that decides ends it::

    1. the resources the request names (``resources.needed_resources``); a body that does not say
       refuses with the parse error, like RocketMQ's parse
    2. peer address matches a globalWhiteRemoteAddresses pattern     -> pass (no key needed)
    3. no AccessKey                                 -> "No accessKey is configured"
    4. AccessKey not in the file                    -> "No acl config for <key>"
    5. peer address matches the account's whiteRemoteAddress         -> pass (no signature, no perms)
    6. signature (``protocol.acl.verify``) differs  -> "Check signature failed for accessKey=<key>"
    7. a send to RMQ_SYS_TRACE_TOPIC                -> pass
    8. admin account                                -> pass
    9. admin request code (``resources.ADMIN_CODES``)
                         -> "Need admin permission for request code=<code>, but accessKey=<key> is not"
   10. each needed resource: listed in topicPerms / groupPerms -> that permission must cover it, else
       "No permission for topic:<t>" / "group:<g>"; not listed -> the default topic or group permission,
       else "No default permission for ..."

A refusal raises ``AclDenied`` with that text; the broker answers SYSTEM_ERROR with
``AclDenied.remark`` (RocketMQ's client sees the AclException class name and message there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_store.acl.account import PlainAccount, split_resource_perm
from broker_store.acl.address import AddressPattern, parse_address_pattern
from broker_store.acl.permission import Permission, covers, parse_perm
from broker_store.acl.plain_file import PlainAclFile
from broker_store.acl.resources import (
    ADMIN_CODES,
    TRACE_TOPIC,
    ResourceParseError,
    describe_resource,
    is_group_resource,
    needed_resources,
)
from broker_store.protocol.acl import ACCESS_KEY, verify
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.topic import retry_topic

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
"""The class name RocketMQ's refusal remark starts with (clients and operators match on it)."""


class AclDenied(RocketMQError):
    """A request the ACL refuses; ``str()`` is RocketMQ's AclException message."""

    @property
    def remark(self) -> str:
        """The response remark: ``org.apache.rocketmq.acl.common.AclException: <message>``."""
        return f"{ACL_EXCEPTION}: {self}"


@dataclass(frozen=True)
class AccountRights:
    """One account, compiled for decisions."""

    access_key: str
    secret_key: str
    white_address: AddressPattern
    admin: bool
    default_topic_perm: Permission
    default_group_perm: Permission
    resource_perms: dict[str, Permission] = field(default_factory=dict)
    """Topics by name, groups by retry topic (``%RETRY%<group>``)."""

    @classmethod
    def compile(cls, account: PlainAccount) -> AccountRights:
        perms: dict[str, Permission] = {}
        for entry in account.group_perms:
            name, perm = split_resource_perm(entry)
            perms[retry_topic(name)] = perm
        for entry in account.topic_perms:
            name, perm = split_resource_perm(entry)
            perms[name] = perm

        def default(text: str | None) -> Permission:
            return Permission.DENY if text is None else parse_perm(text)
        return cls(account.access_key, account.secret_key, parse_address_pattern(account.white_remote_address),
                   account.admin, default(account.default_topic_perm), default(account.default_group_perm), perms)

    def __repr__(self) -> str:  # the secret never reaches a log
        return f"AccountRights(access_key={self.access_key!r}, admin={self.admin})"


@dataclass(frozen=True)
class AclTable:
    """The compiled plain_acl.yml a broker decides with (immutable: a reload builds a new one)."""

    global_white: tuple[AddressPattern, ...]
    accounts: dict[str, AccountRights]

    @classmethod
    def compile(cls, acl_file: PlainAclFile) -> AclTable:
        """The table of a validated file (``plain_file.parse_plain_acl`` already refused bad patterns and
        permission words, so this does not raise)."""
        return cls(tuple(parse_address_pattern(p) for p in acl_file.global_white_remote_addresses),
                   {a.access_key: AccountRights.compile(a) for a in acl_file.accounts})


def remote_host(remote_addr: str) -> str:
    """The host part of a peer's ``host:port`` (an address without a port is returned as is)."""
    return remote_addr.rsplit(":", 1)[0] if ":" in remote_addr else remote_addr


def check(table: AclTable, cmd: RemotingCommand, host: str) -> None:
    """Pass ``cmd`` from a peer at ``host`` or raise ``AclDenied`` (the rule in the module docstring)."""
    needed: dict[str, Permission] = {}
    if cmd.ext_fields:  # RocketMQ's parse stops at a request without extFields
        try:
            needed = needed_resources(cmd)
        except ResourceParseError as exc:
            raise AclDenied(str(exc)) from exc
    if any(pattern.matches(host) for pattern in table.global_white):
        return
    access_key = cmd.ext_fields.get(ACCESS_KEY)
    if access_key is None:
        raise AclDenied("No accessKey is configured")
    account = table.accounts.get(access_key)
    if account is None:
        raise AclDenied(f"No acl config for {access_key}")
    if account.white_address.matches(host):
        return
    if not verify(cmd, account.secret_key):
        raise AclDenied(f"Check signature failed for accessKey={access_key}")
    if needed.get(TRACE_TOPIC) == Permission.PUB:
        return
    check_permission(account, cmd.code, needed)


def check_permission(account: AccountRights, code: int, needed: dict[str, Permission]) -> None:
    """Steps 8-10 of the rule: may ``account`` send request ``code`` needing ``needed``? AclDenied if not."""
    if account.admin:
        return
    if code in ADMIN_CODES:
        raise AclDenied(f"Need admin permission for request code={code}, but accessKey={account.access_key} is not")
    for resource, perm in needed.items():
        owned = account.resource_perms.get(resource)
        if owned is None:
            default = account.default_group_perm if is_group_resource(resource) else account.default_topic_perm
            if not covers(perm, default):
                raise AclDenied(f"No default permission for {describe_resource(resource)}")
        elif not covers(perm, owned):
            raise AclDenied(f"No permission for {describe_resource(resource)}")
