"""broker_store.controller.replicas: the controller's election, SyncStateSet and broker-id rules, with
RocketMQ's response codes (pure: no sockets, no clock)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker_store.controller.replicas import (
    BrokerLiveInfo,
    GroupState,
    Member,
    alter_sync_state_set,
    apply_broker_id,
    elect_master,
    elect_policy,
    needs_reelection,
    next_broker_id,
    register_broker,
)
from broker_store.protocol.codes import ResponseCode as R


def group(*ids: int, master: int | None = None, epoch: int = 0, sss: tuple[int, ...] = (), sss_epoch: int = 0
          ) -> GroupState:
    return GroupState("c", "g", {i: Member(f"127.0.0.1:{1000 + i}", f"127.0.0.1:{1000 + i};1") for i in ids},
                      master, epoch, frozenset(sss), sss_epoch)


def live(*infos: tuple[int, int, int, int]) -> dict[int, BrokerLiveInfo]:
    """(id, epoch, max offset, priority) of each live broker."""
    return {i: BrokerLiveInfo(i, f"127.0.0.1:{1000 + i}", e, o, 0, p) for i, e, o, p in infos}


def test_broker_ids_start_at_one_and_are_compare_and_set() -> None:
    assert next_broker_id(None).broker_id == 1
    first = apply_broker_id(None, "c", "g", 1, "127.0.0.1:1001;1")
    assert first.ok and first.state is not None and first.state.members[1].address == "127.0.0.1:1001"
    assert apply_broker_id(None, "c", "g", 2, "a:1;1").code is R.CONTROLLER_BROKER_ID_INVALID
    g = first.state
    assert next_broker_id(g).broker_id == 2
    taken = apply_broker_id(g, "c", "g", 1, "127.0.0.1:1002;5")
    assert taken.code is R.CONTROLLER_BROKER_ID_INVALID and "taken by 127.0.0.1:1001;1" in taken.remark
    again = apply_broker_id(g, "c", "g", 1, "127.0.0.1:1001;1")
    assert again.ok and again.state is None  # the same broker applying again changes nothing
    assert apply_broker_id(g, "c", "g", 0, "x:1;1").code is R.CONTROLLER_BROKER_ID_INVALID


def test_register_keeps_the_id_across_an_address_change_and_names_only_a_live_master() -> None:
    g = group(1, 2, master=1, epoch=1, sss=(1,), sss_epoch=1)
    moved = register_broker(g, "g", 2, "127.0.0.1:2002", alive={1, 2})
    assert moved.ok and moved.state is not None and moved.state.members[2].address == "127.0.0.1:2002"
    assert moved.answer is not None and moved.answer.master_id == 1
    dead_master = register_broker(g, "g", 2, "127.0.0.1:1002", alive={2})
    assert dead_master.state is None and dead_master.answer is not None and dead_master.answer.master_id is None
    assert register_broker(g, "g", 3, "x:1", alive={2}).code is R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert register_broker(None, "g", 1, "x:1", alive=()).code is R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_the_first_election_takes_the_requester() -> None:
    out = elect_master(group(1, 2), "g", live((1, 0, 0, 0), (2, 0, 0, 0)), requester=2)
    assert out.ok and out.state is not None
    assert (out.state.master_id, out.state.master_epoch, out.state.sync_state_set, out.state.sync_state_set_epoch) \
        == (2, 1, frozenset({2}), 1)


def test_a_dead_master_is_replaced_by_the_best_live_sync_state_set_member() -> None:
    g = group(1, 2, 3, 4, master=1, epoch=3, sss=(1, 2, 3), sss_epoch=5)
    # 4 is not in the SyncStateSet: never elected without unclean, whatever its offset
    out = elect_master(g, "g", live((2, 3, 100, 5), (3, 3, 200, 9), (4, 3, 999, 0)), requester=None)
    assert out.ok and out.state is not None
    assert (out.state.master_id, out.state.master_epoch, out.state.sync_state_set, out.state.sync_state_set_epoch) \
        == (3, 4, frozenset({3}), 6)
    tie = elect_master(g, "g", live((2, 3, 200, 5), (3, 3, 200, 9)), requester=None)
    assert tie.state is not None and tie.state.master_id == 2  # same epoch and offset: lower priority wins


def test_offsets_are_compared_not_subtracted() -> None:
    big = 1 << 40  # RocketMQ's (int)(o2 - o1) overflows on gaps past 2 GiB and can pick the shorter log
    assert elect_policy({1, 2}, live((1, 1, 3 << 31, 0), (2, 1, big, 0)), None, None) == 2
    assert elect_policy({1, 2}, live((1, 1, big, 0), (2, 1, (1 << 31) + 5, 0)), None, None) == 1


def test_a_live_old_master_is_kept_unless_another_broker_is_preferred() -> None:
    g = group(1, 2, master=1, epoch=2, sss=(1, 2), sss_epoch=2)
    alive = live((1, 2, 10, 0), (2, 2, 10, 0))
    still = elect_master(g, "g", alive, requester=2)
    assert still.code is R.CONTROLLER_MASTER_STILL_EXIST and still.state is None
    forced = elect_master(g, "g", alive, requester=2, designate=True)
    assert forced.ok and forced.state is not None and forced.state.master_id == 2
    # a preferred broker that is not a live candidate: the election fails, no fallback
    gone = elect_master(g, "g", live((1, 2, 10, 0)), requester=2, designate=True)
    assert gone.code is R.CONTROLLER_ELECT_MASTER_FAILED and gone.state is None


def test_no_candidate_clears_the_master_and_unclean_election_widens_the_candidates() -> None:
    g = group(1, 2, master=1, epoch=2, sss=(1,), sss_epoch=2)
    out = elect_master(g, "g", live((2, 1, 5, 0)), requester=None)
    assert out.code is R.CONTROLLER_MASTER_NOT_AVAILABLE and out.state is not None
    assert (out.state.master_id, out.state.master_epoch, out.state.sync_state_set) == (None, 3, frozenset({1}))
    by_broker = elect_master(g, "g", live((2, 1, 5, 0)), requester=2)
    assert by_broker.code is R.CONTROLLER_ELECT_MASTER_FAILED and by_broker.state is None
    unclean = elect_master(g, "g", live((2, 1, 5, 0)), requester=None, unclean=True)
    assert unclean.ok and unclean.state is not None and unclean.state.master_id == 2


def test_alter_sync_state_set_checks_in_rocketmq_order() -> None:
    g = group(1, 2, 3, master=1, epoch=2, sss=(1,), sss_epoch=4)
    alive = {1, 2}
    assert alter_sync_state_set(g, "g", 1, 2, {1}, 4, alive).code is R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert alter_sync_state_set(g, "g", 2, 2, {1, 2}, 4, alive).code is R.CONTROLLER_INVALID_MASTER
    assert alter_sync_state_set(g, "g", 1, 1, {1, 2}, 4, alive).code is R.CONTROLLER_FENCED_MASTER_EPOCH
    assert alter_sync_state_set(g, "g", 1, 2, {1, 2}, 3, alive).code is R.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter_sync_state_set(g, "g", 1, 2, {1, 9}, 4, alive).code is R.CONTROLLER_INVALID_REPLICAS
    assert alter_sync_state_set(g, "g", 1, 2, {1, 3}, 4, alive).code is R.CONTROLLER_BROKER_NOT_ALIVE
    assert alter_sync_state_set(g, "g", 1, 2, {2}, 4, alive).code is R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    ok = alter_sync_state_set(g, "g", 1, 2, {1, 2}, 4, alive)
    assert ok.ok and ok.state is not None
    assert (ok.state.sync_state_set, ok.state.sync_state_set_epoch) == (frozenset({1, 2}), 5)


def test_reelection_is_needed_for_a_dead_master_or_no_master_with_an_eligible_broker_back() -> None:
    g = group(1, 2, master=1, epoch=2, sss=(1, 2), sss_epoch=2)
    assert needs_reelection(g, {2}) and not needs_reelection(g, {1, 2}) and not needs_reelection(g, set())
    cleared = group(1, 2, master=None, epoch=3, sss=(1,), sss_epoch=2)
    assert not needs_reelection(cleared, {2}) and needs_reelection(cleared, {2}, unclean=True)
    assert needs_reelection(cleared, {1})
    assert not needs_reelection(group(1), {1})  # never elected: the broker's own registration asks


def test_group_state_round_trips() -> None:
    g = group(1, 2, master=2, epoch=7, sss=(1, 2), sss_epoch=9)
    assert GroupState.from_json(g.to_json()) == g


BROKERS = st.dictionaries(st.integers(1, 6), st.tuples(st.integers(0, 3), st.integers(0, 1 << 45), st.integers(0, 3)),
                          min_size=1)


@given(BROKERS, st.frozensets(st.integers(1, 6), min_size=1))
def test_the_elected_broker_is_a_live_candidate_with_no_better_one(infos: dict[int, tuple[int, int, int]],
                                                                   candidates: frozenset[int]) -> None:
    alive = {i: BrokerLiveInfo(i, "a", e, o, 0, p) for i, (e, o, p) in infos.items()}
    chosen = elect_policy(candidates, alive, None, None)
    eligible = [c for c in candidates if c in alive]
    if not eligible:
        assert chosen is None
        return
    assert chosen in eligible
    best = alive[chosen]
    for c in eligible:
        other = alive[c]
        assert (other.epoch, other.max_offset) <= (best.epoch, best.max_offset)
