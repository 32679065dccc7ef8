"""Apache RocketMQ's C++ client (librocketmq, the `rocketmq` wheel) against brokers with ACL on: its signed
sends and pulls pass within its account's permissions, a wrong secret or a missing permission is refused
and nothing is written. The broker, the name server and the C++ client are separate processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker_store.client import Admin, MessageQueue, PullConsumer, PullStatus
from broker_store.protocol.acl import SessionCredentials
from tests.support.processes import local_cluster

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client", reason="the rocketmq C++ client wheel is x86_64 Linux only")

ACL = """
accounts:
  - {accessKey: adminAK01, secretKey: adminSK01, admin: true}
  - {accessKey: cppProducer, secretKey: cppProducerSK, defaultTopicPerm: DENY, topicPerms: [CppAcl=PUB]}
  - {accessKey: cppConsumer, secretKey: cppConsumerSK, defaultTopicPerm: SUB, defaultGroupPerm: SUB}
"""
ADMIN = SessionCredentials("adminAK01", "adminSK01")
TOPIC = "CppAcl"

def cpp_script(client: str, group: str, steps: str) -> str:
    """A script for the C++ client's wheel: a ``client`` (Producer / PullConsumer) of ``group`` started on
    argv[1]'s name server, signed with the ACL_AK / ACL_SK account, runs ``steps`` (``namesrv, topic, n`` from
    argv; ``out`` is a list), shuts down and prints ``out`` as its last line (JSON), for ``run_cpp``."""
    return textwrap.dedent(f"""
        import json, os, sys, time
        from rocketmq.client import {client}, Message
        from rocketmq.exceptions import ProducerSendSyncFailed
        namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        c = {client}("{group}")
        c.set_namesrv_addr(namesrv)
        c.set_session_credentials(os.environ["ACL_AK"], os.environ["ACL_SK"], "LOCAL")
        c.start()
        out = []
    """) + textwrap.dedent(steps) + "c.shutdown()\nprint(json.dumps(out))\n"


CPP_SEND = cpp_script("Producer", "PID_CPP_ACL", """
    for i in range(n):
        m = Message(topic)
        m.set_keys("key-%d" % i)
        m.set_body(b"cpp acl %d" % i)
        for retries in range(5):  # librocketmq's transport lock (apache/rocketmq-client-cpp#455), as test_wire_compat
            try:
                r = c.send_sync(m)
                out.append({"status": int(r.status), "msg_id": r.msg_id})
                break
            except ProducerSendSyncFailed as exc:
                if retries == 4:
                    out.append({"error": str(exc)})
                time.sleep(0.2)
""")

CPP_PULL = cpp_script("PullConsumer", "CID_CPP_ACL", """
    for msg in c.pull(topic):
        out.append({"id": msg.id, "body": msg.body.decode()})
        if len(out) >= n:
            break
""")


def run_cpp(script: str, creds: tuple[str, str], *args: str, cwd: Path) -> list[dict[str, object]]:
    env = {"HOME": str(cwd), "PATH": "/usr/bin:/bin", "ACL_AK": creds[0], "ACL_SK": creds[1]}
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                            cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    out: list[dict[str, object]] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def stored(admin: Admin, queues: list[MessageQueue]) -> int:
    return sum(admin.max_offset(mq) for mq in queues)


def test_cpp_client_under_acl(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    with local_cluster(tmp_path, "cppacl", brokers=1, acl_enable=True, acl_file=acl_file) as cluster:
        ns = cluster.namesrv_addr
        with Admin(ns, credentials=ADMIN) as admin:
            admin.create_topic(TOPIC, 2)
            admin.wait_for_route(TOPIC)
            route = admin.topic_route(TOPIC)
            queues = [MessageQueue(TOPIC, q.broker_name, i) for q in route.queue_datas
                      for i in range(q.read_queue_nums)]

            sent = run_cpp(CPP_SEND, ("cppProducer", "cppProducerSK"), ns, TOPIC, "5", cwd=tmp_path)
            assert [s.get("status") for s in sent] == [0] * 5, sent  # SEND_OK, signed by librocketmq
            count = stored(admin, queues)
            assert count >= 5

            forged = run_cpp(CPP_SEND, ("cppProducer", "not-the-secret"), ns, TOPIC, "1", cwd=tmp_path)
            assert "error" in forged[0], forged
            elsewhere = run_cpp(CPP_SEND, ("cppConsumer", "cppConsumerSK"), ns, TOPIC, "1", cwd=tmp_path)
            assert "error" in elsewhere[0], elsewhere  # SUB only: no PUB on the topic
            assert stored(admin, queues) == count, "a refused send was stored"

            pulled = run_cpp(CPP_PULL, ("cppConsumer", "cppConsumerSK"), ns, TOPIC, str(count), cwd=tmp_path)
            assert {s["msg_id"] for s in sent} <= {p["id"] for p in pulled}

        with PullConsumer(ns, "our-group", credentials=SessionCredentials("cppConsumer", "cppConsumerSK")) as ours:
            bodies = [m.body for mq in queues for r in [ours.pull(mq, 0, 32)] if r.status is PullStatus.FOUND
                      for m in r.messages]
        assert sorted(bodies)[:5] == [b"cpp acl %d" % i for i in range(5)]
        log = (tmp_path / "cppacl").glob("*.log")
        refusals = "".join(p.read_text() for p in log)
        assert "Check signature failed for accessKey=cppProducer" in refusals
        assert "No default permission for topic:CppAcl" in refusals or "No permission for topic:CppAcl" in refusals
