"""The heartbeat connector (RIP-45's HeartbeatConnector): each link's heartbeat, produced on its source
cluster, replicated by the link like any topic, and watched on its target. Modules, pure unless noted:

* ``records``      the heartbeat message (body format) and what the monitor observes
* ``schedule``     the polling core: the next heartbeat per interval, resume state explicit
* ``monitor``      per-link state on the target: born / arrival time, lag, last seen, status
* ``reader`` / ``writer`` / ``data_source``  the ``rmq_heartbeat`` Spark data source (Spark)
* ``tail``         pulls new heartbeats of a cluster's heartbeat topic (a broker)
* ``tables``       the Delta ``heartbeats`` table of each link (deltalake)
* ``monitor_loop`` the driver thread that feeds ``monitor`` from both clusters' tails (a broker)

Imports ``connectors.core`` only; the replication package knows nothing of it (the heartbeat topic is
replicated through ``connectors.core.topic_mapping``).
"""
