"""The broker's side of controller mode without sockets: the pure role decision, where a replica dials its
primary, the broker id assignment walk (a crash after every step, and two brokers racing for one id), the
epoch entry a promotion writes, and ControllerAgents driving RoleStates against a real Controller service
(file state store) on a ManualClock: join, first election, replicas following, failover by push and by poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path

import pytest

from broker_store.broker.broker_id_assignment import IdAssignmentError, assign_broker_id
from broker_store.broker.controller_agent import ControllerAgent
from broker_store.broker.controller_client import BrokerBeat
from broker_store.broker.identity_file import AssignedIdentity, BrokerIdentityFiles, RegisterState
from broker_store.broker.primary_lease import PrimaryLease
from broker_store.broker.role import BrokerRole, RoleStage, RoleState, RoleView
from broker_store.broker.role_decision import (
    Follow,
    IdStep,
    Keep,
    Promote,
    ReplicaInfo,
    RequestElection,
    decide_role,
    id_step,
    primary_ha_address,
)
from broker_store.clock import ManualClock
from broker_store.config import ControllerLinkSettings
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.replicas import BrokerLiveInfo, GroupState
from broker_store.controller.service import Controller, Notify
from broker_store.controller.settings import ControllerSettings
from broker_store.durable_file import write_file_atomically
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import StoreError, TransportError
from broker_store.store.epoch_cache import EpochEntry
from broker_store.store.epoch_file import EpochFile

P, R = RoleStage.PRIMARY, RoleStage.REPLICA
A1, A2 = "127.0.0.1:20001", "127.0.0.1:20002"


def info(master: int | None, epoch: int, sss: Iterable[int] = ()) -> ReplicaInfo:
    address = None if master is None else f"127.0.0.1:{20000 + master}"
    return ReplicaInfo(master, address, epoch, frozenset(sss), 1)


# -- decide_role ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("view", "following", "group", "action"), [
    # this broker is the master
    (RoleView(R, 1, 0), None, info(1, 1, {1}), Promote(1)),                 # the first election took it
    (RoleView(P, 0, 1), None, info(1, 1, {1}), Keep("already primary at epoch 1")),
    (RoleView(P, 0, 1), None, info(1, 3, {1}), Promote(3)),                 # re-elected: a new epoch entry
    (RoleView(R, 1, 2), A2, info(1, 2, {1, 2}), Promote(2)),                # restarted as that epoch's primary
    # another broker is
    (RoleView(P, 0, 1), None, info(2, 2, {2}), Follow(2, A2, 2)),           # replaced: demote, follow
    (RoleView(R, 1, 1), None, info(2, 2, {2}), Follow(2, A2, 2)),
    (RoleView(R, 1, 2), A2, info(2, 2, {2}), Keep(f"already following {A2} at epoch 2")),
    (RoleView(R, 1, 2), A1, info(2, 2, {2}), Follow(2, A2, 2)),             # the master moved to another port
    (RoleView(R, 1, 0), None, info(2, 0, {2}), Follow(2, A2, 0)),
    # older views are ignored, whatever they say
    (RoleView(P, 0, 3), None, info(2, 2, {2}), Keep("the controller's master epoch 2 is older than this broker's 3")),
    (RoleView(R, 1, 3), A2, info(1, 2, {1}), Keep("the controller's master epoch 2 is older than this broker's 3")),
    # nobody is
    (RoleView(R, 1, 0), None, info(None, 0), RequestElection()),            # never elected: the requester wins
    (RoleView(R, 1, 2), A2, info(None, 3, {1, 2}), RequestElection()),      # a SyncStateSet member may be elected
    (RoleView(P, 0, 2), None, info(None, 3, {1}), RequestElection()),       # the controller lost sight of it
    (RoleView(R, 3, 2), A2, info(None, 3, {1, 2}),
     Keep("no master, and broker 3 is not in the SyncStateSet [1, 2]: the controller elects one of its members")),
    # a change in flight is never overtaken
    (RoleView(RoleStage.PROMOTING, 1, 2), None, info(2, 3, {2}),
     Keep("a role change is in flight (PROMOTING); decided again after it")),
])
def test_decide_role(view: RoleView, following: str | None, group: ReplicaInfo, action: object) -> None:
    own_id = 3 if view.broker_id == 3 else 1
    assert decide_role(view, own_id, group, following=following) == action


def test_a_replica_dials_the_named_ha_address_of_that_primary_else_listen_plus_one() -> None:
    assert primary_ha_address(A2, named_master=None, named_ha=None) == "127.0.0.1:20003"
    assert primary_ha_address(A2, named_master=A2, named_ha="127.0.0.1:31000") == "127.0.0.1:31000"
    # the name server still lists the old primary: its HA address is not the new one's
    assert primary_ha_address(A2, named_master=A1, named_ha="127.0.0.1:20002") == "127.0.0.1:20003"


def test_the_id_steps_follow_the_files() -> None:
    assert [id_step(s) for s in RegisterState] == [IdStep.ASK_NEXT_ID, IdStep.APPLY, IdStep.DONE]


# -- an in-process controller behind the agent's API ----------------------------------------------------


class InProcessApi:
    """``ControllerApi`` over a ``Controller`` service (what ``ControllerClient`` does over the wire, without
    sockets; the integration tests run the wire). ``crash_after`` raises Crash once that many calls (API
    calls and identity file writes, counted by the test's wrappers) have run."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.reachable = True

    def _check(self) -> None:
        if not self.reachable:  # as ControllerClient says it when no controller answers
            raise TransportError("no controller answered (test)")

    async def heartbeat(self, beat: BrokerBeat) -> bool:
        self._check()
        self.controller.heartbeat(beat.cluster_name, beat.broker_name, BrokerLiveInfo(
            beat.broker_id, beat.broker_addr, beat.epoch, beat.max_offset, beat.confirm_offset,
            beat.election_priority), beat.heartbeat_timeout_ms)
        return True

    async def next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        self._check()
        out = await self.controller.next_broker_id(cluster_name, broker_name)
        assert out.broker_id is not None
        return out.broker_id

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int, check_code: str) -> bool:
        self._check()
        out = await self.controller.apply_broker_id(cluster_name, broker_name, broker_id, check_code)
        if out.code is ResponseCode.CONTROLLER_BROKER_ID_INVALID:
            return False
        assert out.ok, out
        return True

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int, address: str) -> ReplicaInfo:
        self._check()
        out = await self.controller.register_broker(broker_name, broker_id, address)
        assert out.ok and out.answer is not None, out
        return _replica_info(out.answer)

    async def elect_master(self, cluster_name: str, broker_name: str, broker_id: int) -> ReplicaInfo | None:
        self._check()
        out = await self.controller.elect_master(broker_name, requester=broker_id)
        if out.code is ResponseCode.CONTROLLER_ELECT_MASTER_FAILED:
            return None
        assert out.answer is not None
        return _replica_info(out.answer)

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        self._check()
        group, _ = await self.controller.read_group(broker_name)
        assert group is not None
        return _replica_info(group)


