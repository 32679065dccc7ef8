"""Re-send a link's recorded failures to its target cluster and mark them replayed.

    python -m jobs.replay_failures --config conf/replicator.yaml --link source-to-target [--dry-run]

Reads ``LinkTables.unreplayed_failures()`` (oldest source position first), sends each message with
the project Producer to its recorded target topic, with the same property rules as the sink
(``connectors.replication.forwarding.target_properties``: generated properties dropped, UNIQ_KEY kept, loop-guard chain
stamped) and skips (and marks) messages whose chain already holds the target cluster. A failure is
marked replayed only after the target acknowledged it; failures that fail again stay unreplayed and
are listed. Runs on one machine, no Spark. Exit code 0 when everything was replayed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys

from broker_store.client import Message, Producer
from broker_store.protocol.errors import RocketMQError
from connectors.core.config import DEFAULT_PRODUCER_GROUP_PREFIX, load_replicator_config
from connectors.core.errors import ReplicatorError
from connectors.core.executor import CLIENT_MAX_MESSAGE_SIZE
from connectors.replication import loop_guard
from connectors.replication.forwarding import target_properties
from connectors.replication.tables import LinkTables

log = logging.getLogger("jobs.replay_failures")


def replay(config_path: str, link_name: str, *, dry_run: bool = False) -> tuple[int, list[str]]:
    """Replay the link's unreplayed failures; returns (replayed count, descriptions of those that failed)."""
    config = load_replicator_config(config_path)
    link = config.link(link_name)
    tables = LinkTables.for_link(link)
    pending = tables.unreplayed_failures()
    log.info("link %s: %d unreplayed failure(s)", link.name, len(pending))
    if dry_run or not pending:
        for f in pending:
            m = f.message
            log.info("  %s %s/%s/%d@%d -> %s: %s", f.failure_id, m.topic, m.broker_name, m.queue_id,
                     m.queue_offset, m.target_topic, m.error)
        return 0, []
    done: list[str] = []
    still_failing: list[str] = []
    namesrv = ";".join(config.cluster(link.target).namesrv)
    with Producer(namesrv, f"{DEFAULT_PRODUCER_GROUP_PREFIX}{link.name}_replay",
                  retry_times_when_send_failed=link.max_retries,
                  max_message_size=CLIENT_MAX_MESSAGE_SIZE,
                  credentials=config.cluster(link.target).credentials(),
                  tls=config.cluster(link.target).tls) as producer:
        for f in pending:
            m = f.message
            where = f"{m.topic}/{m.broker_name}/{m.queue_id}@{m.queue_offset}"
            if loop_guard.should_skip(m.properties, link.target, link.source):
                log.info("%s: target %s already in its chain; marked replayed without sending", where, link.target)
                done.append(f.failure_id)
                continue
            props = target_properties(m.properties, link.source, m.msg_id)
            try:
                result = producer.send(Message(topic=m.target_topic, body=m.body, properties=props))
            except RocketMQError as exc:
                still_failing.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            log.info("%s -> %s offset %d", where, result.message_queue, result.queue_offset)
            done.append(f.failure_id)
    tables.mark_replayed(done)
    return len(done), still_failing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replay_failures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--link", required=True)
    parser.add_argument("--dry-run", action="store_true", help="list the failures, send nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        replayed, failing = replay(args.config, args.link, dry_run=args.dry_run)
    except ReplicatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"replayed {replayed} failure(s); {len(failing)} still failing")
    for line in failing:
        print(f"  {line}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
