"""How loudly a replica reports its HA link's end (issue 18): the primary closing a link that was up is INFO (every
clean stop of a primary, e.g. ``up``'s shutdown, looks so); a dead link or failed attempts are WARNING once per run,
DEBUG for the repeats."""

from __future__ import annotations

import logging

from broker_store.ha.errors import HALinkClosedError, HALinkError
from broker_store.ha.replica_client import link_end_level

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
