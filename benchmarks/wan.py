"""WAN benchmark: the replication of ``benchmarks/replicator.py`` (b) on loopback and across an emulated WAN.

    .venv/bin/python benchmarks/wan.py                 # rtt 50 ms, 200k x 1 KiB messages per side, ~4 minutes
    .venv/bin/python benchmarks/wan.py --quick         # 60k messages per side, shorter lag phase, ~2.5 minutes
    .venv/bin/python benchmarks/wan.py --rtt-ms 100 --rate-mbps 125   # a 1 Gb/s path of 100 ms
    .venv/bin/python benchmarks/wan.py --quick --lag-rate 12000       # the lag phase at a fixed rate (two builds)

Disaster-recovery links cross regions and the replicator runs beside the target cluster, so every pull crosses
the WAN. What one run does (every process on this machine, loopback only):

1. Starts three single-broker clusters: ``bsrc`` (the LAN source), ``bwan`` (the WAN source) and ``bdst`` (the
   target). ``bwan``'s broker listens on 127.0.0.1 but advertises 127.0.0.2 (``broker_ip``, as a broker behind
   NAT advertises its public address), and a delay proxy (``tests/support/delay_proxy.py``, a child process)
   listens on 127.0.0.2 at the name server's and the broker's ports and forwards to 127.0.0.1 after
   ``--rtt-ms`` / 2 each way (optionally capped at ``--rate-mbps`` per direction). The replicator's config
   names ``bwan``'s name server by its 127.0.0.2 address, so routes, pulls and offset queries all cross the
   proxy; the target is local, as RIP-45 places the replicator.
2. Preloads ``--messages`` messages of ``--body`` bytes over ``--queues`` queues into each source (``bwan``'s
   through the proxy: its routes lead there; not measured).
3. Spark ``local[2]`` as in ``benchmarks/replicator.py``: a warm-up link from ``bsrc``, then (lan) and (wan):
   the same AvailableNow replication, rate sustained after the first batch (``replicate_backlog``, see (b) in
   that module's docstring), first from ``bsrc``, then from ``bwan``. ratio = wan / lan.
4. Lag: a paced producer writes to a ``bwan`` topic at half the wan rate for ``--latency-seconds`` while a
   link with a processing-time trigger of ``--trigger`` replicates it; per message target store time - source
   born time. The producer's sends cross the proxy too (its routes lead there), so each lag includes one
   one-way delay before the source stores the message: the figure is a little pessimistic.

Targets at rtt 50 ms: ratio >= 0.8, lag p99 <= trigger + 0.5 s. The last line is exactly
``wan rtt R ms: lan X MB/s, wan Y MB/s, ratio Q, lag p99 Z s`` (1 MB = 10^6 bytes of message body).
Exit status 0 whether or not targets are met; 1 on a failed run. Every process and file is removed at exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from benchmarks.replicator_backlog import replicate_backlog  # noqa: E402
from benchmarks.replicator_children import run_child  # noqa: E402
from benchmarks.replicator_cluster import (  # noqa: E402
    Cluster,
    choose_data_root,
    create_topic,
    link_yaml,
    read_timestamps,
    start_cluster,
    stop_cluster,
    stop_spark,
    wait_for,
)
from benchmarks.replicator_report import pct, print_cpu  # noqa: E402
from broker_store.address import split_host_port  # noqa: E402
from broker_store.client import Admin, MessageQueue  # noqa: E402
from connectors.core.job_stop import prepare_stop_marker  # noqa: E402
from tests.support.delay_proxy import DelayProxyProcess, Route  # noqa: E402

LAN, WAN, TARGET = "bsrc", "bwan", "bdst"
WAN_IP = "127.0.0.2"
"""The address ``bwan``'s broker advertises and the proxy listens on (loopback: 127.0.0.0/8)."""
TOPIC_LAN, TOPIC_WAN, TOPIC_WARM, TOPIC_LAG = "WanBenchLan", "WanBenchWan", "WanBenchWarm", "WanBenchLag"
TARGET_RATIO, LAG_SLACK_S = 0.8, 0.5


def summary_line(rtt_ms: float, lan_mbps: float, wan_mbps: float, lag_p99_s: float) -> str:
    """The run's last line (its format is the benchmark's contract)."""
    ratio = wan_mbps / lan_mbps if lan_mbps else 0.0
    return (f"wan rtt {rtt_ms:g} ms: lan {lan_mbps:.1f} MB/s, wan {wan_mbps:.1f} MB/s, ratio {ratio:.2f}, "
            f"lag p99 {lag_p99_s:.2f} s")


