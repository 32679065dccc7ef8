"""Running the brokers as processes: ``launcher`` (supervised child processes on loopback, used by ``up``, the
tests' harness and the benchmarks), ``up`` and ``up_supervisor`` (``python -m broker_store up``: every process of
a local-clusters file, restarted by its ``restart_policy``), and ``image`` / ``image_constraints`` (the container
tier's image and its pins).

Nothing is imported here: ``python -m broker_store image ...`` loads neither the launcher nor the settings.
"""
