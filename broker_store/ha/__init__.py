"""High availability of a broker group: CommitLog shipping from primary to replicas and quorum acks.

One module per moving part (DESIGN.md, "Replication and quorum writes")::

    wire.py            the classic shipping wire format and its incremental decoders (bytes only)
    errors.py          HA's error classes, under broker_store's one root
    settings.py        the ``ha:`` settings section (roles, quorum sizes, intervals, limits)
    clock.py           the injectable monotonic clock the state machines read
    quorum.py          pure state: needAck rules, alive-replica accounting, the ack tracker
    replica_start.py   pure decision: where a replica starts following the primary's log
    primary_service.py asyncio: HA port listener, one shipping stream per replica, acks -> quorum
    replica_client.py  asyncio: connect, report, append batches, reconnect and resume

The broker wires these in (send path awaiting acks, role changes, controller epochs); nothing here
imports the broker.
"""
