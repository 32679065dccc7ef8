"""The ACL 1.0 rule (``broker_store.acl``): plain_acl.yml model, whitelist patterns, resource map and
decision, pure (no socket). Texts are RocketMQ's AclException messages."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.acl.address import parse_address_pattern
from broker_store.acl.decision import AclDenied, AclTable, check, remote_host
from broker_store.acl.permission import Permission, covers
from broker_store.acl.plain_file import PlainAclFile, parse_plain_acl
from broker_store.acl.resources import needed_resources
from broker_store.protocol.acl import UNIQUE_KEY_QUERY, SessionCredentials, sign
from broker_store.protocol.codes import RequestCode
from broker_store.protocol.errors import ConfigError
from broker_store.protocol.frame import RemotingCommand

ACL_YAML = b"""
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: producerAK
    secretKey: producerSK
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - orders=PUB
      - audit=PUB|SUB
      - secret=DENY
    groupPerms:
      - blocked=DENY
  - accessKey: consumerAK
    secretKey: consumerSK
    whiteRemoteAddress: 192.168.1.*
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
"""

PRODUCER = SessionCredentials("producerAK", "producerSK")
CONSUMER = SessionCredentials("consumerAK", "consumerSK")
ADMIN = SessionCredentials("adminAK01", "adminSK01")
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def table() -> AclTable:
    return AclTable.compile(parse_plain_acl(ACL_YAML, "plain_acl.yml"))


def request(code: int, ext: dict[str, str], body: bytes = b"", creds: SessionCredentials | None = None,
            version: int = 395) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext_fields=dict(ext), body=body, version=version)
    return sign(cmd, creds) if creds is not None else cmd


def send(topic: str, creds: SessionCredentials | None = PRODUCER) -> RemotingCommand:
    return request(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": topic, "e": "0"}, b"hello", creds)


def pull(topic: str, group: str, creds: SessionCredentials | None = CONSUMER) -> RemotingCommand:
    return request(RequestCode.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0"}, b"", creds)


def refusal(table: AclTable, cmd: RemotingCommand, host: str = HOST) -> str:
    with pytest.raises(AclDenied) as info:
        check(table, cmd, host)
    return str(info.value)


# -- the file model ------------------------------------------------------------------------------------------


def test_plain_acl_yml_in_rocketmqs_layout_parses_and_round_trips() -> None:
    parsed = parse_plain_acl(ACL_YAML, "plain_acl.yml")
    assert [a.access_key for a in parsed.accounts] == ["producerAK", "consumerAK", "adminAK01"]
    assert parsed.global_white_remote_addresses == ["10.10.103.*"]
    again = parse_plain_acl(parsed.to_yaml(), "again")
    assert again == parsed
    assert b"accessKey: producerAK" in parsed.to_yaml() and b"topicPerms:" in parsed.to_yaml()


@pytest.mark.parametrize(("text", "path"), [
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK, topicPerms: [orders=WRITE]}\n",
     "accounts[0].topicPerms"),
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK, topicPerms: [orders]}\n",
     "accounts[0].topicPerms"),
    (b"accounts:\n- {accessKey: short, secretKey: producerSK}\n", "accounts[0].accessKey"),
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK, defaultGroupPerm: ALL}\n",
     "accounts[0].defaultGroupPerm"),
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK, whiteRemoteAddress: 300.1.1.*}\n",
     "accounts[0].whiteRemoteAddress"),
    (b"globalWhiteRemoteAddresses: [10.1.*]\n", "globalWhiteRemoteAddresses"),
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK, colour: red}\n", "accounts[0].colour"),
    (b"accounts:\n- {accessKey: producerAK, secretKey: producerSK}\n- {accessKey: producerAK, secretKey: otherSK1}\n",
     "appears more than once"),
    (b"accounts: [\n", "invalid YAML"),
])
def test_a_bad_file_is_refused_naming_the_field(text: bytes, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_plain_acl(text, "conf/plain_acl.yml")
    assert str(info.value).startswith("conf/plain_acl.yml: ")
    assert path in str(info.value)


def test_an_empty_file_is_an_empty_table() -> None:
    assert parse_plain_acl(b"", "x") == PlainAclFile()


# -- whitelist patterns --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "host", "expected"), [
    ("*", "8.8.8.8", True),
    ("*.*.*.*", "8.8.8.8", True),
    ("", "127.0.0.1", False),
    ("127.0.0.1", "127.0.0.1", True),
    ("127.0.0.1", "127.0.0.2", False),
    ("10.0.0.1,10.0.0.2", "10.0.0.2", True),
    ("10.0.0.{1,2}", "10.0.0.2", True),
    ("10.0.0.{1,2}", "10.0.0.3", False),
    ("192.168.*.*", "192.168.7.9", True),
    ("192.168.1.10-20", "192.168.1.20", True),
    ("192.168.1.10-20", "192.168.1.21", False),
    ("192.168.1.*", "192.168.2.1", False),
    ("::1", "0:0:0:0:0:0:0:1", True),
    ("2::ac5:78:1-200:*", "2::ac5:78:150:9", True),
    ("2::ac5:78:1-200:*", "2::ac5:78:201:9", False),
    ("2::ac5:78:*", "2::ac5:78:ffff", True),
])
def test_rocketmq_address_patterns(pattern: str, host: str, expected: bool) -> None:
    assert parse_address_pattern(pattern).matches(host) is expected


@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(1, 255))
def test_an_ipv4_range_matches_exactly_the_addresses_in_it(a: int, b: int, x: int, low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    pattern = parse_address_pattern(f"{a}.{b}.7.{low}-{high}")
    assert pattern.matches(f"{a}.{b}.7.{x}") is (low <= x <= high)
    assert not pattern.matches(f"{a}.{(b + 1) % 256}.7.{low}")


@given(st.ip_addresses(v=4))
def test_star_and_exact_patterns(addr: ipaddress.IPv4Address) -> None:
    assert parse_address_pattern("*").matches(str(addr))
    assert parse_address_pattern(str(addr)).matches(str(addr))
    assert not parse_address_pattern("").matches(str(addr))


def test_remote_host_drops_the_port() -> None:
    assert remote_host("127.0.0.1:54321") == "127.0.0.1"


# -- permissions ---------------------------------------------------------------------------------------------

FLAGS = st.sampled_from([Permission(v) for v in range(16)])


@given(FLAGS, FLAGS)
def test_covers_is_rocketmqs_check_permission(needed: Permission, owned: Permission) -> None:
    if owned & Permission.DENY:
        expected = False
    elif needed & Permission.ANY:
        expected = bool(owned & Permission.PUB) or bool(owned & Permission.SUB)
    else:
        expected = (int(needed) & int(owned)) > 0
    assert covers(needed, owned) is expected


# -- the resource map ----------------------------------------------------------------------------------------


def test_resource_map_of_rocketmq_5() -> None:
    def need(code: int, ext: dict[str, str], body: bytes = b"") -> dict[str, Permission]:
        return needed_resources(RemotingCommand(code=code, ext_fields=ext, body=body))

    P, S = Permission.PUB, Permission.SUB
    assert need(RequestCode.SEND_MESSAGE, {"topic": "t"}) == {"t": P}
    assert need(RequestCode.SEND_MESSAGE_V2, {"b": "t"}) == {"t": P}
    assert need(RequestCode.SEND_BATCH_MESSAGE, {"b": "%RETRY%g"}) == {"%RETRY%g": S}
    assert need(RequestCode.PULL_MESSAGE, {"topic": "t", "consumerGroup": "g"}) == {"t": S, "%RETRY%g": S}
    assert need(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g"}) == {"%RETRY%g": S}
    assert need(RequestCode.QUERY_MESSAGE, {"topic": "t"}) == {"t": S}
    assert need(RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "producerGroup": "p"}) == {}
    assert need(RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "g"}) == {"%RETRY%g": S}
    assert need(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}) == {"%RETRY%g": S}
    assert need(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "t"}) == {"%RETRY%g": S, "t": S}
    assert need(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "t"}) == {}
    body = (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"t1"},'
            b'{"topic":"t2"}]}],"producerDataSet":[{"groupName":"p"}]}')
    assert need(RequestCode.HEART_BEAT, {}, body) == {"%RETRY%g": S, "t1": S, "t2": S}


# -- the decision --------------------------------------------------------------------------------------------


def test_signed_requests_within_their_permissions_pass(table: AclTable) -> None:
    check(table, send("orders"), HOST)
    check(table, send("audit"), HOST)
    check(table, pull("anything", "anygroup"), HOST)  # consumer defaults: SUB on topics and groups
    check(table, request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "new"}, creds=ADMIN), HOST)
    check(table, send("secret", ADMIN), HOST)  # an admin passes every resource


def test_refusals_carry_rocketmqs_texts(table: AclTable) -> None:
    assert refusal(table, send("orders", None)) == "No accessKey is configured"
    assert refusal(table, send("orders", SessionCredentials("strangerAK", "strangerSK"))) == \
        "No acl config for strangerAK"
    assert refusal(table, send("orders", SessionCredentials("producerAK", "wrongSecret"))) == \
        "Check signature failed for accessKey=producerAK"
    assert refusal(table, send("secret")) == "No permission for topic:secret"
    assert refusal(table, send("unlisted")) == "No default permission for topic:unlisted"
    assert refusal(table, pull("orders", "g", PRODUCER)) == "No permission for topic:orders"
    assert refusal(table, pull("audit", "blocked", PRODUCER)) == "No permission for group:blocked"
    assert refusal(table, send("orders", CONSUMER)) == "No default permission for topic:orders"
    assert refusal(table, request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}, creds=PRODUCER)) == \
        "Need admin permission for request code=17, but accessKey=producerAK is not"
    for code in (RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                 RequestCode.DELETE_SUBSCRIPTIONGROUP, *range(50, 55)):
        assert refusal(table, request(code, {"x": "y"}, creds=CONSUMER)).startswith("Need admin permission")


def test_a_retry_topic_send_is_sub_on_its_group(table: AclTable) -> None:
    check(table, send("%RETRY%somegroup"), HOST)  # producer: default group perm SUB
    assert refusal(table, send("%RETRY%blocked")) == "No permission for group:blocked"


def test_whitelists(table: AclTable) -> None:
    check(table, send("secret", None), "10.10.103.5")  # global: no key at all
    check(table, send("orders", SessionCredentials("consumerAK", "not-the-secret")), "192.168.1.9")
    assert refusal(table, send("orders", SessionCredentials("consumerAK", "not-the-secret")), "192.168.2.9") == \
        "Check signature failed for accessKey=consumerAK"


def test_tampering_after_signing_is_refused(table: AclTable) -> None:
    cmd = send("orders")
    cmd.ext_fields["b"] = "audit"
    assert refusal(table, cmd) == "Check signature failed for accessKey=producerAK"
    cmd = send("orders")
    cmd.body = b"other"
    assert refusal(table, cmd) == "Check signature failed for accessKey=producerAK"


def test_unique_key_query_is_left_out_only_for_old_clients(table: AclTable) -> None:
    for version, passes in ((399, True), (400, False)):
        cmd = request(RequestCode.QUERY_MESSAGE, {"topic": "audit"}, creds=PRODUCER, version=version)
        cmd.ext_fields[UNIQUE_KEY_QUERY] = "true"  # an old client added it after signing
        if passes:
            check(table, cmd, HOST)
        else:
            assert refusal(table, cmd).startswith("Check signature failed")


def test_trace_topic_sends_skip_the_permission_check(table: AclTable) -> None:
    check(table, send("RMQ_SYS_TRACE_TOPIC"), HOST)


def test_a_heartbeat_body_that_does_not_decode_is_refused(table: AclTable) -> None:
    cmd = request(RequestCode.HEART_BEAT, {"x": "1"}, b"not json", creds=CONSUMER)
    assert "HeartbeatData" in refusal(table, cmd)


def test_the_remark_names_rocketmqs_exception_class() -> None:
    assert AclDenied("No accessKey is configured").remark == \
        "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"


@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ("Signature", "AccessKey")),
                       st.text(max_size=12), max_size=5),
       st.binary(max_size=32), st.text(min_size=1, max_size=8))
def test_any_signed_request_passes_and_any_changed_value_fails(ext: dict[str, str], body: bytes, extra: str) -> None:
    table = AclTable.compile(parse_plain_acl(
        b"accounts: [{accessKey: propAK01, secretKey: propSK01, admin: true}]", "p"))
    cmd = request(RequestCode.GET_ALL_TOPIC_CONFIG, ext, body, SessionCredentials("propAK01", "propSK01"))
    check(table, cmd, HOST)
    cmd.body = body + extra.encode()
    with pytest.raises(AclDenied):
        check(table, cmd, HOST)


# -- hostile input: every decoder fails only in its own way --------------------------------------------------

ADDRESS_ALPHABET = st.text(alphabet="0123456789abcdef.:*-{},: ", max_size=24)


@given(ADDRESS_ALPHABET, st.one_of(st.ip_addresses().map(str), ADDRESS_ALPHABET))
def test_address_patterns_refuse_with_value_error_and_never_raise_on_match(pattern: str, host: str) -> None:
    try:
        parsed = parse_address_pattern(pattern)
    except ValueError:
        return
    assert parsed.matches(host) in (True, False)


@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_any_acl_file_bytes_parse_or_raise_config_error(raw: bytes) -> None:
    try:
        parse_plain_acl(raw, "fuzz.yml")
    except ConfigError:
        pass


@given(st.binary(max_size=200), st.dictionaries(st.sampled_from(["topic", "b", "group", "consumerGroup"]),
                                                 st.text(max_size=10), max_size=4),
       st.sampled_from([int(c) for c in RequestCode]))
def test_any_request_is_decided_without_an_unexpected_error(body: bytes, ext: dict[str, str], code: int) -> None:
    table = AclTable.compile(parse_plain_acl(ACL_YAML, "plain_acl.yml"))
    cmd = request(code, ext, body, PRODUCER)
    try:
        check(table, cmd, HOST)
    except AclDenied:
        pass
