"""High availability of a broker group: CommitLog shipping from primary to replicas and quorum acks.

One module per moving part (docs/architecture.md, "Replication and quorum writes")::

    wire.py            the classic shipping wire format and its incremental decoders (bytes only)
    errors.py          HA's error classes, under broker_store's one root
    settings.py        the ``ha:`` settings section (roles, quorum sizes, intervals, limits)
    replica_links.py   pure state: connected replicas, their acks, dead-link expiry
    ack_tracker.py     pure state: puts waiting for replica acks (pipelined, ordered, timed out)
    store_view.py      the store-like Protocols the I/O services read and write through
    quorum.py          pure state: needAck rules and the front over replica_links + ack_tracker
    replica_start.py   pure decision: where a replica starts following the primary's log
    replica_read.py    pure decision: which group member a consumer pulls from next (slave reads)
    primary_service.py asyncio: HA port listener, one shipping stream per replica, acks -> quorum
    replica_client.py  asyncio: connect, report, append batches, reconnect and resume

Controller mode (``enable_controller_mode``; selected on both ends, the classic link is untouched)::

    wire_epoch.py             RocketMQ 5's AutoSwitch layouts (handshakes, 36-byte transfer header, acks)
    epoch_start.py            pure decision: consistent point, truncate and follow, or refuse
    sync_state_set.py         pure state: SyncStateSet join/leave, the union during an alter, confirm offset
    epoch_primary_service.py  asyncio: the primary side over wire_epoch, driving the SyncStateSet
    epoch_replica_client.py   asyncio: handshake, crash-safe truncation (store.epoch_store), follow

The broker wires these in (send path awaiting acks, role changes, controller epochs); nothing here
imports the broker.
"""
