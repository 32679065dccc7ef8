"""`python -m broker_store ...`: run name servers and brokers, a whole local cluster, and small
mqadmin-style commands (cluster, topics, create-topic, produce, consume, offsets; ha-status, controller-status and
elect live in ``cli.ha``, ACL accounts in ``cli.acl``).

Server commands print `READY <address>` on stdout once serving (the launcher and tests wait for it);
logs go to stderr. Exit codes: 0 ok, 1 runtime failure, 2 bad configuration or arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from broker_store.cli.credentials import add_credential_arguments
from broker_store.cli.ha import (
    cmd_controller_config,
    cmd_controller_status,
    cmd_elect,
    cmd_ha_status,
    setting_assignment,
)
from broker_store.cli.table import print_table
from broker_store.cli.tls import add_tls_arguments, tls_from_args
from broker_store.deploy.image import DEFAULT_MIRROR
from broker_store.protocol.errors import ConfigError, RocketMQError
from broker_store.protocol.message import StoredMessage


def _event_loop_run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        asyncio.run(main)
    else:
        uvloop.run(main)


def _print_ready(addr: str) -> None:
    print(f"READY {addr}", flush=True)


def _serve(kind: str, config: Path) -> int:
    from broker_store.config import BrokerConfig, ControllerConfig, NamesrvConfig, load_yaml

    if kind == "namesrv":
        from broker_store.namesrv.server import run_namesrv

        _event_loop_run(run_namesrv(load_yaml(config, NamesrvConfig), _print_ready))
    elif kind == "controller":
        from broker_store.controller.server import run_controller

        controller = load_yaml(config, ControllerConfig)
        _event_loop_run(run_controller(controller.controller, controller.listen, controller.tls, _print_ready))
    else:
        from broker_store.broker.server import run_broker

        _event_loop_run(run_broker(load_yaml(config, BrokerConfig), _print_ready))
    return 0


def _queues(admin: Any, topic: str) -> list[Any]:
    from broker_store.client import MessageQueue

    route = admin.topic_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def cmd_cluster(args: argparse.Namespace) -> int:
    from broker_store.client import Admin

    with Admin(args.namesrv, tls=tls_from_args(args)) as admin:
        info = admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        for name in sorted(names):
            broker = info.broker_addr_table.get(name)
            addrs = ", ".join(f"{bid}={addr}" for bid, addr in sorted((broker.broker_addrs if broker else {}).items()))
            rows.append((cluster, name, addrs or None))
    print_table(("cluster", "broker group", "addresses (broker id=address)"), rows)
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from broker_store.client import Admin

    with Admin(args.namesrv, tls=tls_from_args(args)) as admin:
        for topic in sorted(admin.topic_list()):
            print(topic)
    return 0


def cmd_create_topic(args: argparse.Namespace) -> int:
    from broker_store.client import Admin

    with Admin(args.namesrv, tls=tls_from_args(args)) as admin:
        created = admin.create_topic(args.topic, args.queues, cluster=args.cluster)
        admin.wait_for_route(args.topic, timeout=10)
    print(f"created {args.topic} with {args.queues} queues on {', '.join(created)}")
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from broker_store.client import Producer, new_message

    body = args.body.encode() if args.body is not None else os.urandom(args.size)
    started = time.monotonic()
    sent = 0
    with Producer(args.namesrv, args.group, tls=tls_from_args(args)) as producer:
        while sent < args.count:
            n = min(args.batch, args.count - sent)
            msgs = [new_message(args.topic, body, tags=args.tag, keys=args.keys) for _ in range(n)]
            if n == 1:
                result = producer.send(msgs[0])
            else:
                result = producer.send_batch(msgs)
            if args.verbose:
                print(f"{result.status.value} {result.message_queue} offset={result.queue_offset} "
                      f"msgId={result.msg_id}")
            sent += n
    elapsed = time.monotonic() - started
    print(f"sent {sent} messages of {len(body)} bytes to {args.topic} in {elapsed:.2f}s "
          f"({sent / max(elapsed, 1e-9):.0f} msg/s)")
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    from broker_store.client import Admin, PullConsumer, PullStatus

    received = 0
    tls = tls_from_args(args)
    with Admin(args.namesrv, tls=tls) as admin, PullConsumer(args.namesrv, args.group, tls=tls) as consumer:
        queues = _queues(admin, args.topic)
        positions = {}
        for mq in queues:
            if args.start == "earliest":
                positions[mq] = admin.min_offset(mq)
            elif args.start == "latest":
                positions[mq] = admin.max_offset(mq)
            else:
                committed = consumer.query_consumer_offset(mq)
                positions[mq] = committed if committed is not None else admin.min_offset(mq)
        deadline = time.monotonic() + args.timeout
        while received < args.count and time.monotonic() < deadline:
            progressed = False
            for mq in queues:
                result = consumer.pull(mq, positions[mq], min(32, args.count - received), expression=args.tags)
                if result.status is PullStatus.OFFSET_ILLEGAL or result.status is PullStatus.NO_MATCHED_MSG:
                    positions[mq] = result.next_begin_offset
                    continue
                if result.status is not PullStatus.FOUND:
                    continue
                for msg in result.messages[: args.count - received]:
                    print(consumed_line(mq, msg, show_body=args.show_body))
                    received += 1
                positions[mq] = result.next_begin_offset
                progressed = True
                if args.commit:
                    consumer.update_consumer_offset(mq, positions[mq])
                if received >= args.count:
                    break
            if not progressed:
                time.sleep(0.1)
    print(f"received {received} messages from {args.topic}", file=sys.stderr)
    return 0


def consumed_line(mq: object, msg: StoredMessage, *, show_body: bool) -> str:
    """``consume``'s line for one message: tags and keys only when the message has them."""
    body = msg.body.decode(errors="replace") if show_body else f"{len(msg.body)} bytes"
    tags = f" tags={msg.tags}" if msg.tags else ""
    keys = f" keys={msg.keys}" if msg.keys else ""
    return f"{mq} offset={msg.queue_offset} msgId={msg.msg_id}{tags}{keys} {body}"


