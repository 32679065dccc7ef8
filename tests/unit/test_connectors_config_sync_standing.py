"""connectors.config_sync.standing: a refusal is recorded once per distinct change and keeps counting as
pending while it stands (pure), and ``ConfigTables.commit_round`` applies that on a real Delta table."""

from __future__ import annotations

from pathlib import Path

from connectors.config_sync.applier import AppliedRound, ConfigTables
from connectors.config_sync.evidence import Evidence
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange, plan_changes
from connectors.config_sync.standing import ChangeKey, fold, pending, queue_floors, to_record, unfinished_deletions
from connectors.config_sync.state import ClusterState
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig

SHRINK = ConfigChange(ChangeKind.SHRINK, "DR_T", ChangeStatus.REFUSED, ("T",), 2, 2, 6, detail="2 < 8")
GROWTH = ConfigChange(ChangeKind.UPDATE_TOPIC, "DR_U", ChangeStatus.APPLIED, ("U",), 16, 16, 6)


def rounds(*changes_per_round: list[ConfigChange], whole_view: bool = True) -> list[tuple[list[str], int]]:
    """Per round: what is recorded (kind subject status) and the pending count after it."""
    standing: dict[ChangeKey, ConfigChange] = {}
    out = []
    for changes in changes_per_round:
        recorded = to_record(standing, changes, whole_view=whole_view)
        fold(standing, recorded)
        out.append(([f"{c.kind.value} {c.subject} {c.status.value}" for c in recorded], pending(standing)))
    return out


def test_a_standing_refusal_is_recorded_once_and_stays_pending() -> None:
    assert rounds([SHRINK], [SHRINK], [SHRINK, GROWTH], [SHRINK]) == [
        (["shrink DR_T refused"], 1), ([], 1), (["update_topic DR_U applied"], 1), ([], 1)]


def test_a_changed_refusal_is_recorded_again() -> None:
    other = ConfigChange(ChangeKind.SHRINK, "DR_T", ChangeStatus.REFUSED, ("T",), 1, 1, 6, detail="1 < 8")
    assert rounds([SHRINK], [other], [other]) == [(["shrink DR_T refused"], 1), (["shrink DR_T refused"], 1),
                                                  ([], 1)]


def test_a_resolved_refusal_is_cleared_once_and_recorded_again_when_it_reappears() -> None:
    assert rounds([SHRINK], [], [], [SHRINK]) == [
        (["shrink DR_T refused"], 1), (["shrink DR_T cleared"], 0), ([], 0), (["shrink DR_T refused"], 1)]


def test_an_applied_change_ends_a_failure_and_is_always_recorded() -> None:
    failed = GROWTH.with_status(ChangeStatus.FAILED, "target busy")
    assert rounds([failed], [failed], [GROWTH], [GROWTH]) == [
        (["update_topic DR_U failed"], 1), ([], 1), (["update_topic DR_U applied"], 0),
        (["update_topic DR_U applied"], 0)]


def test_nothing_is_cleared_on_a_partial_view() -> None:
    standing: dict[ChangeKey, ConfigChange] = {}
    fold(standing, [SHRINK])
    unreadable = ConfigChange(ChangeKind.READ_TARGET, "", ChangeStatus.FAILED, detail="timeout")
    recorded = to_record(standing, [unreadable], whole_view=False)
    assert recorded == [unreadable]
    fold(standing, recorded)
    assert pending(standing) == 2


