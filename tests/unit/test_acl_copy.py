"""The file a replica's metadata sync writes from its primary's ACL admin answers (``acl.plain_file.
plain_acl_from_broker``): the same accounts, whitelist and data version as the primary's file, or a refusal
naming the field. The copy over real processes is tests/integration/test_acl_replica_sync.py."""

from __future__ import annotations

import json

import pytest

from broker_store.acl.plain_file import parse_plain_acl, plain_acl_from_broker
from broker_store.protocol.errors import ConfigError

FILE = """\
globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]
accounts:
  - {accessKey: RocketMQ, secretKey: "12345678", whiteRemoteAddress: 192.168.0.*, admin: false,
     defaultTopicPerm: DENY, defaultGroupPerm: SUB, topicPerms: [topicA=DENY, topicB=PUB|SUB], groupPerms: [g=SUB]}
  - {accessKey: rocketmq2, secretKey: "12345678", admin: true}
dataVersion:
  - {counter: 4, timestamp: 1700000000123}
"""


def answers(text: str) -> tuple[dict[str, object], dict[str, int]]:
    """What GET_BROKER_CLUSTER_ACL_CONFIG (54) and _INFO (52) say about ``text`` (as ``broker.acl_processor``)."""
    acl_file = parse_plain_acl(text, "primary")
    body = {"globalWhiteAddrs": list(acl_file.global_white_remote_addresses),
            "plainAccessConfigs": [a.model_dump(by_alias=True) for a in acl_file.accounts]}
    version = acl_file.data_version[0] if acl_file.data_version else None
    info = {"stateVersion": 0, "counter": version.counter if version else 0,
            "timestamp": version.timestamp if version else 0}
    return json.loads(json.dumps(body)), info


def test_the_copy_is_the_primarys_file_with_its_data_version() -> None:
    body, info = answers(FILE)
    assert plain_acl_from_broker(body, info, "p") == parse_plain_acl(FILE, "primary")


def test_a_file_without_a_data_version_is_copied_without_one() -> None:
    text = "accounts: [{accessKey: adminAK01, secretKey: adminSK01, admin: true}]\n"
    body, info = answers(text)
    copy = plain_acl_from_broker(body, info, "p")
    assert copy == parse_plain_acl(text, "primary") and copy.data_version == []
    assert plain_acl_from_broker({}, None, "p").accounts == []


def test_a_body_that_is_no_valid_file_is_refused_naming_the_source_and_field() -> None:
    body, info = answers(FILE)
    body["plainAccessConfigs"][1]["topicPerms"] = ["topicA=WRITE"]  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"the primary.s file: accounts\[1\]\.topicPerms: .*WRITE"):
        plain_acl_from_broker(body, info, "the primary's file")
