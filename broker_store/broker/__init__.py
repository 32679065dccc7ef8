"""The broker: request processors over the message store, topic and offset metadata, and the
name-server registration.

``BrokerServer`` (``server.py``) is the in-process entry point (tests); ``run_broker`` serves until
SIGTERM (CLI). Processors live in one module per concern: send, pull, offsets, admin/metadata, client
registry; the broker's role is ``role.RoleState``.
"""

from broker_store.broker.role import BrokerRole, RoleState
from broker_store.broker.server import BrokerServer, run_broker

__all__ = ["BrokerRole", "BrokerServer", "RoleState", "run_broker"]