def test_commit_round_on_the_delta_table(tmp_path: Path) -> None:
    tables = ConfigTables(tmp_path)
    attributes = ConfigChange(ChangeKind.CREATE_TOPIC, "DR_Big", ChangeStatus.REFUSED, ("Big",), 64, 64, 6,
                              attributes={"tier": "gold"}, detail="64 queues exceed max_queue_nums 32")
    for batch in range(3):
        tables.commit_round("q", batch, 1, AppliedRound([SHRINK, attributes], whole_view=True))
    assert tables.read("config_changes").num_rows == 2  # each refusal once, not once per round
    assert tables.pending_config_changes() == 2
    # a restarted writer (a new ConfigTables on the same table) knows what stands
    again = ConfigTables(tmp_path)
    assert again.commit_round("q2", 0, 1, AppliedRound([SHRINK, attributes], whole_view=True)) == []
    assert again.commit_round("q2", 1, 1, AppliedRound([attributes], whole_view=True)) == [
        SHRINK.with_status(ChangeStatus.CLEARED, "no longer called for (was refused: 2 < 8)")]
    assert again.pending_config_changes() == 1
    assert again.commit_round("q2", 1, 1, AppliedRound([], whole_view=True)) == []  # batch 1 committed before


def test_a_failed_group_deletion_is_called_for_again_until_applied() -> None:
    settings = ConfigSyncSettings(propagate_deletion=True)
    mapper = TopicMapper(TopicMappingConfig.model_validate({"include": [{"pattern": ".*"}]}))
    source = ClusterState(1, {}, {}, ("b1",))  # "billing" was deleted on the source
    target = ClusterState(1, {}, {"billing": {"groupName": "billing"}}, ("b1",))
    standing: dict[ChangeKey, ConfigChange] = {}
    first = [c.with_status(ChangeStatus.FAILED, "target busy")
             for c in plan_changes(source, target, mapper, settings, Evidence(deleted_groups={"billing": "gone"}))]
    fold(standing, to_record(standing, first, whole_view=True))
    # the reader forgot "billing" once judged deleted: the failure gives it back
    topics_again, groups_again = unfinished_deletions(standing)
    assert (topics_again, groups_again) == ([], ["billing"])
    again = plan_changes(source, target, mapper, settings, Evidence().retrying(topics_again, groups_again))
    assert [(c.kind, c.subject, c.status) for c in again] == [(ChangeKind.DELETE_GROUP, "billing",
                                                               ChangeStatus.PLANNED)]
    fold(standing, to_record(standing, [again[0].with_status(ChangeStatus.APPLIED, "")], whole_view=True))
    assert unfinished_deletions(standing) == ([], []) and pending(standing) == 0


def test_an_unknown_explicit_group_is_recorded_once_and_cleared_when_it_appears() -> None:
    settings = ConfigSyncSettings(groups={"explicit": ["ghost"]})
    mapper = TopicMapper(TopicMappingConfig(all_topics=True))
    empty = ClusterState(1, {}, {}, ("b1",))
    missing = plan_changes(empty, empty, mapper, settings)
    appeared = [c.with_status(ChangeStatus.APPLIED, "")
                for c in plan_changes(ClusterState(1, {}, {"ghost": {"groupName": "ghost"}}, ("b1",)), empty, mapper,
                                      settings)]
    assert rounds(missing, missing, appeared) == [
        (["unknown_group ghost refused"], 1), ([], 1),
        (["create_group ghost applied", "unknown_group ghost cleared"], 0)]


def test_queue_floors_are_the_largest_counts_of_applied_deletions() -> None:
    def delete(subject: str, status: ChangeStatus, read: int | None, write: int | None) -> ConfigChange:
        return ConfigChange(ChangeKind.DELETE_TOPIC, subject, status, ("s",), read, write)
    assert queue_floors([delete("T", ChangeStatus.APPLIED, 8, 8), delete("T", ChangeStatus.APPLIED, 4, 16),
                         delete("U", ChangeStatus.DEFERRED, 32, 32), delete("V", ChangeStatus.APPLIED, None, None)]) \
        == {"T": (8, 16)}


def test_a_deferred_deletion_is_called_for_again() -> None:
    deferred = ConfigChange(ChangeKind.DELETE_TOPIC, "DR_T", ChangeStatus.DEFERRED, ("T",), 4, 4, detail="waits")
    standing: dict[ChangeKey, ConfigChange] = {}
    fold(standing, [deferred])
    assert unfinished_deletions(standing) == (["T"], []) and pending(standing) == 1
