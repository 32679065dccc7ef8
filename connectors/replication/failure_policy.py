"""Apply a link's failure policy to the messages of a batch that still failed after retries.

Runs on the driver, in the sink's ``commit(messages, batchId)``, before the Delta tables are written:
the job loads the hook once at start-up with ``load_failure_hook`` (a bad "module:function" fails the
job before any data moves), and every batch with failures goes through ``apply_failure_policy``. A
``DISMISSED`` decision is written to the failures table by ``LinkTables.commit_batch``; a
``FAILED_BATCH`` decision raises ``BatchFailedError`` from ``PolicyDecision.raise_if_failed`` so the
batch's offsets never commit and Spark re-runs it after a restart. No failure is dropped silently.

Hook contract (``failure_policy: custom``, ``failure_hook: "package.module:function"``)::

    def hook(failures: list[FailedMessage]) -> bool

    called once per batch that has failures, on the driver, with every failed message of the batch;
    True  -> dismiss them all (recorded in the failures table, replayable later);
    False -> fail the batch;  raising -> fail the batch, the hook's exception chained;
    any other return value (None included) -> fail the batch: the hook must decide explicitly.
    The hook may be called again for the same messages when Spark re-runs a batch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from connectors.core.config import HOOK_PATTERN, FailurePolicy, LinkConfig
from connectors.core.errors import BatchFailedError, FailureHookError
from connectors.replication.records import FailedMessage, FailureOutcome, RecordedFailure

FailureHook = Callable[[list[FailedMessage]], object]


def load_failure_hook(spec: str) -> FailureHook:
    """Import ``"package.module:function"`` (attribute may be dotted) and return the callable.

    Raises ``FailureHookError`` saying whether the syntax, the import, the attribute or callability is
    what failed.
    """
    if not HOOK_PATTERN.fullmatch(spec):
        raise FailureHookError(f"{spec!r} is not \"package.module:function\"", field="failure_hook")
    module_name, _, attr_path = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise FailureHookError(f"cannot import module {module_name!r} of {spec!r}: {exc}",
                               field="failure_hook") from exc
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise FailureHookError(f"{spec!r}: {module_name!r} has no attribute {attr_path!r}",
                                   field="failure_hook") from exc
    if not callable(target):
        raise FailureHookError(f"{spec!r} is a {type(target).__name__}, not a callable", field="failure_hook")
    return target


@dataclass(frozen=True)
class PolicyDecision:
    """The policy's verdict on one batch's failures; the outcome is per message, aligned with input."""

    policy: FailurePolicy
    failures: tuple[FailedMessage, ...]
    outcomes: tuple[FailureOutcome, ...]
    """``outcomes[i]`` is the outcome of ``failures[i]``."""
    reason: str | None = None
    """Why the batch failed (hook returned False / a non-bool, or raised); ``None`` when dismissed."""
    cause: BaseException | None = None
    """The hook's exception, chained by ``raise_if_failed``."""

    @property
    def batch_failed(self) -> bool:
        return FailureOutcome.FAILED_BATCH in self.outcomes

    def recorded(self) -> list[RecordedFailure]:
        """Rows for the failures table (only meaningful when the batch was not failed)."""
        return [RecordedFailure(message, self.policy.value, outcome)
                for message, outcome in zip(self.failures, self.outcomes, strict=True)]

    def raise_if_failed(self, *, link: str, batch_id: int) -> None:
        """Raise ``BatchFailedError`` (hook's exception chained) when the policy failed the batch."""
        if not self.batch_failed:
            return
        failed = [f"{m.topic}/{m.broker_name}/{m.queue_id}@{m.queue_offset}" for m in self.failures]
        sample = ", ".join(failed[:5])
        more = f" and {len(self.failures) - 5} more" if len(self.failures) > 5 else ""
        raise BatchFailedError(
            f"link {link!r} batch {batch_id}: {len(self.failures)} failed message(s) ({sample}{more}); "
            f"{self.reason}",
            failed=failed,
        ) from self.cause


def apply_failure_policy(policy: FailurePolicy, failures: Sequence[FailedMessage],
                         hook: FailureHook | None = None) -> PolicyDecision:
    """Decide the fate of a batch's failed messages (see the module docstring for the hook contract)."""
    batch = tuple(failures)
    if not batch or policy is FailurePolicy.DISMISS:
        return PolicyDecision(policy, batch, (FailureOutcome.DISMISSED,) * len(batch))
    if hook is None:
        raise FailureHookError("failure_policy is custom but no hook was given", field="failure_hook")
    try:
        verdict = hook(list(batch))
    except Exception as exc:  # noqa: BLE001 - any hook error fails the batch; chained in raise_if_failed
        return PolicyDecision(policy, batch, (FailureOutcome.FAILED_BATCH,) * len(batch),
                              reason=f"failure hook raised {type(exc).__name__}: {exc}", cause=exc)
    if verdict is True:
        return PolicyDecision(policy, batch, (FailureOutcome.DISMISSED,) * len(batch))
    if verdict is False:
        reason = "failure hook returned False"
    else:
        reason = f"failure hook returned {verdict!r}; it must return True (dismiss) or False (fail the batch)"
    return PolicyDecision(policy, batch, (FailureOutcome.FAILED_BATCH,) * len(batch), reason=reason)


class FailurePolicyRunner:
    """A link's policy with its hook loaded once (driver side); ``decide`` applies it to one batch."""

    def __init__(self, link: LinkConfig) -> None:
        self.link = link
        self.hook = load_failure_hook(link.failure_hook) if link.failure_hook else None

    def decide(self, failures: Sequence[FailedMessage]) -> PolicyDecision:
        return apply_failure_policy(self.link.failure_policy, failures, self.hook)
