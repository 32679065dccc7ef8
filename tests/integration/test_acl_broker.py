"""ACL 1.0 enforced by a real broker (in-process, loopback) against the project client: signed sends and
pulls pass, each missing permission, unknown key and bad signature is refused with RocketMQ's text and
nothing is written, whitelists, reloading the file, and the client's immediate permission error."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, AsyncPullConsumer
from broker_store.client.records import MessageQueue, PullStatus
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import AclPermissionError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import UpdateConsumerOffsetRequestHeader
from broker_store.protocol.message import Message
from tests.integration.test_broker_server import Env, eventually, run

pytestmark = pytest.mark.integration

ADMIN = SessionCredentials("adminAK01", "adminSK01")
PRODUCER = SessionCredentials("producerAK", "producerSK")
CONSUMER = SessionCredentials("consumerAK", "consumerSK")

ACL = """
accounts:
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
  - accessKey: producerAK
    secretKey: producerSK
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=PUB]
  - accessKey: consumerAK
    secretKey: consumerSK
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms: [readers=SUB]
"""


def write_acl(path: Path, text: str) -> None:
    """Rewrite the file the way an operator's editor does, with a new mtime even within one clock tick."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def acl_run(tmp_path: Path, body: object, text: str = ACL) -> Path:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(text)
    run(tmp_path, body, acl_enable=True, acl_file=acl_file, acl_reload_check_seconds=0.05)  # type: ignore[arg-type]
    return acl_file


async def create_topic(env: Env, topic: str) -> None:
    async with AsyncAdmin(env.namesrv.addr, credentials=ADMIN) as admin:
        await admin.create_topic(topic, 4)
        await admin.wait_for_route(topic)


def written(env: Env) -> int:
    return env.broker.store.max_physical_offset


def test_signed_sends_and_pulls_within_permissions_pass(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        await create_topic(env, "orders")
        async with AsyncProducer(env.namesrv.addr, credentials=PRODUCER) as producer:
            result = await producer.send(Message("orders", b"paid"))
        mq = result.message_queue
        async with AsyncPullConsumer(env.namesrv.addr, "readers", credentials=CONSUMER,
                                     heartbeat_interval=None) as consumer:
            pulled = await consumer.pull(mq, 0)
            assert pulled.status is PullStatus.FOUND and [m.body for m in pulled.messages] == [b"paid"]
            await consumer.update_consumer_offset(mq, 1)
            assert await consumer.query_consumer_offset(mq) == 1

    acl_run(tmp_path, body)


def test_each_missing_permission_is_refused_at_once_and_nothing_is_written(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        await create_topic(env, "orders")
        await create_topic(env, "audit")
        before = written(env)
        assert env.broker.acl is not None
        refusals = env.broker.acl.refusals
        async with AsyncProducer(env.namesrv.addr, credentials=PRODUCER, retry_times_when_send_failed=2) as producer:
            with pytest.raises(AclPermissionError) as info:
                await producer.send(Message("audit", b"x"))
        assert info.value.access_key == "producerAK"
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert info.value.remark == "org.apache.rocketmq.acl.common.AclException: No default permission for topic:audit"
        assert "accessKey=producerAK" in str(info.value)
        assert env.broker.acl.refusals == refusals + 1, "the client retried a refusal"  # not on another route
        assert written(env) == before

        mq = MessageQueue("orders", env.broker.config.broker_name, 0)
        async with AsyncPullConsumer(env.namesrv.addr, "writers", credentials=CONSUMER,
                                     heartbeat_interval=None) as consumer:
            with pytest.raises(AclPermissionError, match="No default permission for group:writers"):
                await consumer.pull(mq, 0)
            with pytest.raises(AclPermissionError, match="No default permission for group:writers"):
                await consumer.update_consumer_offset(mq, 5)
        assert env.broker.consumer_offsets.query("writers", "orders", 0) == -1
        async with AsyncPullConsumer(env.namesrv.addr, "readers", credentials=PRODUCER,
                                     heartbeat_interval=None) as consumer:
            with pytest.raises(AclPermissionError, match="No permission for topic:orders"):
                await consumer.pull(mq, 0)
        async with AsyncAdmin(env.namesrv.addr, credentials=PRODUCER) as admin:
            with pytest.raises(AclPermissionError, match="Need admin permission for request code=17, "
                                                         "but accessKey=producerAK is not"):
                await admin.create_topic("newtopic", 4)
        assert env.broker.topic_configs.select("newtopic") is None
        assert written(env) == before

    acl_run(tmp_path, body)


def test_unsigned_unknown_and_badly_signed_requests(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        await create_topic(env, "orders")
        before = written(env)
        resp = await env.send("orders", b"unsigned")
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                            "org.apache.rocketmq.acl.common.AclException: No accessKey is configured")
        async with AsyncProducer(env.namesrv.addr, credentials=SessionCredentials("producerAK", "wrongSK01")) as p:
            with pytest.raises(AclPermissionError, match="Check signature failed for accessKey=producerAK"):
                await p.send(Message("orders", b"forged"))
        async with AsyncProducer(env.namesrv.addr, credentials=SessionCredentials("strangerAK", "strangerSK")) as p:
            with pytest.raises(AclPermissionError, match="No acl config for strangerAK"):
                await p.send(Message("orders", b"stranger"))
        # a signed request changed on the way
        cmd = sign(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG, ext_fields={"x": "1"}), ADMIN)
        assert (await env.client.invoke(env.broker.addr, cmd, 5)).code == ResponseCode.SUCCESS
        cmd = sign(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG, ext_fields={"x": "1"}), ADMIN)
        cmd.ext_fields["x"] = "2"
        resp = await env.client.invoke(env.broker.addr, cmd, 5)
        assert (resp.remark or "").endswith("Check signature failed for accessKey=adminAK01")
        header = UpdateConsumerOffsetRequestHeader(consumer_group="readers", topic="orders", queue_id=0,
                                                   commit_offset=9)
        resp = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext())
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert env.broker.consumer_offsets.query("readers", "orders", 0) == -1
        assert written(env) == before

    acl_run(tmp_path, body)


