"""Who may use the HA port and the controller (docs/security.md, "Peers of the HA port and the controller"), decided
without a socket: the address allow-list (``acl.peers``), the HA secret's challenge-response (``ha.peer_auth``), the
refusal log's rate limit (``acl.refusal_log``) and the settings that configure them. The same exchange over real
processes is tests/integration/test_ha_peers.py. """

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_store.acl.peers import PeerAllowList, decide_peer
from broker_store.acl.refusal_log import MAX_REASONS, RefusalLog
from broker_store.controller.runtime_settings import SettingsUpdateRefused, settings_properties, updated_settings
from broker_store.controller.settings import ControllerSettings
from broker_store.ha.errors import HAProtocolError
from broker_store.ha.peer_auth import (
    CHALLENGE_SIZE,
    HELLO_SIZE,
    MAGIC_SIZE,
    OPEN,
    PeerPolicy,
    decode_hello,
    encode_challenge,
    encode_hello,
    is_hello_magic,
    load_secret,
    peer_policy,
    primary_proof,
    replica_proof,
    split_challenge,
)
from broker_store.ha.settings import HASettings
from broker_store.ha.wire import encode_report
from broker_store.ha.wire_epoch import ReplicaHandshake, encode_replica_handshake
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ConfigError

SECRET = b"0123456789abcdef-group-secret"
R_NONCE = bytes(range(16))
P_NONCE = bytes(range(16, 32))


# -- the address allow-list ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("entries", "host", "allowed"), [
    (["10.0.0.7"], "10.0.0.7", True),
    (["10.0.0.7"], "10.0.0.8", False),
    (["10.0.0.0/24"], "10.0.0.255", True),
    (["10.0.0.0/24"], "10.0.1.0", False),
    (["127.0.0.1", "fd00::/8"], "fd12::1", True),
    (["::1"], "0:0:0:0:0:0:0:1", True),
    (["10.0.0.0/8"], "::ffff:10.1.2.3", True),  # a dual-stack listener's view of an IPv4 peer
    (["10.0.0.0/8"], "::1", False),
    (["fe80::/10"], "fe80::1%eth0", True),
    (["*"], "203.0.113.9", True),
    (["127.0.0.1"], "?", False),  # an unknown peer address is never allowed
    (["127.0.0.1"], "localhost", False),
])
def test_allow_list_matches_exact_addresses_and_networks(entries: list[str], host: str, allowed: bool) -> None:
    assert PeerAllowList.parse(entries).allows(host) is allowed


