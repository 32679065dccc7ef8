"""Wire compatibility with an off-the-shelf RocketMQ 4.x client: Apache RocketMQ's C++ client
(librocketmq, shipped in the `rocketmq` wheel on PyPI) produces and consumes through our name server
and brokers, including TBW102 auto-creation, tags, keys and user properties, and its pull consumer
follows slave-read suggestions (suggestWhichBrokerId) to a replica and back.

The C++ client runs in a child process (it starts native threads and writes ~/logs/rocketmq-cpp)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import (
    Admin,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    StoredMessage,
    new_message,
)
from tests.support.processes import GroupSpec, local_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
rocketmq_cpp = pytest.importorskip("rocketmq.client", reason="the rocketmq C++ client wheel is x86_64 Linux only")

CPP_PRODUCE = textwrap.dedent("""
    import json, sys, time
    from rocketmq.client import Producer, Message
    from rocketmq.exceptions import ProducerSendSyncFailed
    namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    delay_level = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    p = Producer("PID_CPP_COMPAT")
    p.set_namesrv_addr(namesrv)
    p.start()
    out = []
    for i in range(n):
        m = Message(topic)
        m.set_keys("key-%d" % i)
        m.set_tags("TagCpp")
        m.set_body(("cpp body %d " % i).encode() * (i + 1))
        m.set_property("userProp", "value-%d" % i)
        if delay_level:
            m.set_delay_time_level(delay_level)
        # librocketmq's transport lock can fail at once while its own heartbeat thread connects
        # ("GetTransport ... get timed_mutex timeout", apache/rocketmq-client-cpp#455): the send may
        # have been stored yet reported failed. Retry as an application would, and count it.
        for retries in range(5):
            try:
                r = p.send_sync(m)
                break
            except ProducerSendSyncFailed:
                if retries == 4:
                    raise
                time.sleep(0.2)
        out.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "retries": retries})
    p.shutdown()
    print(json.dumps(out))
""")

CPP_PULL = textwrap.dedent("""
    import json, sys
    from rocketmq.client import PullConsumer
    namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = PullConsumer("CID_CPP_COMPAT")
    c.set_namesrv_addr(namesrv)
    c.start()
    out = []
    for msg in c.pull(topic):
        out.append({"id": msg.id, "tags": msg.tags.decode(), "keys": msg.keys.decode(), "body": msg.body.hex(),
                    "prop": (msg.get_property("userProp") or b"").decode(), "queue_id": msg.queue_id,
                    "queue_offset": msg.queue_offset})
        if len(out) >= n:
            break
    c.shutdown()
    print(json.dumps(out))
""")


CPP_PULL_STEPPED = textwrap.dedent("""
    import sys
    from rocketmq.client import PullConsumer
    namesrv, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    c = PullConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.start()
    for i, msg in enumerate(c.pull(topic, max_num=4)):  # until a pull finds nothing new
        print("msg", msg.body[:4].decode(), flush=True)
        if i == 0:
            sys.stdin.readline()  # the parent acts between the first pull and the next
    print("done", flush=True)
    c.shutdown()
