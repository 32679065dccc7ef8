"""RoleState: the broker's runtime role, changed in one place, with listeners told of each change."""

from __future__ import annotations

from broker_store.broker import BrokerRole, RoleState


def test_role_from_configured_id_and_change_role() -> None:
    primary, replica = RoleState(0), RoleState(2)
    assert primary.is_primary and primary.broker_id == 0
    assert replica.role is BrokerRole.REPLICA and replica.broker_id == 2
    seen: list[tuple[BrokerRole, BrokerRole]] = []
    replica.listeners.append(lambda old, new: seen.append((old, new)))
    replica.change_role(BrokerRole.PRIMARY)
    replica.change_role(BrokerRole.PRIMARY)  # no change, no notification
    assert replica.is_primary and replica.broker_id == 0
    primary.listeners.append(lambda old, new: seen.append((old, new)))
    primary.change_role(BrokerRole.REPLICA)
    assert primary.broker_id == 1  # a primary configured as id 0 registers as replica 1
    assert seen == [(BrokerRole.REPLICA, BrokerRole.PRIMARY), (BrokerRole.PRIMARY, BrokerRole.REPLICA)]
