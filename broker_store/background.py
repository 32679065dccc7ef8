"""Background asyncio tasks of the servers: the one way they are stopped.

Called by ``broker.server.BrokerServer`` (offset persistence, client scans, metadata sync),
``broker.namesrv_registration.NamesrvRegistration`` (register and heartbeat loops) and
``namesrv.server.NamesrvServer`` (the broker expiry scan) when they stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task, then wait until all have ended.

    The loops run forever, so one that ended with an error is a bug: it is logged here rather than raised,
    because the caller is stopping and must still release what comes after (ports, files, the store). A
    cancellation of the caller itself still propagates.
    """
    stopping = list(tasks)
    if not stopping:
        return
    for task in stopping:
        task.cancel()
    await asyncio.wait(stopping)
    for task in stopping:
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s had failed before it was stopped", task.get_name(),
                      exc_info=task.exception())
