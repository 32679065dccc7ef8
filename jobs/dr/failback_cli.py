"""``python -m jobs.dr failback --link L [--reverse-link R] [--group G ...]`` and ``abort`` of a failback:
opens both links' ends, runs ``jobs.dr.failback``'s steps with the runner of ``jobs.dr.cli`` and prints the
report. Called by ``jobs.dr.cli.run``; the options it reads are declared there."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console

from broker_store.cli.table import print_table
from broker_store.clock import ThreadClock
from connectors.core.config import LinkConfig, ReplicatorConfig
from jobs.dr.failback import KIND, Failback, FailbackSettings, reverse_link_of
from jobs.dr.link_ends import LinkEnds
from jobs.dr.operation import OperationRecord, OperationRunner, Step, StepRecord
from jobs.dr.switchover import SwitchoverSettings

Plan = Callable[[str, list[Step], OperationRecord | None], list[str]]


def print_failback_report(record: OperationRecord) -> None:
    report: dict[str, Any] = record.step("report").result
    print(f"failback {record.id} of link {record.link}: done")
    print_table(["queue on B", "on B", "replicated to A", "missing"],
                [("/".join(str(p) for p in q["queue"]), q["on_a"], q["replicated"], q["missing"])
                 for q in report["queues"]], numeric=["on B", "replicated to A", "missing"])
    print_table(["group", "queue on A", "A offset", "exact", "read again"],
                [(group, "/".join(str(p) for p in r["a_queue"]), r["a_offset"], "yes" if r["exact"] else "no",
                  r["re_read"]) for group, rows in sorted(report["groups"].items()) for r in rows],
                numeric=["A offset", "read again"])
    resume = report["forward_resume"]
    if "error" in resume:
        print(f"forward link resume check: A did not answer ({resume['error']})")
    else:
        print(f"forward link resume check: beyond its resume point A holds {resume['from_b']} copies of B's "
              f"messages (skipped by its loop guard) and {resume['others']} other message(s)")
    if report.get("forward_stop"):
        print(report["forward_stop"])
    durations = report["durations_s"]  # in the steps' order (the journal keeps JSON objects sorted)
    print("steps: " + ", ".join(f"{s.name} {durations[s.name]:.1f} s" for s in record.steps
                                if durations.get(s.name) is not None))
    print(report["operator"])


def run_failback(args: argparse.Namespace, config: ReplicatorConfig, link: LinkConfig, runner: OperationRunner,
                 clock: ThreadClock, err: Console, plan: Plan, on_step: Callable[[StepRecord], None]) -> int:
    """``failback`` (or ``abort`` of one) of ``link``, the forward link."""
    reverse_link = reverse_link_of(config, link, args.reverse_link)
    forward = LinkEnds.open(args.config, config, link, clock)
    reverse = LinkEnds.open(args.config, config, reverse_link, clock)
    try:
        settings = FailbackSettings(SwitchoverSettings(args.max_lag, args.drain_timeout, args.groups_timeout),
                                    tuple(args.group))
        previous = runner.current()
        failback = Failback(forward, reverse, settings, previous,
                            progress=lambda line: err.print(f"  {line}", markup=False))
        steps = failback.steps()
        if args.command == "abort":
            if args.dry_run:
                assert previous is not None
                print(f"abort of link {link.name}: would undo {previous.kind} {previous.id} ({previous.state.value})")
                return 0
            record = runner.abort(link.name, lambda kind: steps, on_step=on_step)
            print(json.dumps(record.to_json(), indent=2) if args.json else
                  f"{record.kind} {record.id} of link {link.name}: aborted (B's topic permissions restored, A's "
                  f"fenced again)")
            return 0
        if args.dry_run:
            print("\n".join(plan(KIND, steps, previous)))
            print(f"reverse link: {reverse_link.name}; dry run: nothing changed")
            return 0
        record = runner.run(KIND, link.name, steps, on_step=on_step)
        if args.json:
            print(json.dumps(record.to_json(), indent=2))
        else:
            print_failback_report(record)
        return 0
    finally:
        forward.close()
        reverse.close()
