"""Connection hygiene decisions (``net.hygiene``), without a socket: idle and partial-frame deadlines, the
connection and in-flight caps. The server applying them over loopback is tests/integration/test_connection_hygiene.py.
"""

from __future__ import annotations

from broker_store.net.hygiene import (
    OVERLOAD,
    ConnectionLimits,
    close_reason,
    connection_overload,
    request_overload,
)

LIMITS = ConnectionLimits(max_idle_seconds=120, partial_frame_seconds=30, max_connections=2, max_requests_in_flight=3)


def test_an_idle_connection_closes_at_its_deadline_unless_a_request_is_in_flight() -> None:
    assert close_reason(LIMITS, 1119.9, last_activity=1000, partial_since=None, in_flight=0) is None
    reason = close_reason(LIMITS, 1120, last_activity=1000, partial_since=None, in_flight=0)
    assert reason is not None and "server_channel_max_idle_seconds 120" in reason
    assert close_reason(LIMITS, 5000, last_activity=1000, partial_since=None, in_flight=1) is None  # a held pull


def test_an_incomplete_frame_closes_its_connection_after_the_partial_frame_deadline() -> None:
    assert close_reason(LIMITS, 1029, last_activity=1029, partial_since=1000, in_flight=0) is None
    reason = close_reason(LIMITS, 1030, last_activity=1029, partial_since=1000, in_flight=1)
    assert reason is not None and "still incomplete" in reason
    # held by the server (its peer reads its answers slowly): the peer cannot complete the frame meanwhile
    assert close_reason(LIMITS, 5000, last_activity=1029, partial_since=1000, in_flight=1, reading=False) is None


def test_rules_set_to_none_are_off() -> None:
    off = ConnectionLimits(None, None, None, None)
    assert not off.sweeps
    assert close_reason(off, 1e9, last_activity=0, partial_since=0, in_flight=0) is None
    assert connection_overload(off, 10**6) is None and request_overload(off, 10**6) is None


def test_caps_answer_overload_remarks_naming_the_setting() -> None:
    assert connection_overload(LIMITS, 1) is None
    remark = connection_overload(LIMITS, 2)
    assert remark is not None and remark.startswith(OVERLOAD) and "server_max_connections 2" in remark
    assert request_overload(LIMITS, 2) is None
    remark = request_overload(LIMITS, 3)
    assert remark is not None and remark.startswith(OVERLOAD) and "server_max_requests_in_flight 3" in remark


def test_sweep_interval_is_a_quarter_of_the_shortest_deadline_within_bounds() -> None:
    assert LIMITS.sweep_interval() == 5.0
    assert ConnectionLimits(max_idle_seconds=8, partial_frame_seconds=None).sweep_interval() == 2.0
    assert ConnectionLimits(max_idle_seconds=0.01, partial_frame_seconds=None).sweep_interval() == 0.05
