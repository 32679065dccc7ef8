"""``python -m jobs.dr <command> --link NAME``: disaster recovery of one link of the replicator config
(A = the link's source cluster, B = its target). docs/operations.md "Disaster recovery" is the runbook.

    status       per topic: lag, and the recovery point if A died now; per group: checkpoint age; config
                 drift (``jobs.dr.status``; with A unreachable, from the job's record of A's max offsets)
    switchover   planned move of the link's traffic from A (healthy) to B (``jobs.dr.switchover``); ``--reverse``
                 also starts the reverse link B -> A exactly at B's end, A the warm standby (``jobs.dr.reverse_start``)
    failover     unplanned move to B with A lost (refused while A answers, unless ``--force``): stop the link,
                 audit what A acknowledged that B lacks from the job's records, commit the groups on B
                 (``jobs.dr.failover``)
    recover      after a failover, with A back: copy what A acknowledged beyond the replicated point to B,
                 marked, and read it back (``jobs.dr.recover``); ``--quarantine`` into separate topics
    failback     planned move back from B to A over the reverse link, group positions exact both ways
                 (``jobs.dr.failback``)
    abort        undo the operation under way where that is safe (restores A's fenced topic permissions)
    show         print the link's operation journal (which step it is at)

Every operation is resumable: each step is recorded in ``<delta_location>/<link>/dr_operation.json``
(``jobs.dr.journal``) before and after it runs, and the same command again resumes at the first step not
done. ``--dry-run`` prints the plan (and where a resume would start) and touches nothing; ``--json`` prints
the operation's record, with the report, as one JSON document.

Exit codes: 0 done; 1 refused or failed, with one line saying why and what to do; 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from broker_store.cli.table import print_table
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.errors import RocketMQError
from broker_store.store.delay_levels import DelayLevels
from connectors.core.config import LinkConfig, load_replicator_config
from connectors.core.errors import ReplicatorConfigError, ReplicatorError
from connectors.replication.source_maxes import read_source_maxes
from jobs.dr.delayed import keep_link_line, stamp_ms
from jobs.dr.failback import KIND as FAILBACK
from jobs.dr.failback import reverse_link_of
from jobs.dr.failback_cli import run_failback
from jobs.dr.failover import KIND as FAILOVER
from jobs.dr.failover import Failover, FailoverSettings
from jobs.dr.journal import FileJournal
from jobs.dr.link_ends import LinkEnds
from jobs.dr.operation import (
    OperationConflictError,
    OperationRecord,
    OperationRunner,
    Step,
    StepRecord,
    StepState,
)
from jobs.dr.recover import KIND as RECOVER
from jobs.dr.recover import QUARANTINE_SUFFIX, Recover, RecoverSettings
from jobs.dr.reverse_start import ReverseStandby
from jobs.dr.rpo import audit
from jobs.dr.status import LinkStatus, read_status
from jobs.dr.switchover import KIND as SWITCHOVER
from jobs.dr.switchover import Switchover, SwitchoverSettings

COMMANDS = ("status", "switchover", "failover", "recover", "failback", "abort", "show")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.dr", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=COMMANDS)
    p.add_argument("--link", required=True, help="the link's name in the config")
    p.add_argument("--config", default="conf/replicator.yaml", help="replicator YAML (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    p.add_argument("--json", action="store_true", help="print the operation's record as JSON")
    defaults = SwitchoverSettings()
    p.add_argument("--max-lag", type=int, default=defaults.max_lag,
                   help="switchover: refuse when the link is more than this many messages behind (%(default)s)")
    p.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout_s,
                   help="switchover: seconds to wait for the link to replicate A's last messages (%(default)s)")
    p.add_argument("--groups-timeout", type=float, default=defaults.groups_timeout_s,
                   help="switchover: seconds to wait for the groups' consumers to leave A (%(default)s)")
    p.add_argument("--delay-levels", default=defaults.delay_levels, metavar="LEVELS",
                   help="switchover, status, recover: A's message_delay_level, for the due time of the delayed "
                        "messages waiting on A (default: RocketMQ's, %(default)r)")
    p.add_argument("--force", action="store_true", help="failover: although A answers")
    p.add_argument("--quarantine", action="store_true",
                   help=f"recover: into quarantine topics on B (<target topic>{QUARANTINE_SUFFIX}), not the mapped "
                        "ones, for the application to replay")
    p.add_argument("--reverse", nargs="?", const="", metavar="LINK",
                   help="switchover: make A the warm standby: start the reverse link B -> A (this one, or the "
                        "config's only one) from B's end exactly, A's topics taking its writes")
    p.add_argument("--reverse-link", help="failback: the link B -> A (default: the config's only one)")
    p.add_argument("--group", action="append", default=[], metavar="G",
                   help="failover, failback: move this group (repeatable; default: failover, every group with a "
                        "translated checkpoint; failback, the reverse link's selected groups)")
    return p


def _steps(kind: str, switchover: Switchover, recover: Recover | None = None,
           failover: Failover | None = None) -> list[Step]:
    if kind == SWITCHOVER:
        return switchover.steps()
    if kind == FAILOVER and failover is not None:
        return failover.steps()
    if kind == RECOVER and recover is not None:
        return recover.steps()  # nothing to undo: what was copied stays on B (marked), A is never changed
    raise ReplicatorError(f"this version cannot undo an operation of kind {kind!r}")


def _plan(kind: str, steps: Sequence[Step], current: OperationRecord | None) -> list[str]:
    resume = ""
    if current is not None and current.kind == kind and current.state.value == "running":
        pending = current.next_step()
        resume = f"; operation {current.id} resumes at {pending.name}" if pending else ""
    lines = [f"{kind}: {len(steps)} step(s){resume}"]
    lines += [f"  {i}. {s.name:10} {s.describe}" for i, s in enumerate(steps, 1)]
    return lines


def _step_line(console: Console, record: StepRecord) -> None:
    if record.state is StepState.RUNNING:
        console.print(f"[bold]{record.name}[/] ... (attempt {record.attempts})")
    elif record.state is StepState.DONE:
        console.print(f"[bold]{record.name}[/] done in {record.duration_s or 0:.1f} s")
    elif record.state is StepState.UNDONE:
        console.print(f"[bold]{record.name}[/] undone")
    elif record.state is StepState.FAILED:
        console.print(f"[bold]{record.name}[/] [red]refused[/]")


def print_group_offsets(groups: dict[str, list[dict[str, Any]]]) -> None:
    """Per group and A queue: its offset on A and where it was committed on B (switchover, failover)."""
    rows = []
    for group, entries in sorted(groups.items()):
        for e in entries:
            b_queue = "/".join(str(p) for p in e["b_queue"]) if e["b_queue"] else "-"
            rows.append((group, "/".join(str(p) for p in e["source"]), e["a_offset"], b_queue, e["b_offset"]))
    print_table(["group", "queue on A", "A offset", "queue on B", "B offset"], rows,
                numeric=["A offset", "B offset"])


def print_report(record: OperationRecord) -> None:
    report: dict[str, Any] = record.step("report").result
    print(f"switchover {record.id} of link {record.link}: done")
    print_table(["queue on A", "on A", "replicated", "missing"],
                [("/".join(str(p) for p in q["queue"]), q["on_a"], q["replicated"], q["missing"])
                 for q in report["queues"]], numeric=["on A", "replicated", "missing"])
    print_group_offsets(report["groups"])
    reverse = report.get("reverse")
    if reverse is not None:
        print(f"reverse link {reverse['reverse_link']} starts on B at (its resume point; "
              f"{reverse['skipped']} copies of A's messages not read again):")
        print_table(["queue on B", "start", "B end"], [("/".join(str(p) for p in q["queue"]), q["start"], q["end"])
                                                      for q in reverse["queues"]], numeric=["start", "B end"])
    durations = report["durations_s"]  # in the steps' order (the journal keeps JSON objects sorted)
    print("steps: " + ", ".join(f"{s.name} {durations[s.name]:.1f} s" for s in record.steps
                                if durations.get(s.name) is not None))
    print(report["operator"])
    delayed = report.get("delayed")
    if delayed is not None:
        print_delayed(delayed)
        print(report["delayed_next"])


def print_delayed(delayed: Mapping[str, Any]) -> None:
    """The delayed messages waiting on A per broker group and level (``jobs.dr.delayed``), if any."""
    if delayed["levels"]:
        print_table(["broker on A", "delay level", "delivered up to", "schedule end", "waiting"],
                    [(w["broker"], w["level"], w["delivered_up_to"], w["end"], w["waiting"])
                     for w in delayed["levels"]], numeric=["delay level", "delivered up to", "schedule end", "waiting"])


def print_audit(audit: Mapping[str, Any]) -> None:
    """The recovery-point audit (``jobs.dr.rpo``) as a table and its summary lines."""
    print_table(["queue on A", "replicated up to", "A last seen at", "seen at", "not on B (at least)"],
                [("/".join(str(p) for p in q["queue"]), "-" if q["replicated"] is None else q["replicated"],
                  "-" if q["last_seen"] is None else q["last_seen"],
                  "never" if q["observed_at"] is None else _stamp(q["observed_at"]),
                  "unknown" if q["missing"] is None else q["missing"]) for q in audit["queues"]],
                numeric=["replicated up to", "A last seen at", "not on B (at least)"])
    newest = audit["newest_observation"]
    print(f"at least {audit['missing']} acknowledged message(s) of A are not on B"
          + (f" (A observed up to {_stamp(newest)})" if newest is not None else
             " (the job never recorded A's max offsets: the loss cannot be bounded)")
          + (f"; {len(audit['unknown_queues'])} queue(s) never observed: unknown" if audit["unknown_queues"] else ""))
    print(audit["unknown_after"])


def print_failover_report(record: OperationRecord) -> None:
    report: dict[str, Any] = record.step("report").result
    print(f"failover {record.id} of link {record.link}: done")
    adopted = report.get("adopted") or {}
    if adopted.get("adopted") or adopted.get("beyond_gap"):
        print(f"{adopted['adopted']} message(s) a batch of the link sent to B without committing were found there and "
              f"counted as replicated" + (f"; {adopted['beyond_gap']} more lie beyond a missing one (not counted: "
                                          "recover copies the missing one)" if adopted.get("beyond_gap") else ""))
    print_audit(report["audit"])
    print_group_offsets(report["groups"])
    for low in report["lowered"]:
        print(f"group {low['group']}: {'/'.join(str(p) for p in low['queue'])} offset {low['a_offset']} on A is "
              f"beyond what was replicated: set to {low['set_to']} (the end of the replicated data)")
    if report["without_checkpoint"]:
        print(f"group(s) without a translated checkpoint, not moved: {', '.join(report['without_checkpoint'])}")
    print("steps: " + ", ".join(f"{name} {d:.1f} s" for name, d in report["durations_s"].items() if d is not None))
    print(report["operator"])
    print(report["next"])


def print_recover_report(record: OperationRecord) -> None:
    report: dict[str, Any] = record.step("report").result
    print(f"recover {record.id} of link {record.link}: done, {report['recovered']} message(s) recovered"
          + (" into quarantine topics" if report["quarantine"] else "")
          + (f", {report['lost_to_retention']} removed by A's retention before they could be"
             if report["lost_to_retention"] else ""))
    if report.get("audited") is not None:
        print(f"the failover's audit (the job's record of A's max offsets) bounded the loss at {report['audited']} "
              "message(s) at least; what A acknowledged after its last observation is counted here too")
    print_table(["queue on A", "to topic on B", "replicated", "on A", "divergent", "recovered", "sent now",
                 "born on B", "lost to retention"],
                [("/".join(str(p) for p in q["queue"]), q["target"], q["replicated"], q["on_a"], q["divergent"],
                  q["recovered"], q["sent_now"], q["born_on_b"], q["lost_to_retention"]) for q in report["queues"]
                 if q["divergent"] or q["lost_to_retention"]],
                numeric=["replicated", "on A", "divergent", "recovered", "sent now", "born on B",
                         "lost to retention"])
    delayed = report.get("delayed")
    if delayed is not None:
        print_delayed(delayed)
        if delayed["waiting"]:
            print(f"{delayed['waiting']} delayed message(s) still wait on A: A delivers them when due (by "
                  f"{stamp_ms(delayed['latest_due_ms'])} at the latest), beyond what this recover copied; run "
                  f"python -m jobs.dr recover --link {record.link} again after that")
        else:
            print("no delayed message waits on A: every one A delivered is in the range copied")


def print_status(status: LinkStatus) -> None:
    if status.a_error is not None:
        seen = "never recorded" if status.recorded_at is None else f"last recorded at {_stamp(status.recorded_at)}"
        print(f"link {status.link}: A does not answer ({status.a_error}); A's side below is the replication job's "
              f"record of its max offsets ({seen}), not read now")
        print(f"at least {status.recorded_rpo if status.recorded_rpo is not None else 'an unknown number of'} "
              f"acknowledged message(s) of A are not on B (what python -m jobs.dr failover's audit would say); "
              f"what A acknowledged after that is unknown")
        _status_tables(status)
        print("delayed messages waiting on A: unknown (A does not answer); A delivers them when it is back, into "
              "its topics beyond the replicated point")
        return
    print(f"link {status.link}: if A died now, {status.rpo_messages} acknowledged message(s) would not be on B "
          f"(A's max offsets read at {_stamp(status.observed_at)})")
    if status.recorded_rpo is None:
        print("the replication job has not recorded A's max offsets yet: a failover could not bound its loss")
    else:
        age = max(0.0, status.observed_at - (status.recorded_at or status.observed_at))
        print(f"from the job's own record (a failover's audit): at least {status.recorded_rpo} message(s), "
              f"A observed {age:.1f} s ago")
    _status_tables(status)
    if status.delayed is not None:
        print_delayed(status.delayed)
        print(keep_link_line(status.link, status.delayed))


def _status_tables(status: LinkStatus) -> None:
    print_table(["topic on A", "topic on B", "queues", "on A", "replicated", "lag (messages)"],
                [(t.topic, t.target, t.queues, t.on_a, t.replicated, t.lag) for t in status.topics],
                numeric=["queues", "on A", "replicated", "lag (messages)"])
    if status.checkpoint_age_s:
        print_table(["group", "checkpoint age"], [(g, "none yet" if age is None else f"{age:.1f} s")
                                                  for g, age in status.checkpoint_age_s.items()])
    drift = [*(f"topic {t} missing on B" for t in status.missing_on_b),
             *(f"group {g} missing on B" for g in status.groups_missing_on_b)]
    print("config drift: " + ("; ".join(drift) if drift else "none"))


def preview_audit(ends: LinkEnds) -> dict[str, Any]:
    return audit(ends.replicated(), read_source_maxes(ends.link.tables_location)).to_json()


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run(args: argparse.Namespace, clock: ThreadClock = SYSTEM_CLOCK) -> int:
    config = load_replicator_config(args.config)
    link: LinkConfig = config.link(args.link)
    # soft wrap: a progress line piped to a log stays one line (rich wraps at 80 columns off a terminal)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    journal = FileJournal(link.tables_location)
    runner = OperationRunner(journal, clock)
    if args.command == "show":
        current = runner.current()
        print(json.dumps(current.to_json() if current else None, indent=2))
        return 0
    if args.command == "failback" or (args.command == "abort" and (c := runner.current()) and c.kind == FAILBACK):
        return run_failback(args, config, link, runner, clock, err, _plan, lambda r: _step_line(err, r))
    if args.reverse is not None and args.command != "switchover":
        raise ReplicatorConfigError("--reverse is an option of switchover (failback names the reverse link with "
                                    "--reverse-link)")
    ends = LinkEnds.open(args.config, config, link, clock)
    reverse_ends = None
    try:
        def progress(line: str) -> None:
            err.print(f"  {line}", markup=False)  # a line may hold "[a, b)" ranges

        standby = None
        current = runner.current()
        if args.command == "switchover" or (args.command == "abort" and current is not None
                                            and current.kind == SWITCHOVER and "hold" in current.names):
            name = _reverse_for(args, link.name, current)
            if name is not None:
                reverse_ends = LinkEnds.open(args.config, config, reverse_link_of(config, link, name or None), clock)
                standby = ReverseStandby(ends, reverse_ends)
        try:
            levels = DelayLevels.parse(args.delay_levels)
        except ValueError as exc:
            raise ReplicatorConfigError(f"--delay-levels: {exc}") from exc
        switchover = Switchover(ends, SwitchoverSettings(args.max_lag, args.drain_timeout, args.groups_timeout,
                                                         delay_levels=args.delay_levels),
                                progress=progress, standby=standby)
        recover = Recover(ends, RecoverSettings(quarantine=args.quarantine, delay_levels=args.delay_levels),
                          progress=progress)
        failover = Failover(ends, FailoverSettings(force=args.force, groups=tuple(args.group)), progress=progress)
        if args.command == "status":
            status = read_status(ends, levels)
            if args.json:
                print(json.dumps(status.to_json(), indent=2))
            else:
                print_status(status)
            return 0
        if args.command == "abort":
            current = runner.current()
            if args.dry_run:
                what = "nothing to abort" if current is None else \
                    f"would undo {current.kind} {current.id} ({current.state.value})"
                print(f"abort of link {link.name}: {what}")
                return 0
            record = runner.abort(link.name, lambda kind: _steps(kind, switchover, recover, failover),
                                  on_step=lambda r: _step_line(err, r))
            print(json.dumps(record.to_json(), indent=2) if args.json else
                  f"{record.kind} {record.id} of link {link.name}: aborted"
                  + (" (A's topic permissions restored)" if record.kind == SWITCHOVER else
                     " (the link's stop marker removed)" if record.kind == FAILOVER else ""))
            return 0
        kind = {"recover": RECOVER, "failover": FAILOVER}.get(args.command, SWITCHOVER)
        steps = _steps(kind, switchover, recover, failover)
        current = runner.current()
        resuming = current is not None and current.kind == kind and current.state.value == "running"
        if args.dry_run:
            print("\n".join(_plan(kind, steps, current)))
            if kind == FAILOVER:
                print("the audit as the link's records stand now:")
                print_audit(preview_audit(ends))
            print("dry run: nothing changed")
            return 0
        if kind == FAILOVER and not resuming:
            failover.gate()  # refused before anything is recorded: no operation to abort afterwards
        record = runner.run(kind, link.name, steps, on_step=lambda r: _step_line(err, r))
        if args.json:
            print(json.dumps(record.to_json(), indent=2))
        elif kind == RECOVER:
            print_recover_report(record)
        elif kind == FAILOVER:
            print_failover_report(record)
        else:
            print_report(record)
        return 0
    finally:
        ends.close()
        if reverse_ends is not None:
            reverse_ends.close()


def _reverse_for(args: argparse.Namespace, link: str, current: OperationRecord | None) -> str | None:
    """The reverse link of a switchover (``--reverse``; "" = the config's only one; None = none): a switchover under
    way keeps the shape it was started with, whatever this run's options."""
    if current is None or current.kind != SWITCHOVER or current.state.value not in ("running", "aborting"):
        return args.reverse if args.command == "switchover" else None
    if "hold" not in current.names:
        if args.command == "switchover" and args.reverse is not None:
            raise OperationConflictError(
                f"switchover {current.id} of link {link} is under way without --reverse: finish it with the same "
                f"command without --reverse, or abort it (python -m jobs.dr abort --link {link}) and start again")
        return None
    held = _held_link(current)
    if args.command == "switchover" and args.reverse and held and args.reverse != held:
        raise OperationConflictError(f"switchover {current.id} of link {link} is under way with --reverse {held}, "
                                     f"not {args.reverse}: finish it with that, or abort it")
    if args.command != "switchover":
        return held  # abort: None while nothing was held (nothing of the reverse link to undo)
    return held or args.reverse or ""


def _held_link(record: OperationRecord | None) -> str | None:
    """The reverse link a switchover with ``--reverse`` holds (its ``hold`` step's record)."""
    if record is None or "hold" not in record.names:
        return None
    step = record.step("hold")
    if step.state is StepState.PENDING:
        return None
    return str(step.result.get("reverse_link") or step.progress.get("reverse_link") or "")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"interrupted: the operation stays where it stopped; run the same command again to resume, or "
              f"python -m jobs.dr abort --link {args.link}", file=sys.stderr)
        return 1
    except ReplicatorConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ReplicatorError, RocketMQError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
