"""The controller's settings as GET_CONTROLLER_CONFIG (1010) shows them and UPDATE_CONTROLLER_CONFIG (1009) changes
them: the properties key of each ``ControllerSettings`` field, which of them may change at runtime, and the pure
rule that turns an update into new settings or a refusal naming the key. Called by ``controller.service``
(``Controller.update_settings``); the text itself is ``protocol.config_text``'s.

Keys are RocketMQ's ControllerConfig names where one exists (``enableElectUncleanMaster``,
``notifyBrokerRoleChanged``, ``scanInactiveMasterInterval``: RocketMQ 5.1.1+ scans for dead masters at that
interval, and here the same scan also expires silent brokers; ``controllerStorePath`` for the embedded store's
directory). The heartbeat timeout is ``controllerHeartBeatTimeoutMills``, RocketMQ's name for it on the broker,
which sends it in every heartbeat: here too a broker's own timeout wins, and this is the controller's default
for brokers that send none (ours by default). ``etcd`` has no RocketMQ counterpart (DLedger's peers play its
role) and is shown as ``etcdEndpoints`` (';'-separated), ``etcdPrefix``, ``etcdLeaseTtlSeconds``. An update
may also name a field as the YAML does (``enable_elect_unclean_master``). ``allowed_peers`` (no RocketMQ
counterpart) is shown as ``controllerAllowedPeers``, ','-separated, ``acl_file`` as ``controllerAclFile``.

Update rules, in this order, the first failing one refusing the whole update (nothing applied):
unknown key -> CONTROLLER_INVALID_REQUEST; a key that cannot change at runtime (the store: ``state_dir``,
``etcd``, ``allowed_peers``, ``acl_file``: a peer allowed in must not widen the list; RocketMQ's config
blacklist answers the same NO_PERMISSION) -> NO_PERMISSION; one setting named
twice -> CONTROLLER_INVALID_REQUEST; a value the ``ControllerSettings`` model rejects ->
CONTROLLER_INVALID_REQUEST with the model's error naming the key and the field. RocketMQ ignores unknown
keys; refusing them here keeps a typo from reading as a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from broker_store.controller.settings import ControllerSettings
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ConfigError
from broker_store.validation import describe_validation_error


@dataclass(frozen=True)
class SettingKey:
    key: str
    """The properties key (RocketMQ's camelCase name where it has one)."""
    field: str
    """The ``ControllerSettings`` field it shows."""
    runtime: bool
    """Whether UPDATE_CONTROLLER_CONFIG may change it (False: only a restart with a new configuration)."""


KEYS: tuple[SettingKey, ...] = (
    SettingKey("enableElectUncleanMaster", "enable_elect_unclean_master", True),
    SettingKey("controllerHeartBeatTimeoutMills", "heartbeat_timeout_ms", True),
    SettingKey("scanInactiveMasterInterval", "scan_interval_ms", True),
    SettingKey("notifyBrokerRoleChanged", "notify_broker_role_changed", True),
    SettingKey("controllerStorePath", "state_dir", False),
    SettingKey("etcdEndpoints", "etcd", False),
    SettingKey("etcdPrefix", "etcd", False),
    SettingKey("etcdLeaseTtlSeconds", "etcd", False),
    SettingKey("controllerAllowedPeers", "allowed_peers", False),
    SettingKey("controllerAclFile", "acl_file", False),
    SettingKey("controllerAclCredentialsFile", "acl_credentials_file", False),
    SettingKey("metricsPromExporterPort", "metrics_port", False),
)
_BY_NAME: dict[str, SettingKey] = {k.key: k for k in KEYS} | {k.field: k for k in KEYS if k.field != "etcd"}


class SettingsUpdateRefused(ConfigError):
    """An update refused as a whole; ``code`` is the response code, ``str(self)`` the remark (naming the key)."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def settings_properties(settings: ControllerSettings) -> dict[str, str]:
    """The GET_CONTROLLER_CONFIG entries of ``settings``, in ``KEYS`` order; unset ones (None) left out, as
    RocketMQ leaves out null fields. Booleans as Java prints them (``true``/``false``)."""
    out: dict[str, str] = {}
    for k in KEYS:
        if k.field != "etcd":
            value = getattr(settings, k.field)
            if value is not None:
                out[k.key] = _text(value)
    if settings.etcd is not None:
        out["etcdEndpoints"] = ";".join(str(u).rstrip("/") for u in settings.etcd.endpoints)
        out["etcdPrefix"] = settings.etcd.prefix
        out["etcdLeaseTtlSeconds"] = str(settings.etcd.lease_ttl_seconds)
    return out


def updated_settings(settings: ControllerSettings, update: Mapping[str, str]) -> ControllerSettings:
    """``settings`` with ``update`` (properties key or field name -> text value) applied, validated as a whole by
    the ``ControllerSettings`` model; SettingsUpdateRefused by the rules of the module docstring. An empty update
    gives ``settings`` back."""
    known = [name for name in update if name in _BY_NAME]
    unknown = [name for name in update if name not in _BY_NAME]
    if unknown:
        runtime = ", ".join(k.key for k in KEYS if k.runtime)
        raise SettingsUpdateRefused(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                    f"unknown controller setting {unknown[0]!r} (runtime settings: {runtime})")
    for name in known:
        k = _BY_NAME[name]
        if not k.runtime:
            raise SettingsUpdateRefused(ResponseCode.NO_PERMISSION,
                                        f"controller setting {name!r} ({k.field}) cannot change at runtime: restart "
                                        f"the controller with a new configuration")
    changes: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for name in known:
        field = _BY_NAME[name].field
        if field in changes:
            raise SettingsUpdateRefused(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                        f"controller setting {field} given twice ({given_as[field]!r} and {name!r})")
        changes[field] = update[name].strip()
        given_as[field] = name
    if not changes:
        return settings
    current = settings.model_dump()
    for field, value in changes.items():  # each alone first, so that an error names the key it came from
        _validated(current | {field: value}, repr(given_as[field]))
    return _validated(current | changes, ", ".join(repr(name) for name in given_as.values()))


def _validated(fields: dict[str, object], keys: str) -> ControllerSettings:
    try:
        return ControllerSettings.model_validate(fields)
    except ValidationError as exc:
        raise SettingsUpdateRefused(ResponseCode.CONTROLLER_INVALID_REQUEST, describe_validation_error(
            f"UPDATE_CONTROLLER_CONFIG {keys}", exc)) from exc


def _text(value: object) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
