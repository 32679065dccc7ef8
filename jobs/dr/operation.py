"""A disaster-recovery operation as a resumable state machine: a list of named steps, each recorded in a
journal before and after it runs. Pure: no sockets, time from the injected clock; the steps bring the I/O.

Used by ``jobs.dr`` (``switchover``, ``abort``) with ``jobs.dr.journal.FileJournal``; unit-tested with an
in-memory journal and steps the test writes.

Contract:

* ``OperationRunner.run`` loads the journal. No operation, or a finished one (done / aborted): a new one
  starts. One of the same kind under way: it resumes at the first step not done (a failed or a running one
  is run again: a crash may have struck while it ran, so a step must be idempotent; what it must not lose
  between its parts it saves with ``StepContext.save``, which is durable before ``save`` returns). One of
  another kind under way: ``OperationConflictError`` naming it.
* A step that raises ``StepRefusedError`` (a precondition does not hold: lag over the gate, a group still
  online) leaves the operation running with the step failed and the reason recorded; running the command
  again retries from that step. Any other ``ReplicatorError`` is recorded the same way, then re-raised.
* ``OperationRunner.abort`` undoes, newest first, every step that ran (done, failed or running) and has an
  ``undo`` (given the step's result or saved progress), recording each as undone; a step without one has
  nothing to undo. A finished operation cannot be aborted: it would reopen what the operator moved on from.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from broker_store.clock import ThreadClock
from connectors.core.errors import ReplicatorError

Json = dict[str, Any]
"""A step's result or progress: JSON-serialisable (kept in the journal)."""


class StepState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    """Recorded before the step runs; still so after a crash inside it."""
    DONE = "done"
    FAILED = "failed"
    """Refused or failed; ``error`` says why. Run again by the next run."""
    UNDONE = "undone"
    """Reversed by ``abort``."""


class OperationState(enum.StrEnum):
    RUNNING = "running"
    DONE = "done"
    ABORTING = "aborting"
    ABORTED = "aborted"


FINISHED = frozenset({OperationState.DONE, OperationState.ABORTED})


class StepRefusedError(ReplicatorError):
    """A step's precondition does not hold. ``reason`` names the blocker, ``action`` what the operator does."""

    def __init__(self, reason: str, action: str) -> None:
        self.reason = reason
        self.action = action
        super().__init__(f"{reason}; {action}")


class OperationConflictError(ReplicatorError):
    """Another operation of the link is under way."""


@dataclass(frozen=True)
class StepRecord:
    """One step as the journal holds it."""

    name: str
    state: StepState = StepState.PENDING
    started_at: float | None = None
    """Wall clock (s since the epoch) when the step last started."""
    finished_at: float | None = None
    attempts: int = 0
    """How many times the step was started (a re-run after a crash or a refusal counts)."""
    result: Json = field(default_factory=dict)
    progress: Json = field(default_factory=dict)
    """What the step saved while running (``StepContext.save``): kept across crashes and re-runs."""
    error: str | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)

    def to_json(self) -> Json:
        return {"name": self.name, "state": self.state.value, "started_at": self.started_at,
                "finished_at": self.finished_at, "attempts": self.attempts, "result": self.result,
                "progress": self.progress, "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        return cls(str(data["name"]), StepState(data["state"]), _opt_float(data.get("started_at")),
                   _opt_float(data.get("finished_at")), int(data.get("attempts", 0)), dict(data.get("result") or {}),
                   dict(data.get("progress") or {}), None if data.get("error") is None else str(data["error"]))


