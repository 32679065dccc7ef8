"""The child processes of ``benchmarks/replicator.py``: the preload, (a)'s raw pull and the paced producer of
(c) and (e1), each in its own spawned process so that its CPU is not the measured job's."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks.replicator_report import MB
from broker_store.client import MessageQueue


def _child(kind: str, args: dict[str, Any], results: Any) -> None:
    import uvloop

    try:
        results.put(uvloop.run(_CHILDREN[kind](**args)))
    except BaseException as exc:  # reported to the parent, which fails the run
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def start_child(kind: str, **args: Any) -> tuple[Any, Any]:
    """A child process running ``_CHILDREN[kind](**args)``: (process, its results queue)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_child, args=(kind, args, results), daemon=True)
    proc.start()
    return proc, results


def run_child(kind: str, **args: Any) -> dict[str, Any]:
    proc, results = start_child(kind, **args)
    try:
        out: dict[str, Any] = results.get()  # what _child put: the child's answer or {"error": ...}
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    if "error" in out:
        raise RuntimeError(f"{kind} child failed: {out['error']}")
    return out


def _body(size: int, seq: int) -> bytes:
    head = seq.to_bytes(8, "big")
    return head + bytes((seq + i) & 0xFF for i in range(size - 8)) if size > 8 else head[:size]


async def _preload(namesrv: str, topic: str, queues: list[tuple[str, int]], count: int, body: int,
                   batch: int = 128, concurrency: int = 8, spread: bool = False) -> dict[str, Any]:
    """``count`` messages in batches of ``batch`` from ``concurrency`` senders, each on its own queue of
    ``queues`` (the first ``concurrency`` of them), or with ``spread`` every batch on the next queue."""
    from broker_store.client import AsyncProducer, Message, MessageQueue

    payload = _body(body, 0)
    start = time.perf_counter()
    async with AsyncProducer(namesrv, "PID_BENCH_PRELOAD") as producer:
        next_seq = 0

        async def worker(mq: MessageQueue) -> None:
            nonlocal next_seq
            while next_seq < count:
                n = min(batch, count - next_seq)
                if spread:
                    mq = mqs[next_seq // batch % len(mqs)]
                next_seq += n
                msgs = [Message(topic, payload, {"TAGS": "bench", "KEYS": f"k{next_seq - n + i}"})
                        for i in range(n)]
                await producer.send_batch(msgs, mq)

        mqs = [MessageQueue(topic, b, q) for b, q in queues]
        await asyncio.gather(*(worker(mqs[i % len(mqs)]) for i in range(concurrency)))
    return {"seconds": time.perf_counter() - start}


async def _raw_pull(namesrv: str, topic: str, queues: list[tuple[str, int]], ends: list[int],
                    pull_batch: int) -> dict[str, Any]:
    from broker_store.client import AsyncPullConsumer, MessageQueue, PullStatus

    async with AsyncPullConsumer(namesrv, "CID_BENCH_RAW", heartbeat_interval=None) as consumer:
        # one pull per queue first: connections and routes are not part of the measurement
        for b, q in queues:
            await consumer.pull(MessageQueue(topic, b, q), 0, 1)
        count = 0
        body_bytes = 0

        async def drain(mq: MessageQueue, end: int) -> None:
            nonlocal count, body_bytes
            offset = 0
            while offset < end:
                r = await consumer.pull(mq, offset, min(pull_batch, end - offset))
                if r.status is not PullStatus.FOUND:
                    raise RuntimeError(f"{mq}: {r.status} at {offset}")
                count += len(r.messages)
                body_bytes += sum(len(m.body) for m in r.messages)
                offset = r.next_begin_offset

        start = time.perf_counter()
        await asyncio.gather(*(drain(MessageQueue(topic, b, q), e) for (b, q), e in zip(queues, ends, strict=True)))
        elapsed = time.perf_counter() - start
    return {"messages": count, "bytes": body_bytes, "seconds": elapsed}


async def _paced(namesrv: str, topic: str, queues: list[tuple[str, int]], rate: float, seconds: float,
                 body: int, batch: int) -> dict[str, Any]:
    from broker_store.client import AsyncProducer, Message, MessageQueue
    from connectors.replication.forwarding import encode_entry

    payload = _body(body, 1)
    mqs = [MessageQueue(topic, b, q) for b, q in queues]
    id_prefix = f"{os.getpid():08X}{int(time.time()):08X}"
    # The harness encodes each batch itself and sends it with send_encoded_batch: one entry is a fixed
    # prefix (header, body, properties length) + "UNIQ_KEY\x01<id>\x02", the id a fixed-width counter
    # (UNIQ_KEY is what (c) joins source and target on). Building Message objects and letting the
    # client encode them cost ~5 us per message more: CPU taken from the replicator under test, on the
    # same two cores, that a real producer on its own machine would not take.
    entry = encode_entry(payload, f"UNIQ_KEY\x01{id_prefix}{0:010X}\x02".encode(), 0)
    head = entry[:len(entry) - len(f"{id_prefix}{0:010X}\x02")]
    sent = 0
    late = 0.0
    async with AsyncProducer(namesrv, "PID_BENCH_PACED") as producer:
        await producer.send(Message(topic, payload), mqs[0])  # connect + route, not paced
        sent = 1
        start = time.perf_counter()
        i = 0
        pending: set[asyncio.Task[Any]] = set()
        while True:
            due = start + i * batch / rate
            now = time.perf_counter()
            if due - start >= seconds:
                break
            if due > now:
                await asyncio.sleep(due - now)
            else:
                late = max(late, now - due)
            first = i * batch
            encoded = b"".join([head + f"{id_prefix}{first + k:010X}\x02".encode() for k in range(batch)])
            task = asyncio.ensure_future(producer.send_encoded_batch(topic, encoded, mqs[i % len(mqs)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += batch
            i += 1
        if pending:
            await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
    return {"messages": sent, "seconds": elapsed, "max_late_s": late, "cpu_s": time.process_time()}


_CHILDREN: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
    "preload": _preload, "raw_pull": _raw_pull, "paced": _paced}


def measure_raw_pull(namesrv: str, topic: str, queues: list[tuple[str, int]], ends: list[int],
                     pull_batch: int) -> tuple[float, float]:
    """(a): the whole topic pulled by one child process, twice, the faster run counting (the first may overlap the
    broker's background flush); prints (a)'s line and returns (msg/s, MB/s)."""
    runs = [run_child("raw_pull", namesrv=namesrv, topic=topic, queues=queues, ends=ends, pull_batch=pull_batch)
            for _ in range(2)]
    raw = min(runs, key=lambda r: r["seconds"])
    rate = raw["messages"] / raw["seconds"]
    mbps = raw["bytes"] / raw["seconds"] / MB
    print(f"(a) raw pull, 1 process, {len(queues)} queues concurrently, {pull_batch}/pull: "
          f"{raw['messages']} msgs in {raw['seconds']:.2f} s = {rate:,.0f} msg/s, {mbps:.1f} MB/s (runs: "
          + ", ".join(f"{r['seconds']:.2f} s" for r in runs) + ")", flush=True)
    return rate, mbps
