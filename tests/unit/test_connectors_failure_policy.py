"""Failure policy: dismiss, custom hook verdicts (True / False / raise / non-bool), hook loading errors."""

from __future__ import annotations

import pytest

from connectors.core.config import FailurePolicy, LinkConfig
from connectors.core.errors import BatchFailedError, FailureHookError
from connectors.replication.failure_policy import FailurePolicyRunner, apply_failure_policy, load_failure_hook
from connectors.replication.records import FailedMessage, FailureOutcome

SEEN: list[list[FailedMessage]] = []
NOT_CALLABLE = 42


def dismiss_all(failures: list[FailedMessage]) -> bool:
    SEEN.append(failures)
    return True


def fail_batch(failures: list[FailedMessage]) -> bool:
    return False


def explode(failures: list[FailedMessage]) -> bool:
    raise RuntimeError("hook is down")


def undecided(failures: list[FailedMessage]) -> None:
    return None


class Hooks:
    @staticmethod
    def dismiss(failures: list[FailedMessage]) -> bool:
        return True


HERE = __name__


def failed(offset: int) -> FailedMessage:
    return FailedMessage("Orders", "src-a", 1, offset, f"ID{offset}", "OrdersDR", b"x", {"K": "v"},
                         "SystemBusyError: busy", 4)


BATCH = [failed(10), failed(11)]


def test_dismiss_never_calls_a_hook() -> None:
    decision = apply_failure_policy(FailurePolicy.DISMISS, BATCH)
    assert decision.outcomes == (FailureOutcome.DISMISSED,) * 2 and not decision.batch_failed
    decision.raise_if_failed(link="l", batch_id=1)
    assert [r.outcome for r in decision.recorded()] == [FailureOutcome.DISMISSED] * 2
    assert decision.recorded()[0].policy == "dismiss"


def test_custom_hook_true_dismisses_with_every_failed_message() -> None:
    SEEN.clear()
    decision = apply_failure_policy(FailurePolicy.CUSTOM, BATCH, load_failure_hook(f"{HERE}:dismiss_all"))
    assert not decision.batch_failed
    assert SEEN == [BATCH]
    assert apply_failure_policy(FailurePolicy.CUSTOM, [], dismiss_all).outcomes == ()
    assert SEEN == [BATCH]   # not called for a batch without failures


@pytest.mark.parametrize(("hook", "reason"), [
    (fail_batch, "returned False"),
    (explode, "raised RuntimeError: hook is down"),
    (undecided, "returned None"),
])
def test_custom_hook_fails_the_batch(hook: object, reason: str) -> None:
    decision = apply_failure_policy(FailurePolicy.CUSTOM, BATCH, hook)  # type: ignore[arg-type]
    assert decision.outcomes == (FailureOutcome.FAILED_BATCH,) * 2
    with pytest.raises(BatchFailedError, match=reason) as info:
        decision.raise_if_failed(link="ab", batch_id=7)
    assert info.value.failed == ("Orders/src-a/1@10", "Orders/src-a/1@11")
    assert "link 'ab' batch 7" in str(info.value)
    if hook is explode:
        assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(("spec", "needle"), [
    ("no_such_module_xyz:fn", "cannot import module"),
    (f"{HERE}:missing", "has no attribute"),
    (f"{HERE}:NOT_CALLABLE", "not a callable"),
    ("not a spec", "is not"),
])
def test_hook_loading_errors(spec: str, needle: str) -> None:
    with pytest.raises(FailureHookError, match=needle) as info:
        load_failure_hook(spec)
    assert info.value.field == "failure_hook"


def test_runner_loads_dotted_attribute_once() -> None:
    link = LinkConfig.model_validate({
        "name": "ab", "source": "A", "target": "B", "topics": {"all_topics": True},
        "checkpoint_location": "c", "delta_location": "d",
        "failure_policy": "custom", "failure_hook": f"{HERE}:Hooks.dismiss"})
    runner = FailurePolicyRunner(link)
    assert runner.decide(BATCH).recorded()[0].policy == "custom"
