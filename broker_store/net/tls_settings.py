"""TLS settings under RocketMQ's key names: the ``tls:`` section of a name server's, a broker's and a
controller's configuration, and the client side the project client, the CLI and the replicator use.

The one owner of every TLS setting (``net.tls`` turns them into ``ssl.SSLContext``s). Each field's path is
RocketMQ's system-property name (``TlsSystemConfig``): in YAML ::

    tls:
      server:                         # tls.server.*: how this process's remoting port(s) serve
        mode: permissive              # tls.server.mode: disabled | permissive | enforcing
        certPath: certs/server.pem    # tls.server.certPath (PEM chain)
        keyPath: certs/server.key     # tls.server.keyPath (unencrypted PEM key)
        trustCertPath: certs/ca.pem   # tls.server.trustCertPath (CAs that sign client certificates)
        need.client.auth: none        # tls.server.need.client.auth: none | optional | require
      enable: true                    # tls.enable: this process's own connections (broker -> name server...)
      client:                         # tls.client.*: what those connections present and trust
        trustCertPath: certs/ca.pem
        certPath: certs/client.pem
        keyPath: certs/client.key
        authServer: true

so an error names ``tls.server.certPath`` exactly as RocketMQ spells it. Python names (``cert_path``...) are
accepted too, because ``launcher.write_config`` writes models back out by field name.

Where this differs from RocketMQ, on purpose: the default mode is ``disabled`` (RocketMQ's ``permissive``
default relies on ``tls.test.mode.enable``, a self-signed certificate made at start, which is not offered);
``tls.client.authServer`` defaults to true (RocketMQ: false, trusting any server); a certificate a server
asks for is always verified against ``tls.server.trustCertPath`` (RocketMQ's ``tls.server.authClient=true``;
Python's ssl module cannot ask for a certificate without checking it); neither side checks host names
(as RocketMQ: brokers are dialled by the IP their routes name); keys are unencrypted PEM files
(``keyPassword`` would be a secret inline in a configuration file).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ClientAuth", "TlsClientSettings", "TlsMode", "TlsServerSettings", "TlsSettings"]


class TlsMode(StrEnum):
    """RocketMQ's TlsMode: what a server does with the first byte of a connection (0x16 = a TLS ClientHello)."""

    DISABLED = "disabled"
    """Plain connections only; a TLS handshake is closed at once."""
    PERMISSIVE = "permissive"
    """TLS and plain clients on the same port."""
    ENFORCING = "enforcing"
    """TLS only; a plain client's first request is answered SYSTEM_ERROR saying so, then closed."""


class ClientAuth(StrEnum):
    """tls.server.need.client.auth: whether a TLS client must present a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    """A certificate is asked for and verified when given; a client without one is served."""
    REQUIRE = "require"
    """A client without a certificate signed by ``tls.server.trustCertPath`` fails the handshake."""


def _existing_file(value: Path | None) -> Path | None:
    if value is not None and "-----BEGIN" in str(value):
        raise ValueError("inline PEM text is not allowed (a key is a secret); name the file that holds it")
    if value is not None and not value.is_file():
        raise ValueError(f"file not found: {value}")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True)


class TlsServerSettings(_Model):
    """tls.server.*: how a process's remoting ports accept connections."""

    mode: TlsMode = TlsMode.DISABLED
    """tls.server.mode. ``disabled``: plain connections only (a TLS handshake is closed and logged).
    ``permissive``: TLS and plain clients on the same port. ``enforcing``: TLS only; a plain client's first request
    is answered SYSTEM_ERROR ``TLS required: this server runs tls.server.mode=enforcing ...``, then closed. Applies
    to every remoting port of the process (a broker's fast port too; not the HA port). Not ``disabled``:
    ``certPath`` and ``keyPath`` are required."""
    cert_path: Path | None = Field(default=None, alias="certPath")
    """tls.server.certPath: the server's X.509 certificate chain, PEM."""
    key_path: Path | None = Field(default=None, alias="keyPath")
    """tls.server.keyPath: the certificate's private key, unencrypted PEM."""
    trust_cert_path: Path | None = Field(default=None, alias="trustCertPath")
    """tls.server.trustCertPath: PEM certificates of the CAs client certificates must chain to; required when
    ``need.client.auth`` is not ``none``."""
    need_client_auth: ClientAuth = Field(default=ClientAuth.NONE, alias="need.client.auth")
    """tls.server.need.client.auth: none, optional or require (a client certificate)."""

    @field_validator("cert_path", "key_path", "trust_cert_path")
    @classmethod
    def _files_exist(cls, value: Path | None) -> Path | None:
        return _existing_file(value)

    @model_validator(mode="after")
    def _complete(self) -> TlsServerSettings:
        if self.mode is not TlsMode.DISABLED:
            missing = [name for name, value in (("certPath", self.cert_path), ("keyPath", self.key_path))
                       if value is None]
            if missing:
                raise ValueError(f"mode {self.mode.value} needs {' and '.join(missing)} (the server's certificate "
                                 "and key, PEM)")
        if self.need_client_auth is not ClientAuth.NONE and self.trust_cert_path is None:
            raise ValueError(f"need.client.auth {self.need_client_auth.value} needs trustCertPath, the CA "
                             "certificates client certificates are verified against")
        return self


class TlsClientSettings(_Model):
    """tls.client.*: what a client presents and whom it trusts when it connects with TLS."""

    trust_cert_path: Path | None = Field(default=None, alias="trustCertPath")
    """tls.client.trustCertPath: PEM certificates of the CAs a server's certificate must chain to; none: the
    system's default CAs."""
    cert_path: Path | None = Field(default=None, alias="certPath")
    """tls.client.certPath: this client's certificate chain, PEM, for servers with need.client.auth."""
    key_path: Path | None = Field(default=None, alias="keyPath")
    """tls.client.keyPath: its private key, unencrypted PEM (set together with certPath)."""
    auth_server: bool = Field(default=True, alias="authServer")
    """tls.client.authServer: verify the server's certificate chain (RocketMQ's default is false: any
    server is trusted). Host names are not checked (as RocketMQ)."""

    @field_validator("cert_path", "key_path", "trust_cert_path")
    @classmethod
    def _files_exist(cls, value: Path | None) -> Path | None:
        return _existing_file(value)

    @model_validator(mode="after")
    def _pair(self) -> TlsClientSettings:
        if (self.cert_path is None) != (self.key_path is None):
            missing = "keyPath" if self.key_path is None else "certPath"
            raise ValueError(f"certPath and keyPath go together (a client certificate and its key); {missing} "
                             "is missing")
        return self


class TlsSettings(_Model):
    """The ``tls:`` section of a server process: its ports (``server``) and its own outgoing connections
    (``enable`` + ``client``: a broker's to name servers and controllers, a controller's to brokers)."""

    server: TlsServerSettings = Field(default_factory=lambda: TlsServerSettings())
    """tls.server.*."""
    enable: bool = False
    """tls.enable: this process connects to other servers with TLS (RocketMQ's client-side switch): a broker's
    connections to name servers and controllers, a controller's role-change notices to brokers, ``up``'s
    registration check."""
    client: TlsClientSettings = Field(default_factory=lambda: TlsClientSettings())
    """tls.client.*, used when ``enable`` is true."""

    def client_settings(self) -> TlsClientSettings | None:
        """The client side when ``tls.enable``, else None (plain connections)."""
        return self.client if self.enable else None
