"""Unit tests of the store's durability seam: ``PutResult.durable`` and ``DurabilityPolicy``'s steps."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

from broker_store.protocol.message import encode_properties
from broker_store.store import DurabilityPolicy, DurableFuture, FlushMode, PutStatus
from tests.unit.test_store import BORN_HOST, make_store


class _Step:
    """A durability step the test resolves by hand (as replication's replica-ack step will be)."""

    def __init__(self, name: str, met: bool = False) -> None:
        self.name = name
        self.met = met
        self.waits: list[tuple[int, DurableFuture]] = []

    def wait(self, end_offset: int) -> DurableFuture | None:
        if self.met:
            return None
        future: DurableFuture = concurrent.futures.Future()
        self.waits.append((end_offset, future))
        return future


def test_async_flush_puts_are_durable_at_once(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    r = store.put_message("D", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.durable.done() and r.durable.result() is PutStatus.PUT_OK
    store.shutdown()


def test_sync_flush_put_is_durable_once_fsynced(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, flush_interval_ms=10_000)

    async def send() -> list[PutStatus]:
        results = [store.put_messages("D", 0, [(b"x" * 100, b"", 0, 0)] * 3, born_timestamp=0, born_host=BORN_HOST)
                   for _ in range(20)]
        return list(await asyncio.gather(*(asyncio.wrap_future(r.durable) for r in results)))

    assert asyncio.run(send()) == [PutStatus.PUT_OK] * 20
    assert store.flushed_physical_offset == store.max_physical_offset
    store.shutdown()


def test_wait_false_skips_the_durability_wait(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, flush_interval_ms=10_000)
    step = _Step("replica-ack")
    store.durability.add_step(step)
    no_wait = encode_properties({"WAIT": "false"})
    r = store.put_messages("D", 0, [(b"a", b"", 0, 0), (b"b", no_wait, 0, 0)], born_timestamp=0, born_host=BORN_HOST)
    assert r.durable.done() and r.durable.result() is PutStatus.PUT_OK
    assert step.waits == []
    store.shutdown()


def test_failed_put_carries_its_status(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    r = store.put_message("bad topic!", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL and r.durable.result() is PutStatus.MESSAGE_ILLEGAL
    store.shutdown()


def test_added_step_is_folded_into_the_one_future(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, flush_interval_ms=10_000)
    step = _Step("replica-ack")
    store.durability.add_step(step)
    r = store.put_message("D", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert [end for end, _ in step.waits] == [r.end_offset]
    assert store.wait_for_flush(r.end_offset).result(timeout=5) is True
    assert not r.durable.done()  # flushed, the replica has not acknowledged yet
    step.waits[0][1].set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
    assert r.durable.result(timeout=5) is PutStatus.FLUSH_SLAVE_TIMEOUT
    store.shutdown()


def test_policy_reports_the_first_failing_step_in_order() -> None:
    first, second = _Step("flush"), _Step("replica-ack")
    policy = DurabilityPolicy([first, second])
    durable = policy.durable(100)
    second.waits[0][1].set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
    assert not durable.done()
    first.waits[0][1].set_result(PutStatus.FLUSH_DISK_TIMEOUT)
    assert durable.result() is PutStatus.FLUSH_DISK_TIMEOUT


def test_policy_without_pending_steps_is_resolved() -> None:
    assert DurabilityPolicy().durable(10).result() is PutStatus.PUT_OK
    assert DurabilityPolicy([_Step("flush", met=True)]).durable(10).result() is PutStatus.PUT_OK
    only = _Step("flush")
    durable = DurabilityPolicy([only, _Step("replica-ack", met=True)]).durable(10)
    assert durable is only.waits[0][1]  # one pending step: its own future, no combining
    assert DurabilityPolicy([_Step("flush")]).durable(10, wait_store_msg_ok=False).result() is PutStatus.PUT_OK


class _Gate(_Step):
    """A step that can also refuse puts before the append (as the replica-ack step does)."""

    def __init__(self) -> None:
        super().__init__("replica-ack", met=True)
        self.refuse: tuple[PutStatus, str] | None = None
        self.asked: list[int] = []

    def admit(self, max_offset: int) -> tuple[PutStatus, str] | None:
        self.asked.append(max_offset)
        return self.refuse


def test_admission_refuses_before_the_append_and_writes_nothing(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    gate = _Gate()
    store.durability.add_step(gate)
    ok = store.put_message("D", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert ok.status is PutStatus.PUT_OK and gate.asked == [0]
    gate.refuse = (PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, "the put needs 2 copies, 1 in sync")
    end = store.max_physical_offset
    refused = store.put_message("D", 0, b"y", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert refused.status is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH and refused.remark.endswith("1 in sync")
    assert refused.durable.result() is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert store.max_physical_offset == end and store.get_max_offset("D", 0) == 1  # nothing written
    no_wait = encode_properties({"WAIT": "false"})  # waits for no step, so no step may refuse it
    assert store.put_message("D", 0, b"z", no_wait, tags_code=0, born_timestamp=0,
                             born_host=BORN_HOST).status is PutStatus.PUT_OK
    store.durability.remove_step(gate)
    assert store.durability.admits_all and store.durability.steps == ()
    assert store.put_message("D", 0, b"w", b"", tags_code=0, born_timestamp=0,
                             born_host=BORN_HOST).status is PutStatus.PUT_OK
    store.shutdown()


def test_restart_commit_log_continues_empty_at_the_new_offset(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.put_message("D", 0, b"x" * 100, b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    seg = store.config.commit_log_segment_size
    store.restart_commit_log(3 * seg)
    assert (store.min_physical_offset, store.max_physical_offset) == (3 * seg, 3 * seg)
    assert store.dispatched_physical_offset == store.flushed_physical_offset == 3 * seg
    assert store.read_commit_log(0, 100) == b""
    store.shutdown()
