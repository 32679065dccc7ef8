"""The TLS options of every `python -m broker_store` admin command (RocketMQ's client-side tls.enable and
tls.client.*), turned into the client's ``TlsClientSettings``.

``--tls`` connects with TLS and verifies the servers' certificates against the system CAs or
``--tls-trust-cert`` (tls.client.trustCertPath); ``--tls-cert`` / ``--tls-key`` present a client certificate
(tls.client.certPath / keyPath, for servers with need.client.auth); ``--tls-no-verify`` trusts any server
(tls.client.authServer=false). Any of them implies ``--tls``. Environment defaults: ``TLS_ENABLE=true`` and
``TLS_CLIENT_TRUST_CERT_PATH`` / ``TLS_CLIENT_CERT_PATH`` / ``TLS_CLIENT_KEY_PATH``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.errors import ConfigError

_FLAGS = {"trust_cert_path": "--tls-trust-cert", "cert_path": "--tls-cert", "key_path": "--tls-key",
          "auth_server": "--tls-no-verify"}


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (RocketMQ's tls.enable and tls.client.*)")
    group.add_argument("--tls", action="store_true", default=os.environ.get("TLS_ENABLE", "").lower() == "true",
                       help="connect with TLS (tls.enable; env TLS_ENABLE=true)")
    group.add_argument("--tls-trust-cert", type=Path, default=os.environ.get("TLS_CLIENT_TRUST_CERT_PATH"),
                       help="CA certificates (PEM) the servers' certificates must chain to (tls.client.trustCertPath); "
                            "default: the system's CAs")
    group.add_argument("--tls-cert", type=Path, default=os.environ.get("TLS_CLIENT_CERT_PATH"),
                       help="client certificate (PEM) for servers with need.client.auth (tls.client.certPath)")
    group.add_argument("--tls-key", type=Path, default=os.environ.get("TLS_CLIENT_KEY_PATH"),
                       help="the client certificate's unencrypted PEM key (tls.client.keyPath)")
    group.add_argument("--tls-no-verify", action="store_true",
                       help="trust any server certificate (tls.client.authServer=false)")


def tls_from_args(args: argparse.Namespace) -> TlsClientSettings | None:
    """The client TLS settings the options ask for, None for plain connections; ``ConfigError`` naming the
    option (and RocketMQ's key) when a file is missing or the pair is incomplete."""
    given: dict[str, Any] = {
        "trust_cert_path": getattr(args, "tls_trust_cert", None), "cert_path": getattr(args, "tls_cert", None),
        "key_path": getattr(args, "tls_key", None)}
    given = {key: value for key, value in given.items() if value is not None}
    if getattr(args, "tls_no_verify", False):
        given["auth_server"] = False
    if not given and not getattr(args, "tls", False):
        return None
    try:
        return TlsClientSettings(**given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = err["loc"]
            field = str(loc[0]) if loc else ""
            name = _python_name(field)
            flag = _FLAGS.get(name, "")
            where = f"{flag} (tls.client.{TlsClientSettings.model_fields[name].alias})" if flag else "TLS options"
            problems.append(f"{where}: {err['msg']}")
        raise ConfigError("; ".join(problems)) from exc


def _python_name(field: str) -> str:
    for name, info in TlsClientSettings.model_fields.items():
        if field in (name, info.alias):
            return name
    return field
