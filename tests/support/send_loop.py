"""A producer sending keyed messages until stopped, for fault tests: what was acknowledged (SEND_OK) is what
must survive. Used by the container tier's broker-group and controller tests."""

from __future__ import annotations

import asyncio

from broker_store.client import AsyncProducer, SendStatus, new_message
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import until


class Writer:
    """Sends ``<prefix>-<i>`` keyed messages to ``topic`` until stopped; ``acked`` holds every key answered
    SEND_OK, ``failed`` counts sends that raised (retried after 50 ms with the next key)."""

    def __init__(self, namesrv: str, topic: str, prefix: str = "k") -> None:
        self.namesrv, self.topic, self.prefix = namesrv, topic, prefix
        self.acked: list[str] = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with AsyncProducer(self.namesrv, "ContainerProducers", send_timeout=3.0) as producer:
            i = 0
            while not self._stop.is_set():
                key = f"{self.prefix}-{i}"
                i += 1
                try:
                    result = await producer.send(new_message(self.topic, key.encode(), keys=key))
                except RocketMQError:
                    self.failed += 1
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(key)
                await asyncio.sleep(0.005)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def until_acked(self, n: int, timeout: float = 30.0) -> None:
        """Until ``n`` more sends were acknowledged (the loop's own error, if it died)."""
        target = len(self.acked) + n

        async def enough() -> bool:
            assert self._task is not None
            if self._task.done():
                self._task.result()
            return len(self.acked) >= target
        await until(enough, lambda: f"{n} more SEND_OK (acked {len(self.acked)}, failed {self.failed})", timeout)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
