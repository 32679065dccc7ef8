"""ACL 1.0 admin requests (codes 50-54, RocketMQ's header names) sent to one broker: what mqadmin's
updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr, clusterAclConfigVersion and getAclConfig do.

Used by ``broker_store.cli.acl`` over an ``AsyncAdmin``'s session (``AclAdmin``: the blocking form over an
``Admin``, for the config connector), so the requests are signed with its credentials; the broker answers only
an admin account. Non-success answers
raise ``protocol.errors`` (an ACL refusal: ``AclPermissionError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from broker_store.acl.account import PlainAccount as PlainAccount  # re-exported: what these requests carry
from broker_store.client.admin import Admin, AsyncAdmin
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import ProtocolError, error_for_response
from broker_store.protocol.frame import RemotingCommand


@dataclass(frozen=True)
class BrokerAclConfig:
    """One broker's ACL file as GET_BROKER_CLUSTER_ACL_CONFIG returns it."""

    global_white_addrs: tuple[str, ...]
    accounts: tuple[PlainAccount, ...]
    """Secrets included: never print them."""


def account_ext(account: PlainAccount) -> dict[str, str]:
    """The UPDATE_AND_CREATE_ACL_CONFIG header of ``account`` (every field: the broker replaces the stored
    perm lists with these)."""
    ext = {
        "accessKey": account.access_key,
        "secretKey": account.secret_key,
        "admin": "true" if account.admin else "false",
        "topicPerms": ",".join(account.topic_perms),
        "groupPerms": ",".join(account.group_perms),
    }
    if account.white_remote_address is not None:
        ext["whiteRemoteAddress"] = account.white_remote_address
    if account.default_topic_perm is not None:
        ext["defaultTopicPerm"] = account.default_topic_perm
    if account.default_group_perm is not None:
        ext["defaultGroupPerm"] = account.default_group_perm
    return ext


class AsyncAclAdmin:
    """ACL requests to brokers by address, through ``admin``'s session (not owned: close the admin)."""

    def __init__(self, admin: AsyncAdmin) -> None:
        self._session = admin.session

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext_fields=ext or {})
        resp = await self._session.send(addr, cmd, self._session.request_timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_response(resp.code, resp.remark, addr=addr)
        return resp

    async def update_account(self, addr: str, account: PlainAccount) -> None:
        """Create ``account`` on the broker at ``addr``, or update it (UPDATE_AND_CREATE_ACL_CONFIG)."""
        await self._call(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, account_ext(account))

    async def delete_account(self, addr: str, access_key: str) -> None:
        """DELETE_ACL_CONFIG; an unknown key raises (DELETE_ACL_CONFIG_FAILED, as RocketMQ)."""
        await self._call(addr, RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})

    async def update_global_white_addrs(self, addr: str, patterns: Sequence[str]) -> None:
        """Replace the broker's globalWhiteRemoteAddresses (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG)."""
        await self._call(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": ",".join(patterns)})

    async def acl_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CLUSTER_ACL_INFO's header: version (DataVersion JSON), brokerName, brokerAddr,
        clusterName."""
        return dict((await self._call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)).ext_fields)

    async def acl_config(self, addr: str) -> BrokerAclConfig:
        """GET_BROKER_CLUSTER_ACL_CONFIG: the broker's accounts and global whitelist."""
        resp = await self._call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        try:
            data: Any = orjson.loads(resp.body)
            return BrokerAclConfig(
                tuple(str(a) for a in data.get("globalWhiteAddrs") or ()),
                tuple(PlainAccount.model_validate(a) for a in data.get("plainAccessConfigs") or ()))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
            raise ProtocolError(f"GET_BROKER_CLUSTER_ACL_CONFIG body from {addr} does not decode: {exc}") from exc


class AclAdmin:
    """``AsyncAclAdmin``'s reads and account updates, blocking, over a synchronous ``Admin``."""

    def __init__(self, admin: Admin) -> None:
        self._admin = admin

    def acl_config(self, addr: str) -> BrokerAclConfig:
        return self._admin.call(lambda a: AsyncAclAdmin(a).acl_config(addr))

    def update_account(self, addr: str, account: PlainAccount) -> None:
        self._admin.call(lambda a: AsyncAclAdmin(a).update_account(addr, account))
