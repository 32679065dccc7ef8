"""ACL request signing (``broker_store.protocol.acl``) against a vector computed with openssl:

    printf '%s' 'ak1S_{"a":1}topicAbody' | openssl dgst -sha1 -hmac 'sk-secret' -binary | base64
"""

from __future__ import annotations

import pytest

from broker_store.protocol.acl import (
    SessionCredentials,
    calculate_signature,
    sign,
    signature_input,
    verify,
)
from broker_store.protocol.errors import ConfigError
from broker_store.protocol.frame import RemotingCommand

GOLDEN = "RNUK2W5W0Q4n57zgNpkZx4CrX3g="


def test_signature_matches_the_openssl_vector() -> None:
    cmd = RemotingCommand(code=10, ext_fields={"b": "topicA", "a": 'S_{"a":1}'}, body=b"body")
    sign(cmd, SessionCredentials("ak1", "sk-secret"))
    # Java's TreeMap order: "AccessKey" < "a" < "b" (upper case first); Signature is not signed.
    assert signature_input(cmd.ext_fields, cmd.body) == b'ak1S_{"a":1}topicAbody'
    assert cmd.ext_fields["AccessKey"] == "ak1"
    assert cmd.ext_fields["Signature"] == GOLDEN
    assert verify(cmd, "sk-secret")
    assert not verify(cmd, "another-secret")


def test_resigning_replaces_the_signature_and_tampering_is_detected() -> None:
    cmd = RemotingCommand(code=10, ext_fields={"b": "topicA", "a": 'S_{"a":1}'}, body=b"body")
    creds = SessionCredentials("ak1", "sk-secret")
    first = sign(cmd, creds).ext_fields["Signature"]
    assert sign(cmd, creds).ext_fields["Signature"] == first == GOLDEN
    cmd.body = b"bodY"
    assert not verify(cmd, "sk-secret")
    assert not verify(RemotingCommand(code=10), "sk-secret")  # unsigned


def test_security_token_is_sent_and_signed() -> None:
    cmd = sign(RemotingCommand(code=11, ext_fields={"x": "1"}), SessionCredentials("ak", "sk", "tok"))
    assert cmd.ext_fields["SecurityToken"] == "tok"
    assert signature_input(cmd.ext_fields, b"") == b"aktok1"  # AccessKey, SecurityToken, x
    assert cmd.ext_fields["Signature"] == calculate_signature(b"aktok1", "sk")


def test_credentials_never_show_the_secret_and_need_both_keys() -> None:
    text = repr(SessionCredentials("ak", "very-secret", "tok"))
    assert "very-secret" not in text and "tok'" not in text and "ak" in text
    with pytest.raises(ConfigError, match="secret key"):
        SessionCredentials("ak", "")
    with pytest.raises(ConfigError, match="access key"):
        SessionCredentials("", "sk")