""")


def cpp_env(cwd: Path) -> dict[str, str]:
    return {"HOME": str(cwd), "PATH": "/usr/bin:/bin"}


def run_cpp(script: str, *args: str, cwd: Path) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                            cwd=cwd, env=cpp_env(cwd))
    assert result.returncode == 0, result.stderr[-2000:]
    rows: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])  # the script's JSON report
    return rows


def test_cpp_client_produces_and_our_client_consumes(tmp_path: Path) -> None:
    with local_cluster(tmp_path, "compat", brokers=2) as cluster:
        sent = run_cpp(CPP_PRODUCE, cluster.namesrv_addr, "CppProduced", "20", cwd=tmp_path)
        assert [s["status"] for s in sent] == [0] * 20  # SEND_OK, topic auto-created through TBW102
        with Admin(cluster.namesrv_addr) as admin:
            route = admin.topic_route("CppProduced")
        queues = [MessageQueue("CppProduced", q.broker_name, i) for q in route.queue_datas
                  for i in range(q.read_queue_nums)]
        got = {}
        with PullConsumer(cluster.namesrv_addr, "our-group") as consumer:
            for mq in queues:
                result = consumer.pull(mq, 0, 64)
                if result.status is PullStatus.FOUND:
                    got.update({m.msg_id: m for m in result.messages})
        sent_ids = {s["msg_id"] for s in sent}
        assert sent_ids <= set(got)  # UNIQ_KEY set by the C++ client is the msgId
        # a send the client retried may also have been stored the first time (at least once)
        assert len(set(got) - sent_ids) <= sum(s["retries"] for s in sent)
        for i, s in enumerate(sent):
            msg = got[s["msg_id"]]
            assert msg.body == (f"cpp body {i} ".encode()) * (i + 1)
            assert (msg.tags, msg.keys, msg.properties["userProp"]) == ("TagCpp", f"key-{i}", f"value-{i}")


def test_a_cpp_clients_delay_level_is_honoured(tmp_path: Path) -> None:
    """setDelayTimeLevel(1) of the C++ client: the message reaches its topic after level 1's delay (1 s here)."""
    with local_cluster(tmp_path, "compat", brokers=1, message_delay_level="1s 2s") as cluster:
        (sent,) = run_cpp(CPP_PRODUCE, cluster.namesrv_addr, "CppDelayed", "1", "1", cwd=tmp_path)
        assert sent["status"] == 0
        with Admin(cluster.namesrv_addr) as admin:
            route = admin.topic_route("CppDelayed")
        queues = [MessageQueue("CppDelayed", q.broker_name, i) for q in route.queue_datas
                  for i in range(q.read_queue_nums)]
        found: list[StoredMessage] = []
        with PullConsumer(cluster.namesrv_addr, "our-group") as consumer:
            def delivered() -> bool:
                found[:] = [m for mq in queues for m in consumer.pull(mq, 0, 8).messages if m.msg_id == sent["msg_id"]]
                return bool(found)

            eventually(delivered, timeout=10.0, what="the C++ client's delayed message in its topic")
        (msg,) = found
        assert msg.store_timestamp >= msg.born_timestamp + 1000 and "DELAY" not in msg.properties
        assert (msg.tags, msg.keys, msg.properties["userProp"]) == ("TagCpp", "key-0", "value-0")


def test_our_client_produces_and_cpp_client_consumes(tmp_path: Path) -> None:
    with local_cluster(tmp_path, "compat2", brokers=1) as cluster:
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("OursProduced", 2)
            admin.wait_for_route("OursProduced")
        sent = {}
        with Producer(cluster.namesrv_addr) as producer:
            for i in range(10):
                body = bytes(range(1, 256)) * (i + 1)  # the binding reads bodies as C strings: no NUL
                result = producer.send(new_message("OursProduced", body, tags="TagPy", keys=f"k{i}",
                                                   properties={"userProp": f"p{i}"}))
                sent[result.msg_id] = (body, f"k{i}", f"p{i}")
        pulled = run_cpp(CPP_PULL, cluster.namesrv_addr, "OursProduced", "10", cwd=tmp_path)
        assert len(pulled) == 10
        for m in pulled:
            body, keys, prop = sent[m["id"]]
            assert (bytes.fromhex(m["body"]), m["tags"], m["keys"], m["prop"]) == (body, "TagPy", keys, prop)


CPP_SIGNED_SEND = textwrap.dedent("""
    import sys
    from rocketmq.client import Producer, Message
    p = Producer("PID_CPP_ACL")
    p.set_namesrv_addr(sys.argv[1])
    p.set_session_credentials("cpp-access", "cpp-secret", "LOCAL")
    p.start()
    try:
        m = Message("AclTopic")
        m.set_body(b"x")
        p.send_sync(m)
    except Exception:
        pass  # the recording name server knows no route; only the signed requests matter
    p.shutdown()
    print("[]")
""")


