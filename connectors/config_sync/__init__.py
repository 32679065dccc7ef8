"""The config connector (RIP-45 ConfigConnector): topic configuration and subscription groups copied from a
link's source cluster to its target under the link's topic mapping. ``plan`` holds the pure rules (never
shrink, deletion only when enabled), ``standing`` which changes are recorded and which stay pending (pure),
``state`` reads a cluster, ``applier`` applies and records, ``creation`` applies the create rule for the
replication planner (``jobs/run_all.py``), and ``data_source`` is the thin Spark pair."""