def _replica_info(g: GroupState) -> ReplicaInfo:
    return ReplicaInfo(g.master_id, g.master_address, g.master_epoch, g.sync_state_set, g.sync_state_set_epoch)


def new_controller(tmp_path: Path, clock: ManualClock, notify: Notify | None = None) -> Controller:
    return Controller(FileStateStore(tmp_path / "controller" / "state.json"),
                      ControllerSettings(heartbeat_timeout_ms=3000, scan_interval_ms=500), clock=clock, notify=notify)


# -- the id assignment walk ------------------------------------------------------------------------------


class Crash(Exception):
    """A kill -9 between two steps of the walk."""


class Steps:
    """Counts the walk's steps (controller calls and identity file writes) and crashes after the n-th."""

    def __init__(self, crash_after: int | None) -> None:
        self.crash_after = crash_after
        self.done = 0

    def step(self) -> None:
        self.done += 1
        if self.crash_after is not None and self.done == self.crash_after:
            raise Crash(f"crashed after step {self.done}")


class CountingApi:
    def __init__(self, api: InProcessApi, steps: Steps) -> None:
        self._api, self._steps = api, steps

    async def next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        out = await self._api.next_broker_id(cluster_name, broker_name)
        self._steps.step()
        return out

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int, check_code: str) -> bool:
        out = await self._api.apply_broker_id(cluster_name, broker_name, broker_id, check_code)
        self._steps.step()
        return out


