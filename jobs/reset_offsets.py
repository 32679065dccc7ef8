"""Move a replication link's resume point, in the spirit of ``kafka-consumer-groups --reset-offsets``.

    python -m jobs.reset_offsets --config conf/replicator.yaml --link NAME \\
        --to earliest|latest|timestamp:<ms>|FILE [--dry-run]

Lists the link's source queues now (the reader's own topic selection and queue discovery,
``RocketMQStreamReader.discover_queues``), computes the new next-offset per queue and prints a table:
queue, current Delta resume point, new offset, the queue's min and max offset. Unless ``--dry-run`` it then
appends the new offsets to the link's Delta offsets table (history kept: the newest row per queue wins,
``LinkTables.latest_offsets``) and says what to do with the Spark checkpoint, which wins over the Delta
table while it exists: stop the job, move the checkpoint directory away, restart.

``--to``: ``earliest`` / ``latest`` (each queue's min / max offset), ``timestamp:<ms>`` (first offset
stored at or after it), or a JSON FILE of per-queue offsets (the ``SourceOffset`` document, or
``{"<topic>/<broker>/<queueId>": n}``) that resets only the queues it names; a queue the link does not
read, or an offset outside the queue's [min, max], is an error naming it. Runs on one machine, no Spark.
Exit code 0 when done (or planned with --dry-run), 1 when the source or the table failed, 2 on a usage or
configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from broker_store.client import MessageQueue
from connectors.core.config import STARTING_OFFSETS_FORMS, LinkConfig, load_replicator_config
from connectors.core.driver_log import LOG_FORMAT
from connectors.core.errors import OffsetFormatError, ReplicatorConfigError, ReplicatorError
from connectors.core.offsets import OffsetSpec, parse_queue_offsets, queue_key
from connectors.core.spark_checkpoint import checkpoint_dir
from connectors.replication.reader import RocketMQStreamReader
from connectors.replication.tables import LinkTables

log = logging.getLogger("jobs.reset_offsets")


@dataclass(frozen=True)
class QueueReset:
    """One line of the plan."""

    queue: MessageQueue
    current: int | None
    """The link's Delta resume point of the queue (None: no row yet)."""
    new: int
    min_offset: int
    max_offset: int


def parse_target(to: str) -> OffsetSpec:
    """``--to`` as an ``OffsetSpec``: one of the keywords, or a JSON file of per-queue offsets."""
    text = to.strip()
    if text.lower() in ("earliest", "latest") or text.lower().startswith("timestamp:"):
        try:
            return OffsetSpec.parse(text)
        except OffsetFormatError as exc:
            raise ReplicatorConfigError(str(exc), field="--to") from exc
    path = Path(text)
    try:
        content = path.read_text(encoding="utf-8")
    except OSError as exc:
        forms = STARTING_OFFSETS_FORMS.replace("per-queue offsets JSON", "FILE")
        raise ReplicatorConfigError(f"{text!r} is not {forms}, and reading it as a file failed: "
                                    f"{exc.strerror or exc}", field="--to") from exc
    try:
        return OffsetSpec("offsets", offsets=parse_queue_offsets(content))
    except OffsetFormatError as exc:
        raise ReplicatorConfigError(str(exc), file=text, field="--to") from exc


def plan(spec: OffsetSpec, queues: Sequence[MessageQueue], resolved: Mapping[MessageQueue, int],
         current: Mapping[MessageQueue, int], mins: Mapping[MessageQueue, int],
         maxes: Mapping[MessageQueue, int], link: str) -> list[QueueReset]:
    """The per-queue resets of ``spec`` (``resolved``: its offsets, ``RocketMQStreamReader.resolve``).
    Given per-queue offsets reset only the queues they name, each of which must be one of ``queues``
    and within its [min, max]; ``ReplicatorConfigError`` naming the first queue that is not."""
    if spec.offsets is not None:
        named = list(spec.offsets.queues)
        known = set(queues)
        for queue in named:
            if queue not in known:
                raise ReplicatorConfigError(f"queue {queue_key(queue)} is not a source queue of link {link} now (its "
                                            f"queues: {', '.join(queue_key(q) for q in queues) or 'none'})",
                                            field="--to")
            offset = spec.offsets.queues[queue]
            if not mins[queue] <= offset <= maxes[queue]:
                raise ReplicatorConfigError(f"queue {queue_key(queue)}: offset {offset} is outside the queue's "
                                            f"[{mins[queue]}, {maxes[queue]}]", field="--to")
        targets = named
    else:
        targets = list(queues)
    return [QueueReset(q, current.get(q), resolved[q], mins[q], maxes[q])
            for q in sorted(targets, key=queue_key)]


def format_plan(rows: Sequence[QueueReset]) -> str:
    header = ("queue", "current (Delta)", "new", "min", "max")
    lines = [(queue_key(r.queue), "-" if r.current is None else str(r.current), str(r.new), str(r.min_offset),
              str(r.max_offset)) for r in rows]
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(cells))
           for cells in [header, *lines]]
    return "\n".join(out)


def checkpoint_advice(link: LinkConfig, config_path: str, *, now: datetime | None = None) -> str:
    """What to do with the link's Spark checkpoint so the job picks up the new resume point."""
    location = link.checkpoint_location
    local = checkpoint_dir(location)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    aside = f"{location.rstrip('/')}.before-reset-{stamp}"
    restart = f"python jobs/replicate.py --config {config_path} --link {link.name}"
    if local is not None and not (local / "offsets").is_dir():
        return (f"The link has no Spark checkpoint at {location}: (re)start the job and it resumes from the new "
                f"offsets:\n  {restart}")
    return (f"The Spark checkpoint wins over the Delta offsets table while it exists. To resume from the new "
            f"offsets:\n  1. stop the job of link {link.name} (SIGTERM)\n"
            f"  2. move its checkpoint away: mv {location} {aside}\n"
            f"  3. restart it: {restart}")


def reset(config_path: str, link_name: str, to: str, *, dry_run: bool = False) -> int:
    config = load_replicator_config(config_path)
    link = config.link(link_name)
    spec = parse_target(to)
    reader = RocketMQStreamReader({"config": config_path, "link": link_name})
    try:
        queues = reader.discover_queues()
        mins, maxes = reader.min_offsets(queues), reader.max_offsets(queues)
        resolved = reader.resolve(spec, queues) if spec.offsets is None else dict(spec.offsets.queues)
    finally:
        reader.stop()
    tables = LinkTables.for_link(link)
    rows = plan(spec, queues, resolved, tables.latest_offsets(), mins, maxes, link.name)
    print(f"link {link.name}: reset {len(rows)} queue(s) of source cluster {link.source} to {spec}")
    print(format_plan(rows))
    if dry_run:
        print("dry run: nothing written")
        return 0
    if not rows:
        print("nothing to reset")
        return 0
    version = tables.append_resume_point({r.queue: r.new for r in rows})
    print(f"appended {len(rows)} row(s) to the Delta offsets table {tables.path('offsets')} (version {version}) "
          f"and made them the resume point in {tables.path('current_offsets')}")
    print(checkpoint_advice(link, config_path))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reset_offsets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", required=True)
    parser.add_argument("--to", required=True, metavar="earliest|latest|timestamp:<ms>|FILE")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)
    try:
        return reset(args.config, args.link, args.to, dry_run=args.dry_run)
    except ReplicatorConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ReplicatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