@dataclass(frozen=True)
class OperationRecord:
    """One operation of one link, as the journal holds it."""

    id: str
    kind: str
    """The command: ``switchover``, ..."""
    link: str
    state: OperationState
    created_at: float
    steps: tuple[StepRecord, ...]
    finished_at: float | None = None

    def step(self, name: str) -> StepRecord:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(f"operation {self.kind} has no step {name!r} (steps: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def results(self) -> dict[str, Json]:
        """Results of the steps done so far, by name."""
        return {s.name: s.result for s in self.steps if s.state is StepState.DONE}

    def with_step(self, record: StepRecord) -> OperationRecord:
        return replace(self, steps=tuple(record if s.name == record.name else s for s in self.steps))

    def next_step(self) -> StepRecord | None:
        """The first step not done (None: all done)."""
        return next((s for s in self.steps if s.state is not StepState.DONE), None)

    def to_json(self) -> Json:
        return {"id": self.id, "kind": self.kind, "link": self.link, "state": self.state.value,
                "created_at": self.created_at, "finished_at": self.finished_at,
                "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OperationRecord:
        return cls(str(data["id"]), str(data["kind"]), str(data["link"]), OperationState(data["state"]),
                   float(data["created_at"]), tuple(StepRecord.from_json(s) for s in data["steps"]),
                   _opt_float(data.get("finished_at")))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


class Journal(Protocol):
    """Where a link's operation is kept. ``save`` is durable when it returns (``jobs.dr.journal``)."""

    def load(self) -> OperationRecord | None: ...

    def save(self, record: OperationRecord) -> None: ...


@dataclass
class StepContext:
    """What a running step gets."""

    operation: OperationRecord
    """The operation as recorded when the step started."""
    step: StepRecord
    """This step as recorded when it started (``attempts`` counts this one)."""
    progress: Json
    """What this step saved in an earlier attempt (empty on the first)."""
    _save: Callable[[Json], None]

    @property
    def results(self) -> dict[str, Json]:
        return self.operation.results()

    def save(self, progress: Json) -> None:
        """Record ``progress`` for this step durably (replacing what was saved): read back by the next attempt
        after a crash (``progress``) and by ``undo``."""
        self.progress = dict(progress)
        self._save(self.progress)


@dataclass(frozen=True)
class Step:
    """One step of an operation. ``run`` must be idempotent (it may run again after a crash) and returns
    the step's result (kept in the journal, read by later steps and the report). ``undo``: reverses it
    for ``abort``, given the step's record (its result if done, its saved progress in any case); None:
    nothing to undo."""

    name: str
    run: Callable[[StepContext], Json]
    describe: str = ""
    """One line for ``--dry-run``'s plan."""
    undo: Callable[[StepRecord], None] | None = None


class _ProgressSaver:
    """``StepContext.save`` of one step: the record with the step's progress replaced, saved."""

    def __init__(self, journal: Journal, record: OperationRecord, name: str) -> None:
        self._journal = journal
        self.record = record
        self._name = name

    def save(self, progress: Json) -> None:
        self.record = self.record.with_step(replace(self.record.step(self._name), progress=progress))
        self._journal.save(self.record)


class OperationRunner:
    """Runs and aborts one link's operations over a journal."""

    def __init__(self, journal: Journal, clock: ThreadClock, *, new_id: Callable[[], str] | None = None) -> None:
        self._journal = journal
        self._clock = clock
        self._new_id = new_id or (lambda: uuid.uuid4().hex[:12])

    def current(self) -> OperationRecord | None:
        return self._journal.load()

    def start_or_resume(self, kind: str, link: str, names: Sequence[str]) -> OperationRecord:
        """The operation ``run`` would work on, recorded (a new one is saved)."""
        record = self._journal.load()
        if record is not None and record.state not in FINISHED:
            if record.kind != kind or record.link != link:
                raise OperationConflictError(
                    f"operation {record.kind} {record.id} of link {record.link} is {record.state.value}: finish it "
                    f"(python -m jobs.dr {record.kind} --link {record.link}) or undo it "
                    f"(python -m jobs.dr abort --link {record.link}) first")
            if record.state is OperationState.ABORTING:
                raise OperationConflictError(f"operation {record.kind} {record.id} of link {link} is being aborted: "
                                             f"finish that with python -m jobs.dr abort --link {link}")
            if record.names != list(names):
                raise OperationConflictError(f"operation {record.kind} {record.id} of link {link} was recorded with "
                                             f"steps {record.names}, this version has {list(names)}: abort it first")
            return record
        record = OperationRecord(self._new_id(), kind, link, OperationState.RUNNING, self._clock.time(),
                                 tuple(StepRecord(n) for n in names))
        self._journal.save(record)
        return record

    def run(self, kind: str, link: str, steps: Sequence[Step],
            on_step: Callable[[StepRecord], None] | None = None) -> OperationRecord:
        """Run (or resume) operation ``kind`` of ``link`` to its end; see the module docstring. ``on_step`` is
        called with each step's record as it starts and ends (display)."""
        record = self.start_or_resume(kind, link, [s.name for s in steps])
        by_name = {s.name: s for s in steps}
        while (pending := record.next_step()) is not None:
            step = by_name[pending.name]
            started = replace(pending, state=StepState.RUNNING, started_at=self._clock.time(), finished_at=None,
                              attempts=pending.attempts + 1, error=None)
            record = record.with_step(started)
            self._journal.save(record)  # before: a crash from here on re-runs the step
            if on_step is not None:
                on_step(started)
            saver = _ProgressSaver(self._journal, record, pending.name)
            try:
                result = step.run(StepContext(record, started, dict(started.progress), saver.save))
            except ReplicatorError as exc:
                record = saver.record
                failed = replace(record.step(pending.name), state=StepState.FAILED, finished_at=self._clock.time(),
                                 error=str(exc))
                self._journal.save(record.with_step(failed))
                if on_step is not None:
                    on_step(failed)
                raise
            record = saver.record
            done = replace(record.step(pending.name), state=StepState.DONE, finished_at=self._clock.time(),
                           result=dict(result))
            record = record.with_step(done)
            self._journal.save(record)  # after: the step is not run again
            if on_step is not None:
                on_step(done)
        record = replace(record, state=OperationState.DONE, finished_at=self._clock.time())
        self._journal.save(record)
        return record

    def abort(self, link: str, steps_of: Callable[[str], Iterable[Step]],
              on_step: Callable[[StepRecord], None] | None = None) -> OperationRecord:
        """Undo the link's operation under way (``steps_of(kind)`` gives its steps and their ``undo``); see the
        module docstring. ``OperationConflictError`` when there is none or it has finished."""
        record = self._journal.load()
        if record is None:
            raise OperationConflictError(f"link {link} has no operation to abort")
        if record.state in FINISHED:
            raise OperationConflictError(f"operation {record.kind} {record.id} of link {link} is "
                                         f"{record.state.value}: nothing to abort")
        by_name = {s.name: s for s in steps_of(record.kind)}
        if record.state is not OperationState.ABORTING:
            record = replace(record, state=OperationState.ABORTING)
            self._journal.save(record)
        for step_record in reversed(record.steps):
            if step_record.state in (StepState.PENDING, StepState.UNDONE):
                continue
            step = by_name.get(step_record.name)
            if step is not None and step.undo is not None:
                step.undo(step_record)  # idempotent: a crash here undoes it again
            undone = replace(step_record, state=StepState.UNDONE, finished_at=self._clock.time())
            record = record.with_step(undone)
            self._journal.save(record)
            if on_step is not None:
                on_step(undone)
        record = replace(record, state=OperationState.ABORTED, finished_at=self._clock.time())
        self._journal.save(record)
        return record
