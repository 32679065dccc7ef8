"""A link's ACL credentials: read from environment variables or a file the configuration NAMES, never inline
(docs/security.md, "Credentials").
One owner of the rule for the YAML clusters (``connectors.core.config.ClusterConfig``) and the data sources'
options (``connectors.replication.reader_options`` / ``writer_options``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.credentials_file import CredentialsFileError
from broker_store.protocol.credentials_file import read_credentials_file as read_tools_yml
from connectors.core.errors import CredentialError

log = logging.getLogger(__name__)

INLINE_SECRET_KEYS = frozenset({
    "access_key", "secret_key", "accessKey", "secretKey", "password", "secret", "token",
    "security_token", "securityToken",
})
"""Keys that would hold a credential inline; rejected with a pointer to ``*_env``."""



def resolve_credentials(access_key_env: str | None, secret_key_env: str | None, *, fields: tuple[str, str],
                        environ: Mapping[str, str] | None = None) -> SessionCredentials | None:
    """ACL credentials from the environment variables NAMED by the two arguments (both or neither);
    ``None`` without ACL. Raises ``CredentialError`` naming the field (``fields``: the names of the
    two settings as the user wrote them) and the variable when one is missing, unset or empty.
    The resolved secret is never written to config, logs or Spark options: it travels to executors
    only inside the pickled reader / writer (``SessionCredentials`` masks it in ``repr``)."""
    if access_key_env is None and secret_key_env is None:
        return None
    if access_key_env is None or secret_key_env is None:
        missing = fields[1] if secret_key_env is None else fields[0]
        raise CredentialError(f"{fields[0]} and {fields[1]} must be set together", field=missing)
    env = os.environ if environ is None else environ
    values = []
    for name, var in zip(fields, (access_key_env, secret_key_env), strict=True):
        value = env.get(var)
        if not value:
            raise CredentialError(f"environment variable {var} is not set (or empty)", field=name)
        values.append(value)
    return SessionCredentials(access_key=values[0], secret_key=values[1])


def read_credentials_file(path: str | Path, *, field: str) -> SessionCredentials:
    """ACL credentials from a file of RocketMQ's layout (its tools' ``conf/tools.yml``): a YAML mapping with
    ``accessKey`` and ``secretKey`` (strings, not empty), and nothing else but an optional ``securityToken``
    (the format's one reader is ``broker_store.protocol.credentials_file``). Read where the job starts (the driver),
    like the environment variables. Raises ``CredentialError`` naming ``field`` and the file (never its content)
    when it is missing, unreadable or malformed. A file that group or others may read is used with a WARNING: a
    secret belongs in a file of mode 0600."""
    try:
        return read_tools_yml(path)
    except CredentialsFileError as exc:
        raise CredentialError(str(exc), field=field) from None