class CountingFiles(BrokerIdentityFiles):
    def __init__(self, store_dir: Path, steps: Steps) -> None:
        super().__init__(store_dir, "c", "g")
        self._steps = steps

    def write_temp(self, broker_id: int, check_code: str) -> AssignedIdentity:
        out = super().write_temp(broker_id, check_code)
        self._steps.step()
        return out

    def persist(self, broker_id: int) -> AssignedIdentity:
        """``BrokerIdentityFiles.persist``'s two writes, a step each."""
        write_file_atomically(self.path, AssignedIdentity("c", "g", broker_id).encode())
        self._steps.step()  # a crash between brokerIdentity and the temp file's removal
        self.clear_temp()
        self._steps.step()
        return AssignedIdentity("c", "g", broker_id)


WALK_STEPS = 5
"""GET_NEXT_BROKER_ID, write temp, APPLY_BROKER_ID, write brokerIdentity, remove temp."""


@pytest.mark.parametrize("crash_after", range(1, WALK_STEPS + 1))
def test_a_crash_after_any_step_of_the_id_walk_resumes_to_the_same_single_id(tmp_path: Path, crash_after: int) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        api = InProcessApi(new_controller(tmp_path, clock))
        codes = iter(f"127.0.0.1:{port};{port}" for port in range(30000, 30010))  # a new address each start

        async def start(steps: Steps) -> int:
            return await assign_broker_id(CountingApi(api, steps), CountingFiles(tmp_path / "store", steps),
                                          cluster_name="c", broker_name="g", check_code=lambda: next(codes))

        first = Steps(crash_after)
        with pytest.raises(Crash):
            await start(first)
        assert await start(Steps(None)) == 1
        files = BrokerIdentityFiles(tmp_path / "store", "c", "g")
        assert files.path.read_text() == "c#g#1" and not files.temp_path.exists()
        group, _ = await api.controller.read_group("g")
        assert group is not None and list(group.members) == [1]  # one id, never a second one for one broker
        assert (await api.controller.register_broker("g", 1, "127.0.0.1:30009")).ok
        assert await start(Steps(None)) == 1  # a later start keeps it without asking

    asyncio.run(scenario())


def test_an_uninterrupted_walk_takes_exactly_its_steps(tmp_path: Path) -> None:
    async def scenario() -> None:
        api = InProcessApi(new_controller(tmp_path, ManualClock()))
        steps = Steps(None)
        broker_id = await assign_broker_id(CountingApi(api, steps), CountingFiles(tmp_path / "s", steps),
                                           cluster_name="c", broker_name="g", check_code=lambda: "127.0.0.1:1;1")
        assert (broker_id, steps.done) == (1, WALK_STEPS)

    asyncio.run(scenario())


def test_a_broker_that_lost_the_race_for_an_id_applies_for_the_next(tmp_path: Path) -> None:
    async def scenario() -> None:
        api = InProcessApi(new_controller(tmp_path, ManualClock()))
        slow = BrokerIdentityFiles(tmp_path / "slow", "c", "g")
        slow.write_temp(await api.next_broker_id("c", "g"), "127.0.0.1:1;1")  # asked, then stalled
        fast = await assign_broker_id(api, BrokerIdentityFiles(tmp_path / "fast", "c", "g"), cluster_name="c",
                                      broker_name="g", check_code=lambda: "127.0.0.1:2;2")
        assert fast == 1
        assert await assign_broker_id(api, slow, cluster_name="c", broker_name="g",
                                      check_code=lambda: "127.0.0.1:1;3") == 2
        assert slow.path.read_text() == "c#g#2"

    asyncio.run(scenario())