@pytest.mark.parametrize(("entry", "words"), [
    ("10.0.0.300", "not an IP address"),
    ("host.example", "not an IP address"),
    ("10.0.0.1/24", "host bits set"),
    ("10.0.0.*", "not an IP address"),
])
def test_allow_list_refuses_malformed_entries_naming_them(entry: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as info:
        PeerAllowList.parse(["127.0.0.1", entry])
    assert repr(entry) in str(info.value)


def test_decide_peer_without_a_list_lets_everyone_in_and_a_refusal_names_the_setting() -> None:
    assert decide_peer("203.0.113.9", None, setting="x.y").allowed
    refused = decide_peer("203.0.113.9", PeerAllowList.parse(["127.0.0.1"]), setting="ha.ha_allowed_peers")
    assert not refused.allowed
    assert refused.reason == "peer 203.0.113.9 is not in ha.ha_allowed_peers ['127.0.0.1']"


# -- the HA secret's exchange ---------------------------------------------------------------------------------


def test_hello_layout_is_magic_version_flags_nonce() -> None:
    raw = encode_hello(R_NONCE, controller_mode=True)
    assert len(raw) == HELLO_SIZE == 24
    assert raw[:8] == struct.pack(">IHH", 0xC7484131, 1, 1) and raw[8:] == R_NONCE
    hello = decode_hello(raw)
    assert hello.controller_mode and hello.nonce == R_NONCE and hello.raw == raw
    assert not decode_hello(encode_hello(R_NONCE, controller_mode=False)).controller_mode


def test_a_secretless_replicas_opening_is_never_a_hello_in_either_link_format() -> None:
    # A classic report is an offset >= 0 (top bit clear); a controller-mode handshake starts with state 1.
    for opening in (encode_report(0), encode_report(2**63 - 1), encode_replica_handshake(ReplicaHandshake(3))):
        assert not is_hello_magic(opening[:MAGIC_SIZE])
        decision, hello = PeerPolicy(secret=SECRET).hello(opening[:MAGIC_SIZE], controller_mode=False)
        assert hello is None and not decision.allowed and "no HA hello" in decision.reason
        assert "ha.ha_secret_file" in decision.reason


def test_hello_of_another_version_or_unknown_flags_is_refused_by_name() -> None:
    with pytest.raises(HAProtocolError, match="version 2"):
        decode_hello(struct.pack(">IHH", 0xC7484131, 2, 0) + R_NONCE)
    with pytest.raises(HAProtocolError, match="flags"):
        decode_hello(struct.pack(">IHH", 0xC7484131, 1, 6) + R_NONCE)
    with pytest.raises(HAProtocolError, match="24 bytes"):
        decode_hello(encode_hello(R_NONCE, controller_mode=False)[:20])


def test_link_format_mismatch_is_refused_with_the_setting_that_differs() -> None:
    decision, hello = PeerPolicy(secret=SECRET).hello(encode_hello(R_NONCE, controller_mode=True),
                                                      controller_mode=False)
    assert hello is None and "enable_controller_mode differs" in decision.reason


def test_matching_secrets_prove_both_ways_and_the_secret_never_crosses_the_wire() -> None:
    primary, replica = PeerPolicy(secret=SECRET), PeerPolicy(secret=bytes(SECRET))
    raw = encode_hello(R_NONCE, controller_mode=False)
    decision, hello = primary.hello(raw, controller_mode=False)
    assert decision.allowed and hello is not None
    challenge = encode_challenge(SECRET, hello, P_NONCE)
    assert len(challenge) == CHALLENGE_SIZE
    nonce, proof = split_challenge(challenge)
    assert nonce == P_NONCE and replica.primary_proved(raw, nonce, proof)
    answer = replica_proof(SECRET, raw, nonce)
    assert primary.replica_proved(hello, nonce, answer).allowed
    assert SECRET not in raw + challenge + answer


def test_a_wrong_secret_fails_each_side_and_proofs_are_not_interchangeable() -> None:
    primary, wrong = PeerPolicy(secret=SECRET), PeerPolicy(secret=b"another-secret-of-16+bytes")
    raw = encode_hello(R_NONCE, controller_mode=False)
    _, hello = primary.hello(raw, controller_mode=False)
    assert hello is not None
    # the replica with the wrong secret rejects the primary's proof, and its own proof is rejected
    assert not wrong.primary_proved(raw, P_NONCE, primary_proof(SECRET, raw, P_NONCE))
    refused = primary.replica_proved(hello, P_NONCE, replica_proof(b"another-secret-of-16+bytes", raw, P_NONCE))
    assert not refused.allowed and "ha.ha_secret_file differs" in refused.reason
    # a replica cannot answer with the primary's own proof (different labels), nor replay it for another nonce
    assert not primary.replica_proved(hello, P_NONCE, primary_proof(SECRET, raw, P_NONCE)).allowed
    assert not primary.replica_proved(hello, bytes(16), replica_proof(SECRET, raw, P_NONCE)).allowed
    # a replica without a secret never takes a primary's proof as good
    assert not OPEN.primary_proved(raw, P_NONCE, primary_proof(SECRET, raw, P_NONCE))


def test_address_decision_of_the_policy_names_the_ha_setting() -> None:
    policy = peer_policy(["10.0.0.0/8"], None)
    assert policy.address("10.9.9.9").allowed and policy.secret is None and policy.restricted
    assert "ha.ha_allowed_peers" in policy.address("127.0.0.1").reason
    assert not OPEN.restricted and OPEN.address("203.0.113.9").allowed


# -- the secret file and the settings ---------------------------------------------------------------------------


def test_secret_file_is_read_stripped_and_a_short_or_missing_one_names_the_field(tmp_path: Path) -> None:
    good = tmp_path / "ha.secret"
    good.write_bytes(SECRET + b"\n")
    assert load_secret(good) == SECRET
    assert peer_policy(None, good).secret == SECRET
    short = tmp_path / "short"
    short.write_bytes(b"tiny-secret\n")
    with pytest.raises(ConfigError, match=r"ha\.ha_secret_file: .* 11 bytes; at least 16") as info:
        load_secret(short)
    assert "tiny-secret" not in str(info.value)
    with pytest.raises(ConfigError, match=r"ha\.ha_secret_file: cannot read"):
        HASettings(ha_secret_file=tmp_path / "absent").peer_policy()


def test_ha_settings_refuse_bad_or_empty_allow_lists_naming_the_field() -> None:
    assert HASettings(ha_allowed_peers=["127.0.0.1", "10.0.0.0/8"]).peer_policy().allow_list is not None
    with pytest.raises(ValidationError, match="ha_allowed_peers") as info:
        HASettings(ha_allowed_peers=["127.0.0.1", "10.0.0.0/33"])
    assert "10.0.0.0/33" in str(info.value)
    with pytest.raises(ValidationError, match="ha_allowed_peers"):
        HASettings(ha_allowed_peers=[])
    assert HASettings().peer_policy() == OPEN


def test_controller_allowed_peers_validated_shown_and_not_changeable_at_runtime() -> None:
    settings = ControllerSettings(allowed_peers=["127.0.0.1", "10.0.0.0/8"])
    assert settings.peer_allow_list() is not None and ControllerSettings().peer_allow_list() is None
    assert settings_properties(settings)["controllerAllowedPeers"] == "127.0.0.1,10.0.0.0/8"
    with pytest.raises(SettingsUpdateRefused) as info:
        updated_settings(settings, {"controllerAllowedPeers": "*"})
    assert info.value.code is ResponseCode.NO_PERMISSION
    with pytest.raises(ValidationError, match="allowed_peers"):
        ControllerSettings(allowed_peers=["not-an-address"])


# -- the refusal log ---------------------------------------------------------------------------------------------


def test_refusal_log_logs_each_reason_once_then_repeats_once_a_second_with_the_count() -> None:
    refusals = RefusalLog(interval=1.0)
    assert refusals.note("a", 10.0) == 0  # a new reason: at once
    assert refusals.note("a", 10.2) is None
    assert refusals.note("b", 10.3) == 0  # another reason is not hidden by a's limit
    assert refusals.note("a", 10.9) is None
    assert refusals.note("a", 11.0) == 2  # a second later: logged, with the two left out
    assert refusals.note("a", 11.5) is None
    assert refusals.refusals == 6


def test_refusal_log_forgets_the_oldest_reasons_past_its_bound() -> None:
    refusals = RefusalLog()
    for i in range(MAX_REASONS + 1):
        assert refusals.note(f"peer {i}", 0.0) == 0
    assert refusals.note("peer 0", 0.1) == 0  # forgotten: logged again as new
    assert refusals.note(f"peer {MAX_REASONS}", 0.1) is None
