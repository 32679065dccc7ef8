"""RoleState and RoleTransition: a role change fences the broker while its steps run, in order, without sockets.

The state machine is driven step by step; the transition's I/O steps are futures the test resolves, so each
fenced window is observed (sends refused, pulls cut at the confirm offset) before it is let go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from broker_store.broker import BrokerRole, RoleState
from broker_store.broker.primary_lease import PrimaryLease
from broker_store.broker.pull_processor import cut_at_offset
from broker_store.broker.role import RoleStage, RoleTransitionError, RoleView, StaleEpochError
from broker_store.broker.role_transition import RoleTransition, StorePromotionSteps
from broker_store.broker.send_processor import SERVICE_NOT_AVAILABLE_REMARK, SendContext, SendProcessor
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import ManualClock
from broker_store.net.server import Connection
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import StoreError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import SendMessageRequestHeader
from broker_store.protocol.message import decode_stored_messages
from broker_store.store import GetStatus, MessageStore, StoreConfig

P, R, PROMOTING, DEMOTING = RoleStage.PRIMARY, RoleStage.REPLICA, RoleStage.PROMOTING, RoleStage.DEMOTING


def recorded(state: RoleState) -> list[tuple[RoleView, RoleView]]:
    seen: list[tuple[RoleView, RoleView]] = []
    state.listeners.append(lambda old, new: seen.append((old, new)))
    return seen


# -- RoleState: the pure state machine -----------------------------------------------------------------


def test_starts_unfenced_from_the_configured_id() -> None:
    primary, replica = RoleState(0), RoleState(2, epoch=4)
    assert (primary.stage, primary.is_primary, primary.fenced, primary.broker_id) == (P, True, False, 0)
    assert (replica.stage, replica.role, replica.broker_id, replica.epoch) == (R, BrokerRole.REPLICA, 2, 4)
    assert primary.replica_id == 1  # a primary configured as id 0 registers as replica 1 once demoted


def test_promotion_is_fenced_until_finished_and_registers_id_0_only_then() -> None:
    state = RoleState(2)
    seen = recorded(state)
    assert state.begin_promotion(3)
    assert (state.stage, state.fenced, state.is_primary, state.role) == (PROMOTING, True, False, BrokerRole.REPLICA)
    assert (state.broker_id, state.epoch) == (2, 3)  # not primary to clients before the steps are done
    state.finish()
    assert (state.stage, state.is_primary, state.broker_id) == (P, True, 0)
    assert seen == [(RoleView(R, 2, 0), RoleView(PROMOTING, 2, 3)), (RoleView(PROMOTING, 2, 3), RoleView(P, 0, 3))]


def test_demotion_is_fenced_from_its_first_step_and_stops_being_primary_at_once() -> None:
    state = RoleState(0, epoch=1)
    seen = recorded(state)
    assert state.begin_demotion(2)
    assert (state.stage, state.fenced, state.is_primary, state.broker_id, state.epoch) == (DEMOTING, True, False, 1, 2)
    state.finish()
    assert (state.stage, state.fenced, state.broker_id) == (R, False, 1)
    assert [new.stage for _, new in seen] == [DEMOTING, R]


def test_promoting_the_primary_again_needs_a_newer_epoch_and_keeps_id_0() -> None:
    state = RoleState(0, epoch=1)
    seen = recorded(state)
    assert not state.begin_promotion()  # already primary at the epoch in force: nothing to do
    assert not state.begin_promotion(1)
    assert seen == []
    assert state.begin_promotion(2)  # re-elected under a newer epoch: fenced for its epoch entry
    assert (state.stage, state.broker_id, state.is_primary) == (PROMOTING, 0, False)
    state.finish()
    assert (state.stage, state.broker_id, state.epoch) == (P, 0, 2)


def test_demoting_a_replica_only_records_a_newer_epoch() -> None:
    state = RoleState(3, epoch=1)
    seen = recorded(state)
    assert not state.begin_demotion()
    assert seen == []
    assert not state.begin_demotion(5)
    assert (state.stage, state.epoch) == (R, 5) and seen == [(RoleView(R, 3, 1), RoleView(R, 3, 5))]


def test_an_older_epoch_is_refused_and_changes_nothing() -> None:
    state = RoleState(1, epoch=7)
    seen = recorded(state)
    for step in (state.begin_promotion, state.begin_demotion, state.set_epoch):
        with pytest.raises(StaleEpochError, match="epoch 6 refused: epoch 7 is in force"):
            step(6)
    assert (state.stage, state.epoch, seen) == (R, 7, [])
    state.set_epoch(7)  # equal: accepted, no change to tell
    state.set_epoch(8)
    assert state.epoch == 8 and len(seen) == 1


def test_broker_id_and_epoch_are_settable_at_runtime() -> None:
    state = RoleState(1)
    seen = recorded(state)
    state.set_broker_id(4)
    assert (state.broker_id, state.replica_id) == (4, 4)
    with pytest.raises(ValueError, match="at least 1"):
        state.set_broker_id(0)
    state.set_epoch(2)
    assert seen == [(RoleView(R, 1, 0), RoleView(R, 4, 0)), (RoleView(R, 4, 0), RoleView(R, 4, 2))]
    assert state.begin_promotion() and state.epoch == 2
    state.finish()
    state.set_broker_id(5)  # the replica id changes; the registered id stays 0 while primary
    assert (state.broker_id, state.replica_id) == (0, 5)


def test_steps_from_the_wrong_stage_are_refused_and_abort_ends_in_replica() -> None:
    state = RoleState(0)
    with pytest.raises(RoleTransitionError, match="PRIMARY is not fenced"):
        state.finish()
    assert state.begin_demotion()
    with pytest.raises(RoleTransitionError, match="while DEMOTING"):
        state.begin_promotion()
    with pytest.raises(RoleTransitionError, match="while DEMOTING"):
        state.begin_demotion(1)
    state.abort()
    assert state.stage is R
    state.abort()  # not fenced: nothing to abort
    assert state.begin_promotion()
    state.abort()
    assert (state.stage, state.broker_id) == (R, 1)


# -- RoleTransition: the steps, in order, while fenced --------------------------------------------------


class Steps:
    """PromotionSteps and ReplicationSide whose every call waits for the test to release it."""

    def __init__(self, state: RoleState) -> None:
        self.state = state
        self.calls: list[tuple[str, RoleStage]] = []
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.start_offset = 4096
        self.fail: str | None = None

    async def _step(self, name: str) -> None:
        self.calls.append((name, self.state.stage))
        gate = self.gates.setdefault(name, asyncio.get_running_loop().create_future())
        await gate
        if name == self.fail:
            raise StoreError(f"{name} failed")

    def release(self, name: str) -> None:
        self.gates.setdefault(name, asyncio.get_running_loop().create_future()).set_result(None)

    async def stop_following(self) -> None:
        await self._step("stop_following")

    async def become(self, role: BrokerRole) -> None:
        await self._step(f"become {role.value}")

    async def truncate_invalid_tail(self) -> int:
        await self._step("truncate")
        return self.start_offset

    async def append_epoch_entry(self, epoch: int, start_offset: int) -> None:
        await self._step(f"epoch entry {epoch}@{start_offset}")

    async def rebuild_consume_queues(self) -> None:
        await self._step("rebuild")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_promotion_runs_each_step_fenced_in_changetomaster_order() -> None:
    async def main() -> None:
        state = RoleState(1)
        steps = Steps(state)
        change = asyncio.ensure_future(RoleTransition(state, steps, steps).change_role(BrokerRole.PRIMARY, epoch=2))
        order = ["stop_following", "truncate", "epoch entry 2@4096", "rebuild", "become PRIMARY"]
        for i, name in enumerate(order):
            await settle()
            assert [c for c, _ in steps.calls] == order[:i + 1]  # the next step waits for this one
            assert state.fenced and not change.done()
            steps.release(name)
        await change
        assert all(stage is PROMOTING for _, stage in steps.calls)
        assert (state.stage, state.broker_id, state.epoch) == (P, 0, 2)

    asyncio.run(main())


def test_demotion_switches_the_replication_side_while_fenced() -> None:
    async def main() -> None:
        state = RoleState(0)
        steps = Steps(state)
        change = asyncio.ensure_future(RoleTransition(state, steps, steps).demote())
        await settle()
        assert steps.calls == [("become REPLICA", DEMOTING)] and state.fenced
        steps.release("become REPLICA")
        await change
        assert (state.stage, state.broker_id) == (R, 1)

    asyncio.run(main())


def test_a_failed_step_aborts_to_replica_and_restarts_following() -> None:
    async def main() -> None:
        state = RoleState(1)
        steps = Steps(state)
        steps.fail = "truncate"
        for name in ("stop_following", "truncate", "become REPLICA"):
            steps.release(name)
        with pytest.raises(StoreError, match="truncate failed"):
            await RoleTransition(state, steps, steps).promote(1)
        assert [c for c, _ in steps.calls] == ["stop_following", "truncate", "become REPLICA"]
        assert (state.stage, state.fenced, state.broker_id) == (R, False, 1)

    asyncio.run(main())


def test_a_stale_epoch_runs_no_step_and_changes_are_serialised() -> None:
    async def main() -> None:
        state = RoleState(1, epoch=3)
        steps = Steps(state)
        transition = RoleTransition(state, steps, steps)
        with pytest.raises(StaleEpochError):
            await transition.promote(2)
        assert steps.calls == []
        first = asyncio.ensure_future(transition.promote(3))
        second = asyncio.ensure_future(transition.demote(4))
        await settle()
        assert [c for c, _ in steps.calls] == ["stop_following"]  # the demotion waits for the promotion
        for name in ("stop_following", "truncate", "epoch entry 3@4096", "rebuild", "become PRIMARY"):
            steps.release(name)
            await settle()
        await first
        assert steps.calls[-1] == ("become REPLICA", DEMOTING)
        steps.release("become REPLICA")
        await second
        assert (state.stage, state.epoch) == (R, 4)

    asyncio.run(main())


# -- what a fenced broker answers --------------------------------------------------------------------------


def _send(sp: SendProcessor) -> RemotingCommand:
    h = SendMessageRequestHeader(producer_group="pg", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
                                 queue_id=0, sys_flag=0, born_timestamp=1, flag=0)
    resp = sp.send_message(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=h.to_ext(), body=b"x"),
                           cast(Connection, None))
    assert resp is not None
    return resp


def test_sends_are_refused_service_not_available_while_fenced(tmp_path: Path) -> None:
    state = RoleState(1)
    sp = SendProcessor(SendContext(store=cast(MessageStore, None), topic_configs=cast(TopicConfigManager, None),
                                   role=state, broker_name="broker-a", cluster_name="c1", region_id="r",
                                   trace_on=False, max_message_size=1024, max_batch_size=2048, max_reconsume_times=16))
    resp = _send(sp)
    assert (resp.code, resp.remark) == (ResponseCode.SERVICE_NOT_AVAILABLE, SERVICE_NOT_AVAILABLE_REMARK)
    state.begin_promotion(2)
    resp = _send(sp)
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert resp.remark == ("broker broker-a is fenced while it changes role (PROMOTING, epoch 2): it takes no "
                           "messages until the change is done; refresh the route and retry")


def test_a_primary_whose_lease_ended_refuses_sends_before_touching_the_store() -> None:
    clock = ManualClock()
    lease = PrimaryLease(1.5, clock)
    lease.heartbeat_accepted(clock.monotonic())
    lease.confirmed(2, lease.last_beat)
    state = RoleState(0, epoch=2)
    sp = SendProcessor(SendContext(store=cast(MessageStore, None), topic_configs=cast(TopicConfigManager, None),
                                   role=state, broker_name="broker-a", cluster_name="c1", region_id="r",
                                   trace_on=False, max_message_size=1024, max_batch_size=2048, max_reconsume_times=16,
                                   lease=lease))
    clock.advance(1.5)  # frozen past the controller's heartbeat timeout: no store, no topic config is read
    resp = _send(sp)
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert (resp.remark or "").startswith("broker broker-a: no controller has confirmed this primary")


# -- the store steps of a static group --------------------------------------------------------------------


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    made = []
    for name in ("primary", "replica"):
        store = MessageStore(StoreConfig(store_dir=tmp_path / name, commit_log_segment_size=64 * 1024,
                                         flush_interval_ms=50, retention_interval_ms=0),
                             store_host="10.0.0.1:10911", clock=ManualClock())
        store.start()
        made.append(store)
    yield made[0], made[1]
    for store in made:
        store.shutdown()


def test_promotion_truncates_a_partly_received_record_and_rebuilds_the_queues(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """A replica holding a record only in part would let the new primary's puts land behind the fragment."""
    primary, replica = stores
    for i in range(3):
        primary.put_message("Promo", 0, b"m%d" % i, b"", tags_code=0, born_timestamp=0, born_host="10.0.0.2:1")
    log = primary.read_commit_log(0, primary.max_physical_offset)
    second_end = primary.get_queue_entries("Promo", 0, 1, 1)[0]
    complete = second_end.physical_offset + second_end.size
    replica.write_commit_log(0, log[:complete + 10])  # two records, then 10 bytes of the third
    steps = StorePromotionSteps(replica)
    assert asyncio.run(steps.truncate_invalid_tail()) == complete
    asyncio.run(steps.rebuild_consume_queues())
    assert replica.max_physical_offset == replica.dispatched_physical_offset == complete
    assert replica.get_max_offset("Promo", 0) == 2
    r = replica.put_message("Promo", 0, b"new", b"", tags_code=0, born_timestamp=0, born_host="10.0.0.2:1")
    assert r.wrote_offset == complete
    got = replica.get_messages("Promo", 0, 0, 10)
    assert [m.body for m in decode_stored_messages(got.body)] == [b"m0", b"m1", b"new"]


def test_fenced_pulls_are_cut_at_the_confirm_offset(stores: tuple[MessageStore, MessageStore]) -> None:
    store = stores[0]
    for i in range(3):
        store.put_message("Cut", 0, b"m%d" % i, b"", tags_code=0, born_timestamp=0, born_host="10.0.0.2:1")
    entries = store.get_queue_entries("Cut", 0, 0, 3)
    whole = store.get_messages("Cut", 0, 0, 10)
    assert cut_at_offset(whole, store.max_physical_offset) is whole
    second_end = entries[1].physical_offset + entries[1].size
    cut = cut_at_offset(whole, second_end + entries[2].size - 1)  # the third ends one byte past the limit
    assert (cut.status, cut.count, cut.next_begin_offset, cut.max_offset) == (GetStatus.FOUND, 2, 2, 3)
    assert [m.body for m in decode_stored_messages(cut.body)] == [b"m0", b"m1"]
    nothing = cut_at_offset(store.get_messages("Cut", 0, 2, 10), second_end)
    assert (nothing.status, nothing.count, nothing.next_begin_offset, nothing.body) == (
        GetStatus.OFFSET_OVERFLOW_ONE, 0, 2, b"")
