"""The config connector (RIP-45 ConfigConnector): topic configuration and subscription groups copied from a
link's source cluster to its target under the link's topic mapping. ``plan`` holds the pure rules (never
shrink, deletion only when enabled), ``state`` reads a cluster, ``applier`` applies and records, and
``data_source`` is the thin Spark pair."""
