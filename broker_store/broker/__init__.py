"""The broker: request processors over the message store, topic and offset metadata, and the
name-server registration.

``BrokerController`` is the in-process entry point (tests); ``run_broker`` serves until SIGTERM (CLI).
Processors live in one module per concern: send, pull, offsets, admin/metadata, client registry.
"""

from broker_store.broker.controller import BrokerController, BrokerRole, run_broker

__all__ = ["BrokerController", "BrokerRole", "run_broker"]
