"""Serve-until-stopped helper shared by the name server and broker entry points.

``run_namesrv`` / ``run_broker`` await ``wait_for_termination()``; it returns on SIGTERM or SIGINT
(when running in the main thread) and propagates cancellation, so callers shut down in ``finally``.
"""

from __future__ import annotations

import asyncio
import signal


async def wait_for_termination() -> None:
    """Block until SIGTERM/SIGINT arrives or the calling task is cancelled."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError, NotImplementedError):
            continue  # not the main thread (tests): cancellation is the only way out
        installed.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
