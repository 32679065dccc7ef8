"""Controller mode (RocketMQ 5): the controller elects a broker group's primary from its SyncStateSet, keeps
epochs and broker ids, and tells brokers their role. Pure rules over a narrow state store
(``state_store``: an embedded file store inside the name server by default, etcd when controllers are
replicated); the remoting processor and timers around them are thin."""
