"""The broker's ACL gate (``broker.acl_guard``) on a ManualClock: the file is looked at only once per check
interval, a changed file is put in force, a bad one is logged once and the accounts in force kept."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, cast

import pytest

from broker_store.acl.plain_file import parse_plain_acl
from broker_store.broker.acl_guard import AclGuard
from broker_store.clock import ManualClock
from broker_store.net.server import Connection
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import ConfigError
from broker_store.protocol.frame import RemotingCommand

GOOD = "accounts: [{accessKey: producerAK, secretKey: producerSK, topicPerms: [orders=PUB]}]\n"
WIDER = "accounts: [{accessKey: producerAK, secretKey: producerSK, topicPerms: [orders=PUB, audit=PUB]}]\n"
BAD = "accounts: [{accessKey: producerAK, secretKey: producerSK, topicPerms: [audit=EVERYTHING]}]\n"


class _Peer:
    remote_addr = "127.0.0.1:40000"


PEER = cast(Connection, _Peer())


def write(path: Path, text: str, mtime_s: int) -> None:
    path.write_text(text)
    os.utime(path, (mtime_s, mtime_s))


def send(topic: str) -> RemotingCommand:
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "pg", "b": topic}, body=b"x")
    return sign(cmd, SessionCredentials("producerAK", "producerSK"))


def refused(guard: AclGuard, topic: str) -> Any:
    resp = guard.refuse(send(topic), PEER)
    return None if resp is None else resp.remark


def test_a_changed_file_is_in_force_after_the_check_interval(tmp_path: Path) -> None:
    path, clock = tmp_path / "plain_acl.yml", ManualClock()
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=clock, check_interval=1.0)
    guard.load()
    assert refused(guard, "orders") is None
    assert refused(guard, "audit").endswith("No default permission for topic:audit")
    write(path, WIDER, 2000)
    clock.advance(0.5)
    assert refused(guard, "audit") is not None  # not looked at yet
    clock.advance(0.6)
    assert refused(guard, "audit") is None


def test_a_bad_file_is_logged_once_and_the_accounts_in_force_kept(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    path, clock = tmp_path / "plain_acl.yml", ManualClock()
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=clock, check_interval=1.0)
    guard.load()
    write(path, BAD, 2000)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            clock.advance(1.0)
            assert refused(guard, "orders") is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and f"{path}: accounts[0].topicPerms" in errors[0]
    path.unlink()
    clock.advance(1.0)
    assert refused(guard, "orders") is None  # a vanished file keeps the accounts too
    write(path, WIDER, 3000)
    clock.advance(1.0)
    assert refused(guard, "audit") is None


def test_a_bad_or_missing_file_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    with pytest.raises(ConfigError, match="does not exist"):
        AclGuard(path, clock=ManualClock(), check_interval=1.0).load()
    write(path, BAD, 1000)
    with pytest.raises(ConfigError, match=r"accounts\[0\]\.topicPerms"):
        AclGuard(path, clock=ManualClock(), check_interval=1.0).load()


def test_store_writes_the_file_and_puts_it_in_force(tmp_path: Path) -> None:
    path, clock = tmp_path / "plain_acl.yml", ManualClock()
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=clock, check_interval=1.0)
    guard.load()
    guard.store(parse_plain_acl(WIDER, "wider"))
    assert refused(guard, "audit") is None
    assert parse_plain_acl(path.read_bytes(), str(path)) == guard.acl_file
    assert not (tmp_path / "plain_acl.yml.tmp").exists()


def test_the_refusal_is_a_system_error_with_the_acl_exception_text(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=ManualClock(), check_interval=1.0)
    guard.load()
    resp = guard.refuse(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "orders"}), PEER)
    assert resp is not None and resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"


def test_refusals_are_counted_and_logged_at_most_once_a_second(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path, clock = tmp_path / "plain_acl.yml", ManualClock()
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=clock, check_interval=1.0)
    guard.load()
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            assert refused(guard, "audit") is not None
        clock.advance(1.0)
        assert refused(guard, "audit") is not None
    lines = [r.getMessage() for r in caplog.records if r.name == "broker_store.broker.acl_guard"]
    assert guard.refusals == 51
    assert len(lines) == 2 and lines[1].endswith("(49 more refusals not logged)")


def test_a_refusal_with_another_reason_is_logged_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plain_acl.yml"
    write(path, GOOD, 1000)
    guard = AclGuard(path, clock=ManualClock(), check_interval=1.0)
    guard.load()
    with caplog.at_level(logging.WARNING):
        assert refused(guard, "audit") is not None
        assert refused(guard, "audit") is not None  # a repeat within the second: counted, not logged
        unsigned = guard.refuse(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "orders"}), PEER)
        assert unsigned is not None  # another reason within the same second: logged
    lines = [r.getMessage() for r in caplog.records if r.name == "broker_store.broker.acl_guard"]
    assert len(lines) == 2 and "No accessKey is configured" in lines[1], lines
