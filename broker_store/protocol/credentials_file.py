"""One account's ACL credentials in a file of RocketMQ's tools.yml layout: the one reader of that format.

Used by the broker for its own account (``acl_credentials_file``: it signs its metadata-sync requests to its
primary and its requests to the controllers) and by the replicator's clusters (``connectors.core.credentials``,
which turns the error into its ``CredentialError``)::

    accessKey: replicator01        # a non-empty string
    secretKey: ...                 # a non-empty string
    securityToken: ...             # optional

Nothing else is allowed in the file. A file group or others may read is used with a WARNING.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import yaml

from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import ConfigError

log = logging.getLogger(__name__)

KEYS = ("accessKey", "secretKey", "securityToken")


class CredentialsFileError(ConfigError):
    """The file is missing, unreadable or malformed; the message names the file, never its content."""


def read_credentials_file(path: str | Path) -> SessionCredentials:
    """The credentials in ``path`` (``~`` expanded); ``CredentialsFileError`` when they cannot be read (see the
    module docstring)."""
    file = Path(path).expanduser()
    try:
        mode = file.stat().st_mode
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialsFileError(f"cannot read credentials file {file}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CredentialsFileError(f"credentials file {file} is not YAML (line "
                                   f"{getattr(getattr(exc, 'problem_mark', None), 'line', -1) + 1})") from None
    if not isinstance(data, dict):
        raise CredentialsFileError(f"credentials file {file} must be a mapping with accessKey and secretKey")
    unknown = sorted(str(k) for k in data if k not in KEYS)
    if unknown:
        raise CredentialsFileError(f"credentials file {file} has unknown key(s) {', '.join(unknown)} (allowed: "
                                   "accessKey, secretKey, securityToken)")
    values = {}
    for key in ("accessKey", "secretKey"):
        value = data.get(key)
        if not isinstance(value, str | int) or not str(value):
            raise CredentialsFileError(f"credentials file {file} has no {key} (a non-empty string)")
        values[key] = str(value)
    token = data.get("securityToken")
    if token is not None and not isinstance(token, str):
        raise CredentialsFileError(f"credentials file {file}: securityToken must be a string")
    if stat.S_IMODE(mode) & 0o077:
        log.warning("credentials file %s can be read by group or others (mode %o); chmod 600 it", file,
                    stat.S_IMODE(mode))
    return SessionCredentials(access_key=values["accessKey"], secret_key=values["secretKey"],
                              security_token=token or None)
