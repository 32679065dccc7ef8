"""The config connector's ACL copy between two ACL-enabled clusters (real processes): the link's admin accounts
read the source's accounts and write them to every target primary, topic permissions through the mapping, the
target's own secrets kept (or the source's with copy_secrets), nothing deleted, and a second round changes
nothing; the accounts then work on the target (a signed send passes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.acl.plain_file import read_plain_acl
from broker_store.client import Admin, Producer, SendStatus, new_message
from broker_store.client.acl_admin import AclAdmin
from broker_store.protocol.acl import SessionCredentials
from connectors.config_sync.acl_sync import AclSync
from connectors.config_sync.plan import ChangeKind, ChangeStatus
from connectors.core.sync_settings import AclSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from tests.support.processes import GroupSpec, local_cluster

pytestmark = pytest.mark.integration

SRC_ADMIN = SessionCredentials("srcAdmin01", "srcAdminSK")
DST_ADMIN = SessionCredentials("dstAdmin01", "dstAdminSK")

SOURCE_ACL = """
accounts:
  - {accessKey: srcAdmin01, secretKey: srcAdminSK, admin: true}
  - accessKey: orderApp
    secretKey: srcOrderSK
    defaultTopicPerm: DENY
    topicPerms: [Orders=PUB, Internal=PUB]
    groupPerms: [readers=SUB]
  - {accessKey: newApp01, secretKey: srcNewSK01, topicPerms: [Orders=SUB]}
"""
TARGET_ACL = """
accounts:
  - {accessKey: dstAdmin01, secretKey: dstAdminSK, admin: true}
  - {accessKey: orderApp, secretKey: dstOrderSK, defaultTopicPerm: DENY}
  - {accessKey: localApp, secretKey: localAppSK, admin: true}
"""


def test_accounts_are_copied_mapped_with_the_targets_secrets_and_then_work(tmp_path: Path) -> None:
    (tmp_path / "src.yml").write_text(SOURCE_ACL)
    acl = {"acl_enable": True, "acl_reload_check_seconds": 0.05}
    with local_cluster(tmp_path, "src", brokers=1, acl_file=str(tmp_path / "src.yml"), **acl) as src:
        target_files = []
        for name in ("a", "b"):
            (tmp_path / f"dst-{name}.yml").write_text(TARGET_ACL)
            target_files.append(tmp_path / f"dst-{name}.yml")
        specs = [GroupSpec("dst-a", ({"acl_file": str(target_files[0])},)),
                 GroupSpec("dst-b", ({"acl_file": str(target_files[1])},))]
        with local_cluster(tmp_path, "dst", specs, **acl) as dst, \
                Admin(src.namesrv_addr, credentials=SRC_ADMIN) as source_admin, \
                Admin(dst.namesrv_addr, credentials=DST_ADMIN) as target_admin:
            mapper = TopicMapper(TopicMappingConfig.model_validate(
                {"explicit": [{"source": "Orders", "target": "OrdersB"}]}))

            def sync(copy_secrets: bool) -> dict[str, tuple[ChangeKind, ChangeStatus]]:
                changes = AclSync(source_admin=source_admin, source_cluster=src.name, target_admin=target_admin,
                                  mapper=mapper, settings=AclSyncSettings(enabled=True, copy_secrets=copy_secrets)
                                  ).round()
                for c in changes:
                    assert "SK" not in c.detail and "secretKey" not in (c.group_config or {}), c
                return {c.subject: (c.kind, c.status) for c in changes}

            assert sync(copy_secrets=False) == {
                "srcAdmin01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.REFUSED),
                "orderApp": (ChangeKind.UPDATE_ACCOUNT, ChangeStatus.APPLIED),
                "newApp01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.REFUSED)}
            for path in target_files:  # on every target primary, crash-safely rewritten by the broker
                accounts = {a.access_key: a for a in read_plain_acl(path).accounts}
                order = accounts["orderApp"]
                assert order.secret_key == "dstOrderSK" and order.topic_perms == ["OrdersB=PUB"]
                assert order.group_perms == ["readers=SUB"] and "localApp" in accounts  # nothing deleted
            # a second round: nothing left to write but the two refusals
            assert sync(copy_secrets=False) == {
                "srcAdmin01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.REFUSED),
                "newApp01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.REFUSED)}
            # copy_secrets: the missing accounts are created with the source's secrets
            assert sync(copy_secrets=True) == {
                "srcAdmin01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.APPLIED),
                "newApp01": (ChangeKind.CREATE_ACCOUNT, ChangeStatus.APPLIED),
                "orderApp": (ChangeKind.UPDATE_ACCOUNT, ChangeStatus.APPLIED)}  # now with the source's secret
            assert sync(copy_secrets=True) == {}
            primary = dst.primary("dst-a").listen
            assert {a.access_key: a.secret_key for a in AclAdmin(target_admin).acl_config(primary).accounts}[
                "newApp01"] == "srcNewSK01"
            # the copied permission works on the target: orderApp (source secret now) may send to OrdersB
            target_admin.create_topic("OrdersB", 2, broker_names=["dst-a"])
            target_admin.wait_for_route("OrdersB")
            with Producer(dst.namesrv_addr, credentials=SessionCredentials("orderApp", "srcOrderSK")) as producer:
                assert producer.send(new_message("OrdersB", b"copied")).status is SendStatus.SEND_OK
