"""The ACL 1.0 identity of the `python -m broker_store` admin commands that sign (``acl ...``, ``ha-status``,
``controller-status``, ``elect``, ``controller-config``): ``--access-key`` (env BROKER_STORE_ACL_ACCESS_KEY) and
the secret from ``--secret-key-file`` or the environment variable BROKER_STORE_ACL_SECRET_KEY, turned into the
client's ``SessionCredentials``. No access key: the requests go unsigned.

Secrets never appear on the command line (where ``ps`` shows them) nor in the output.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import ConfigError

ACCESS_KEY_ENV = "BROKER_STORE_ACL_ACCESS_KEY"
SECRET_KEY_ENV = "BROKER_STORE_ACL_SECRET_KEY"


def read_secret(path: Path | None, env: str, what: str) -> str:
    """The secret in ``path`` (stripped), else the environment variable ``env``; ``ConfigError`` naming ``what``
    when neither gives one."""
    if path is not None:
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    value = os.environ.get(env)
    if not value:
        raise ConfigError(f"{what}: give a file with the secret or set {env}")
    return value


def add_credential_arguments(parser: argparse.ArgumentParser, account: str = "account") -> None:
    """``--access-key`` and ``--secret-key-file`` (``account`` says which account the command needs)."""
    parser.add_argument("--access-key", default=os.environ.get(ACCESS_KEY_ENV),
                        help=f"{account} to sign with (env {ACCESS_KEY_ENV}; none: unsigned)")
    parser.add_argument("--secret-key-file", type=Path,
                        help=f"file holding that account's secret key (default: env {SECRET_KEY_ENV})")


def credentials_from_args(args: argparse.Namespace) -> SessionCredentials | None:
    """The credentials the options give, None without ``--access-key`` (unsigned requests)."""
    if not getattr(args, "access_key", None):
        return None
    return SessionCredentials(args.access_key, read_secret(args.secret_key_file, SECRET_KEY_ENV, "the secret key"))
