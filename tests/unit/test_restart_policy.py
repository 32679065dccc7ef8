"""up's restart rule without processes: which exits restart, the back-off series and its reset, an operator's
restart; and restart-member's refusal of a name the run directory does not hold. The supervisor around it runs
real children in tests/integration/test_up_restarts.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.config import BrokerSettings, NamesrvConfig
from broker_store.deploy.up_supervisor import request_restart
from broker_store.restart_policy import BackOff, RestartMode, RestartPolicy


def test_on_failure_restarts_crashes_with_growing_delays_up_to_the_cap() -> None:
    policy = RestartPolicy(RestartMode.ON_FAILURE, BackOff(initial_s=0.5, factor=2.0, max_s=3.0, stable_after_s=60))
    policy.started(0.0)
    delays = []
    now = 1.0
    for _ in range(6):  # crashes at start-up, one after the other
        when = policy.exited(-9, now)
        assert when is not None
        delays.append(when - now)
        now = when
        policy.started(now)
        now += 1.0
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert policy.failures == 6


def test_a_run_longer_than_stable_after_starts_the_series_again() -> None:
    policy = RestartPolicy(RestartMode.ON_FAILURE, BackOff(initial_s=0.5, stable_after_s=60))
    policy.started(0.0)
    assert policy.exited(1, 10.0) == 10.5
    policy.started(10.5)
    assert policy.exited(1, 11.0) == 12.0  # the second in a row waits longer
    policy.started(12.0)
    assert policy.exited(-9, 72.0) == 72.5  # it had run 60 s: a fresh series
    assert policy.failures == 1


@pytest.mark.parametrize(("mode", "code"), [(RestartMode.NO, -9), (RestartMode.NO, 1), (RestartMode.ON_FAILURE, 0)])
def test_restart_no_and_a_clean_exit_leave_the_member_down(mode: RestartMode, code: int) -> None:
    policy = RestartPolicy(mode)
    policy.started(0.0)
    assert policy.exited(code, 5.0) is None


def test_an_operators_restart_resets_the_series() -> None:
    policy = RestartPolicy(RestartMode.ON_FAILURE, BackOff(initial_s=1.0))
    policy.started(0.0)
    for t in (1.0, 3.0, 7.0):
        policy.exited(-9, t)
    policy.requested()
    assert policy.exited(-9, 20.0) == 21.0


def test_brokers_and_name_servers_restart_on_failure_unless_told_no() -> None:
    assert BrokerSettings(broker_name="b", store_dir=Path("s")).restart is RestartMode.ON_FAILURE
    assert NamesrvConfig().restart is RestartMode.ON_FAILURE
    told = BrokerSettings.model_validate({"broker_name": "b", "store_dir": "s", "restart": "no"})
    assert told.restart is RestartMode.NO
    with pytest.raises(ValueError, match="on-failure"):
        BrokerSettings.model_validate({"broker_name": "b", "store_dir": "s", "restart": "always"})


def test_restart_member_names_the_members_it_knows(tmp_path: Path) -> None:
    (tmp_path / "broker-a.pid").write_text("123\n")
    (tmp_path / "c1-namesrv.pid").write_text("124\n")
    with pytest.raises(ValueError, match=r"no member 'broker-b' \(members: broker-a, c1-namesrv\)"):
        request_restart(tmp_path, "broker-b")
    assert not (tmp_path / "broker-b.restart").exists()


def test_restart_member_gives_up_when_no_up_answers(tmp_path: Path) -> None:
    (tmp_path / "broker-a.pid").write_text("123\n")
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    with pytest.raises(TimeoutError, match="is up running with --run-dir"):
        request_restart(tmp_path, "broker-a", 1.0, now=lambda: clock[0], sleep=sleep)
    assert not (tmp_path / "broker-a.restart").exists()  # the request is withdrawn
