"""Abuse benchmark (docs/security.md, "Connection hygiene"): a real client's send throughput against a broker alone, and
with garbage, slow readers and 1,000 idle connections running beside it, measured side by side in one run.

    .venv/bin/python benchmarks/abuse.py                 # ~1.5 minutes
    .venv/bin/python benchmarks/abuse.py --seconds 5 --rounds 1

One name server and one broker (``tests/support/processes.py``'s ``LocalCluster``, 127.0.0.1, ASYNC_FLUSH) and a
4-queue topic. The measured client is this process: ``--producers`` (16) ``AsyncProducer`` tasks on one uvloop
sharing one connection, each sending 1 KiB messages one at a time (SEND_MESSAGE_V2) for ``--seconds`` (8) after
a 1 s warm-up. Phases alternate alone / under abuse, ``--rounds`` (2) times each, so drift of the shared machine
hits both sides alike; each phase's msg/s is printed and the last line is
``abuse: send throughput X msg/s alone, Y msg/s under abuse, ratio R`` (means over the phases; target R >= 0.8).

The abuse is one other process, started before each abuse phase (measuring begins once all its connections are
open) and killed after it:

- ``--idle`` (1,000) connections opened and never used. The broker's cap, ``server_max_connections``, is 10,000
  by default, so all are accepted and held (idle ones are closed after ``server_channel_max_idle_seconds``, 120
  s, longer than a phase); ``--max-connections N`` sets the cap instead, and the extras are refused with
  SYSTEM_BUSY "[OVERLOAD]" while the measured client, connected first, keeps working.
- ``--slow`` (50) slow readers: each pipelines PULL_MESSAGE requests for 32 messages of the topic without
  ever reading an answer (its transport paused). The broker serves each a bounded amount (``net.answer_flow``:
  ``max_queued_answer_bytes`` of answers, ``kernel_unsent_bytes`` more in its socket, and the reader's receive
  window), then stops reading its requests; the reader keeps writing until the kernel buffers of its requests are
  full. Measuring starts once every one of them is blocked (no write accepted for 1 s) or after 15 s (the time
  this took is printed). From then on they cost the broker memory, not CPU.
- ``--partial`` (50) connections holding the first bytes of a 1 MiB frame, never completed (closed after
  ``server_partial_frame_timeout_seconds``, 30 s; the abuser opens new ones as they close).
- garbage: ``--garbage-rate`` (200) connections a second, each writing 1-512 random bytes (some starting with a
  plausible length prefix), then closing.

The broker's file descriptors are sampled during each abuse phase and printed, as evidence that the abuse was
there. Processes are killed and data removed at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.synchronize
import os
import random
import socket
import statistics
import struct
import sys
import tempfile
import time
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_store.client import Admin, AsyncProducer, new_message
from broker_store.protocol.codes import RequestCode
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.frame import RemotingCommand, encode_frame
from broker_store.protocol.headers import PullMessageRequestHeader
from tests.support.processes import LocalCluster

TOPIC = "AbuseTopic"
HOST = "127.0.0.1"


# -- the abuser process -----------------------------------------------------------------------------------------

def _pull_frame(opaque: int) -> bytes:
    header = PullMessageRequestHeader(consumer_group="abuse-slow", topic=TOPIC, queue_id=opaque % 4, queue_offset=0,
                                      max_msg_nums=32, sys_flag=0, commit_offset=0, suspend_timeout_millis=0,
                                      sub_version=0, subscription="*", expression_type="TAG")
    return encode_frame(RemotingCommand(RequestCode.PULL_MESSAGE, header.to_ext(), opaque=opaque))


async def _abuse(port: int, idle: int, slow: int, partial: int, garbage_rate: float,
                 ready: multiprocessing.synchronize.Event) -> None:
    held: list[asyncio.StreamWriter] = []
    for _ in range(idle):
        _reader, writer = await asyncio.open_connection(HOST, port)
        held.append(writer)

    last_drained = [time.monotonic()] * slow

    async def slow_reader(index: int) -> None:
        _reader, writer = await asyncio.open_connection(HOST, port)
        # Never read, not even into the stream's buffer (asyncio reads up to 128 KiB into it unasked as soon as
        # this loop is idle, which let the answers flow again just as measuring began).
        typing.cast(asyncio.Transport, writer.transport).pause_reading()
        held.append(writer)
        opaque = index * 1_000_000
        try:
            while True:  # drain() blocks for good once the broker stops reading this connection
                writer.write(b"".join(_pull_frame(opaque + i) for i in range(16)))
                opaque += 16
                await writer.drain()
                last_drained[index] = time.monotonic()
        except OSError:
            pass

    async def partial_frame() -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
                writer.write(struct.pack(">iI", 1 << 20, 200) + b"{\"code\":")
                await reader.read()  # the broker closes it after its partial-frame deadline
                writer.close()
            except OSError:
                await asyncio.sleep(0.1)

    async def garbage() -> None:
        rng = random.Random(17)
        interval = 1.0 / garbage_rate
        while True:
            started = time.monotonic()
            try:
                _reader, writer = await asyncio.open_connection(HOST, port)
                data = rng.randbytes(rng.randint(1, 512))
                if rng.random() < 0.5:  # a length prefix that fits, so the header decoder sees the rest
                    data = struct.pack(">iI", len(data) + 4, len(data)) + data
                writer.write(data)
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
                writer.transport.abort()
            except OSError:
                pass
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    tasks = [asyncio.create_task(slow_reader(i)) for i in range(slow)]
    tasks += [asyncio.create_task(partial_frame()) for _ in range(partial)]
    if garbage_rate > 0:
        tasks.append(asyncio.create_task(garbage()))
    # Ready once every slow reader is blocked (no drain for 1 s): until the kernel buffers of both ends are full
    # (several MiB a connection) a reader that never reads is, to the broker, a client pulling at full speed.
    started = time.monotonic()
    await asyncio.sleep(0.5)
    while slow and time.monotonic() - max(last_drained) < 1.0 and time.monotonic() - started < 15:
        await asyncio.sleep(0.1)
    print(f"  (abuser: connections open and slow readers blocked after {time.monotonic() - started:.1f} s)",
          flush=True)
    ready.set()
    await asyncio.gather(*tasks)


def _abuser_entry(port: int, idle: int, slow: int, partial: int, garbage_rate: float,
                  ready: multiprocessing.synchronize.Event) -> None:
    import uvloop

    uvloop.run(_abuse(port, idle, slow, partial, garbage_rate, ready))


# -- measuring ------------------------------------------------------------------------------------------------

async def _measure(producer: AsyncProducer, producers: int, seconds: float, body: bytes) -> float:
    """msg/s of ``producers`` tasks sending one message at a time for ``seconds`` after a 1 s warm-up."""
    counting = False
    sent = 0
    stop = False

    async def one() -> None:
        nonlocal sent
        message = new_message(TOPIC, body)
        while not stop:
            started = time.monotonic()
            try:
                await producer.send(message)
            except RocketMQError as exc:  # counted as nothing sent; said once per failure
                print(f"    send failed after {time.monotonic() - started:.1f} s: {type(exc).__name__}: {exc}",
                      flush=True)
                continue
            if counting:
                sent += 1

    tasks = [asyncio.create_task(one()) for _ in range(producers)]
    await asyncio.sleep(1.0)
    counting = True
    started = time.monotonic()
    await asyncio.sleep(seconds)
    counting = False
    elapsed = time.monotonic() - started
    stop = True
    await asyncio.gather(*tasks)
    return sent / elapsed


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _run(args: argparse.Namespace, cluster: LocalCluster) -> tuple[list[float], list[float]]:
    broker = cluster.brokers[0]
    port = int(broker.listen.rsplit(":", 1)[1])
    assert broker.proc is not None
    producer = AsyncProducer(cluster.namesrv_addr, "abuse-bench", send_timeout=5.0)
    await producer.start()
    body = b"x" * 1024
    alone: list[float] = []
    abused: list[float] = []
    ctx = multiprocessing.get_context("spawn")
    try:
        await producer.send(new_message(TOPIC, body))
        for round_ in range(args.rounds):
            rate = await _measure(producer, args.producers, args.seconds, body)
            alone.append(rate)
            print(f"  round {round_ + 1} alone:        {rate:8.0f} msg/s  (broker fds {_fds(broker.proc.pid)})",
                  flush=True)
            ready = ctx.Event()
            abuser = ctx.Process(target=_abuser_entry, args=(port, args.idle, args.slow, args.partial,
                                                             args.garbage_rate, ready), daemon=True)
            abuser.start()
            try:
                if not await asyncio.to_thread(ready.wait, 60):
                    raise RuntimeError("the abuser did not open its connections within 60 s")
                rate = await _measure(producer, args.producers, args.seconds, body)
                abused.append(rate)
                print(f"  round {round_ + 1} under abuse:  {rate:8.0f} msg/s  (broker fds "
                      f"{_fds(broker.proc.pid)}: {args.idle} idle, {args.slow} slow readers, {args.partial} "
                      f"partial frames, garbage {args.garbage_rate:g}/s)", flush=True)
            finally:
                abuser.kill()
                abuser.join()
            await asyncio.sleep(1.0)  # the broker drops the abuser's connections before the next phase
    finally:
        await producer.close()
    return alone, abused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per phase")
    parser.add_argument("--rounds", type=int, default=2, help="alone / under-abuse pairs")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--partial", type=int, default=50)
    parser.add_argument("--garbage-rate", type=float, default=200.0, help="garbage connections per second")
    parser.add_argument("--max-connections", type=int, default=None,
                        help="the broker's server_max_connections (default: its own, 10000)")
    args = parser.parse_args(argv)
    import uvloop

    options = {} if args.max_connections is None else {"server_max_connections": args.max_connections}
    with tempfile.TemporaryDirectory(prefix="abuse-") as tmp:
        cluster = LocalCluster(Path(tmp), "abuse", 1, **options)
        try:
            cluster.start()
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic(TOPIC, 4)
                admin.wait_for_route(TOPIC)
            alone, abused = uvloop.run(_run(args, cluster))
        finally:
            cluster.stop()
    x, y = statistics.mean(alone), statistics.mean(abused)
    print(f"abuse: send throughput {x:.0f} msg/s alone, {y:.0f} msg/s under abuse, ratio {y / x:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
