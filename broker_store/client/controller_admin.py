"""Admin requests to a controller (embedded in a name server, or standalone): who leads, each group's
SyncStateSet and epochs, an operator's election, and the controller's own settings (GET_CONTROLLER_CONFIG,
UPDATE_CONTROLLER_CONFIG). Used by ``python -m broker_store elect``, ``controller-status`` and
``controller-config``; async over one ``RemotingClient`` (the CLI runs them with ``asyncio.run``). Each takes
optional ``credentials``: the request is then signed (ACL 1.0, ``protocol.acl.sign``), as a controller with
``controller.acl_file`` requires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from broker_store.net.client import RemotingClient
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.config_text import decode_config, encode_config
from broker_store.protocol.controller import (
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    ReplicasInfo,
    decode_replicas_info,
)
from broker_store.protocol.errors import error_for_response
from broker_store.protocol.frame import RemotingCommand

TIMEOUT_S = 5.0


async def _invoke(client: RemotingClient, addr: str, cmd: RemotingCommand, credentials: SessionCredentials | None,
                  ok: Sequence[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
    if credentials is not None:
        sign(cmd, credentials)
    resp = await client.invoke(addr, cmd, TIMEOUT_S)
    if resp.code not in ok:
        raise error_for_response(resp.code, resp.remark, addr=addr)
    return resp


async def controller_metadata(client: RemotingClient, addr: str, *,
                              credentials: SessionCredentials | None = None) -> GetMetaDataResponseHeader:
    resp = await _invoke(client, addr, RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO), credentials)
    return GetMetaDataResponseHeader.from_ext(resp.ext_fields)


async def sync_state_data(client: RemotingClient, addr: str,
                          broker_names: Sequence[str] | None = None, *,
                          credentials: SessionCredentials | None = None) -> dict[str, ReplicasInfo]:
    body = b"" if broker_names is None else json.dumps(list(broker_names)).encode()
    resp = await _invoke(client, addr, RemotingCommand(code=RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body),
                         credentials)
    return decode_replicas_info(resp.body)


async def elect_master(client: RemotingClient, addr: str, cluster: str, broker_name: str,
                       prefer: int | None = None, *,
                       credentials: SessionCredentials | None = None) -> tuple[ElectMasterResponseHeader, bool]:
    """An operator's election: with ``prefer`` that broker by force (it must be a live candidate), else the
    controller's policy. Returns the answer and whether a new master was elected (False: the old one stays)."""
    header = ElectMasterRequestHeader(cluster, broker_name, -1 if prefer is None else prefer, prefer is not None)
    resp = await _invoke(client, addr, RemotingCommand(code=RequestCode.CONTROLLER_ELECT_MASTER,
                                                       ext_fields=header.to_ext()),
                         credentials, ok=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST))
    return ElectMasterResponseHeader.from_ext(resp.ext_fields), resp.code == ResponseCode.SUCCESS


async def controller_config(client: RemotingClient, addr: str, *,
                            credentials: SessionCredentials | None = None) -> dict[str, str]:
    """GET_CONTROLLER_CONFIG: the addressed controller's settings (properties key -> text value). Each controller
    has its own: ask the one you mean."""
    resp = await _invoke(client, addr, RemotingCommand(code=RequestCode.GET_CONTROLLER_CONFIG), credentials)
    return decode_config(resp.body)


async def update_controller_config(client: RemotingClient, addr: str, update: Mapping[str, str], *,
                                   credentials: SessionCredentials | None = None) -> None:
    """UPDATE_CONTROLLER_CONFIG: change the addressed controller's runtime settings (all or none). Raises the
    controller's refusal: CONTROLLER_NOT_LEADER from a follower, NO_PERMISSION for a setting that cannot change
    at runtime, CONTROLLER_INVALID_REQUEST for an unknown key or a bad value (the remark names the key)."""
    await _invoke(client, addr, RemotingCommand(code=RequestCode.UPDATE_CONTROLLER_CONFIG,
                                                body=encode_config(update)), credentials)