def cmd_offsets(args: argparse.Namespace) -> int:
    from broker_store.client import Admin

    columns = ["queue", "min", "max"] + (["consumer offset", "lag"] if args.group else [])
    rows: list[list[object]] = []
    with Admin(args.namesrv, tls=tls_from_args(args)) as admin:
        for mq in _queues(admin, args.topic):
            lo, hi = admin.min_offset(mq), admin.max_offset(mq)
            row: list[object] = [mq, lo, hi]
            if args.group:
                # no committed offset: the group has not consumed here (or never committed: consume --commit)
                committed = admin.consumer_offset(args.group, mq)
                row += [committed, hi - (committed if committed is not None else lo)]
            rows.append(row)
    print_table(columns, rows, numeric=("min", "max", "consumer offset", "lag"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m broker_store",
                                     description="RocketMQ-compatible name server, broker and admin commands.")
    parser.add_argument("--log-level", default=os.environ.get("BROKER_STORE_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    for kind in ("namesrv", "broker", "controller"):
        p = sub.add_parser(kind, help=f"run one {kind}")
        p.add_argument("--config", type=Path, required=True)
        p.set_defaults(func=lambda a, k=kind: _serve(k, a.config))

    p = sub.add_parser("up", help="run every process of the local clusters in a YAML file")
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, help="where generated per-process configs go (default run/up-<pid>)")
    p.add_argument("--data-dir", type=Path, help="put every broker's store under this directory")
    p.add_argument("--start-timeout", type=float, default=60.0)

    def run_up(a: argparse.Namespace) -> int:
        from broker_store.deploy.up import run_up as up

        return up(a.config, a.run_dir, a.data_dir, a.start_timeout)

    p.set_defaults(func=run_up)

    p = sub.add_parser("restart-member", help="restart one member of a running up (SIGTERM, then started again)")
    p.add_argument("--run-dir", type=Path, required=True, help="the --run-dir of the running up")
    p.add_argument("name", help="the member's process name (its <run-dir>/<name>.pid), e.g. broker-a or ha.0")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for its new pid")

    def restart_member(a: argparse.Namespace) -> int:
        from broker_store.deploy.up_supervisor import request_restart

        try:
            pid = request_restart(a.run_dir, a.name, a.timeout)
        except (ValueError, TimeoutError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{a.name} restarted: pid {pid}")
        return 0

    p.set_defaults(func=restart_member)

    def admin_parser(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        ap = sub.add_parser(name, help=help_text)
        ap.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
                        help="name server address(es), ';'-separated (env NAMESRV_ADDR)")
        add_tls_arguments(ap)
        ap.set_defaults(func=func)
        return ap

    admin_parser("cluster", cmd_cluster, "list clusters, broker groups and addresses")
    admin_parser("topics", cmd_topics, "list topics known to the name server")
    p = admin_parser("create-topic", cmd_create_topic, "create or update a topic on every primary of a cluster")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("-c", "--cluster", help="cluster name (default: every cluster)")
    p = admin_parser("produce", cmd_produce, "send messages")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--size", type=int, default=128, help="random body size when --body is not given")
    p.add_argument("--body")
    p.add_argument("--tag")
    p.add_argument("--keys")
    p.add_argument("--batch", type=int, default=1, help="messages per SEND_BATCH_MESSAGE request")
    p.add_argument("--group", default="CLI_PRODUCER_GROUP")
    p.add_argument("-v", "--verbose", action="store_true")
    p = admin_parser("consume", cmd_consume, "pull messages and print them")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--group", default="CLI_CONSUMER_GROUP")
    p.add_argument("--from", dest="start", choices=("earliest", "latest", "committed"), default="committed")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--tags", default="*", help="tag expression, e.g. 'TagA || TagB'")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--commit", action="store_true", help="commit the consumer offset after each pull")
    p.add_argument("--show-body", action="store_true")
    for name, func, text in (("ha-status", cmd_ha_status,
                              "each broker group's members: role, CommitLog and confirm offsets, lag behind the "
                              "primary, in-sync state, epochs; for controller-mode groups the controller's view"),
                             ("controller-status", cmd_controller_status,
                              "the controllers, their leader and each broker group's master, epochs and SyncStateSet"),
                             ("elect", cmd_elect, "elect a broker group's master now (controller mode)"),
                             ("controller-config", cmd_controller_config,
                              "each controller's settings; --set KEY=VALUE changes the leader's at runtime")):
        p = admin_parser(name, func, text)
        p.add_argument("--controller", help="controller address(es), ';'-separated (default: the first name server, "
                                            "the embedded controller)")
        add_credential_arguments(p, "account (of the controllers' controller.acl_file, or a broker's)")
        if name in ("ha-status", "controller-status"):
            p.add_argument("--json", action="store_true",
                           help="one JSON document (the same cells under the column names) instead of tables")
        if name == "elect":
            p.add_argument("-b", "--broker-name", required=True)
            p.add_argument("-c", "--cluster", default="", help="the group's cluster")
            p.add_argument("--prefer", type=int, help="elect this broker id by force (it must be a live candidate)")
        if name == "controller-config":
            p.add_argument("--set", type=setting_assignment, action="append", metavar="KEY=VALUE",
                           help="change a runtime setting (enableElectUncleanMaster, controllerHeartBeatTimeoutMills, "
                                "scanInactiveMasterInterval, notifyBrokerRoleChanged); repeatable, applied together")
    p = sub.add_parser("image", help="the container tier's image (Debian + this project's wheel), built here")
    image_sub = p.add_subparsers(dest="image_command", required=True)
    p = image_sub.add_parser("build", help="build the image, or reuse it when its inputs did not change")
    p.add_argument("--mirror", default=DEFAULT_MIRROR, help="Debian mirror for debootstrap")
    p.add_argument("--force", action="store_true", help="rebuild the top layer even when cached")

    def run_image_build(a: argparse.Namespace) -> int:
        from broker_store.deploy.image import cmd_image_build

        return cmd_image_build(a.mirror, a.force)

    p.set_defaults(func=run_image_build)
    p = image_sub.add_parser("tag", help="print the tag the image of this checkout has (its inputs' hash)")

    def run_image_tag(a: argparse.Namespace) -> int:
        from broker_store.deploy.image import cmd_image_tag

        return cmd_image_tag()

    p.set_defaults(func=run_image_tag)
    p = image_sub.add_parser("constraints", help="regenerate image/constraints.txt (the image's pins) from the "
                                                 "installed runtime dependencies; the build does it too")
    p.add_argument("--check", action="store_true", help="only say whether it is stale (exit 1 when it is)")

    def run_image_constraints(a: argparse.Namespace) -> int:
        from broker_store.deploy.image import cmd_image_constraints

        return cmd_image_constraints(a.check)

    p.set_defaults(func=run_image_constraints)
    p = admin_parser("offsets", cmd_offsets, "min/max offsets per queue and a group's committed offset")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--group")
    from broker_store.cli.acl import add_acl_commands

    add_acl_commands(admin_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RocketMQError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
