"""Answer flow control and per-pass fairness of a remoting server connection (``net.answer_flow``), without a
socket. The server applying them over loopback is tests/integration/test_connection_hygiene.py."""

from __future__ import annotations

import socket

import pytest

from broker_store.net.answer_flow import DEFAULT_FLOW, AnswerFlow, Hold

FLOW = AnswerFlow(max_queued_answer_bytes=1000, max_requests_per_pass=4, kernel_unsent_bytes=2048)


def test_a_request_runs_while_answers_are_taken_and_the_connection_has_turns_left() -> None:
    assert FLOW.hold(queued_bytes=0, writer_paused=False, run_this_pass=0) is None
    assert FLOW.hold(queued_bytes=999, writer_paused=False, run_this_pass=3) is None


def test_answers_left_untaken_hold_the_next_request_until_they_drain() -> None:
    assert FLOW.hold(queued_bytes=1000, writer_paused=False, run_this_pass=0) is Hold.ANSWERS
    assert FLOW.hold(queued_bytes=0, writer_paused=True, run_this_pass=0) is Hold.ANSWERS  # the transport is full


def test_a_connection_yields_the_loop_after_its_requests_of_one_pass() -> None:
    assert FLOW.hold(queued_bytes=0, writer_paused=False, run_this_pass=4) is Hold.TURN
    # a peer that does not read waits for its drain, not for its next turn
    assert FLOW.hold(queued_bytes=5000, writer_paused=False, run_this_pass=4) is Hold.ANSWERS


def test_no_per_pass_limit_when_off() -> None:
    unlimited = AnswerFlow(max_requests_per_pass=None)
    assert unlimited.hold(queued_bytes=0, writer_paused=False, run_this_pass=10**6) is None


def test_the_kernel_holds_at_most_kernel_unsent_bytes_of_unsent_answers() -> None:
    if not hasattr(socket, "TCP_NOTSENT_LOWAT"):
        assert FLOW.socket_options() == []
        return
    assert FLOW.socket_options() == [(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 2048)]
    assert AnswerFlow(kernel_unsent_bytes=None).socket_options() == []


def test_defaults() -> None:
    assert DEFAULT_FLOW.max_requests_per_pass == 16  # Netty's maxMessagesPerRead
    assert DEFAULT_FLOW.max_queued_answer_bytes == 256 * 1024


@pytest.mark.parametrize("field", ["max_queued_answer_bytes", "max_requests_per_pass", "kernel_unsent_bytes",
                                   "max_decoded_ahead"])
def test_a_bound_that_is_not_positive_is_refused_by_name(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        AnswerFlow(**{field: 0})
