"""Controller mode's wiring of a broker: its assigned id, its epoch file, the store steps a promotion awaits, and
its agent with the SyncStateSet alterer its HA primary calls.

Called by ``broker.server.BrokerServer.start`` (on the event loop; the file I/O runs in worker threads). Static
groups use only ``promotion_steps`` (without an epoch store). What each part does is its own module's business:
``broker.identity_file``, ``store.epoch_store``, ``broker.role_transition``, ``broker.controller_agent``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from broker_store.broker.controller_agent import ControlledBroker, ControllerAgent
from broker_store.broker.controller_client import ControllerClient
from broker_store.broker.identity_file import BrokerIdentityFiles, RegisterState
from broker_store.broker.primary_lease import PrimaryLease
from broker_store.broker.replication import BrokerReplication
from broker_store.broker.role import RoleState
from broker_store.broker.role_transition import ControllerPromotionSteps, PromotionSteps, StorePromotionSteps
from broker_store.clock import Clock
from broker_store.config import BrokerConfig
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.controller import SyncStateSet
from broker_store.store import MessageStore
from broker_store.store.epoch_store import EpochStore

log = logging.getLogger(__name__)

PromotionStepsFactory = Callable[[MessageStore], PromotionSteps]
"""The store steps of a promotion, built once the store is open (default: ``StorePromotionSteps`` with the
epoch file's entry writer in controller mode, none in static groups)."""


async def load_assigned_id(config: BrokerConfig, role_state: RoleState) -> tuple[BrokerIdentityFiles | None, bool]:
    """Controller mode: the broker's identity files, and whether brokerIdentity keeps an id (then ``role_state``
    takes it). A pending brokerIdentity-temp is the controller client's to finish: no id yet. Static groups:
    ``(None, False)``."""
    if not config.enable_controller_mode:
        return None, False
    files = BrokerIdentityFiles(Path(config.store_dir), config.cluster_name, config.broker_name)
    state, assigned = await asyncio.to_thread(files.load)
    if state is RegisterState.CREATE_METADATA_FILE_DONE and assigned is not None:
        role_state.set_broker_id(assigned.broker_id)
        log.info("controller mode: broker id %d from %s", assigned.broker_id, files.path)
        return files, True
    return files, False


async def open_epoch_store(store: MessageStore, role_state: RoleState, on_truncated: Callable[[], None]) -> EpochStore:
    """Controller mode: the started ``store`` with its epoch file. The role resumes at the file's newest epoch when
    that is newer; ``on_truncated`` runs on this event loop after each truncation of the log (which runs on the
    HA client's thread)."""
    epoch_store = await asyncio.to_thread(EpochStore.open, store)
    last_epoch = epoch_store.epoch_cache.last_epoch
    if last_epoch is not None and last_epoch > role_state.epoch:
        role_state.set_epoch(last_epoch)
    loop = asyncio.get_running_loop()

    def truncated(_offset: int) -> None:
        loop.call_soon_threadsafe(on_truncated)
    epoch_store.on_truncated.append(truncated)
    return epoch_store


def promotion_steps(factory: PromotionStepsFactory | None, store: MessageStore,
                    epoch_store: EpochStore | None) -> PromotionSteps:
    """The store steps a promotion awaits: a test's ``factory`` when it gives one, else controller mode's (the
    epoch file's cut and append) or the static group's."""
    if factory is not None and factory is not StorePromotionSteps:
        return factory(store)
    if epoch_store is not None:
        return ControllerPromotionSteps(epoch_store)
    return StorePromotionSteps(store)


def primary_lease(config: BrokerConfig, clock: Clock) -> PrimaryLease | None:
    """Controller mode: the lease a primary appends under (``broker.primary_lease``), as long as the controller's
    heartbeat timeout for this broker: the ``controller.heartbeat_timeout_ms`` it sends, else the controller's
    default (``up`` fills in its controllers'). A controller configured with a shorter timeout than that default needs
    its brokers to send theirs, or a primary frozen between the two timeouts appends on thaw. None in static
    groups."""
    if not config.enable_controller_mode:
        return None
    return PrimaryLease(config.controller.primary_lease_ms() / 1000, clock)


def controller_agent(config: BrokerConfig, broker: ControlledBroker, files: BrokerIdentityFiles,
                     role_state: RoleState, replication: BrokerReplication | None,
                     clock: Clock, credentials: SessionCredentials | None = None,
                     lease: PrimaryLease | None = None) -> tuple[ControllerClient, ControllerAgent]:
    """The broker's controller client and agent (not started); the HA primary's SyncStateSet changes go through
    the client (ALTER_SYNC_STATE_SET under the role's replica id and epoch at the time of each call), every request
    signed with ``credentials`` (the broker's ``acl_credentials_file``) when given."""
    link = config.controller
    client = ControllerClient(config.controller_addresses(), request_timeout=link.request_timeout_ms / 1000,
                              tls=config.tls.client_settings(), credentials=credentials, clock=clock)
    agent = ControllerAgent(client, broker, files, cluster_name=config.cluster_name,
                            broker_name=config.broker_name, settings=link, clock=clock, lease=lease)
    if replication is not None:
        async def alter(members: frozenset[int], set_epoch: int) -> SyncStateSet:
            new_members, new_epoch = await client.alter_sync_state_set(
                config.broker_name, role_state.replica_id, role_state.epoch, members, set_epoch)
            return SyncStateSet(new_members, new_epoch)
        replication.sync_state_set_alterer = alter
    return client, agent
