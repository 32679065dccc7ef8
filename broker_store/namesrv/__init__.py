"""Name server: broker registry, lite heartbeats, expiry and topic routes.

``RouteInfoManager`` is the pure state machine; ``NamesrvServer`` wires it to the remoting
transport; ``run_namesrv`` is the CLI entry point.
"""

from broker_store.namesrv.route_info import BrokerKey, RegisteredBroker, RegisterResult, RouteInfoManager
from broker_store.namesrv.server import NamesrvServer, run_namesrv

__all__ = [
    "BrokerKey",
    "RegisteredBroker",
    "NamesrvServer",
    "RegisterResult",
    "RouteInfoManager",
    "run_namesrv",
]
