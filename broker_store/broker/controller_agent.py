"""ControllerAgent: a controller-mode broker's side of its controller (RocketMQ 5.1.1+'s ReplicasManager).

Owned by ``BrokerServer`` when ``enable_controller_mode`` is on; started after the broker serves. It joins the
group, then keeps the broker's role where the controller says it is::

    join (retried every poll interval until it succeeds):
        broker id       brokerIdentity, or the controller's next id applied for (``broker_id_assignment``);
                        the broker then registers with the name servers under it
        heartbeat       one BROKER_HEARTBEAT first, so the controller counts this broker alive when it
                        registers (an election only takes live brokers)
        register        CONTROLLER_REGISTER_BROKER: the group's live primary, if any
        act             ``role_decision.decide_role``: promote, follow, or ask for an election
    then, concurrently:
        heartbeats      every ``heartbeat_interval_ms`` to every controller (id, epoch, max and confirm
                        offsets, election priority)
        poll            CONTROLLER_GET_REPLICA_INFO every ``replica_info_poll_interval_ms``, then act
        push            NOTIFY_BROKER_ROLE_CHANGED from the controller (``on_notification``), then act

Acting is serialised (one decision and its role change at a time, each decided on the role in force when it
runs), so a late poll answer and a push cannot interleave; epochs make their order irrelevant (an older
view is ignored). The role changes go through ``BrokerServer.change_role`` (fenced; a promotion appends the
epoch entry). A replica follows the primary's HA address: the name servers' haServerAddr when their
registration answer names the same primary (``namesrv_named``), else its listen port + 1
(``role_decision.primary_ha_address``).

Every timer reads the broker's ``Clock``. Nothing here stops the broker from serving: with every controller
down it keeps its role and only elections stop. The primary's lease (``broker.primary_lease``) is fed here: every
accepted heartbeat with its send time, every answer naming a primary (a confirmation when it names this broker and
was asked for after an accepted heartbeat; a push only deposes, and a push naming this broker is followed by a poll
at once so that the new primary is confirmed within a round trip), and every poll that reached no controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from broker_store.background import cancel_and_wait
from broker_store.broker.broker_id_assignment import BrokerIdApi, assign_broker_id
from broker_store.broker.controller_client import BrokerBeat, NoControllerAnswered
from broker_store.broker.identity_file import BrokerIdentityFiles, register_check_code
from broker_store.broker.primary_lease import PrimaryLease
from broker_store.broker.role import BrokerRole, RoleView
from broker_store.broker.role_decision import (
    Follow,
    Keep,
    Promote,
    ReplicaInfo,
    RequestElection,
    RoleAction,
    decide_role,
    primary_ha_address,
)
from broker_store.clock import Clock
from broker_store.config import ControllerLinkSettings
from broker_store.protocol.errors import RocketMQError, TransportError

log = logging.getLogger(__name__)


class ControllerApi(BrokerIdApi, Protocol):
    """The controller calls the agent makes (``controller_client.ControllerClient``)."""

    async def heartbeat(self, beat: BrokerBeat) -> bool: ...

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              address: str) -> ReplicaInfo: ...

    async def elect_master(self, cluster_name: str, broker_name: str, broker_id: int) -> ReplicaInfo | None: ...

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo: ...


class ControlledBroker(Protocol):
    """What the agent needs of its broker (``BrokerServer``)."""

    @property
    def addr(self) -> str:
        """The advertised remoting ``host:port`` (the controller pushes to it)."""
        ...

    def role_view(self) -> RoleView: ...

    async def take_broker_id(self, broker_id: int) -> None:
        """brokerIdentity holds ``broker_id`` now: take it (and register with the name servers under it)."""
        ...

    async def change_role(self, role: BrokerRole, *, epoch: int | None = None) -> None: ...

    def follow_primary(self, ha_address: str) -> None:
        """Follow (or keep following) the primary's HA port at ``ha_address`` while replica."""
        ...

    def heartbeat_offsets(self) -> tuple[int, int, int]:
        """(epoch, max offset, confirm offset) for the next heartbeat."""
        ...

    def set_sync_state_set(self, members: frozenset[int], epoch: int) -> None:
        """The group's SyncStateSet as the controller holds it (the primary side counts acks by it)."""
        ...