def proxy_routes(cluster: Cluster) -> list[Route]:
    """127.0.0.2:<port> -> 127.0.0.1:<port> for ``cluster``'s name server and broker."""
    ns_port = split_host_port(cluster.addr)[1]
    broker_port = split_host_port(cluster.broker.addr or "")[1]
    return [Route(f"{WAN_IP}:{port}", f"127.0.0.1:{port}") for port in (ns_port, broker_port)]


def config_yaml(clusters: dict[str, str], links: list[str]) -> str:
    """The replicator.yaml: cluster name -> the name server address the replicator uses."""
    rows = "".join(f"  - name: {name}\n    namesrv: [{addr}]\n" for name, addr in clusters.items())
    return f"version: 1\nclusters:\n{rows}links:\n{''.join(links)}"


def link(name: str, source: str, topic: str, interval: float, work: Path, per_trigger: int,
         max_in_flight: int) -> str:
    return link_yaml(name, topic, interval, work, per_trigger, max_in_flight).replace(
        "    source: bsrc\n", f"    source: {source}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rtt-ms", type=float, default=50.0, help="round-trip time of the emulated WAN (default 50)")
    p.add_argument("--rate-mbps", type=float, default=None, help="bandwidth cap per direction, 10^6 bytes/s")
    p.add_argument("--quick", action="store_true", help="60k messages per side, 15 s lag phase")
    p.add_argument("--messages", type=int, default=None, help="backlog per source (default 200000; quick 60000)")
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--per-trigger", type=int, default=None,
                   help="the links' max_messages_per_trigger (default 50000; quick 20000)")
    p.add_argument("--warmup", type=int, default=5000, help="messages of the warm-up link (from bsrc)")
    p.add_argument("--trigger", type=float, default=1.0, help="the lag link's trigger interval, seconds")
    p.add_argument("--latency-seconds", type=float, default=None, help="lag phase (default 30; quick 15)")
    p.add_argument("--lag-rate", type=float, default=None,
                   help="msg/s of the lag phase (default: half of the wan rate; a fixed rate compares two builds)")
    p.add_argument("--latency-batch", type=int, default=64, help="messages per send of the paced producer")
    p.add_argument("--max-in-flight", type=int, default=4, help="the links' max_in_flight")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    args = p.parse_args(argv)
    n = args.messages or (60_000 if args.quick else 200_000)
    per_trigger = args.per_trigger or (20_000 if args.quick else 50_000)
    lat_seconds = args.latency_seconds or (15.0 if args.quick else 30.0)

    root = choose_data_root()
    clusters: list[Cluster] = []
    proxy: DelayProxyProcess | None = None
    spark = None
    queries: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        print(f"data dir {root}; rtt {args.rtt_ms:g} ms"
              + (f", {args.rate_mbps:g} MB/s per direction" if args.rate_mbps else "")
              + f"; {n} x {args.body} B messages over {args.queues} queues per source", flush=True)
        lan = start_cluster(LAN, root)
        clusters.append(lan)
        wan = start_cluster(WAN, root, broker_ip=WAN_IP)
        clusters.append(wan)
        dst = start_cluster(TARGET, root)
        clusters.append(dst)
        proxy = DelayProxyProcess(proxy_routes(wan), args.rtt_ms / 2, rate_mbps=args.rate_mbps)
        wan_ns = proxy.start()[0]
        print(f"delay proxy (pid {proxy.pid}): {WAN} reached at {wan_ns} (routes advertise {WAN_IP})", flush=True)
        qs: dict[str, tuple[list[MessageQueue], list[MessageQueue]]] = {}
        for topic, src in ((TOPIC_LAN, lan), (TOPIC_WARM, lan), (TOPIC_WAN, wan), (TOPIC_LAG, wan)):
            qs[topic] = (create_topic(src.addr, src.name, topic, args.queues),
                         create_topic(dst.addr, dst.name, topic, args.queues))
        wire = {t: [(mq.broker_name, mq.queue_id) for mq in v[0]] for t, v in qs.items()}
        for topic, src, count in ((TOPIC_LAN, lan, n), (TOPIC_WARM, lan, args.warmup), (TOPIC_WAN, wan, n)):
            pre = run_child("preload", namesrv=src.addr, topic=topic, queues=wire[topic], count=count, body=args.body)
            print(f"preloaded {count} messages into {src.name}/{topic} in {pre['seconds']:.1f} s", flush=True)

        work = root / "spark"
        work.mkdir()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys([str(PROJECT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        config_path = work / "replicator.yaml"
        lk = (work, per_trigger, args.max_in_flight)
        config_path.write_text(config_yaml({LAN: lan.addr, WAN: wan_ns, TARGET: dst.addr}, [
            link("wan-warm", LAN, TOPIC_WARM, 1.0, *lk), link("wan-lan", LAN, TOPIC_LAN, 1.0, *lk),
            link("wan-wan", WAN, TOPIC_WAN, 1.0, *lk), link("wan-lag", WAN, TOPIC_LAG, args.trigger, *lk)]))
        from connectors.core.config import load_replicator_config
        from jobs.replicate import start_link
        from jobs.spark_session import build_spark

        config = load_replicator_config(config_path)
        logs = PROJECT / "run" / "logs" / "wan-bench"  # kept after the run (its data root is removed)
        logs.mkdir(parents=True, exist_ok=True)
        print(f"Spark's logs: {logs}", flush=True)
        prepare_stop_marker()
        t0 = time.monotonic()
        spark = build_spark("wan-bench", master=args.master, settings=dict(kv.split("=", 1) for kv in args.conf),
                            checkpoint_locations=[str(work / "checkpoints")], log_dir=logs)
        spark.sparkContext.setLogLevel("WARN")
        print(f"spark {spark.version} {args.master} up in {time.monotonic() - t0:.1f} s; load average "
              f"{os.getloadavg()[0]:.1f} (other jobs on the machine skew every number)", flush=True)
        admin_dst = Admin(dst.addr)
        q = start_link(spark, str(config_path), config, "wan-warm", available_now=True)
        queries.append(q)
        wait_for(admin_dst, qs[TOPIC_WARM][1], args.warmup, 300, q)
        q.awaitTermination(300)

        labels = {lan.broker.pid: "source broker (lan)", wan.broker.pid: "source broker (wan)",
                  dst.broker.pid: "target broker", proxy.pid: "delay proxy",
                  **{c.namesrv.pid: "name servers" for c in clusters}}
        runs = {}
        for side, name, topic in (("lan", "wan-lan", TOPIC_LAN), ("wan", "wan-wan", TOPIC_WAN)):
            run = replicate_backlog(spark, config_path, config, name, qs[topic][1], n, args.body, "ranges",
                                    admin_dst, labels)
            runs[side] = run
            per_batch = [dict(pr.durationMs) for pr in run.batches[1:]] or [dict(run.batches[0].durationMs)]
            print(f"({side}) {n} msgs, {len(run.batches)} batches: {run.rate:,.0f} msg/s, {run.mbps:.1f} MB/s "
                  f"sustained (after the first batch, which ended {run.first_end_s:.2f} s after start); mean per "
                  "batch after the first: " + ", ".join(
                      f"{k} {statistics.mean(x.get(k, 0) for x in per_batch):.0f} ms"
                      for k in ("triggerExecution", "latestOffset", "addBatch")), flush=True)
            print_cpu(run.total_s, run.cpu)

        rate = args.lag_rate or 0.5 * runs["wan"].rate
        q = start_link(spark, str(config_path), config, "wan-lag", available_now=False)
        queries.append(q)
        time.sleep(max(3.0, 2 * args.trigger))  # the first (empty) batches pass
        paced = run_child("paced", namesrv=wan.addr, topic=TOPIC_LAG, queues=wire[TOPIC_LAG], rate=rate,
                          batch=args.latency_batch, seconds=lat_seconds, body=args.body)
        wait_for(admin_dst, qs[TOPIC_LAG][1], paced["messages"], 300, q)
        from jobs.query_supervisor import stop_queries

        stop_queries([q])
        born = read_timestamps(wan.addr, qs[TOPIC_LAG][0], "born_timestamp")
        stored = read_timestamps(dst.addr, qs[TOPIC_LAG][1], "store_timestamp")
        lag = [(stored[k] - born[k]) / 1000 for k in born if k in stored]
        p99 = pct(lag, 99)
        chosen = "given" if args.lag_rate else "half of wan"
        print(f"(lag) at {rate:,.0f} msg/s ({chosen}; achieved {paced['messages'] / paced['seconds']:,.0f}) for "
              f"{lat_seconds:g} s, trigger {args.trigger:g} s: {len(lag)} msgs, p50 {statistics.median(lag):.2f} s, "
              f"p99 {p99:.2f} s, max {max(lag):.2f} s; {len(born) - len(lag)} not found on the target", flush=True)
        admin_dst.close()

        line = summary_line(args.rtt_ms, runs["lan"].mbps, runs["wan"].mbps, p99)
        ratio = runs["wan"].mbps / runs["lan"].mbps
        print(f"\ntargets at rtt 50 ms: ratio >= {TARGET_RATIO}: {'MET' if ratio >= TARGET_RATIO else 'NOT MET'}; "
              f"lag p99 <= {args.trigger + LAG_SLACK_S:g} s: "
              f"{'MET' if p99 <= args.trigger + LAG_SLACK_S else 'NOT MET'}")
        print(line)
        return 0
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 1
    finally:
        stop_spark(queries, spark)
        if proxy is not None:
            proxy.stop()
        for c in clusters:
            stop_cluster(c)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
