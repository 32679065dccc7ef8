"""How loudly a replica reports its HA link's end: the primary closing a link that was up is INFO (every
clean stop of a primary, e.g. ``up``'s shutdown, looks so); a dead link or failed attempts are WARNING once per run,
DEBUG for the repeats. A damaged record the primary sends on every reconnect is a WARNING when it starts
and an INFO when it clears (the ReplicaClient doing so: tests/integration/test_ha_link_timers.py)."""

from __future__ import annotations

import logging

from broker_store.ha.errors import HALinkClosedError, HALinkError
from broker_store.ha.replica_client import DamageReport, link_end_level
from broker_store.protocol.errors import RefusedRecordError

CLOSED = HALinkClosedError("the primary closed the link")
DEAD = HALinkError("nothing from the primary for 20 s: dead link")
REFUSED = HALinkError("cannot connect to the primary's HA port 127.0.0.1:10912: Connection refused")


def test_a_link_the_primary_closed_is_info() -> None:
    assert link_end_level(CLOSED, was_up=True, failures_in_row=0) == logging.INFO


def test_a_dead_link_or_the_first_failed_attempt_is_a_warning_and_the_repeats_debug() -> None:
    assert link_end_level(DEAD, was_up=True, failures_in_row=0) == logging.WARNING
    assert link_end_level(REFUSED, was_up=False, failures_in_row=1) == logging.WARNING  # e.g. the primary crashed
    assert link_end_level(REFUSED, was_up=False, failures_in_row=2) == logging.DEBUG
    # closed before the session came up (during the handshake): a failed attempt, not a stop
    assert link_end_level(CLOSED, was_up=False, failures_in_row=1) == logging.WARNING


def refused(offset: int, end: int) -> RefusedRecordError:
    return RefusedRecordError(f"refused a damaged record from the primary at commit log offset {offset}",
                              offset=offset, end=end)


def test_a_damaged_record_sent_again_every_reconnect_is_a_warning_once_and_its_end_an_info() -> None:
    report = DamageReport()
    assert report.refused(refused(100, 400)) == logging.WARNING
    assert report.refused(refused(100, 400)) == logging.DEBUG  # the reconnect a second later meets it again
    assert report.progressed(100) is None and report.progressed(399) is None  # a start of it is not it
    assert report.refused(refused(100, 400)) == logging.DEBUG
    assert report.progressed(400) is not None  # taken intact: cleared once
    assert report.standing is None and report.progressed(500) is None
    assert report.refused(refused(100, 400)) == logging.WARNING  # damaged again later: a new report


def test_damage_at_another_offset_is_reported_anew() -> None:
    report = DamageReport()
    assert report.refused(refused(100, 400)) == logging.WARNING
    assert report.refused(refused(900, 1200)) == logging.WARNING
