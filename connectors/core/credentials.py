"""A link's ACL credentials: read from environment variables the configuration NAMES, never inline (issue 17).
One owner of the rule for the YAML clusters (``connectors.core.config.ClusterConfig``) and the data sources'
options (``connectors.replication.reader_options`` / ``writer_options``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from broker_store.protocol.acl import SessionCredentials
from connectors.core.errors import CredentialError

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
