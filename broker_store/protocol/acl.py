"""RocketMQ 4.x ACL request signing, as clients with an AclClientRPCHook do it.

The client (``broker_store.client.session``) signs every outgoing request when it has credentials;
a broker with ACL enabled (``broker_store.acl.decision``) recomputes the signature and refuses the
request when it differs (SYSTEM_ERROR with RocketMQ's AclException text, as ACL 1.0 does).
Pure functions: no socket, no clock.

Signature input (bytes, UTF-8)::

    +-----------------------------------------------------------+----------------+
    | values of extFields sorted by key (AccessKey and          | request body   |
    | SecurityToken included, Signature excluded), concatenated | (may be empty) |
    +-----------------------------------------------------------+----------------+

    Signature = Base64(HMAC-SHA1(key = secret key UTF-8, message = the bytes above))

A broker checking a request from a client of version V4_9_3 or older (``version`` <= 399) also leaves
``_UNIQUE_KEY_QUERY`` out: those clients added it after signing (RocketMQ's PlainAccessResource does the
same); newer clients sign it like any field.

The request then carries ``AccessKey``, ``Signature`` and, for temporary credentials,
``SecurityToken`` as extFields. Keys sort by UTF-16 code units, as Java's ``TreeMap<String, ...>``
does; for the ASCII header names RocketMQ uses this is plain string order.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from broker_store.protocol.errors import ConfigError
from broker_store.protocol.frame import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
VERSION_V4_9_3 = 399
"""Ordinal of RocketMQ's MQVersion.Version.V4_9_3, the last client version that signed without
``_UNIQUE_KEY_QUERY``."""


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """An ACL identity. ``repr`` never shows the secret (it ends up in logs and Spark plans)."""

    access_key: str
    """The account's access key, sent in clear as ``AccessKey``."""
    secret_key: str
    """The HMAC key; never sent."""
    security_token: str | None = None
    """Optional token of temporary credentials, sent as ``SecurityToken`` and signed."""

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigError("ACL credentials need a non-empty access key and secret key")

    def __repr__(self) -> str:
        token = ", security_token=***" if self.security_token else ""
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key=***{token})"


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be")


def signature_input(ext_fields: Mapping[str, str], body: bytes, *, leave_out: str | None = None) -> bytes:
    """The bytes that are signed: extField values in key order (``Signature`` and ``leave_out`` skipped),
    then the body."""
    # For ASCII keys (every RocketMQ header name) code-point order is UTF-16 order: the cheap sort.
    keys = sorted(ext_fields) if "".join(ext_fields).isascii() else sorted(ext_fields, key=_utf16_key)
    values = "".join(ext_fields[k] for k in keys if k not in (SIGNATURE, leave_out))
    return values.encode() + body


def calculate_signature(data: bytes, secret_key: str) -> str:
    """Base64 of HMAC-SHA1 over ``data`` keyed with ``secret_key``."""
    return base64.b64encode(hmac.new(secret_key.encode(), data, hashlib.sha1).digest()).decode("ascii")


def sign(cmd: RemotingCommand, credentials: SessionCredentials) -> RemotingCommand:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` over the result to ``cmd``
    in place; returns ``cmd``. Re-signing a signed command replaces the old signature."""
    ext = cmd.ext_fields
    ext[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        ext[SECURITY_TOKEN] = credentials.security_token
    ext[SIGNATURE] = calculate_signature(signature_input(ext, cmd.body), credentials.secret_key)
    return cmd


def verify(cmd: RemotingCommand, secret_key: str) -> bool:
    """True when ``cmd`` carries a ``Signature`` made with ``secret_key`` (constant-time compare);
    ``_UNIQUE_KEY_QUERY`` is left out for clients of V4_9_3 and older (module docstring)."""
    given = cmd.ext_fields.get(SIGNATURE)
    if given is None:
        return False
    leave_out = UNIQUE_KEY_QUERY if cmd.version <= VERSION_V4_9_3 else None
    # signature_input's bytes, fed in two parts: a large body (batches) is not copied per request
    mac = hmac.new(secret_key.encode(), signature_input(cmd.ext_fields, b"", leave_out=leave_out), hashlib.sha1)
    mac.update(cmd.body)
    expected = base64.b64encode(mac.digest()).decode("ascii")
    return hmac.compare_digest(given.encode(), expected.encode())
