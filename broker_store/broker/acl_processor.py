"""ACL 1.0 admin requests 50-54 (RocketMQ's AdminBrokerProcessor ACL handlers): edit the broker's
plain_acl.yml through ``broker.acl_guard`` and report it. Installed by ``BrokerServer``; the guard has
already checked that the caller is an admin account (``acl.resources.ADMIN_CODES``).

Headers (RocketMQ's field names)::

    50 UPDATE_AND_CREATE_ACL_CONFIG   accessKey*, secretKey, whiteRemoteAddress, admin, defaultTopicPerm,
                                      defaultGroupPerm, topicPerms / groupPerms (comma-separated Res=Perm)
    51 DELETE_ACL_CONFIG              accessKey*
    52 GET_BROKER_CLUSTER_ACL_INFO    -> header version (DataVersion JSON), brokerName, brokerAddr,
                                         clusterName
    53 UPDATE_GLOBAL_WHITE_ADDRS_CONFIG  globalWhiteAddrs* (comma-separated), aclFileFullPath (this
                                      broker's one file, or absent)
    54 GET_BROKER_CLUSTER_ACL_CONFIG  -> body {"globalWhiteAddrs": [...], "plainAccessConfigs": [...]}

An update needs the access and secret keys (both longer than 6 characters, as RocketMQ) and merges into an
existing account as RocketMQ does: the default permissions, the address and the perm lists replace the
stored ones only when the request carries them; ``admin`` is always taken (absent = false). Each
change is validated as a whole file (the same model the file is read with), written crash-safely, bumps
the file's dataVersion and is in force for the next request. Failures answer RocketMQ's codes
(UPDATE_AND_CREATE_ACL_CONFIG_FAILED 209, DELETE_ACL_CONFIG_FAILED 210,
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED 211) with the reason as remark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from broker_store.acl.account import KEY_MIN_LENGTH, PlainAccount
from broker_store.acl.permission import PERM_SPELLINGS
from broker_store.acl.plain_file import AclDataVersion, PlainAclFile
from broker_store.broker.acl_guard import AclGuard
from broker_store.clock import Clock, wall_ms
from broker_store.net.server import Connection
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import StoreError
from broker_store.protocol.frame import RemotingCommand
from broker_store.validation import describe_validation_error


class _Refused(Exception):
    """An ACL admin request that cannot be applied; the message is the remark."""


@dataclass(frozen=True)
class AclAdminContext:
    guard: AclGuard | None
    """None: acl_enable is off (every request is answered SYSTEM_ERROR saying so)."""
    cluster_name: str
    broker_name: str
    broker_addr: Callable[[], str]
    clock: Clock
    """Stamps the file's dataVersion."""


def _split(value: str | None) -> list[str] | None:
    """RocketMQ's UtilAll.split on ','; None stays None (the field was not sent)."""
    return None if value is None else [item.strip() for item in value.split(",") if item.strip()]


def _check_resource_perms(entries: list[str] | None) -> None:
    for entry in entries or []:
        items = [item for item in entry.split("=") if item]
        if len(items) != 2:
            raise _Refused(f"Parse Resource format error for {entry}.\n"
                           "The expected resource format is 'Res=Perm'. For example: topicA=SUB")
        if items[1].strip() not in PERM_SPELLINGS:
            raise _Refused(f"Parse resource permission error for {entry}.\n"
                           "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.")