def test_ids_refused_again_and_again_give_up_for_a_later_retry(tmp_path: Path) -> None:
    class Greedy(InProcessApi):
        async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int, check_code: str) -> bool:
            return False

    async def scenario() -> None:
        files = BrokerIdentityFiles(tmp_path / "s", "c", "g")
        with pytest.raises(IdAssignmentError, match="refused 8 broker ids in a row"):
            await assign_broker_id(Greedy(new_controller(tmp_path, ManualClock())), files, cluster_name="c",
                                   broker_name="g", check_code=lambda: "127.0.0.1:1;1")
        assert files.load() == (RegisterState.INITIAL, None)

    asyncio.run(scenario())


# -- the epoch entry of a promotion ----------------------------------------------------------------------


def test_a_promotion_cuts_the_epoch_file_at_its_start_and_appends_its_epoch(tmp_path: Path) -> None:
    async def scenario() -> None:
        epoch_file = EpochFile.open(tmp_path)

        async def write(epoch: int, start_offset: int) -> None:
            await asyncio.to_thread(epoch_file.begin_epoch, epoch, start_offset)

        def entries() -> tuple[EpochEntry, ...]:  # a call, so mypy does not keep one assert's narrowing for the next
            return epoch_file.cache.entries

        await write(1, 0)
        await write(1, 0)  # promoted again within its epoch (a restart): nothing new
        await write(1, 500)
        assert entries() == (EpochEntry(1, 0),)  # the epoch's range still starts at 0
        await write(3, 700)
        await write(4, 700)  # epoch 3 wrote nothing: cut, epoch 4 starts there
        assert EpochFile.open(tmp_path).cache.entries == (EpochEntry(1, 0), EpochEntry(4, 700))
        await write(5, 600)  # the log was cut below 700 (a replica's fork point): epoch 4's entry goes
        assert entries() == (EpochEntry(1, 0), EpochEntry(5, 600))
        with pytest.raises(StoreError, match="not greater than the newest epoch 5"):
            await write(2, 900)

    asyncio.run(scenario())


# -- agents over a real Controller service, time by hand -----------------------------------------------


class FakeBroker:
    """``ControlledBroker`` over a real RoleState whose changes finish at once (the fenced transition has its
    own tests); records what the agent asked."""

    def __init__(self, port: int) -> None:
        self.addr = f"127.0.0.1:{port}"
        self.role = RoleState(0, replica=True)
        self.took: list[int] = []
        self.followed: list[str] = []
        self.changes: list[tuple[BrokerRole, int | None]] = []
        self.max_offset = 0

    def role_view(self) -> RoleView:
        return self.role.view()

    async def take_broker_id(self, broker_id: int) -> None:
        self.took.append(broker_id)
        self.role.set_broker_id(broker_id)

    async def change_role(self, role: BrokerRole, *, epoch: int | None = None) -> None:
        self.changes.append((role, epoch))
        if role is BrokerRole.PRIMARY:
            if self.role.begin_promotion(epoch):
                self.role.finish()
        elif self.role.begin_demotion(epoch):
            self.role.finish()

    def follow_primary(self, ha_address: str) -> None:
        self.followed.append(ha_address)

    def set_sync_state_set(self, members: frozenset[int], epoch: int) -> None:
        self.sync_state_set = (members, epoch)

    def heartbeat_offsets(self) -> tuple[int, int, int]:
        return self.role.epoch, self.max_offset, self.max_offset


LINK = ControllerLinkSettings(controller_addrs=["127.0.0.1:1"], heartbeat_interval_ms=1000,
                              replica_info_poll_interval_ms=2000)