def test_global_and_account_whitelists(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        # global whitelist: no key at all
        resp = await env.send("orders", b"from-a-white-address")
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # an account's whitelist skips its signature and permissions
        async with AsyncProducer(env.namesrv.addr, credentials=SessionCredentials("consumerAK", "not-its-SK")) as p:
            await p.send(Message("orders", b"whitelisted account"))

    acl_run(tmp_path, body, "globalWhiteRemoteAddresses: [127.0.0.1]\n" + ACL.replace(
        "    groupPerms: [readers=SUB]", "    groupPerms: [readers=SUB]\n    whiteRemoteAddress: 127.0.0.*"))


def test_the_file_is_reloaded_and_a_bad_one_keeps_the_accounts_in_force(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    acl_file = tmp_path / "plain_acl.yml"

    async def body(env: Env) -> None:
        await create_topic(env, "audit")
        async with AsyncProducer(env.namesrv.addr, credentials=PRODUCER) as producer:
            with pytest.raises(AclPermissionError):
                await producer.send(Message("audit", b"before"))
            write_acl(acl_file, ACL.replace("topicPerms: [orders=PUB]", "topicPerms: [orders=PUB, audit=PUB]"))

            async def passes() -> bool:
                try:
                    await producer.send(Message("audit", b"after"))
                except AclPermissionError:
                    return False
                return True
            await eventually(passes)

            caplog.clear()
            write_acl(acl_file, ACL.replace("topicPerms: [orders=PUB]", "topicPerms: [orders=WRITE]"))
            deadline = time.monotonic() + 3
            while not any("ACL file refused" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the bad file was not noticed"
                await producer.send(Message("audit", b"still allowed"))  # the accounts in force stay
        bad = next(r.getMessage() for r in caplog.records if "ACL file refused" in r.getMessage())
        assert f"{acl_file}: accounts[1].topicPerms" in bad and "WRITE" in bad

    with caplog.at_level(logging.INFO):
        acl_run(tmp_path, body)


def test_a_broker_does_not_start_with_a_bad_acl_file(tmp_path: Path) -> None:
    from broker_store.protocol.errors import ConfigError

    async def body(env: Env) -> None:
        raise AssertionError("started")

    with pytest.raises(ConfigError, match=r"accounts\[0\]\.secretKey"):
        acl_run(tmp_path, body, "accounts: [{accessKey: adminAK01, secretKey: short}]\n")


# -- ACL admin requests 50-54 and the CLI ---------------------------------------------------------------------


def test_acl_admin_requests_edit_the_file_crash_safely_and_take_effect_at_once(tmp_path: Path) -> None:
    from broker_store.acl.account import PlainAccount
    from broker_store.acl.plain_file import read_plain_acl
    from broker_store.client.acl_admin import AsyncAclAdmin
    from broker_store.protocol.errors import BrokerResponseError

    acl_file = tmp_path / "plain_acl.yml"
    newcomer = SessionCredentials("newcomerAK", "newcomerSK")

    async def body(env: Env) -> None:
        await create_topic(env, "orders")
        addr = env.broker.addr
        async with AsyncAdmin(env.namesrv.addr, credentials=ADMIN) as admin:
            acl = AsyncAclAdmin(admin)
            info = await acl.acl_info(addr)
            assert (info["brokerName"], info["brokerAddr"], info["clusterName"]) == ("broker-a", addr, "c1")
            await acl.update_account(addr, PlainAccount.model_validate(
                {"accessKey": "newcomerAK", "secretKey": "newcomerSK", "topicPerms": ["orders=PUB"]}))
            on_disk = read_plain_acl(acl_file)
            assert on_disk.account("newcomerAK") is not None and on_disk.data_version[0].counter == 1
            assert not list(tmp_path.glob("*.tmp"))
            async with AsyncProducer(env.namesrv.addr, credentials=newcomer) as producer:
                await producer.send(Message("orders", b"from the new account"))
                config = await acl.acl_config(addr)
                assert [a.access_key for a in config.accounts] == ["adminAK01", "producerAK", "consumerAK",
                                                                   "newcomerAK"]
                # a merge keeps what the request leaves out, and replaces the lists it carries
                await acl.update_account(addr, PlainAccount.model_validate(
                    {"accessKey": "newcomerAK", "secretKey": "newcomerSK", "defaultTopicPerm": "PUB"}))
                merged = (await acl.acl_config(addr)).accounts[-1]
                assert (merged.default_topic_perm, merged.topic_perms) == ("PUB", [])
                resp = await env.client.invoke(addr, sign(RemotingCommand(
                    code=RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                    ext_fields={"accessKey": "newcomerAK", "secretKey": "newcomerSK", "topicPerms": "orders=ALL"}),
                    ADMIN), 5)
                assert resp.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
                assert (resp.remark or "").startswith("Parse resource permission error for orders=ALL")
                await acl.delete_account(addr, "newcomerAK")
                with pytest.raises(AclPermissionError, match="No acl config for newcomerAK"):
                    await producer.send(Message("orders", b"after deletion"))
            with pytest.raises(BrokerResponseError) as missing:
                await acl.delete_account(addr, "newcomerAK")
            assert missing.value.code == ResponseCode.DELETE_ACL_CONFIG_FAILED
            assert missing.value.remark == \
                "The accessKey[newcomerAK] corresponding to accessConfig has been deleted failed."
            async with AsyncAdmin(env.namesrv.addr, credentials=PRODUCER) as producer_admin:
                with pytest.raises(AclPermissionError, match="Need admin permission for request code=54"):
                    await AsyncAclAdmin(producer_admin).acl_config(addr)
            await acl.update_global_white_addrs(addr, ["127.0.0.1"])  # from now on, everything from here passes
            assert (await env.send("orders", b"unsigned from a white address")).code == ResponseCode.SUCCESS
            assert read_plain_acl(acl_file).global_white_remote_addresses == ["127.0.0.1"]
            assert json_counter((await acl.acl_info(addr))["version"]) == 4  # two updates, a deletion, the whitelist

    acl_run(tmp_path, body)


def json_counter(version: str) -> int:
    import json

    return int(json.loads(version)["counter"])


def test_acl_cli_commands(tmp_path: Path) -> None:
    import asyncio
    import sys

    async def cli(env: Env, *argv: str, account_secret: str | None = None) -> tuple[int, str]:
        environ = dict(os.environ, BROKER_STORE_ACL_ACCESS_KEY="adminAK01", BROKER_STORE_ACL_SECRET_KEY="adminSK01")
        if account_secret is not None:
            environ["BROKER_STORE_ACL_ACCOUNT_SECRET"] = account_secret
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "broker_store", "acl", "-n", env.namesrv.addr, *argv, env=environ,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode()

    async def body(env: Env) -> None:
        code, out = await cli(env, "update", "--account", "cliAccount", "--topic-perms", "orders=PUB,audit=SUB",
                              "--default-group-perm", "SUB", account_secret="cliSecret1")
        assert code == 0, out
        assert "updated account cliAccount on broker-a" in out
        code, out = await cli(env, "list")
        assert code == 0, out
        assert "cliAccount\tadmin=false" in out and "topicPerms=orders=PUB,audit=SUB" in out
        assert "cliSecret1" not in out and "adminSK01" not in out
        code, out = await cli(env, "whitelist", "--addresses", "10.0.0.*,192.168.1.7")
        assert code == 0, out
        assert env.broker.acl is not None
        assert env.broker.acl.acl_file.global_white_remote_addresses == ["10.0.0.*", "192.168.1.7"]
        code, out = await cli(env, "delete", "--account", "cliAccount")
        assert code == 0 and env.broker.acl.acl_file.account("cliAccount") is None, out
        code, out = await cli(env, "update", "--account", "cliAccount", "--topic-perms", "orders=ALL",
                              account_secret="cliSecret1")
        assert code == 2 and "topicPerms" in out, out
        code, out = await cli(env, "update", "--account", "cliAccount")
        assert code == 2 and "BROKER_STORE_ACL_ACCOUNT_SECRET" in out, out

    acl_run(tmp_path, body)
