"""connectors.config_sync.acl_sync's rules (pure): accounts mapped through the link's topic mapping, written where
a target broker group lacks them or holds other permissions, with the target's own secret unless copy_secrets,
never deleted; a missing account without copy_secrets is refused; secrets never recorded."""

from __future__ import annotations

from pathlib import Path

from broker_store.acl.account import PlainAccount
from broker_store.client.acl_admin import BrokerAclConfig
from connectors.config_sync.acl_sync import map_account, plan_acl
from connectors.config_sync.plan import ChangeKind, ChangeStatus
from connectors.core.sync_settings import AclSyncSettings, ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig

MAPPER = TopicMapper(TopicMappingConfig.model_validate(
    {"explicit": [{"source": "Orders", "target": "OrdersB"}], "include": [{"pattern": "Pay.*"}]}))


def account(key: str, secret: str, *, topics: list[str] | None = None, groups: list[str] | None = None,
            **extra: object) -> PlainAccount:
    return PlainAccount.model_validate({"accessKey": key, "secretKey": secret, "topicPerms": topics or [],
                                        "groupPerms": groups or [], **extra})


SOURCE = BrokerAclConfig((), (
    account("orderApp", "srcOrderSK", topics=["Orders=PUB", "Payments=SUB", "Internal=PUB"], groups=["g1=SUB"],
            defaultTopicPerm="DENY"),
    account("newApp01", "srcNewSK01", topics=["Payments=PUB"]),
))


def test_topic_entries_follow_the_mapping_and_uncopied_topics_are_left_out() -> None:
    mapped = map_account(SOURCE.accounts[0], MAPPER)
    assert mapped.topic_perms == ["OrdersB=PUB", "Payments=SUB"] and mapped.group_perms == ["g1=SUB"]
    assert mapped.default_topic_perm == "DENY" and mapped.secret_key == "srcOrderSK"


def test_existing_accounts_keep_the_targets_secret_and_missing_ones_are_refused_without_copy_secrets() -> None:
    targets = {"dst-a": BrokerAclConfig((), (account("orderApp", "dstOrderSK"),)),
               "dst-b": BrokerAclConfig((), ())}
    writes = plan_acl(SOURCE, targets, MAPPER, AclSyncSettings(enabled=True))
    by_key = {w.change.subject: w for w in writes}
    order = by_key["orderApp"]
    assert order.change.kind is ChangeKind.UPDATE_ACCOUNT and order.change.status is ChangeStatus.PLANNED
    assert order.brokers == ("dst-a", "dst-b") and order.account is not None
    assert order.account.secret_key == "dstOrderSK"  # the target's: its clients keep signing as before
    assert order.account.topic_perms == ["OrdersB=PUB", "Payments=SUB"]
    new = by_key["newApp01"]
    assert new.change.kind is ChangeKind.CREATE_ACCOUNT and new.change.status is ChangeStatus.REFUSED
    assert new.account is None and "copy_secrets is false" in new.change.detail
    for w in writes:  # the recorded account never carries a secret
        assert "secretKey" not in (w.change.group_config or {}) and "SK" not in w.change.detail


def test_copy_secrets_creates_missing_accounts_with_the_sources_secret() -> None:
    writes = plan_acl(SOURCE, {"dst-a": BrokerAclConfig((), ())}, MAPPER,
                      AclSyncSettings(enabled=True, copy_secrets=True))
    assert [(w.change.kind, w.change.status, w.account and w.account.secret_key) for w in writes] == [
        (ChangeKind.CREATE_ACCOUNT, ChangeStatus.PLANNED, "srcNewSK01"),
        (ChangeKind.CREATE_ACCOUNT, ChangeStatus.PLANNED, "srcOrderSK")]


def test_an_account_equal_up_to_order_and_secret_needs_nothing_and_nothing_is_deleted() -> None:
    same = account("orderApp", "dstOrderSK", topics=["Payments=SUB", "OrdersB=PUB"], groups=["g1=SUB"],
                   defaultTopicPerm="DENY")
    only_target = account("localApp", "localAppSK", admin=True)
    targets = {"dst-a": BrokerAclConfig((), (same, only_target))}
    source = BrokerAclConfig((), (SOURCE.accounts[0],))
    assert plan_acl(source, targets, MAPPER, AclSyncSettings(enabled=True)) == []
    # with copy_secrets the secret counts too: the target takes the source's
    [write] = plan_acl(source, targets, MAPPER, AclSyncSettings(enabled=True, copy_secrets=True))
    assert write.account is not None and write.account.secret_key == "srcOrderSK" and write.brokers == ("dst-a",)


def test_the_acl_copy_is_off_by_default_and_named_in_the_link_settings() -> None:
    assert ConfigSyncSettings().acl == AclSyncSettings(enabled=False, copy_secrets=False)
    settings = ConfigSyncSettings.model_validate({"acl": {"enabled": True, "copy_secrets": True}})
    assert settings.acl.enabled and settings.acl.copy_secrets


def test_a_round_with_the_acl_copy_records_its_account_changes_without_secrets(tmp_path: Path) -> None:
    from connectors.config_sync.applier import CONFIG_CHANGES, ConfigApplier, ConfigTables, sync_round
    from connectors.config_sync.evidence import Evidence
    from connectors.config_sync.plan import ConfigChange
    from connectors.config_sync.state import ClusterState

    [write] = plan_acl(BrokerAclConfig((), (SOURCE.accounts[0],)),
                       {"dst-a": BrokerAclConfig((), (account("orderApp", "dstOrderSK"),))}, MAPPER,
                       AclSyncSettings(enabled=True))

    class Acl:
        def round(self) -> list[ConfigChange]:
            return [write.change.with_status(ChangeStatus.APPLIED, write.change.detail)]

    empty = ClusterState(1, {}, {}, ("dst-a",))
    applier = ConfigApplier(target_admin=None, mapper=MAPPER, settings=ConfigSyncSettings(),  # type: ignore[arg-type]
                            read_target=lambda: empty, acl=Acl())  # type: ignore[arg-type]
    tables = ConfigTables(tmp_path)
    sync_round(tables, applier, empty, Evidence(), link="l", query_id="q", batch_id=0)
    [row] = tables.read(CONFIG_CHANGES).to_pylist()
    assert (row["kind"], row["subject"], row["status"]) == ("update_account", "orderApp", "applied")
    assert '"topicPerms": ["OrdersB=PUB", "Payments=SUB"]' in row["group_config"]
    assert "SK" not in str(row)
