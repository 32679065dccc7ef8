"""The application of the disaster-recovery drill (``benchmarks/dr_drill.py``): a producer sending unique messages
at a steady rate and a consumer group pulling and committing all the time, each on one cluster at a time and
moved by the drill's operator as a real one would move them (their name server address). Threads over the
project's client; what they saw is kept for ``benchmarks.dr_drill_tally``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from benchmarks.dr_drill_tally import Read, Stint
from broker_store.client import MessageQueue, Producer, PullConsumer, PullStatus, SendStatus, new_message

ADVANCING = (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG, PullStatus.OFFSET_ILLEGAL)


@dataclass(frozen=True)
class Side:
    """A cluster as the application knows it: its name and name server address."""

    name: str
    namesrv: str


class ProducerApp:
    """Batches of ``batch`` messages at ``rate`` msg/s to the current side until ``stop``. A failed send is
    counted by error, not repeated (it may or may not be stored; its keys are not acknowledged). After a stall
    (a side down) the schedule restarts instead of bursting to catch up."""

    def __init__(self, topic: str, side: Side, *, rate: float, batch: int, body: int) -> None:
        self.topic, self.rate, self.batch, self.body = topic, rate, batch, body
        self._side = side
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.acked: dict[str, str] = {}
        """Key -> the side that acknowledged it."""
        self.failed: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)

    @property
    def side(self) -> Side:
        with self._lock:
            return self._side

    def move(self, side: Side) -> None:
        with self._lock:
            self._side = side

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        index, sent, started = 0, 0, time.monotonic()
        producer: Producer | None = None
        on: Side | None = None
        try:
            while not self.stop.is_set():
                side = self.side
                if side != on:
                    if producer is not None:
                        producer.close()
                    producer = Producer(side.namesrv, "PID_dr_drill", send_timeout=3.0, attempt_timeout=1.0)
                    on = side
                assert producer is not None
                batch = [new_message(self.topic, os.urandom(self.body), keys=f"k{index + k}")
                         for k in range(self.batch)]
                index += self.batch
                try:
                    result = producer.send_batch(batch)
                except Exception as exc:  # noqa: BLE001 - any failure: not acknowledged, the load goes on
                    self.failed[type(exc).__name__] += 1
                    time.sleep(0.05)
                else:
                    if result.status is SendStatus.SEND_OK:
                        self.acked.update(dict.fromkeys(result.msg_ids, side.name))
                    else:
                        self.failed[result.status.name] += 1
                sent += self.batch
                ahead = sent / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
                elif ahead < -1.0:
                    sent, started = 0, time.monotonic()
        finally:
            if producer is not None:
                producer.close()


@dataclass(frozen=True)
class _Want:
    side: Side
    stint: int


class ConsumerApp:
    """One consumer of ``group`` (heartbeats every second: online for the brokers) pulling every queue of the
    topic on its side from the group's committed offset and committing after each round. ``join`` starts it on
    a side (a new stint); ``leave`` stops it: with ``drain`` it first reads until a round brings nothing (the
    side is fenced: that is all there is), commits and unregisters; without (the side is dead) it is dropped.
    """

    def __init__(self, topic: str, group: str, *, max_nums: int = 256) -> None:
        self.topic, self.group, self.max_nums = topic, group, max_nums
        self.reads: list[Read] = []
        self.stints: list[Stint] = []
        self.errors: Counter[str] = Counter()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._want: _Want | None = None
        self._drain = False
        self._idle = threading.Event()
        self._idle.set()
        self._answered = threading.Event()
        self.thread = threading.Thread(target=self._run, name="consumer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, side: Side, move: str) -> int:
        """Start on ``side``; the new stint's index."""
        with self._lock:
            index = len(self.stints)
            self.stints.append(Stint(index, side.name, move, time.time()))
            self._want = _Want(side, index)
            self._idle.clear()
            self._answered.clear()
        return index

    def wait_running(self, timeout: float) -> bool:
        """Until the current stint's first pull answer."""
        return self._answered.wait(timeout)

    def leave(self, *, drain: bool, timeout: float = 60.0) -> bool:
        """Stop consuming; True once it stopped (within ``timeout``)."""
        with self._lock:
            self._want = None
            self._drain = drain
        return self._idle.wait(timeout)

    def _answer(self, stint: int) -> None:
        with self._lock:
            if self.stints[stint].first_answer_at is None:
                self.stints[stint] = replace(self.stints[stint], first_answer_at=time.time())
                self._answered.set()

    def _run(self) -> None:
        consumer: PullConsumer | None = None
        stint = -1
        offsets: dict[MessageQueue, int] = {}
        queues: list[MessageQueue] = []
        while not self.stop.is_set():
            with self._lock:
                want, drain = self._want, self._drain
            if consumer is not None and (want is None or want.stint != stint):
                self._finish(consumer, offsets, queues, stint, drain and want is None)
                consumer, offsets, queues = None, {}, []
            if want is None:
                self._idle.set()
                time.sleep(0.05)
                continue
            if consumer is None:
                consumer = PullConsumer(want.side.namesrv, self.group, pull_timeout=3.0, heartbeat_interval=1.0)
                stint = want.stint
            try:
                if not queues:
                    queues = sorted(consumer.fetch_message_queues(self.topic))
                got = self._round(consumer, offsets, queues, stint)
            except Exception as exc:  # noqa: BLE001 - the side fails under it: retry until moved
                self.errors[type(exc).__name__] += 1
                time.sleep(0.5)
                continue
            if not got:
                time.sleep(0.1)
        if consumer is not None:
            self._finish(consumer, offsets, queues, stint, drain=False)

    def _round(self, consumer: PullConsumer, offsets: dict[MessageQueue, int], queues: list[MessageQueue],
               stint: int) -> int:
        got = 0
        for mq in queues:
            if mq not in offsets:
                offsets[mq] = consumer.query_consumer_offset(mq) or 0
            result = consumer.pull(mq, offsets[mq], self.max_nums)
            self._answer(stint)
            if result.status is PullStatus.FOUND:
                now = time.time()
                self.reads.extend(Read(m.msg_id, now, stint) for m in result.messages)
                got += len(result.messages)
            if result.status in ADVANCING:
                offsets[mq] = result.next_begin_offset
        failed = consumer.update_consumer_offsets(sorted(offsets.items()))
        for error in failed:
            if error is not None:
                self.errors[f"commit {type(error).__name__}"] += 1
        return got

    def _finish(self, consumer: PullConsumer, offsets: dict[MessageQueue, int], queues: list[MessageQueue],
                stint: int, drain: bool) -> None:
        """Leave a side: drained and committed (``drain``), or dropped (closed in the background: a dead side
        would hold the caller for its timeouts)."""
        if drain:
            deadline = time.monotonic() + 60.0
            while time.monotonic() < deadline:
                try:
                    if not queues:
                        queues.extend(sorted(consumer.fetch_message_queues(self.topic)))
                    if not self._round(consumer, offsets, queues, stint):
                        break
                except Exception as exc:  # noqa: BLE001 - counted; the leave goes on
                    self.errors[f"drain {type(exc).__name__}"] += 1
                    time.sleep(0.2)
            consumer.close()
            return
        closer: Callable[[], None] = consumer.close
        threading.Thread(target=closer, name="consumer-close", daemon=True).start()
