"""A name server's settings (``python -m broker_store namesrv --config FILE``, a cluster's ``namesrv:`` in ``up``'s
file)."""

from __future__ import annotations

from pydantic import Field

from broker_store.address import HostPort
from broker_store.config.common import ConfigModel
from broker_store.controller.settings import ControllerSettings
from broker_store.net.tls_settings import TlsSettings
from broker_store.restart_policy import RestartMode


class NamesrvConfig(ConfigModel):
    """One name server."""

    listen: HostPort = "127.0.0.1:9876"
    """Address the name server binds and brokers/clients dial."""
    broker_expiry_seconds: float = Field(default=5.0, gt=0)
    """A broker without a heartbeat for this long is removed from routes (RocketMQ 5 lite heartbeat). A heartbeat
    from a broker the name server does not hold (it restarted, or expired the broker while it was frozen) is
    answered so, and the project's broker registers at once instead of at its next ``register_interval_seconds``
    (RocketMQ's brokers wait for it)."""
    scan_interval_seconds: float = Field(default=1.0, gt=0)
    """Period of the expiry scan."""
    controller: ControllerSettings | None = None
    """The embedded controller (RocketMQ's enableControllerInNamesrv): brokers in controller mode register,
    heartbeat and are elected here. None: this name server runs no controller."""
    tls: TlsSettings = Field(default_factory=lambda: TlsSettings())
    """RocketMQ's TLS settings under their key names (``net.tls_settings``): ``tls.server.mode`` disabled /
    permissive / enforcing with its certificate, key, trust certificates and need.client.auth, and
    ``tls.enable`` + ``tls.client.*`` for the embedded controller's connections to brokers."""
    restart: RestartMode = RestartMode.ON_FAILURE
    """Read by ``up`` only (``restart_policy``): "on-failure" restarts this name server with back-off when it exits
    with a code other than 0; "no" leaves it down."""
