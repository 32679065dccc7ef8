"""The ACL admin requests 50-54 (``broker.acl_processor``) on a real ``AclGuard`` over a temp file, without a
socket: each edit's success, its refusal (code and remark) and that a refused edit leaves the file as it was;
every request refused while ACL is off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from broker_store.broker.acl_guard import AclGuard
from broker_store.broker.acl_processor import AclAdminContext, AclAdminProcessor
from broker_store.clock import ManualClock
from broker_store.net.server import Connection
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand

ACL = "accounts: [{accessKey: adminAK01, secretKey: adminSK01, admin: true}]\n"
CONN = cast(Connection, None)


def processor(tmp_path: Path, enabled: bool = True) -> tuple[AclAdminProcessor, Path]:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    guard = None
    if enabled:
        guard = AclGuard(path, clock=ManualClock(), check_interval=1.0)
        guard.load()
    ctx = AclAdminContext(guard, "c1", "b1", lambda: "127.0.0.1:10911", ManualClock(wall=1_700_000_000.0))
    return AclAdminProcessor(ctx), path


def request(code: RequestCode, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=dict(fields))


def config(p: AclAdminProcessor) -> dict[str, object]:
    resp = p.get_broker_cluster_acl_config(request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG), CONN)
    assert resp.code == ResponseCode.SUCCESS
    answer: dict[str, object] = json.loads(resp.body)
    return answer


def keys(p: AclAdminProcessor) -> list[object]:
    accounts = config(p)["plainAccessConfigs"]
    assert isinstance(accounts, list)
    return [a["accessKey"] for a in accounts]


def test_update_creates_then_merges_and_bumps_the_data_version(tmp_path: Path) -> None:
    p, path = processor(tmp_path)
    resp = p.update_and_create_acl_config(request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, accessKey="producerAK",
                                                  secretKey="producerSK", topicPerms="orders=PUB"), CONN)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
    assert keys(p) == ["adminAK01", "producerAK"]
    assert "producerAK" in path.read_text()
    resp = p.update_and_create_acl_config(request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, accessKey="producerAK",
                                                  secretKey="producerSK2", defaultTopicPerm="SUB"), CONN)
    assert resp.code == ResponseCode.SUCCESS
    accounts = config(p)["plainAccessConfigs"]
    assert isinstance(accounts, list)
    producer = accounts[1]
    assert (producer["secretKey"], producer["topicPerms"], producer["defaultTopicPerm"]) == (
        "producerSK2", ["orders=PUB"], "SUB")  # the perm list kept: the request did not carry it
    info = p.get_broker_cluster_acl_info(request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO), CONN)
    assert json.loads(info.ext_fields["version"])["counter"] == 2


@pytest.mark.parametrize(("fields", "remark"), [
    ({"accessKey": "short", "secretKey": "producerSK"}, "cannot be null and length should longer than 6"),
    ({"accessKey": "producerAK", "secretKey": "producerSK", "topicPerms": "orders"}, "Parse Resource format error"),
    ({"accessKey": "producerAK", "secretKey": "producerSK", "topicPerms": "orders=ALL"},
     "Parse resource permission error"),
])
def test_a_refused_update_answers_its_code_and_reason_and_writes_nothing(tmp_path: Path, fields: dict[str, str],
                                                                          remark: str) -> None:
    p, path = processor(tmp_path)
    resp = p.update_and_create_acl_config(request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, **fields), CONN)
    assert resp.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert resp.remark is not None and remark in resp.remark
    assert path.read_text() == ACL


def test_delete_removes_a_held_key_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    p, path = processor(tmp_path)
    p.update_and_create_acl_config(request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, accessKey="producerAK",
                                           secretKey="producerSK"), CONN)
    resp = p.delete_acl_config(request(RequestCode.DELETE_ACL_CONFIG, accessKey="producerAK"), CONN)
    assert resp.code == ResponseCode.SUCCESS
    assert keys(p) == ["adminAK01"]
    written = path.read_text()
    resp = p.delete_acl_config(request(RequestCode.DELETE_ACL_CONFIG, accessKey="producerAK"), CONN)
    assert (resp.code, resp.remark) == (
        ResponseCode.DELETE_ACL_CONFIG_FAILED,
        "The accessKey[producerAK] corresponding to accessConfig has been deleted failed.")
    assert path.read_text() == written


def test_global_white_addrs_are_replaced_only_for_this_brokers_file(tmp_path: Path) -> None:
    p, path = processor(tmp_path)
    code = RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
    resp = p.update_global_white_addrs_config(request(code, globalWhiteAddrs="10.0.0.1, 10.0.0.*",
                                                      aclFileFullPath=str(path)), CONN)
    assert resp.code == ResponseCode.SUCCESS
    assert config(p)["globalWhiteAddrs"] == ["10.0.0.1", "10.0.0.*"]
    written = path.read_text()
    other = p.update_global_white_addrs_config(request(code, globalWhiteAddrs="10.0.0.2",
                                                       aclFileFullPath=str(tmp_path / "other.yml")), CONN)
    assert other.code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
    assert other.remark is not None and "is not the ACL file of broker b1" in other.remark
    missing = p.update_global_white_addrs_config(request(code), CONN)
    assert (missing.code, missing.remark) == (ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                                              "globalWhiteAddrs is missing")
    assert path.read_text() == written


def test_every_request_is_refused_while_acl_is_off(tmp_path: Path) -> None:
    p, _ = processor(tmp_path, enabled=False)
    handlers = [(p.update_and_create_acl_config, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG),
                (p.delete_acl_config, RequestCode.DELETE_ACL_CONFIG),
                (p.update_global_white_addrs_config, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG),
                (p.get_broker_cluster_acl_info, RequestCode.GET_BROKER_CLUSTER_ACL_INFO),
                (p.get_broker_cluster_acl_config, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)]
    for handler, code in handlers:
        resp = handler(request(code, accessKey="producerAK", secretKey="producerSK", globalWhiteAddrs="1.2.3.4"),
                       CONN)
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                            "broker b1 does not enable ACL (acl_enable is off)"), handler
