"""Copying ACL 1.0 accounts from a link's source to its target (``config_sync.acl``; docs/security.md, "ACL"): each
source account's permissions on every target primary, through the requests an operator's mqadmin would send
(GET_BROKER_CLUSTER_ACL_CONFIG to read, UPDATE_AND_CREATE_ACL_CONFIG to write).

The rules (``plan_acl``, pure):

* the source's accounts are those of its first primary by broker group name that answers (replicas copy their
  primary's file; an operator keeps the groups' files alike);
* an account is *mapped* before it is compared: each ``topic=PERM`` entry names the target topic the link's
  topic mapping gives (an entry for a topic the link does not copy is left out), group entries, the default
  permissions, ``admin`` and ``whiteRemoteAddress`` are kept as they are;
* per target broker group: an account equal to the mapped one (secrets aside; entry order does not count) needs
  nothing; a missing or different one is written there;
* the secret written is the target's own, taken from any target group that holds the account, so copying
  permissions never changes how clients sign on the target; with ``copy_secrets`` it is the source's. An
  account no target group holds cannot be created without ``copy_secrets``: a ``REFUSED`` change saying so;
* nothing is deleted on the target (an account the source lost stays until someone removes it).

Changes go to the link's ``config_changes`` table like topic changes (kind ``create_account`` when no target
group holds it, else ``update_account``; subject the access key; ``group_config`` the mapped account's JSON
*without* its secret, which never reaches a table, a log line or an exception text).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker_store.client import Admin
from broker_store.client.acl_admin import AclAdmin, BrokerAclConfig, PlainAccount
from broker_store.protocol.errors import RocketMQError
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange
from connectors.core.errors import TopicMappingError
from connectors.core.sync_settings import AclSyncSettings
from connectors.core.topic_mapping import TopicMapper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AclWrite:
    """One planned account write: the change to record, and what to write where."""

    change: ConfigChange
    account: PlainAccount | None
    """The mapped account with the secret to write (None when the change is not to be applied)."""
    brokers: tuple[str, ...] = ()
    """Target broker groups to write it to."""


def map_account(account: PlainAccount, mapper: TopicMapper) -> PlainAccount:
    """``account`` with its topic entries renamed by the link's mapping (entries of topics it does not copy
    dropped); the secret is the source's."""
    topic_perms = []
    for entry in account.topic_perms:
        topic, sep, perm = entry.partition("=")
        try:
            target = mapper.target_for(topic.strip())
        except TopicMappingError:
            target = None  # the topic rules report it; its permission has no target topic to go to
        if sep and target is not None:
            topic_perms.append(f"{target}={perm.strip()}")
    return account.model_copy(update={"topic_perms": topic_perms})


def _public(account: PlainAccount) -> dict[str, object]:
    """What is compared and recorded: every field but the secret, entry lists as sorted sets."""
    data = account.model_dump(by_alias=True, exclude={"secret_key"})
    data["topicPerms"] = sorted(set(account.topic_perms))
    data["groupPerms"] = sorted(set(account.group_perms))
    return data


def plan_acl(source: BrokerAclConfig, targets: Mapping[str, BrokerAclConfig], mapper: TopicMapper,
             settings: AclSyncSettings) -> list[AclWrite]:
    """The writes that make every target group in ``targets`` (broker group -> its ACL) hold every source account,
    mapped (see the module docstring)."""
    writes = []
    for account in sorted(source.accounts, key=lambda a: a.access_key):
        mapped = map_account(account, mapper)
        wanted = _public(mapped)
        held = {group: next((a for a in acl.accounts if a.access_key == account.access_key), None)
                for group, acl in sorted(targets.items())}
        stale = tuple(group for group, have in held.items() if have is None or _public(have) != wanted
                      or (settings.copy_secrets and have.secret_key != mapped.secret_key))
        if not stale:
            continue
        existing = next((a for a in held.values() if a is not None), None)
        kind = ChangeKind.UPDATE_ACCOUNT if existing is not None else ChangeKind.CREATE_ACCOUNT
        record = ConfigChange(kind, account.access_key, ChangeStatus.PLANNED, (account.access_key,),
                              group_config=wanted, detail=f"on target broker group(s) {', '.join(stale)}")
        if settings.copy_secrets:
            writes.append(AclWrite(record, mapped, stale))
        elif existing is not None:
            writes.append(AclWrite(record, mapped.model_copy(update={"secret_key": existing.secret_key}), stale))
        else:
            writes.append(AclWrite(record.with_status(
                ChangeStatus.REFUSED, "no target broker group has this account and config_sync.acl.copy_secrets is "
                                      "false: create it on the target (any secret); its permissions then follow"),
                None))
    return writes


class AclSync:
    """Reads both clusters' ACLs and applies ``plan_acl`` on the driver, once per config-sync round."""

    def __init__(self, *, source_admin: Admin, source_cluster: str, target_admin: Admin, mapper: TopicMapper,
                 settings: AclSyncSettings) -> None:
        self._source = source_admin
        self._source_cluster = source_cluster
        self._target = target_admin
        self._mapper = mapper
        self._settings = settings

    def round(self) -> list[ConfigChange]:
        """This round's account changes, applied (APPLIED / FAILED) or not (REFUSED); a cluster whose ACL cannot
        be read gives one FAILED ``read_acl`` change and nothing else."""
        try:
            source_primaries = self._source.primary_addrs(self._source_cluster)
            target_primaries = self._target.primary_addrs(None)
        except RocketMQError as exc:
            return [_read_failed("a cluster (listing its brokers)", exc)]
        source = self._first_answer(AclAdmin(self._source), source_primaries)
        if isinstance(source, ConfigChange):
            return [source]
        acl = AclAdmin(self._target)
        targets: dict[str, BrokerAclConfig] = {}
        for group, addr in sorted(target_primaries.items()):
            try:
                targets[group] = acl.acl_config(addr)
            except RocketMQError as exc:
                return [_read_failed(f"target broker group {group} ({addr})", exc)]
        out = []
        for write in plan_acl(source, targets, self._mapper, self._settings):
            out.append(write.change if write.account is None else self._apply(acl, write, target_primaries))
        return out

    @staticmethod
    def _first_answer(acl: AclAdmin, primaries: Mapping[str, str]) -> BrokerAclConfig | ConfigChange:
        errors: list[str] = []
        for group, addr in sorted(primaries.items()):
            try:
                return acl.acl_config(addr)
            except RocketMQError as exc:
                errors.append(f"{group} ({addr}): {exc}")
        return _read_failed("the source", "; ".join(errors) or "no primary registered")

    def _apply(self, acl: AclAdmin, write: AclWrite, primaries: Mapping[str, str]) -> ConfigChange:
        assert write.account is not None
        failed: list[str] = []
        for group in write.brokers:
            try:
                acl.update_account(primaries[group], write.account)
            except RocketMQError as exc:  # the message names the key and masks the secret (acl_processor)
                failed.append(f"{group}: {exc}")
        c = write.change
        if failed:
            log.warning("config sync: account %s not written on %s", c.subject, "; ".join(failed))
            return c.with_status(ChangeStatus.FAILED, "; ".join(failed))
        return c.with_status(ChangeStatus.APPLIED, c.detail)


def _read_failed(what: str, why: object) -> ConfigChange:
    return ConfigChange(ChangeKind.READ_ACL, "", ChangeStatus.FAILED, detail=f"cannot read the ACL of {what}: {why}")


__all__: Sequence[str] = ("AclSync", "AclWrite", "map_account", "plan_acl")