class AclAdminProcessor:
    def __init__(self, ctx: AclAdminContext) -> None:
        self.ctx = ctx

    def _guard_or_refusal(self, cmd: RemotingCommand) -> AclGuard | RemotingCommand:
        if self.ctx.guard is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"broker {self.ctx.broker_name} does not enable ACL "
                                                           "(acl_enable is off)")
        return self.ctx.guard

    def _commit(self, guard: AclGuard, new: PlainAclFile) -> None:
        """Validate ``new`` as a whole file, bump its dataVersion, write it and put it in force."""
        old = new.data_version[0] if new.data_version else AclDataVersion(counter=0, timestamp=0)
        data = new.model_dump(by_alias=True)
        data["dataVersion"] = [{"counter": old.counter + 1, "timestamp": wall_ms(self.ctx.clock)}]
        try:
            checked = PlainAclFile.model_validate(data)
        except ValidationError as exc:
            raise _Refused(describe_validation_error(str(guard.path), exc)) from exc
        try:
            guard.store(checked)
        except StoreError as exc:
            raise _Refused(str(exc)) from exc

    def _edit(self, cmd: RemotingCommand, failed: ResponseCode,
              change: Callable[[AclGuard], PlainAclFile]) -> RemotingCommand:
        """The editing requests' one shape: refused while ACL is off; else ``change`` makes the new file from the
        guard's current one (raising ``_Refused`` when the request cannot apply) and ``_commit`` puts it in force.
        A refusal answers ``failed`` with its reason as remark."""
        guard = self._guard_or_refusal(cmd)
        if isinstance(guard, RemotingCommand):
            return guard
        try:
            self._commit(guard, change(guard))
        except _Refused as exc:
            return cmd.response(failed, str(exc))
        return cmd.response(ResponseCode.SUCCESS)

    def update_and_create_acl_config(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        """UPDATE_AND_CREATE_ACL_CONFIG (50)."""
        return self._edit(cmd, ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                          lambda guard: _updated(guard.acl_file, cmd.ext_fields))

    def delete_acl_config(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        """DELETE_ACL_CONFIG (51): an access key the file does not hold is refused, as RocketMQ does."""
        access_key = cmd.ext_fields.get("accessKey")

        def deleted(guard: AclGuard) -> PlainAclFile:
            current = guard.acl_file
            if not access_key or current.account(access_key) is None:
                raise _Refused(f"The accessKey[{access_key}] corresponding to accessConfig has been deleted failed.")
            return current.model_copy(update={"accounts": [a for a in current.accounts if a.access_key != access_key]})

        return self._edit(cmd, ResponseCode.DELETE_ACL_CONFIG_FAILED, deleted)

    def update_global_white_addrs_config(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): replaces globalWhiteRemoteAddresses."""
        addrs = _split(cmd.ext_fields.get("globalWhiteAddrs"))
        file_path = cmd.ext_fields.get("aclFileFullPath")

        def replaced(guard: AclGuard) -> PlainAclFile:
            if addrs is None:
                raise _Refused("globalWhiteAddrs is missing")
            if file_path and Path(file_path).resolve() != guard.path.resolve():
                raise _Refused(f"Parameter value {file_path} is not the ACL file of broker {self.ctx.broker_name} "
                               f"({guard.path})")
            return guard.acl_file.model_copy(update={"global_white_remote_addresses": addrs})

        return self._edit(cmd, ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, replaced)

    def get_broker_cluster_acl_info(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_INFO (52): the file's data version and this broker's names."""
        guard = self._guard_or_refusal(cmd)
        if isinstance(guard, RemotingCommand):
            return guard
        version = guard.acl_file.data_version[0] if guard.acl_file.data_version else AclDataVersion(counter=0,
                                                                                                   timestamp=0)
        data_version = {"stateVersion": 0, "timestamp": version.timestamp, "counter": version.counter}
        return cmd.response(ResponseCode.SUCCESS, ext_fields={
            "version": json.dumps(data_version, separators=(",", ":")),
            "allAclFileVersion": json.dumps({str(guard.path): data_version}, separators=(",", ":")),
            "brokerName": self.ctx.broker_name,
            "brokerAddr": self.ctx.broker_addr(),
            "clusterName": self.ctx.cluster_name,
        })

    def get_broker_cluster_acl_config(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_CONFIG (54): every account, secrets included, and the global whitelist."""
        guard = self._guard_or_refusal(cmd)
        if isinstance(guard, RemotingCommand):
            return guard
        acl_file = guard.acl_file
        body = {
            "globalWhiteAddrs": list(acl_file.global_white_remote_addresses),
            "plainAccessConfigs": [a.model_dump(by_alias=True) for a in acl_file.accounts],
        }
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


def _updated(current: PlainAclFile, ext: Mapping[str, str]) -> PlainAclFile:
    """UPDATE_AND_CREATE_ACL_CONFIG's new file: the request's account merged into ``current`` as RocketMQ merges
    (see the module docstring)."""
    access_key, secret_key = ext.get("accessKey"), ext.get("secretKey")
    if (access_key is None or secret_key is None or len(access_key) < KEY_MIN_LENGTH
            or len(secret_key) < KEY_MIN_LENGTH):  # RocketMQ asks for both on every update
        shown = "***" if secret_key else secret_key
        raise _Refused(f"The accessKey={access_key} and secretKey={shown} cannot be null and length "
                       "should longer than 6")
    topic_perms, group_perms = _split(ext.get("topicPerms")), _split(ext.get("groupPerms"))
    _check_resource_perms(topic_perms)
    _check_resource_perms(group_perms)
    existing = current.account(access_key)
    merged: dict[str, Any] = existing.model_dump(by_alias=True) if existing is not None else {}
    merged["accessKey"], merged["secretKey"] = access_key, secret_key
    if "whiteRemoteAddress" in ext:
        merged["whiteRemoteAddress"] = ext["whiteRemoteAddress"]
    merged["admin"] = ext.get("admin", "false").strip().lower() == "true"
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if ext.get(key):
            merged[key] = ext[key]
    if topic_perms is not None:
        merged["topicPerms"] = topic_perms
    if group_perms is not None:
        merged["groupPerms"] = group_perms
    try:
        account = PlainAccount.model_validate(merged)
    except ValidationError as exc:
        raise _Refused(describe_validation_error(f"account {access_key}", exc)) from exc
    accounts = [account if a.access_key == access_key else a for a in current.accounts]
    if existing is None:
        accounts.append(account)
    return current.model_copy(update={"accounts": accounts})
