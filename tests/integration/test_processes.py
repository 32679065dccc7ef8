"""Real processes on loopback: `python -m broker_store up`, kill -9 and restart, SIGTERM shutdown."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, StoredMessage, new_message
from broker_store.config import BrokerConfig
from broker_store.deploy.launcher import ClusterProcesses, loopback_cluster, wait_in_sync
from tests.support.processes import broker_listen_port, free_port, local_cluster

pytestmark = pytest.mark.integration


def pull_all(consumer: PullConsumer, queues: list[MessageQueue]) -> dict[MessageQueue, list[StoredMessage]]:
    out = {}
    for mq in queues:
        offset, msgs = 0, list[StoredMessage]()
        while True:
            result = consumer.pull(mq, offset, 256)
            if result.status is not PullStatus.FOUND:
                break
            msgs.extend(result.messages)
            offset = result.next_begin_offset
        out[mq] = msgs
    return out


def test_up_starts_both_clusters_and_stops_them_on_sigterm(tmp_path: Path) -> None:
    # brokers keep listen + 1 free for their HA port (counted by the config's duplicate-port check)
    ports = [free_port() if i in (0, 3, 5) else broker_listen_port(fast_listen=False) for i in range(6)]
    config = {"clusters": [
        {"name": "src", "namesrv": {"listen": f"127.0.0.1:{ports[0]}"},
         "brokers": [{"broker_name": "src-a", "listen": f"127.0.0.1:{ports[1]}", "store_dir": "s-a",
                      "fast_listen_enable": False},
                     {"broker_name": "src-b", "listen": f"127.0.0.1:{ports[2]}", "store_dir": "s-b",
                      "fast_listen_enable": False}]},
        {"name": "dst", "namesrv": {"listen": f"127.0.0.1:{ports[3]}"},
         "brokers": [{"broker_name": "dst-a", "listen": f"127.0.0.1:{ports[4]}", "store_dir": "d-a",
                      "fast_listen_enable": False}]},
    ]}
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(path),
                             "--run-dir", str(tmp_path / "run")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"READY 127.0.0.1:{ports[0]} 127.0.0.1:{ports[3]}"
        with Admin(f"127.0.0.1:{ports[0]}") as admin:
            assert set(admin.cluster_info().cluster_addr_table["src"]) == {"src-a", "src-b"}
        with Producer(f"127.0.0.1:{ports[3]}") as producer:
            assert producer.send(new_message("UpTopic", b"hello")).ok
        assert (tmp_path / "d-a" / "commitlog").is_dir()  # relative store_dir resolved from cwd
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        for pid in children:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["pkill", "-9", "-P", str(proc.pid)], check=False)
            proc.wait()


def test_up_rejects_invalid_config_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("clusters:\n  - name: x\n    namesrv: {listen: '127.0.0.1:1'}\n"
                    "    brokers: [{broker_name: b, store_dir: s, flush_mode: SOMETIMES}]\n")
    result = subprocess.run([sys.executable, "-m", "broker_store", "up", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert str(path) in result.stderr and "flush_mode" in result.stderr and "SYNC_FLUSH" in result.stderr


def test_sync_flush_acked_messages_survive_kill_9(tmp_path: Path) -> None:
    """Producers send continuously; the broker is SIGKILLed three times mid-stream and restarted.
    Every acknowledged message must come back byte-identical, in its acknowledged queue position."""
    with local_cluster(tmp_path, "crash", brokers=1, flush_mode="SYNC_FLUSH",
                       commit_log_segment_size=256 * 1024, max_message_size=64 * 1024) as cluster:
        broker = cluster.brokers[0]
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("Durable", 4)
            admin.wait_for_route("Durable")
        acked: dict[tuple[int, int], bytes] = {}
        stop = threading.Event()

        def produce(seed: int) -> None:
            rng = random.Random(seed)
            with Producer(cluster.namesrv_addr, f"crash-{seed}", send_timeout=2.0,
                          retry_times_when_send_failed=0) as producer:
                while not stop.is_set():
                    body = rng.randbytes(rng.randint(1, 3000))
                    try:
                        result = producer.send(new_message("Durable", body, tags="T"))
                    except Exception:  # noqa: BLE001 - broker is down: unacknowledged, keep going
                        time.sleep(0.05)
                        continue
                    if result.ok:
                        acked[(result.message_queue.queue_id, result.queue_offset)] = body

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        try:
            for _ in range(3):
                time.sleep(random.uniform(0.5, 1.5))
                broker.kill()
                time.sleep(0.2)
                broker.start()
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert len(acked) > 100
        with Admin(cluster.namesrv_addr) as admin:
            route = admin.wait_for_route("Durable")
        queues = [MessageQueue("Durable", route.queue_datas[0].broker_name, i) for i in range(4)]
        with PullConsumer(cluster.namesrv_addr, "verify") as consumer:
            stored = pull_all(consumer, queues)
        by_position = {(mq.queue_id, m.queue_offset): m.body for mq, msgs in stored.items() for m in msgs}
        missing = [k for k in acked if k not in by_position]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        assert all(by_position[k] == body for k, body in acked.items())
        for msgs in stored.values():  # queue offsets dense and increasing after recovery
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))


def test_async_flush_restart_after_kill_keeps_a_clean_prefix(tmp_path: Path) -> None:
    with local_cluster(tmp_path, "async", brokers=1, flush_mode="ASYNC_FLUSH") as cluster:
        with Producer(cluster.namesrv_addr) as producer:
            for i in range(500):
                producer.send(new_message("AsyncTopic", f"m{i}".encode()), MessageQueue("AsyncTopic", "async-a", 0)
                              if i else None)
        cluster.brokers[0].kill()
        cluster.brokers[0].start()
        with PullConsumer(cluster.namesrv_addr, "g") as consumer:
            q0 = MessageQueue("AsyncTopic", "async-a", 0)
            msgs = pull_all(consumer, [q0])[q0]
        bodies = [m.body for m in msgs]
        # Whatever survived is a prefix of what was sent to queue 0, never a corrupted record.
        sent_q0 = [f"m{i}".encode() for i in range(1, 500)]
        assert bodies == sent_q0[: len(bodies)] or bodies[1:] == sent_q0[: len(bodies) - 1]


def test_broker_keeps_serving_after_garbage_and_oversized_frames(tmp_path: Path) -> None:
    import socket

    with local_cluster(tmp_path, "garbage", brokers=1) as cluster:
        host, port = cluster.brokers[0].listen.split(":")
        for payload in (os.urandom(64), b"\x7f\xff\xff\xff" + b"x" * 16, b"\x00\x00\x00\x08\x00\x00\x00\x04{}]]"):
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(payload)
                sock.settimeout(5)
                try:
                    assert sock.recv(1024) == b""  # the broker closed this connection only
                except ConnectionResetError:
                    pass
        with Producer(cluster.namesrv_addr) as producer:
            assert producer.send(new_message("StillUp", b"x")).ok
        assert cluster.brokers[0].running()


def test_cluster_processes_start_a_replica_group_in_sync_and_restart_a_member(tmp_path: Path) -> None:
    # The product launcher's own path for benchmarks: free loopback ports, replica follows its primary.
    ha = {"role": "SYNC_MASTER", "total_replicas": 2, "in_sync_replicas": 2, "ha_send_heartbeat_interval_ms": 500,
          "ha_housekeeping_interval_ms": 2000}
    config = loopback_cluster("lc", {"g": ({"ha": ha}, {})}, tmp_path / "stores", fast_listen_enable=False)
    with ClusterProcesses(config, tmp_path / "run") as cluster:
        primary, replica = cluster.member("g", 0), cluster.member("g", 1)
        # No address configured: the replica learns the primary's HA address from its registration.
        assert isinstance(replica.config, BrokerConfig) and replica.config.ha.ha_primary_address is None
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("LC", 2, broker_names=["g"])
            admin.wait_for_route("LC")
        with Producer(cluster.namesrv_addr, "lc") as producer:
            producer.send(new_message("LC", b"x"))  # PUT_OK: the replica acked it
        replica.kill()
        replica.start()
        wait_in_sync(primary.config.listen, 1, 15.0)
    assert not primary.running() and not replica.running()