class ControllerAgent:
    """See the module docstring."""

    def __init__(self, api: ControllerApi, broker: ControlledBroker, files: BrokerIdentityFiles, *,
                 cluster_name: str, broker_name: str, settings: ControllerLinkSettings, clock: Clock,
                 lease: PrimaryLease | None = None) -> None:
        self._api = api
        self._broker = broker
        self._files = files
        self.cluster_name, self.broker_name = cluster_name, broker_name
        self._settings = settings
        self._clock = clock
        self._lease = lease
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._pushed: set[asyncio.Task[None]] = set()
        self.broker_id: int | None = None
        """The controller-assigned id (None until the join got one)."""
        self.following: str | None = None
        """The primary's remoting address this broker follows as replica (None while primary or not yet told)."""
        self.last_info: ReplicaInfo | None = None
        """The controller's newest view of the group the agent acted on."""
        self.joined = asyncio.Event()
        """Set once the join registered this broker with the controller and acted on the answer."""
        self._named: tuple[str | None, str | None] = (None, None)
        """The name servers' last answer: (primary's remoting address, its HA address)."""
        self._failing: set[str] = set()
        """Loops whose last round failed (logged once per outage, not once per round)."""

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self.run(), name="controller-agent")]

    async def stop(self) -> None:
        await cancel_and_wait([*self._tasks, *self._pushed])
        self._tasks = []
        self._pushed.clear()

    async def run(self) -> None:
        """Join (retried), then heartbeat and poll until cancelled."""
        while True:
            try:
                await self.join()
                break
            except RocketMQError as exc:
                self._round_failed("join", f"could not join broker group {self.broker_name} through the "
                                           f"controller (retrying): {exc}")
            await self._clock.sleep(self._settings.replica_info_poll_interval_ms / 1000)
        self._round_ok("join")
        await asyncio.gather(self._every(self._settings.heartbeat_interval_ms, "heartbeat", self.heartbeat_once),
                             self._every(self._settings.replica_info_poll_interval_ms, "poll", self.poll_once))

    async def join(self) -> None:
        """Get (or keep) the broker id, heartbeat once, register with the controller, act on its answer."""
        broker_id = await assign_broker_id(
            self._api, self._files, cluster_name=self.cluster_name, broker_name=self.broker_name,
            check_code=lambda: register_check_code(self._broker.addr, int(self._clock.time() * 1000)))
        if self.broker_id is None:
            await self._broker.take_broker_id(broker_id)
            self.broker_id = broker_id
        await self.heartbeat_once()
        beat = self._last_beat()
        info = await self._api.register_broker(self.cluster_name, self.broker_name, broker_id, self._broker.addr)
        log.info("controller mode: %s/%d registered with the controller; master %s at epoch %d", self.broker_name,
                 broker_id, info.master_id, info.master_epoch)
        self._observed(info, beat)
        await self.act(info)
        self.joined.set()

    async def _every(self, interval_ms: int, what: str, round_: Callable[[], Awaitable[None]]) -> None:
        while True:
            await self._clock.sleep(interval_ms / 1000)
            try:
                await round_()
            except RocketMQError as exc:
                self._round_failed(what, f"controller {what} failed: {exc}")
            else:
                self._round_ok(what)

    def _round_failed(self, what: str, message: str) -> None:
        if what in self._failing:
            log.debug("%s", message)
        else:
            self._failing.add(what)
            log.warning("%s", message)

    def _round_ok(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("controller %s works again", what)

    # -- rounds ------------------------------------------------------------------------------------------

    async def heartbeat_once(self) -> None:
        if self.broker_id is None:
            return
        epoch, max_offset, confirm_offset = self._broker.heartbeat_offsets()
        beat = BrokerBeat(self.cluster_name, self.broker_name, self._broker.addr, self.broker_id, epoch, max_offset,
                          confirm_offset, self._settings.election_priority, self._settings.heartbeat_timeout_ms)
        sent_at = self._clock.monotonic()
        if not await self._api.heartbeat(beat):
            raise RocketMQError("no controller accepted the heartbeat")
        if self._lease is not None:
            self._lease.heartbeat_accepted(sent_at)

    async def poll_once(self) -> None:
        """CONTROLLER_GET_REPLICA_INFO, then act on it."""
        beat, sent_at = self._last_beat(), self._clock.monotonic()
        try:
            info = await self._api.get_replica_info(self.broker_name)
        except TransportError as exc:
            if self._lease is not None:
                refused = isinstance(exc, NoControllerAnswered) and exc.refused
                self._lease.unreachable(sent_at, refused_at=self._clock.monotonic() if refused else None)
            raise
        self._observed(info, beat)
        await self.act(info)

    def _last_beat(self) -> float | None:
        return None if self._lease is None else self._lease.last_beat

    def _observed(self, info: ReplicaInfo, beat: float | None) -> None:
        """Feed the lease with a view of the group: asked for after the heartbeat ``beat`` was accepted (None: a
        push, which only deposes)."""
        lease = self._lease
        if lease is None or self.broker_id is None:
            return
        if info.master_id != self.broker_id:
            lease.deposed(info.master_epoch, info.master_address)
        elif beat is not None:
            lease.confirmed(info.master_epoch, beat)

    def on_notification(self, info: ReplicaInfo) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED arrived: act on it in the background (the push is answered at once)."""
        log.info("controller mode: %s notified by the controller: master %s at epoch %d", self.broker_name,
                 info.master_address or "none", info.master_epoch)
        task = asyncio.get_running_loop().create_task(self._act_logged(info), name="controller-push")
        self._pushed.add(task)
        task.add_done_callback(self._pushed.discard)

    async def _act_logged(self, info: ReplicaInfo) -> None:
        self._observed(info, None)
        try:
            await self.act(info)
            if self._lease is not None and info.master_id == self.broker_id:
                await self.poll_once()  # a push proves nothing about when: a poll confirms the new primary
        except RocketMQError as exc:
            log.warning("acting on the controller's notification failed (the next poll decides again): %s", exc)

    def namesrv_named(self, master_addr: str | None, ha_addr: str) -> None:
        """The name servers' registration answer named a primary and its HA address: follow that HA address if
        it is the primary the controller named (a name server may still list a dead one)."""
        self._named = (master_addr, ha_addr)
        if self.following is not None and master_addr == self.following:
            self._broker.follow_primary(primary_ha_address(self.following, named_master=master_addr,
                                                           named_ha=ha_addr))

    # -- deciding and acting -----------------------------------------------------------------------------

    async def act(self, info: ReplicaInfo) -> None:
        """Decide on ``info`` and carry the action out (one at a time). An election asked for is acted on too,
        once: its answer is decided on without asking again."""
        if self.broker_id is None:
            return  # not joined yet: the join registers and acts
        async with self._lock:
            may_elect = True
            while True:
                action = decide_role(self._broker.role_view(), self.broker_id, info, following=self.following)
                if isinstance(action, RequestElection) and may_elect:
                    may_elect = False
                    log.info("controller mode: %s has no master; broker %d asks for an election", self.broker_name,
                             self.broker_id)
                    beat = self._last_beat()
                    elected = await self._api.elect_master(self.cluster_name, self.broker_name, self.broker_id)
                    if elected is None:
                        return
                    self._observed(elected, beat)
                    info = elected
                    continue
                if info.master_epoch >= (self.last_info.master_epoch if self.last_info else 0):
                    self.last_info = info
                    if info.master_id is not None:
                        self._broker.set_sync_state_set(info.sync_state_set, info.sync_state_set_epoch)
                await self._carry_out(action)
                return

    async def _carry_out(self, action: RoleAction) -> None:
        if isinstance(action, Keep | RequestElection):
            log.debug("controller mode: %s", action)
            return
        try:
            if isinstance(action, Promote):
                log.warning("controller mode: broker %s/%s becomes primary at epoch %d", self.broker_name,
                            self.broker_id, action.epoch)
                self.following = None
                await self._broker.change_role(BrokerRole.PRIMARY, epoch=action.epoch)
            elif isinstance(action, Follow):
                named_master, named_ha = self._named
                ha_address = primary_ha_address(action.master_address, named_master=named_master, named_ha=named_ha)
                log.warning("controller mode: broker %s/%s follows master %d at %s (HA %s), epoch %d",
                            self.broker_name, self.broker_id, action.master_id, action.master_address, ha_address,
                            action.epoch)
                self.following = action.master_address
                self._broker.follow_primary(ha_address)
                await self._broker.change_role(BrokerRole.REPLICA, epoch=action.epoch)
        except RocketMQError as exc:
            # The transition left the broker REPLICA (a failed promotion) or refused a stale epoch; the next
            # poll decides again on the role then in force.
            log.error("controller mode: %s of %s/%s failed: %s", action, self.broker_name, self.broker_id, exc)
