"""The controller: the rules of ``controller.replicas`` applied to groups kept in a ``StateStore``, the live
brokers of ``controller.heartbeats``, and the scan that replaces a dead primary. No sockets: the remoting
processor (``controller.processor``) calls it, and its role-change notifications go through the injected
``notify`` callback; its timers read the injected ``Clock``, so tests drive elections with a ``ManualClock``.

Every change of a group is read -> decide (pure) -> compare-and-set on the version read; when another
controller or request wrote first, it re-reads and decides again (bounded). A change is durable in the store
before any broker hears of it. Only the leader (``StateStore.campaign``) scans and elects on its own; any
controller answers reads; writes asked of a non-leader are refused with CONTROLLER_NOT_LEADER naming the
leader (brokers then ask the next controller).

Failover timing: a primary whose connection closes (kill -9) is inactive at once (``broker_closed``), one that
stops heartbeating (frozen, partitioned) after ``heartbeat_timeout_ms``; the next scan, within
``scan_interval_ms``, elects its successor and notifies the group.

Settings change at runtime (UPDATE_CONTROLLER_CONFIG, ``update_settings``): every decision reads
``self.settings`` when it is taken, so the next election, expiry and scan use the new values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from broker_store.background import cancel_and_wait
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.controller import replicas
from broker_store.controller.heartbeats import BrokerLiveTable
from broker_store.controller.replicas import BrokerLiveInfo, GroupState, Outcome
from broker_store.controller.runtime_settings import SettingsUpdateRefused, updated_settings
from broker_store.controller.settings import ControllerSettings
from broker_store.controller.state_store import StateStore, StateStoreError
from broker_store.protocol.codes import ResponseCode

log = logging.getLogger(__name__)

GROUPS_PREFIX = "controller/groups/"
CAS_ATTEMPTS = 8
"""Read-decide-write rounds before a request gives up with SYSTEM_ERROR (each lost round means another writer
changed the group in between: the next round decides on its state)."""

SCAN_EARLY_S = 0.001
"""A scan this close to its time runs now: timers may wake a hair early (float rounding of deadlines, the event
loop's clock resolution), and waiting again for the rest would be a wasted wake-up (or, on a ManualClock, a scan
that never comes)."""

Notify = Callable[[GroupState, Mapping[int, BrokerLiveInfo]], Awaitable[None]]
"""Tell a group's live brokers its new state (NOTIFY_BROKER_ROLE_CHANGED); errors are the callee's to log."""


def group_key(broker_name: str) -> str:
    return GROUPS_PREFIX + broker_name


class Controller:
    """See the module docstring. One per controller process (or name server with the embedded controller)."""

    def __init__(self, store: StateStore, settings: ControllerSettings, *, clock: Clock = SYSTEM_CLOCK,
                 notify: Notify | None = None) -> None:
        self.store = store
        self.settings = settings
        self._clock = clock
        self._notify = notify
        self.live = BrokerLiveTable(clock, settings.heartbeat_timeout_ms / 1000)
        self._leading = False
        self._scan_task: asyncio.Task[None] | None = None
        self._retimed = asyncio.Event()
        """Set by ``update_settings``: wakes the scan loop to re-time its wait by the new interval."""

    @property
    def leading(self) -> bool:
        """Whether this controller was the leader at its last campaign (each scan and write campaigns)."""
        return self._leading

    def set_notify(self, notify: Notify) -> None:
        """Where elections tell a group its new state, for a Controller built before the remoting side that
        owns the sockets (``controller.server.EmbeddedController`` hands it its processor's ``notify``).
        Contract: set before ``start``; it replaces the ``notify`` given to the constructor."""
        self._notify = notify

    # -- state ------------------------------------------------------------------------------------------

    async def read_group(self, broker_name: str) -> tuple[GroupState | None, int | None]:
        """The group's state and its store version (None, None: never registered)."""
        found = await asyncio.to_thread(self.store.get, group_key(broker_name))
        if found is None:
            return None, None
        try:
            return GroupState.from_json(found.value), found.version
        except ValueError as exc:
            raise StateStoreError(f"controller state of {broker_name}: {exc}") from exc

    async def groups(self) -> dict[str, GroupState]:
        rows = await asyncio.to_thread(self.store.list, GROUPS_PREFIX)
        out = {}
        for key, found in rows.items():
            try:
                out[key[len(GROUPS_PREFIX):]] = GroupState.from_json(found.value)
            except ValueError as exc:
                raise StateStoreError(f"controller state {key}: {exc}") from exc
        return out

    async def _decide(self, broker_name: str, rule: Callable[[GroupState | None], Outcome], *,
                      leader_only: bool = True) -> Outcome:
        for _ in range(CAS_ATTEMPTS):
            group, version = await self.read_group(broker_name)
            outcome = rule(group)
            if outcome.state is None:
                return outcome
            if leader_only and not await self._is_leader():
                leader = await asyncio.to_thread(self.store.leader)
                return Outcome(ResponseCode.CONTROLLER_NOT_LEADER,
                               f"this controller ({self.store.member_id}) is not the leader; the leader is {leader}")
            written = await asyncio.to_thread(self.store.compare_and_set, group_key(broker_name), version,
                                              outcome.state.to_json())
            if written:
                return outcome
        return Outcome(ResponseCode.SYSTEM_ERROR, f"{broker_name}: state changed under {CAS_ATTEMPTS} attempts "
                                                  f"in a row; try again")

    async def _is_leader(self) -> bool:
        self._leading = await asyncio.to_thread(self.store.campaign)
        return self._leading

    def _alive(self, broker_name: str) -> dict[int, BrokerLiveInfo]:
        self.live.expire()
        return self.live.alive(broker_name)

    # -- requests ---------------------------------------------------------------------------------------

    def heartbeat(self, cluster: str, broker_name: str, info: BrokerLiveInfo, timeout_ms: int | None = None) -> None:
        if self.live.heartbeat(cluster, broker_name, info, None if timeout_ms is None else timeout_ms / 1000):
            log.info("controller: broker %s/%d at %s is alive (epoch %d, max offset %d)", broker_name,
                     info.broker_id, info.address, info.epoch, info.max_offset)

    def broker_closed(self, address: str) -> None:
        """The connection from ``address`` closed: its brokers are inactive now (the next scan elects)."""
        for name, broker_id in self.live.drop_address(address):
            log.warning("controller: broker %s/%d at %s disconnected", name, broker_id, address)

    async def update_settings(self, update: Mapping[str, str]) -> Outcome:
        """UPDATE_CONTROLLER_CONFIG: apply ``update`` (properties key or field name -> text) to this controller's
        settings by ``runtime_settings.updated_settings`` (all or nothing; a refusal's remark names the key).
        Leader only, like every write: a follower answers CONTROLLER_NOT_LEADER naming the leader.

        Settings are per controller, not replicated state (RocketMQ keeps each controller's config in its own
        process the same way): with replicated controllers the update changes the addressed controller only,
        the others keep the settings of their configuration files, and a controller that takes over the lead
        later decides by its own. Not persisted either: a restart reads the configuration file again."""
        try:
            updated_settings(self.settings, update)  # a bad request is refused as such by any controller
            if not await self._is_leader():
                leader = await asyncio.to_thread(self.store.leader)
                return Outcome(ResponseCode.CONTROLLER_NOT_LEADER,
                               f"this controller ({self.store.member_id}) is not the leader; the leader is {leader}")
            new = updated_settings(self.settings, update)  # again, with no await before the assignment: another
            # update may have landed while the leadership was checked, and it must not be undone
        except SettingsUpdateRefused as exc:
            return Outcome(exc.code, str(exc))
        if new != self.settings:
            log.warning("controller: settings updated: %s", ", ".join(
                f"{field}={getattr(new, field)}" for field in type(new).model_fields
                if getattr(new, field) != getattr(self.settings, field)))
        self.settings = new
        self.live.default_timeout = new.heartbeat_timeout_ms / 1000
        self._retimed.set()
        return Outcome(ResponseCode.SUCCESS)

    async def next_broker_id(self, cluster: str, broker_name: str) -> Outcome:
        group, _ = await self.read_group(broker_name)
        return replicas.next_broker_id(group)

    async def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int, check_code: str) -> Outcome:
        return await self._decide(broker_name, lambda g: replicas.apply_broker_id(
            g, cluster, broker_name, broker_id, check_code))

    async def register_broker(self, broker_name: str, broker_id: int, address: str) -> Outcome:
        alive = self._alive(broker_name)
        return await self._decide(broker_name, lambda g: replicas.register_broker(
            g, broker_name, broker_id, address, alive))

    async def elect_master(self, broker_name: str, *, requester: int | None, designate: bool = False) -> Outcome:
        alive = self._alive(broker_name)
        outcome = await self._decide(broker_name, lambda g: replicas.elect_master(
            g, broker_name, alive, requester=requester, designate=designate,
            unclean=self.settings.enable_elect_unclean_master))
        if outcome.state is not None and outcome.code in (ResponseCode.SUCCESS,
                                                          ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE):
            log.warning("controller: %s: %s", broker_name, outcome.remark)
            if outcome.ok and self._notify is not None and self.settings.notify_broker_role_changed:
                await self._notify(outcome.state, alive)
        return outcome

    async def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int,
                                   new_set: frozenset[int], new_set_epoch: int) -> Outcome:
        alive = self._alive(broker_name)
        outcome = await self._decide(broker_name, lambda g: replicas.alter_sync_state_set(
            g, broker_name, master_id, master_epoch, new_set, new_set_epoch, alive))
        if outcome.ok and outcome.state is not None:
            log.info("controller: %s SyncStateSet %s at epoch %d", broker_name, sorted(outcome.state.sync_state_set),
                     outcome.state.sync_state_set_epoch)
        return outcome

    async def clean_broker_data(self, broker_name: str) -> Outcome:
        """CLEAN_BROKER_DATA for a whole group no member of which is alive (an operator's clean-up)."""
        if self._alive(broker_name):
            return Outcome(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           f"broker set {broker_name} still has live brokers: clean-up refused")
        group, version = await self.read_group(broker_name)
        if group is None or version is None:
            return Outcome(ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           f"broker set {broker_name} does not exist")
        tomb = replace(group, members={}, master_id=None, sync_state_set=frozenset())
        written = await asyncio.to_thread(self.store.compare_and_set, group_key(broker_name), version, tomb.to_json())
        return Outcome(ResponseCode.SUCCESS if written else ResponseCode.SYSTEM_ERROR,
                       "" if written else "state changed meanwhile; try again")

    # -- the scan ---------------------------------------------------------------------------------------

    async def scan_once(self) -> list[Outcome]:
        """Expire silent brokers, then elect for every group whose primary is gone (leader only)."""
        for name, broker_id in self.live.expire():
            log.warning("controller: broker %s/%d inactive: no heartbeat for %d ms", name, broker_id,
                        self.settings.heartbeat_timeout_ms)
        if not await self._is_leader():
            return []
        out = []
        for name, group in sorted((await self.groups()).items()):
            if replicas.needs_reelection(group, self.live.alive(name),
                                         unclean=self.settings.enable_elect_unclean_master):
                out.append(await self.elect_master(name, requester=None))
        return out

    async def run(self) -> None:
        """Scan every ``scan_interval_ms`` until cancelled; a store that cannot be reached skips a scan. A changed
        interval re-times the wait at once: the next scan is due the new interval after the previous one ended."""
        last = self._clock.monotonic()
        while True:
            wait = last + self.settings.scan_interval_ms / 1000 - self._clock.monotonic()
            if wait > SCAN_EARLY_S:
                self._retimed.clear()
                await self._clock.wait_for(self._retimed.wait(), wait)
                continue  # due now, or the interval changed: recompute
            try:
                await self.scan_once()
            except StateStoreError as exc:
                log.warning("controller: scan skipped: %s", exc)
            last = self._clock.monotonic()

    def start(self) -> None:
        self._scan_task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._scan_task is not None:
            await cancel_and_wait([self._scan_task])
            self._scan_task = None