def test_acl_signatures_agree_with_the_cpp_client(tmp_path: Path) -> None:
    """librocketmq signs its requests (AclClientRPCHook's scheme); our verifier accepts them with the
    right secret only, so the client signer, which shares ``signature_input``, matches real clients."""
    import asyncio
    import threading

    from broker_store.net.server import RemotingServer
    from broker_store.protocol.acl import verify
    from broker_store.protocol.codes import ResponseCode
    from broker_store.protocol.frame import RemotingCommand

    seen: list[RemotingCommand] = []

    async def record(cmd: RemotingCommand, _conn: object) -> RemotingCommand:
        seen.append(cmd)
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "no route (recording name server)")

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = RemotingServer(record)
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        run_cpp(CPP_SIGNED_SEND, f"127.0.0.1:{server.port}", cwd=tmp_path)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert seen, "the C++ client sent nothing"
    for cmd in seen:
        assert cmd.ext_fields["AccessKey"] == "cpp-access"
        assert verify(cmd, "cpp-secret"), cmd.ext_fields
        assert not verify(cmd, "wrong-secret")


class ChildLines:
    """A child process's stdout lines as they come (a reader thread), with deadlines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout

        def read_lines() -> None:
            for line in stdout:
                self.lines.put(line.strip())

        threading.Thread(target=read_lines, daemon=True).start()

    def next(self, timeout: float) -> str | None:
        """The next line, or None when none came within ``timeout`` seconds."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None


def test_cpp_pull_consumer_follows_the_suggestion_to_the_replica_and_back(tmp_path: Path) -> None:
    """librocketmq's pull consumer keeps, per queue, the broker id the last pull response suggested
    (PullAPIWrapper: processPullResult records suggestWhichBrokerId, pullKernelImpl looks the address up in
    the route by it). A consumer far behind is pointed by the primary at the replica, reads everything from
    it while the primary is stopped, and is pointed back at broker 0 once it has caught up."""
    reads = {"ha": {"slave_read_enable": True, "memory_basis_bytes": 10_000}}  # slow: > 4000 bytes behind
    group, topic, count = "CID_CPP_SLAVE_READ", "CppSlaveRead", 40
    with local_cluster(tmp_path, "cppsr", [GroupSpec("r", (reads, reads))],
                       ha={"metadata_sync_interval_ms": 300}) as cluster:
        primary, replica = cluster.groups["r"]
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic(topic, 1, broker_names=["r"])
            admin.wait_for_route(topic)
            admin.create_subscription_group({"groupName": group, "whichBrokerWhenConsumeSlowly": 1})
            with Producer(cluster.namesrv_addr, "slave-read") as producer:
                for i in range(count):  # ~46 KB in all, 1 KB bodies (no NUL: the binding reads C strings)
                    producer.send(new_message(topic, b"%04d" % i * 250))
            eventually(lambda: admin.ha_status(replica.listen).max_offset ==
                       admin.ha_status(primary.listen).max_offset, what="replica caught up")
            eventually(lambda: topic in admin.all_topic_config(replica.listen)
                       and group in admin.all_subscription_groups(replica.listen), what="metadata on the replica")

        proc = subprocess.Popen([sys.executable, "-c", CPP_PULL_STEPPED, cluster.namesrv_addr, topic, group],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path, env=cpp_env(tmp_path))
        try:
            out = ChildLines(proc)
            assert out.next(60) == "msg 0000"  # the first pull went to the primary (broker 0), far behind
            primary.pause()  # SIGSTOP: from here on only the replica can answer
            try:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                got = ["0000"]
                while len(got) < count:
                    line = out.next(30)
                    assert line is not None and line.startswith("msg "), f"after {got[-1]}: {line!r}"
                    got.append(line[4:])
                assert got == [f"{i:04d}" for i in range(count)]  # all of it, in order, from the replica
                # Caught up, the replica pointed it back at broker 0: its next pull waits on the stopped primary.
                assert out.next(2.0) is None
            finally:
                primary.resume()
            assert out.next(30) == "done"  # the primary answers: nothing new
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
