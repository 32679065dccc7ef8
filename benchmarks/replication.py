"""Replication benchmark: synchronous vs asynchronous replication throughput, replica lag, catch-up rate.

    .venv/bin/python benchmarks/replication.py            # full run (1 GiB backlog)
    .venv/bin/python benchmarks/replication.py --quick    # smaller volumes, under 2 minutes

One run, everything on this machine (client, primaries and replicas share its cores):

1. Starts one name server and two broker groups of two members each as separate processes on free
   loopback ports (``broker_store.deploy.launcher.ClusterProcesses``, the product launcher): group ``a``
   ASYNC_MASTER, group ``s`` SYNC_MASTER with total_replicas 2 / in_sync_replicas 2; both replicas
   follow their primary.
2. The same load against each group in turn: ``--producers`` (16) concurrent producers send 1 KiB
   messages one at a time for ``--seconds``; msg/s of each, and their ratio (sync / async). The producers
   are tasks of one ``AsyncProducer`` in this process (``--processes 1``, the default), or spread evenly
   over ``--processes`` N spawned client processes, one ``AsyncProducer`` each, clocks started together
   (same total producers, size and duration for both groups). One process is the default because it is
   RocketMQ's own benchmark shape (many sender threads sharing one producer instance, so one connection
   per broker carrying every in-flight send); several processes model independent applications.
3. Replica lag under asynchronous replication at half the asynchronous maximum rate: each acknowledged
   send's CommitLog offset is timed until the replica reports holding it (its GET_BROKER_HA_STATUS
   polled every ~2 ms, so the figure is at that resolution); p50 / p99.
4. Catch-up: group ``a``'s replica is killed, ``--backlog-mib`` (1024; quick 128) MiB are written in
   batches (the primary's batched write rate, CommitLog bytes/s), the replica restarts, and the time
   until it holds the primary's max offset gives its catch-up rate; reported as a ratio of the write rate.

Targets: sync/async >= 0.90, lag p99 <= 50 ms, catch-up >= 1.0. The last line is exactly
``sync/async throughput ratio: R``.

Results, 2026-11-24, 2 vCPUs shared with two other sessions (client, 2 primaries and 2 replicas on those
cores), ``--quick`` unless noted; "before" is 852d609 (the launcher move, no HA change), "after" 8d2300e::

    measure                                 before          after             after, full run   after, 64 producers
    async replication, 1 KiB singles        16.7k msg/s     17.3-17.5k msg/s  17.3k msg/s       24.6k msg/s
    sync replication (2/2), same load        9.6k msg/s     14.4k msg/s       14.4k msg/s       17.7k msg/s
    sync/async ratio (target 0.90)           0.57-0.58      0.82-0.83 MISSED  0.83 MISSED       0.72 MISSED
    replica lag p99 at half the async rate   3.4-4.5 ms     2.7 ms      OK    2.8 ms      OK    3.7 ms  OK
    catch-up / primary batched write rate    1.13-1.17      1.21-1.22   OK    1.11 (1.2 GiB) OK 1.09    OK

Where the time goes (py-spy on the primaries and replicas, CPU seconds per message from /proc, and a count
of requests per read): the load moves as one wave. Every read of the producer connection on the primary
holds all 16 puts and one replica report acks them all, so the client, the primary and the replica take
turns rather than overlap (the machine is ~1.1 of its 2 cores busy in both modes), and a wave lasts as long
as the CPU each process spends on it. Asynchronous: client ~25 + primary ~27 us per message, ~0.9 ms per
wave of 16. Synchronous adds, per wave, the primary's quorum bookkeeping (now ~10 us a put: admit, the
turn's shared ack waiter, the reply) and one replica round trip (batch shipped -> replica writes and
reports -> report read on the primary: p50 126 us, p90 158 us measured). R = 0.90 leaves ~0.1 ms per wave
for both, less than the round trip alone; more producers only make the wave bigger (64: still one wave
per read, and the primary's per-put work weighs more). What the profile found and this branch removed: a
task + wrap_future + cross-thread wake per put (now ``Connection.reply_when_done``), the replica's thread
hop and indexing before its ack (now written on the loop, acked, then indexed: replica CPU 17 -> 10
us/msg), a sender-task wake and a ``wait_for`` task per shipped wave (now one call_soon per loop turn), a
deadline heap that kept every acked put for seconds, and one future per put (puts of one loop turn share
one waiter). TCP_NODELAY is not a factor (asyncio and uvloop set it on both ends; checked).

Client processes (ha-perf2, one cluster, async and sync measured back to back per row, 5 s each, two
rounds, ``--producers 16``): spreading the producers over independent processes does not raise R; it
lowers it, because the extra client CPU parallelism speeds up asynchronous replication more than
synchronous (which still waits a replica round trip per wave of each connection)::

    client processes    async msg/s      sync msg/s       sync/async
    1 (default)         18.1-18.2k       14.2-14.3k       0.78-0.79
    2                   19.8-20.5k       15.1k            0.74-0.76
    4                   19.9-20.4k       13.8-14.0k       0.68-0.70

The same branch then cut per-wave and per-put work that synchronous replication adds (each step measured
against the previous commit in the same session, one cluster, 3 rounds of 5 s): the quorum's admit
decision is reused until the links change or the primary's offset leaves the range giving the same
in-sync count (admit + wait 3.0 -> 1.5 us a put in-process), answers resolved by a replica report leave in
one write at once instead of a loop iteration later, and the replica's per-read timeout context became
one lazily re-armed timer. Sync 14.2-14.7k -> 15.4-15.5k msg/s; the replica change speeds up the
asynchronous group as well. ``--quick``, end state (62b1038)::

    client processes    async msg/s      sync msg/s       sync/async
    1 (default)         18.8-19.1k       14.9-15.8k       0.78, 0.83, 0.83
    2                   20.0k            14.9k            0.74
    4                   18.0k            13.8k            0.77

Why R stays below 0.90: with one connection per client the wave structure above is unchanged, and each
synchronous wave still waits one replica round trip in which neither the client nor the primary has
work; gains in per-put CPU also speed up the asynchronous group, so they raise both rates and move R
little. Spreading producers over processes gives overlap between connections' waves, but the client's
extra parallelism helps the asynchronous group more (2 cores for client, 2 primaries and 2 replicas).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.synchronize
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_store.client import Admin, AsyncProducer, new_message
from broker_store.deploy.launcher import ClusterProcesses, loopback_cluster
from broker_store.protocol.errors import RocketMQError

MiB = 1024 * 1024
BODY = b"r" * 1024
HA = {"ha_send_heartbeat_interval_ms": 1000, "ha_housekeeping_interval_ms": 3000}


def _max_offset(admin: Admin, addr: str) -> int:
    return admin.ha_status(addr).max_offset


async def _load(namesrv: str, topic: str, producers: int, seconds: float, rate: float | None = None,
                acked: list[tuple[float, int]] | None = None,
                ready: multiprocessing.synchronize.Barrier | None = None) -> float:
    """``producers`` tasks sending 1 KiB singles for ``seconds`` (paced to ``rate`` msg/s in total when
    given); returns msg/s. ``acked`` collects (ack time, CommitLog offset) of every send; ``ready``, when
    given, is waited on after the warm-up send so that client processes start their clocks together."""
    count = 0
    async with AsyncProducer(namesrv, "bench-repl", send_timeout=10.0) as producer:
        await producer.send(new_message(topic, BODY))  # routes and connections before the clock starts
        if ready is not None:
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
        started = time.monotonic()
        deadline = started + seconds
        interval = producers / rate if rate else 0.0

        async def one() -> None:
            nonlocal count
            next_at = time.monotonic()
            while time.monotonic() < deadline:
                result = await producer.send(new_message(topic, BODY))
                count += 1
                if acked is not None:
                    acked.append((time.monotonic(), int(result.offset_msg_id[16:], 16)))
                if interval:
                    next_at += interval
                    await asyncio.sleep(max(next_at - time.monotonic(), 0))

        await asyncio.gather(*(one() for _ in range(producers)))
        return count / (time.monotonic() - started)


def _load_process(namesrv: str, topic: str, producers: int, seconds: float,
                  ready: multiprocessing.synchronize.Barrier,
                  rates: multiprocessing.SimpleQueue[float]) -> None:
    rates.put(asyncio.run(_load(namesrv, topic, producers, seconds, ready=ready)))


def throughput(namesrv: str, topic: str, producers: int, processes: int, seconds: float) -> float:
    """msg/s of ``producers`` producers spread evenly over ``processes`` client processes (each its own
    AsyncProducer and connection), all clocks started together; 1 runs them as tasks of this process."""
    if processes == 1:
        return asyncio.run(_load(namesrv, topic, producers, seconds))
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(processes)
    rates: multiprocessing.SimpleQueue[float] = context.SimpleQueue()
    shares = [producers // processes + (i < producers % processes) for i in range(processes)]
    workers = [context.Process(target=_load_process, args=(namesrv, topic, share, seconds, ready, rates))
               for share in shares]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"client process exited with {worker.exitcode}")
    return sum(rates.get() for _ in workers)


def replica_lag_ms(namesrv: str, topic: str, primary: str, replica: str, producers: int, seconds: float,
                   rate: float) -> tuple[float, float]:
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def poll() -> None:
        with Admin(replica) as admin:
            while not stop.is_set():
                samples.append((time.monotonic(), _max_offset(admin, replica)))
                time.sleep(0.002)

    poller = threading.Thread(target=poll)
    poller.start()
    acked: list[tuple[float, int]] = []
    try:
        asyncio.run(_load(namesrv, topic, producers, seconds, rate, acked))
        time.sleep(0.5)
    finally:
        stop.set()
        poller.join()
    lags = []
    j = 0
    for at, offset in sorted(acked, key=lambda a: a[1]):
        while j < len(samples) and samples[j][1] <= offset:
            j += 1
        if j == len(samples):
            break
        lags.append(max(samples[j][0] - at, 0.0) * 1000)
    lags.sort()
    if not lags:
        return float("nan"), float("nan")
    return lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))]


async def _backlog(namesrv: str, topic: str, total: int, producers: int) -> None:
    batch = [new_message(topic, BODY) for _ in range(128)]
    per_batch = 128 * len(BODY)
    remaining = [total // per_batch]
    async with AsyncProducer(namesrv, "bench-backlog", send_timeout=30.0) as producer:
        async def one() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                await producer.send_batch(batch)
        await asyncio.gather(*(one() for _ in range(producers)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--processes", type=int, default=1,
                        help="client processes the producers are spread over (default 1)")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--backlog-mib", type=int)
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    backlog = (args.backlog_mib or (128 if args.quick else 1024)) * MiB
    groups: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # member overrides, as loopback_cluster takes
        "a": ({"ha": {"role": "ASYNC_MASTER"}}, {}),
        "s": ({"ha": {"role": "SYNC_MASTER", "total_replicas": 2, "in_sync_replicas": 2}}, {})}
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp:
        config = loopback_cluster("bench", groups, Path(tmp), ha=HA, commit_log_segment_size=128 * MiB,
                                  fast_listen_enable=False, max_message_size=MiB)
        with ClusterProcesses(config, Path(tmp)) as cluster:
            return _run(cluster, args.producers, args.processes, seconds, backlog)


def _run(cluster: ClusterProcesses, producers: int, processes: int, seconds: float, backlog: int) -> int:
    with Admin(cluster.namesrv_addr) as admin:
        for group in ("a", "s"):
            admin.create_topic(f"T-{group}", 8, broker_names=[group])
            admin.wait_for_route(f"T-{group}")
    async_rate = throughput(cluster.namesrv_addr, "T-a", producers, processes, seconds)
    sync_rate = throughput(cluster.namesrv_addr, "T-s", producers, processes, seconds)
    print(f"async replication (ASYNC_MASTER + replica), 1 KiB singles, {producers} producers in "
          f"{processes} client process(es): {async_rate:,.0f} msg/s")
    print(f"sync replication (SYNC_MASTER 2/2 + replica), same load:                     {sync_rate:,.0f} msg/s")
    primary, replica = cluster.member("a", 0), cluster.member("a", 1)
    primary_addr, replica_addr = primary.config.listen, replica.config.listen
    p50, p99 = replica_lag_ms(cluster.namesrv_addr, "T-a", primary_addr, replica_addr, producers,
                              seconds, async_rate / 2)
    print(f"replica lag under async replication at {async_rate / 2:,.0f} msg/s: p50 {p50:.1f} ms, "
          f"p99 {p99:.1f} ms (target p99 <= 50 ms)")
    replica.kill()
    with Admin(primary_addr) as admin:
        start_offset = _max_offset(admin, primary_addr)
        started = time.monotonic()
        asyncio.run(_backlog(cluster.namesrv_addr, "T-a", backlog, producers))
        write_s = time.monotonic() - started
        end_offset = _max_offset(admin, primary_addr)
        with Admin(replica_addr) as replica_admin:
            replica.start()
            behind = end_offset - _max_offset(replica_admin, replica_addr)
            started = time.monotonic()
            while True:
                try:
                    if _max_offset(replica_admin, replica_addr) >= end_offset:
                        break
                except RocketMQError:
                    pass
                time.sleep(0.01)
            catch_up_s = time.monotonic() - started
    write_rate = (end_offset - start_offset) / write_s
    catch_up_rate = behind / catch_up_s
    written = (end_offset - start_offset) / MiB
    print(f"primary batched write rate: {write_rate / MiB:,.0f} MiB/s ({written:,.0f} MiB); "
          f"replica catch-up of {behind / MiB:,.0f} MiB: {catch_up_rate / MiB:,.0f} MiB/s, "
          f"ratio {catch_up_rate / write_rate:.2f} (target >= 1.0)")
    print(f"sync/async throughput ratio: {sync_rate / async_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
