"""Reads from replicas: the slow-consumer test and the pull suggestion table (RocketMQ's rules)."""

from __future__ import annotations

import pytest

from broker_store.ha.replica_read import PullRouting, consuming_slowly, route_pull
from broker_store.ha.settings import HASettings


def test_slow_means_further_behind_than_the_memory_share() -> None:
    gap = HASettings(memory_basis_bytes=10_000).max_in_memory_gap()   # 40 % of 10 000
    assert gap == 4000
    assert not consuming_slowly(max_physical_offset_lag=4000, max_in_memory_gap=gap)
    assert consuming_slowly(max_physical_offset_lag=4001, max_in_memory_gap=gap)


@pytest.mark.parametrize(("replica", "read_enable", "slow", "expected"), [
    (False, False, False, PullRouting(0, False)),
    (False, False, True, PullRouting(0, False)),     # reads from replicas off: always the primary
    (True, False, False, PullRouting(0, True)),      # a replica that may not serve: retry at the primary
    (True, False, True, PullRouting(0, True)),
    (False, True, True, PullRouting(1, False)),      # slow consumer: the group's whichBrokerWhenConsumeSlowly
    (False, True, False, PullRouting(0, False)),     # fast again: back to the group's brokerId (0)
    (True, True, True, PullRouting(1, False)),
    (True, True, False, PullRouting(0, False)),
])
def test_route_pull_table(replica: bool, read_enable: bool, slow: bool, expected: PullRouting) -> None:
    assert route_pull(is_replica=replica, slave_read_enable=read_enable, slow=slow) == expected


def test_group_settings_are_honoured() -> None:
    assert route_pull(is_replica=False, slave_read_enable=True, slow=True,
                      which_broker_when_consume_slowly=2).suggest_which_broker_id == 2
    assert route_pull(is_replica=True, slave_read_enable=True, slow=False,
                      group_broker_id=1).suggest_which_broker_id == 1
