"""The heartbeat connector's pure parts: the schedule (polling core), the message format, the per-link
monitor (lag, age, p99, STARTING / OK / LAGGING / BROKEN / IDLE), the topic mapping rule and the config
sections.
Time is a fake clock advanced by hand."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.core.config import parse_replicator_config
from connectors.core.errors import ReplicatorConfigError
from connectors.core.monitoring import HEARTBEAT_TOPIC, STALE_INTERVALS
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from connectors.heartbeat.monitor import HeartbeatMonitor, LinkStatus, percentile
from connectors.heartbeat.records import Heartbeat, HeartbeatFormatError, Observed
from connectors.heartbeat.schedule import HeartbeatSchedule, ScheduleState, Tick
from tests.support.clocks import MillisClock

# -- schedule ------------------------------------------------------------------------------------

def test_one_tick_per_interval_and_none_in_between() -> None:
    clock = MillisClock()
    schedule = HeartbeatSchedule(10_000, clock)
    state = schedule.initial_state()
    tick, state = schedule.next_item(state)
    assert tick == Tick(0, clock.now_ms)  # the first one at once
    assert schedule.next_item(state) == (None, state)
    clock.advance(9_999)
    assert schedule.next_item(state)[0] is None
    clock.advance(1)
    tick, state = schedule.next_item(state)
    assert tick is not None and tick.seq == 1
    assert state.seq == 2 and state.due_ms == tick.due_ms + 10_000  # no drift: due times stay on the grid


def test_missed_ticks_are_skipped_not_burst() -> None:
    clock = MillisClock()
    schedule = HeartbeatSchedule(1_000, clock)
    _, state = schedule.next_item(schedule.initial_state())
    clock.advance(60_000)  # the job was down for a minute
    tick, state = schedule.next_item(state)
    assert tick is not None and tick.seq == 1
    assert schedule.next_item(state)[0] is None  # no catch-up burst
    assert state.due_ms == clock.now_ms + 1_000


def test_resume_state_round_trips_and_rereads_the_same_ticks() -> None:
    clock = MillisClock()
    schedule = HeartbeatSchedule(1_000, clock)
    start = ScheduleState(41, clock.now_ms - 5)
    tick, end = schedule.next_item(start)
    assert ScheduleState.from_offset(end.to_offset()) == end
    assert schedule.ticks_between(start, end) == [tick]
    assert schedule.ticks_between(end, end) == []
    with pytest.raises(ValueError, match="not a heartbeat schedule offset"):
        ScheduleState.from_offset({"seq": "x"})


# -- format --------------------------------------------------------------------------------------

def test_heartbeat_body_round_trips_and_rejects_other_formats() -> None:
    hb = Heartbeat("l1", 7, 1_700_000_000_123, "src", "dst")
    assert Heartbeat.decode(hb.encode()) == hb
    assert hb.keys == "l1:7"
    for bad in (b"not json", b'{"v": 2, "link": "l1"}', b'{"v": 1, "link": "l1"}', b"[1]"):
        with pytest.raises(HeartbeatFormatError):
            Heartbeat.decode(bad)


# -- monitor -------------------------------------------------------------------------------------

INTERVAL = 1_000
STARTUP_LIMIT = 120 * INTERVAL


def observed(link: str, seq: int, born_ms: int, lag_ms: int) -> Observed:
    return Observed(Heartbeat(link, seq, born_ms, "src", "dst"), born_ms + lag_ms, f"{HEARTBEAT_TOPIC}/b/0", seq)


def make_monitor(clock: MillisClock, links: tuple[str, ...] = ("l1",), *,
                 startup_limit_ms: int = 0) -> HeartbeatMonitor:
    """A monitor on ``clock``; by default with no start-up grace beyond the 3 intervals (the age rules)."""
    return HeartbeatMonitor(links, interval_ms=INTERVAL, lagging_threshold_ms=500, stale_intervals=STALE_INTERVALS,
                            startup_limit_ms=startup_limit_ms, clock=clock)


def test_lag_born_arrival_last_seen_and_ok() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock)
    assert monitor.state("l1").status is LinkStatus.STARTING
    born = clock.now_ms
    clock.advance(120)
    kept = monitor.on_arrived([observed("l1", 0, born, 80), observed("other", 0, born, 5)])
    assert [o.heartbeat.link for o in kept] == ["l1"]  # links not monitored are not recorded
    s = monitor.state("l1")
    assert (s.status, s.seq, s.born_ms, s.arrived_ms, s.lag_ms, s.last_seen_ms, s.age_ms) == (
        LinkStatus.OK, 0, born, born + 80, 80, clock.now_ms, 120)


def test_lagging_above_threshold() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock)
    monitor.on_arrived([observed("l1", 0, clock.now_ms - 700, 700)])
    assert monitor.state("l1").status is LinkStatus.LAGGING


def test_missing_heartbeats_while_the_source_produces_is_broken() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock)
    monitor.on_arrived([observed("l1", 0, clock.now_ms, 10)])
    for seq in range(1, STALE_INTERVALS + 1):  # the source keeps producing, nothing arrives
        clock.advance(INTERVAL)
        monitor.on_produced([observed("l1", seq, clock.now_ms, 0)])
    assert monitor.state("l1").status is LinkStatus.OK  # exactly 3 intervals: not stale yet
    clock.advance(1)
    state = monitor.state("l1")
    assert state.age_ms > STALE_INTERVALS * INTERVAL
    assert state.status is LinkStatus.BROKEN


def test_nothing_produced_is_idle_not_broken() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock)
    monitor.on_produced([observed("l1", 0, clock.now_ms, 0)])
    monitor.on_arrived([observed("l1", 0, clock.now_ms, 10)])
    clock.advance(STALE_INTERVALS * INTERVAL + 1)  # the heartbeat producer stopped
    assert monitor.state("l1").status is LinkStatus.IDLE
    # it produces again, but the link does not carry it: broken
    monitor.on_produced([observed("l1", 5, clock.now_ms, 0)])
    assert monitor.state("l1").status is LinkStatus.BROKEN


def test_never_arrived_is_broken_when_produced_and_idle_otherwise() -> None:
    clock = MillisClock()
    produced, silent = make_monitor(clock), make_monitor(clock)
    clock.advance(STALE_INTERVALS * INTERVAL + 1)
    produced.on_produced([observed("l1", 0, clock.now_ms - 100, 0)])
    assert produced.state("l1").status is LinkStatus.BROKEN
    assert silent.state("l1").status is LinkStatus.IDLE


def flow(monitor: HeartbeatMonitor, clock: MillisClock, link: str, intervals: int, *, lag_ms: int = 100) -> None:
    """``intervals`` intervals of a running link: one heartbeat each, produced and arriving ``lag_ms`` later."""
    for _ in range(intervals):
        clock.advance(INTERVAL)
        monitor.on_produced([observed(link, clock.now_ms, clock.now_ms - lag_ms, 0)])
        monitor.on_arrived([observed(link, clock.now_ms, clock.now_ms - lag_ms, lag_ms)])


def test_starting_until_the_first_heartbeat_then_broken_once_the_startup_limit_passed() -> None:
    """Start-up (docs/operations.md, "Monitoring"): the heartbeat query produces well before the replication carries
    anything (Spark starting). That is STARTING for the whole start-up limit, not BROKEN after 3 intervals."""
    clock = MillisClock()
    monitor = make_monitor(clock, ("l1", "l2"), startup_limit_ms=STARTUP_LIMIT)
    started = clock.now_ms
    for seq in range(STARTUP_LIMIT // INTERVAL):  # l1's source produces every interval, nothing arrives
        clock.advance(INTERVAL)
        monitor.on_produced([observed("l1", seq, clock.now_ms, 0)])
        assert monitor.state("l1").status is LinkStatus.STARTING, seq
    assert clock.now_ms == started + STARTUP_LIMIT  # exactly at the limit: still starting
    assert monitor.state("l1").age_ms == STARTUP_LIMIT  # the age counts from the monitor's start
    assert monitor.state("l2").status is LinkStatus.STARTING
    clock.advance(1)
    assert monitor.state("l1").status is LinkStatus.BROKEN  # the rules of before, once the limit passed
    assert monitor.state("l2").status is LinkStatus.IDLE  # nothing produced for l2


def test_a_link_warming_up_is_starting_until_its_heartbeats_flow_for_three_intervals() -> None:
    """Measured on jobs/run_all.py with 1 s heartbeats: the first heartbeats arrive late, then seconds apart
    while the queries warm up. Within the start-up limit that is STARTING; once they have arrived in time
    for 3 intervals in a row the link has started up, and a gap is BROKEN as before."""
    clock = MillisClock()
    monitor = make_monitor(clock, startup_limit_ms=STARTUP_LIMIT)
    clock.advance(20 * INTERVAL)
    monitor.on_arrived([observed("l1", 0, clock.now_ms - 5 * INTERVAL, 5 * INTERVAL - 100)])  # born at start-up
    s = monitor.state("l1")
    assert (s.status, s.age_ms, s.seq) == (LinkStatus.STARTING, 5 * INTERVAL, 0)
    clock.advance(INTERVAL)
    monitor.on_arrived([observed("l1", 6, clock.now_ms - STALE_INTERVALS * INTERVAL, 100)])  # just in time
    assert monitor.state("l1").status is LinkStatus.OK
    clock.advance(1)
    assert monitor.state("l1").status is LinkStatus.STARTING  # one arrival in time is no flow yet
    flow(monitor, clock, "l1", STALE_INTERVALS - 1)
    assert monitor.state("l1").status is LinkStatus.OK
    clock.advance(STALE_INTERVALS * INTERVAL)
    assert monitor.state("l1").status is LinkStatus.STARTING  # 2 intervals of flow: not started up yet
    flow(monitor, clock, "l1", STALE_INTERVALS + 1)  # a new run, 3 intervals long: started up
    clock.advance(STALE_INTERVALS * INTERVAL - 100)
    monitor.on_produced([observed("l1", 99, clock.now_ms, 0)])
    assert monitor.state("l1").status is LinkStatus.OK
    clock.advance(1)
    assert monitor.state("l1").status is LinkStatus.BROKEN  # started up: 3 intervals without one is stale


def test_each_link_starts_up_on_its_own() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock, ("l1", "l2"), startup_limit_ms=STARTUP_LIMIT)
    clock.advance(10 * INTERVAL)
    flow(monitor, clock, "l1", STALE_INTERVALS + 1)
    assert monitor.state("l1").status is LinkStatus.OK
    assert monitor.state("l2").status is LinkStatus.STARTING  # nothing of l2 yet
    clock.advance(STALE_INTERVALS * INTERVAL - 100)  # l1's heartbeats stop (l2's have never come)
    assert (monitor.state("l1").status, monitor.state("l2").status) == (LinkStatus.OK, LinkStatus.STARTING)
    clock.advance(1)
    assert (monitor.state("l1").status, monitor.state("l2").status) == (LinkStatus.IDLE, LinkStatus.STARTING)
    monitor.on_arrived([observed("l2", 0, clock.now_ms - 30, 30)])
    assert monitor.state("l2").status is LinkStatus.OK


def test_heartbeats_that_only_ever_arrive_late_are_broken_once_the_startup_limit_passed() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock, startup_limit_ms=STARTUP_LIMIT)
    for seq in range(STARTUP_LIMIT // INTERVAL):
        clock.advance(INTERVAL)
        monitor.on_produced([observed("l1", seq + 5, clock.now_ms, 0)])
        monitor.on_arrived([observed("l1", seq, clock.now_ms - 5 * INTERVAL, 10)])
    assert monitor.state("l1").status is LinkStatus.STARTING
    clock.advance(1)
    assert monitor.state("l1").status is LinkStatus.BROKEN


def test_a_startup_limit_below_three_intervals_keeps_the_three_interval_grace() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock, startup_limit_ms=1)
    assert monitor.startup_limit_ms == STALE_INTERVALS * INTERVAL == make_monitor(clock).startup_limit_ms
    clock.advance(STALE_INTERVALS * INTERVAL)
    assert monitor.state("l1").status is LinkStatus.STARTING
    clock.advance(1)
    assert monitor.state("l1").status is LinkStatus.IDLE


def test_p99_over_the_last_hour_and_out_of_order_arrivals() -> None:
    clock = MillisClock()
    monitor = make_monitor(clock)
    monitor.on_arrived([observed("l1", 0, clock.now_ms, 5_000)])  # an old spike
    clock.advance(3_600_001)
    monitor.on_arrived([observed("l1", i, clock.now_ms - 10 * i, i) for i in range(1, 101)])
    state = monitor.state("l1")
    assert state.lag_p99_ms == 99  # the spike fell out of the window
    assert state.seq == 1  # newest by born time, whatever the order of arrival
    first = state.arrived_ms
    monitor.on_arrived([observed("l1", 1, clock.now_ms - 10, 700)])  # a re-sent copy, later
    assert monitor.state("l1").arrived_ms == first  # the first arrival measures the path
    assert percentile([], 0.99) is None
    assert percentile([3], 0.5) == 3
    assert percentile(list(range(1, 11)), 0.5) == 5


# -- topic mapping and config ----------------------------------------------------------------------

def test_every_link_replicates_the_heartbeat_topic_under_its_own_name() -> None:
    for mapping in ({"explicit": [{"source": "Orders"}]}, {"include": ["Metrics_.*"], "exclude": [".*"]},
                    {"all_topics": True}):
        mapper = TopicMapper(TopicMappingConfig.model_validate(mapping))
        assert mapper.target_for(HEARTBEAT_TOPIC) == HEARTBEAT_TOPIC
        assert mapper.target_for("rmq_sys_other") is None
        assert HEARTBEAT_TOPIC not in mapper.missing_explicit([])  # absent on the source: nothing to report


def _config(**extra: Any) -> dict[str, Any]:
    return {"clusters": [{"name": "a", "namesrv": "127.0.0.1:1"}, {"name": "b", "namesrv": "127.0.0.1:2"}],
            "links": [{"name": "l1", "source": "a", "target": "b", "topics": {"explicit": [{"source": "T"}]},
                       "checkpoint_location": "c", "delta_location": "d"}], **extra}


def test_heartbeat_and_metrics_sections() -> None:
    default = parse_replicator_config(_config())
    assert default.heartbeat.interval == 10.0 and default.metrics.port == 9464
    config = parse_replicator_config(_config(heartbeat={"interval": "1 second", "lagging_threshold": "500 ms"},
                                             metrics={"port": 0}))
    assert config.heartbeat.interval_ms == 1000 and config.heartbeat.stale_after == 3.0
    assert config.heartbeat.lagging_threshold == 0.5 and config.metrics.port == 0
    with pytest.raises(ReplicatorConfigError, match=r"heartbeat\.interval: must be >= 1 second"):
        parse_replicator_config(_config(heartbeat={"interval": "500 ms"}), file="r.yaml")
    with pytest.raises(ReplicatorConfigError, match=r"metrics\.port"):
        parse_replicator_config(_config(metrics={"port": 70000}))
    assert default.heartbeat.startup_limit == 120.0
    assert config.heartbeat.startup_limit_ms == 120_000
    slow = parse_replicator_config(_config(heartbeat={"startup_limit": "5 minutes"}))
    assert slow.heartbeat.startup_limit_ms == 300_000
    for bad, reason in ((0, "must be > 0"), ("soon", "is not a duration")):
        with pytest.raises(ReplicatorConfigError, match=rf"r\.yaml: heartbeat\.startup_limit: .*{reason}"):
            parse_replicator_config(_config(heartbeat={"startup_limit": bad}), file="r.yaml")
    with pytest.raises(ReplicatorConfigError, match=r"metrics\.prot: unknown key"):
        parse_replicator_config(_config(metrics={"prot": 1}))


def test_the_heartbeat_topic_cannot_be_renamed() -> None:
    data = _config()
    data["links"][0]["topics"] = {"explicit": [{"source": HEARTBEAT_TOPIC, "target": "Other"}]}
    with pytest.raises(ReplicatorConfigError, match="cannot be renamed"):
        parse_replicator_config(data)
