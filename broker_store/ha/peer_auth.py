"""Who may open an HA link: the address allow-list and the shared HA secret, decided without a socket.

Pure (no socket, no clock). ``PeerPolicy`` holds what a broker's ``ha:`` settings configure
(``ha_allowed_peers``, ``ha_secret_file``); ``primary_service`` asks it about each accepted connection before
reading the link's first byte, and both link ends use the bytes and proofs below. RocketMQ's HA port accepts
anyone who connects; with neither setting this project does the same, and the link's bytes are RocketMQ's.

With a secret, both link formats (classic ``wire``, controller-mode ``wire_epoch``) are preceded by a mutual
HMAC-SHA256 challenge-response. The secret itself never crosses the wire; each side proves it holds it over
two fresh nonces (so a recorded exchange cannot be replayed), and the primary proves first so a replica never
takes CommitLog bytes from a process that does not hold it::

    replica -> primary: hello, 24 bytes
        0            4              6            8                          24
        +------------+--------------+------------+--------------------------+
        | magic u32  | version u16  | flags u16  | replica nonce (16 bytes) |
        +------------+--------------+------------+--------------------------+
        magic 0xC7484131: its top bit is set, so it is never the first 4 bytes of a secretless replica's
        opening (a classic offset report is >= 0; a controller-mode handshake starts with state 1), and a
        primary tells a secretless replica at once. flags bit 0: the replica speaks the controller-mode link.

    primary -> replica: challenge, 48 bytes
        0                          16                                   48
        +--------------------------+------------------------------------+
        | primary nonce (16 bytes) | primary proof (32 bytes)           |
        +--------------------------+------------------------------------+

    replica -> primary: proof, 32 bytes
        | replica proof (32 bytes) |

    proof = HMAC-SHA256(secret, label || hello (24 bytes) || primary nonce), label b"rmq-ha-primary\\0" or
    b"rmq-ha-replica\\0": different per side, so one side's proof is never the other's.

Then the link's own format starts, the replica speaking first as always. A primary without a secret reading a
hello sees a negative offset (classic) or a wrong link state (controller mode) and closes: a mismatch fails
fast on both ends. What this does not give: secrecy of the CommitLog bytes that follow (TLS is a separate
matter) or protection against a relay in the middle of a live connection.

Version: this is version 1; a new version gets a new ``version`` value, which a primary refuses by name.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_store.acl.peers import ALLOWED, PeerAllowList, PeerDecision, decide_peer
from broker_store.ha.errors import HAProtocolError
from broker_store.protocol.errors import ConfigError

MAGIC = 0xC7484131
VERSION = 1
FLAG_CONTROLLER_MODE = 0x1
NONCE_SIZE = 16
PROOF_SIZE = hashlib.sha256().digest_size  # 32

HELLO = struct.Struct(">IHH16s")
"""Replica -> primary: magic u32, version u16, flags u16, replica nonce 16 bytes."""
HELLO_SIZE = HELLO.size  # 24
MAGIC_SIZE = 4
CHALLENGE_SIZE = NONCE_SIZE + PROOF_SIZE  # 48

_PRIMARY_LABEL = b"rmq-ha-primary\0"
_REPLICA_LABEL = b"rmq-ha-replica\0"

MIN_SECRET_BYTES = 16
"""A shorter secret is refused when loaded: it would be guessable offline from one recorded exchange."""

Nonces = Callable[[], bytes]
"""Fresh random nonces (``os.urandom(16)``; tests pass fixed ones)."""


def random_nonce() -> bytes:
    return os.urandom(NONCE_SIZE)


@dataclass(frozen=True)
class Hello:
    """A decoded replica hello."""

    raw: bytes
    """The 24 bytes as received (both proofs cover them)."""
    controller_mode: bool
    nonce: bytes


def encode_hello(nonce: bytes, *, controller_mode: bool) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise HAProtocolError(f"an HA hello nonce is {NONCE_SIZE} bytes, got {len(nonce)}")
    return HELLO.pack(MAGIC, VERSION, FLAG_CONTROLLER_MODE if controller_mode else 0, nonce)


def is_hello_magic(first4: bytes) -> bool:
    """Whether a connection's first 4 bytes open a hello (a secretless replica's opening never does)."""
    return len(first4) == MAGIC_SIZE and struct.unpack(">I", first4)[0] == MAGIC


def decode_hello(data: bytes) -> Hello:
    """HAProtocolError for a wrong magic (checked first, so a connection's first 4 bytes suffice to refuse a
    secretless replica), a wrong length, version or flags (naming what was expected)."""
    if not is_hello_magic(bytes(data[:MAGIC_SIZE])):
        raise HAProtocolError(f"the peer sent no HA hello (first bytes {bytes(data[:MAGIC_SIZE]).hex()}): it has no "
                              "ha_secret_file")
    if len(data) != HELLO_SIZE:
        raise HAProtocolError(f"an HA hello is {HELLO_SIZE} bytes, got {len(data)}")
    _magic, version, flags, nonce = HELLO.unpack(data)
    if version != VERSION:
        raise HAProtocolError(f"the peer speaks HA authentication version {version}; this broker speaks {VERSION}")
    if flags & ~FLAG_CONTROLLER_MODE:
        raise HAProtocolError(f"unknown HA hello flags {flags:#06x}")
    return Hello(bytes(data), bool(flags & FLAG_CONTROLLER_MODE), nonce)


def primary_proof(secret: bytes, hello: bytes, primary_nonce: bytes) -> bytes:
    return hmac.new(secret, _PRIMARY_LABEL + hello + primary_nonce, hashlib.sha256).digest()


def replica_proof(secret: bytes, hello: bytes, primary_nonce: bytes) -> bytes:
    return hmac.new(secret, _REPLICA_LABEL + hello + primary_nonce, hashlib.sha256).digest()


def encode_challenge(secret: bytes, hello: Hello, primary_nonce: bytes) -> bytes:
    return primary_nonce + primary_proof(secret, hello.raw, primary_nonce)


def split_challenge(data: bytes) -> tuple[bytes, bytes]:
    """(primary nonce, primary proof) of a 48-byte challenge."""
    if len(data) != CHALLENGE_SIZE:
        raise HAProtocolError(f"an HA challenge is {CHALLENGE_SIZE} bytes, got {len(data)}")
    return data[:NONCE_SIZE], data[NONCE_SIZE:]


@dataclass(frozen=True)
class PeerPolicy:
    """What an HA port asks of a peer: an address in ``allow_list`` (None: any) and, with ``secret``, the proof.

    The primary applies all of it; a replica uses ``secret`` only (whom it dials is its configuration's choice).
    """

    allow_list: PeerAllowList | None = None
    secret: bytes | None = None

    @property
    def restricted(self) -> bool:
        return self.allow_list is not None or self.secret is not None

    def address(self, host: str) -> PeerDecision:
        """Before reading anything: is ``host`` allowed to connect?"""
        return decide_peer(host, self.allow_list, setting="ha.ha_allowed_peers")

    def hello(self, data: bytes, *, controller_mode: bool) -> tuple[PeerDecision, Hello | None]:
        """The replica's 24-byte hello (or its first bytes when they are not one): refused without a secret
        proof coming, or when the link formats differ."""
        try:
            hello = decode_hello(data)
        except HAProtocolError as exc:
            return PeerDecision(False, f"{exc} (ha.ha_secret_file is set on this primary)"), None
        if hello.controller_mode != controller_mode:
            mode = {True: "controller-mode", False: "classic"}
            return PeerDecision(False, f"the replica speaks the {mode[hello.controller_mode]} HA link, this primary "
                                       f"the {mode[controller_mode]} one (enable_controller_mode differs)"), None
        return ALLOWED, hello

    def replica_proved(self, hello: Hello, primary_nonce: bytes, proof: bytes) -> PeerDecision:
        """Does the replica's 32-byte proof show it holds the secret? (Constant-time comparison.)"""
        if self.secret is None:
            return ALLOWED
        if hmac.compare_digest(replica_proof(self.secret, hello.raw, primary_nonce), proof):
            return ALLOWED
        return PeerDecision(False, "the replica's HA secret proof does not match (ha.ha_secret_file differs)")

    def primary_proved(self, hello: bytes, primary_nonce: bytes, proof: bytes) -> bool:
        """Replica side: does the primary's proof show it holds the secret?"""
        return self.secret is not None and hmac.compare_digest(primary_proof(self.secret, hello, primary_nonce),
                                                               proof)


OPEN = PeerPolicy()
"""RocketMQ's HA port: anyone may connect, no authentication."""


def load_secret(path: Path, *, field: str = "ha.ha_secret_file") -> bytes:
    """The shared secret in ``path`` (surrounding whitespace stripped); ConfigError naming ``field`` when the file
    cannot be read or holds fewer than ``MIN_SECRET_BYTES`` bytes. The secret is never put in a message."""
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read the HA secret file {path}: {exc.strerror or exc}") from exc
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"{field}: the HA secret in {path} is {len(secret)} bytes; at least {MIN_SECRET_BYTES} "
                          "are needed (e.g. `head -c 32 /dev/urandom | base64 > FILE`)")
    return secret


def peer_policy(allowed_peers: list[str] | None, secret_file: Path | None) -> PeerPolicy:
    """The policy ``ha.ha_allowed_peers`` and ``ha.ha_secret_file`` configure (the file read now: ConfigError)."""
    allow_list = None
    if allowed_peers is not None:
        try:
            allow_list = PeerAllowList.parse(allowed_peers)
        except ValueError as exc:
            raise ConfigError(f"ha.ha_allowed_peers: {exc}") from exc
    return PeerPolicy(allow_list, None if secret_file is None else load_secret(secret_file))