async def until(check: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Wait for the agents' background work (thread hops of the file store); the ManualClock does not move."""
    for _ in range(500):
        result = check()
        if result if isinstance(result, bool) else await result:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def test_agents_join_elect_follow_and_fail_over_by_push_and_by_poll(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        agents: dict[str, ControllerAgent] = {}

        async def push(group: GroupState, alive: Mapping[int, BrokerLiveInfo]) -> None:  # NOTIFY_BROKER_ROLE_CHANGED
            for live in alive.values():
                if live.address in agents and live.address != "127.0.0.1:20003":  # broker 3 misses every push
                    agents[live.address].on_notification(_replica_info(group))

        controller = new_controller(tmp_path, clock, push)
        api = InProcessApi(controller)
        brokers = [FakeBroker(20000 + i) for i in (1, 2, 3)]
        for broker in brokers:  # one after the other: ids 1, 2, 3 and the first is elected
            agent = agents[broker.addr] = ControllerAgent(
                api, broker, BrokerIdentityFiles(tmp_path / broker.addr, "c", "g"), cluster_name="c",
                broker_name="g", settings=LINK, clock=clock)
            agent.start()
            await until(agent.joined.is_set, f"{broker.addr} joined")
        one, two, three = brokers
        assert [b.took for b in brokers] == [[1], [2], [3]]
        assert one.role.view() == RoleView(P, 0, 1) and one.changes == [(BrokerRole.PRIMARY, 1)]
        for replica in (two, three):
            assert replica.role.view() == RoleView(R, replica.took[0], 1)
            assert replica.followed == ["127.0.0.1:20002"]  # the primary's listen port + 1
        assert agents[two.addr].following == one.addr

        # heartbeats every second keep all three alive past the controller's 3 s timeout
        for _ in range(5):
            clock.advance(1.0)
            await asyncio.sleep(0.05)
            assert not await controller.scan_once()
        assert sorted(controller.live.alive("g")) == [1, 2, 3]

        assert (await controller.alter_sync_state_set("g", 1, 1, frozenset({1, 2, 3}), 1)).ok  # the HA side's job
        two.max_offset, three.max_offset = 100, 50
        clock.advance(1.0)
        await until(lambda: controller.live.alive("g")[2].max_offset == 100, "fresh heartbeats")

        # broker 1 dies: its connection closes, the scan elects 2 (more data), 2 hears the push at once
        await agents.pop(one.addr).stop()
        controller.broker_closed(one.addr)
        [elected] = await controller.scan_once()
        assert elected.ok and elected.state is not None and elected.state.master_id == 2
        await until(lambda: two.role.view() == RoleView(P, 0, 2), "broker 2 promoted by the push")
        assert three.role.view() == RoleView(R, 3, 1)  # it missed the push ...
        clock.advance(2.0)
        await until(lambda: three.role.view() == RoleView(R, 3, 2), "broker 3 follows 2 after its poll")
        assert three.followed[-1] == "127.0.0.1:20003" and agents[three.addr].following == two.addr

        # broker 1 comes back on another port with its files: same id, a replica of 2
        back = FakeBroker(20011)
        (tmp_path / back.addr).symlink_to(tmp_path / one.addr)
        agents[back.addr] = ControllerAgent(api, back, BrokerIdentityFiles(tmp_path / back.addr, "c", "g"),
                                            cluster_name="c", broker_name="g", settings=LINK, clock=clock)
        agents[back.addr].start()
        await until(lambda: agents[back.addr].joined.is_set(), "the old primary rejoined")
        assert back.took == [1] and back.role.view() == RoleView(R, 1, 2)
        group, _ = await controller.read_group("g")
        assert group is not None and group.members[1].address == back.addr and group.master_id == 2

        for agent in agents.values():
            await agent.stop()

    asyncio.run(scenario())


def test_with_the_controller_unreachable_the_broker_keeps_its_role_and_retries_the_join(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        api = InProcessApi(new_controller(tmp_path, clock))
        api.reachable = False
        broker = FakeBroker(20001)
        agent = ControllerAgent(api, broker, BrokerIdentityFiles(tmp_path / "b", "c", "g"), cluster_name="c",
                                broker_name="g", settings=LINK, clock=clock)
        agent.start()
        await asyncio.sleep(0.05)
        assert not agent.joined.is_set() and broker.took == [] and broker.role.view() == RoleView(R, 1, 0)
        api.reachable = True
        clock.advance(2.0)  # the join is retried every poll interval
        await until(lambda: agent.joined.is_set(), "joined once the controller answers")
        assert broker.role.view() == RoleView(P, 0, 1)
        api.reachable = False
        clock.advance(2.0)
        await asyncio.sleep(0.05)
        assert broker.role.view() == RoleView(P, 0, 1)  # no controller: no change, only elections stop
        await agent.stop()

    asyncio.run(scenario())


def test_a_frozen_primary_refuses_on_thaw_until_the_controller_answers_and_then_is_deposed(tmp_path: Path) -> None:
    """The primary's agent stops (a SIGSTOP: no heartbeat, no poll) past the controller's 3 s timeout; the scan elects
    broker 2. On thaw its lease has ended (it refuses before anything is appended), and its first poll deposes it.
    Broker 2's lease is confirmed by the poll that follows the push electing it."""
    async def scenario() -> None:
        clock = ManualClock()
        agents: dict[str, ControllerAgent] = {}

        async def push(group: GroupState, alive: Mapping[int, BrokerLiveInfo]) -> None:
            for live in alive.values():
                if live.address in agents:
                    agents[live.address].on_notification(_replica_info(group))

        controller = new_controller(tmp_path, clock, push)
        api = InProcessApi(controller)
        one, two = FakeBroker(20001), FakeBroker(20002)
        leases = {b.addr: PrimaryLease(3.0, clock) for b in (one, two)}
        for broker in (one, two):
            agent = agents[broker.addr] = ControllerAgent(
                api, broker, BrokerIdentityFiles(tmp_path / broker.addr, "c", "g"), cluster_name="c",
                broker_name="g", settings=LINK, clock=clock, lease=leases[broker.addr])
            agent.start()
            await until(agent.joined.is_set, f"{broker.addr} joined")
        lease1, lease2 = leases[one.addr], leases[two.addr]
        assert one.role.view() == RoleView(P, 0, 1) and lease1.refusal(1) is None  # confirmed by its election
        assert (await controller.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1)).ok
        for _ in range(4):  # heartbeats every second keep the lease past its 3 s
            clock.advance(1.0)
            await asyncio.sleep(0.05)
            assert lease1.refusal(1) is None

        frozen = agents.pop(one.addr)
        await frozen.stop()  # frozen: nothing leaves it
        clock.advance(3.5)
        await asyncio.sleep(0.05)
        [elected] = await controller.scan_once()
        assert elected.ok and elected.state is not None and elected.state.master_id == 2
        await until(lambda: two.role.view() == RoleView(P, 0, 2), "broker 2 promoted by the push")
        await until(lambda: lease2.refusal(2) is None, "broker 2 confirmed by the poll after the push")

        # thaw: broker 1 still PRIMARY at epoch 1, its lease over: refused before its agent hears anything
        assert one.role.view() == RoleView(P, 0, 1)
        remark = lease1.refusal(1)
        assert remark is not None and "within its lease of 3 s" in remark
        await frozen.heartbeat_once()  # accepted, but the lease has ended: no renewal on its own
        assert lease1.refusal(1) is not None
        await frozen.poll_once()  # the controller names broker 2 at epoch 2: deposed, then demoted
        assert one.role.view() == RoleView(R, 1, 2)
        assert "names 127.0.0.1:20002 primary at epoch 2" in (lease1.refusal(1) or "")

        # every controller down: broker 2 refuses from its lease's end until a poll sent after it failed
        api.reachable = False
        clock.advance(3.0)
        assert lease2.refusal(2) is not None
        await asyncio.sleep(0.05)
        with pytest.raises(TransportError):
            await agents[two.addr].poll_once()
        assert lease2.refusal(2) is None and two.role.view() == RoleView(P, 0, 2)  # only elections stop
        for agent in agents.values():
            await agent.stop()

    asyncio.run(scenario())
