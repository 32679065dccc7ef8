"""A controller-mode broker's id: asked of the controller once, kept in ``brokerIdentity`` for good.

Called by ``broker.controller_agent`` when the broker starts. The walk is RocketMQ 5.1.1+'s
(ReplicasManager.startBasicService), resumed from the files alone (``identity_file``) at every step, so a
crash anywhere leaves a state the next start finishes (``role_decision.id_step`` names the steps)::

    no file          GET_NEXT_BROKER_ID -> brokerIdentity-temp (id, new check code "addr;timestampMs")
    temp file only   APPLY_BROKER_ID (id, the temp file's check code)
                       accepted -> brokerIdentity, then the temp file removed (confirm)
                       CONTROLLER_BROKER_ID_INVALID (another broker took it first) -> temp removed, ask again
    brokerIdentity   done (a temp file left beside it by a crash inside confirm is removed)

Why it is crash-safe: the temp file is written before the apply, so an apply the controller recorded is
always re-sent with the same check code after a restart, and the controller accepts the same code for the
same id again; brokerIdentity is written only after an accepted apply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from broker_store.broker.identity_file import BrokerIdentityFiles
from broker_store.broker.role_decision import IdStep, id_step
from broker_store.protocol.errors import RocketMQError

log = logging.getLogger(__name__)

MAX_REFUSED_APPLIES = 8
"""Applies refused in a row (each: another broker of the group took the id between our GET_NEXT_BROKER_ID
and APPLY_BROKER_ID) before ``assign_broker_id`` gives up and its caller retries later."""


class IdAssignmentError(RocketMQError):
    """The controller refused every id applied for (brokers of the group racing for ids); retry later."""

    retriable = True


class BrokerIdApi(Protocol):
    """The two controller calls of the walk (``controller_client.ControllerClient``)."""

    async def next_broker_id(self, cluster_name: str, broker_name: str) -> int: ...

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int,
                              check_code: str) -> bool: ...


async def assign_broker_id(api: BrokerIdApi, files: BrokerIdentityFiles, *, cluster_name: str, broker_name: str,
                           check_code: Callable[[], str]) -> int:
    """Walk until brokerIdentity holds this broker's id, and return it (see the module docstring).
    ``check_code()`` makes a new register check code (``identity_file.register_check_code`` of the broker's
    address and the clock's time). Raises what the controller calls raise (the files stay where the walk got
    to) and ``IdAssignmentError`` after ``MAX_REFUSED_APPLIES`` refusals in a row."""
    refused = 0
    while True:
        state, identity = await asyncio.to_thread(files.load)
        step = id_step(state)
        if step is IdStep.DONE:
            assert identity is not None
            await asyncio.to_thread(files.clear_temp)
            return identity.broker_id
        if step is IdStep.ASK_NEXT_ID:
            next_id = await api.next_broker_id(cluster_name, broker_name)
            code = check_code()
            await asyncio.to_thread(files.write_temp, next_id, code)
            log.info("controller mode: applying for broker id %d of %s/%s (check code %s)", next_id, cluster_name,
                     broker_name, code)
            continue
        assert identity is not None and identity.register_check_code is not None
        if await api.apply_broker_id(cluster_name, broker_name, identity.broker_id, identity.register_check_code):
            await asyncio.to_thread(files.confirm)
            log.info("controller mode: broker id %d of %s/%s applied and kept in %s", identity.broker_id,
                     cluster_name, broker_name, files.path)
            continue
        await asyncio.to_thread(files.clear_temp)
        refused += 1
        if refused >= MAX_REFUSED_APPLIES:
            raise IdAssignmentError(f"the controller refused {refused} broker ids in a row for {cluster_name}/"
                                    f"{broker_name} (taken by other brokers first)")
