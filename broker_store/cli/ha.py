"""The replication admin commands of ``python -m broker_store``: ``ha-status`` (every broker group's members, and
for controller-mode groups the controller's view), ``controller-status`` (the controllers, their leader, each
group's master, epochs and SyncStateSet) and ``elect``. Called by ``cli.main``; ``ha-status`` and
``controller-status`` print rich tables (``cli.table``) for people, and with ``--json`` one JSON document for scripts
and tests (the same cells under the column names). The formats they read have one owner each:
``protocol.ha_status`` (GET_BROKER_HA_STATUS, GET_BROKER_EPOCH_CACHE, the in-sync rule) and
``protocol.controller`` (the controller's answers). ``controller-config`` prints each controller's settings and
changes the leader's (``--set KEY=VALUE``; the text is ``protocol.config_text``'s, the keys
``controller.runtime_settings``').

Controllers are ``--controller A[;B;C]`` (default: the first name server, where the controller is embedded by
default); a read goes to the first that answers, as every controller answers reads. With ``--access-key`` (the
account options of ``cli.credentials``, as ``acl ...``) every request, the brokers' and the controllers', is
signed: a controller with ``controller.acl_file`` serves only accounts of that file or whitelisted addresses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from broker_store.cli.credentials import credentials_from_args
from broker_store.cli.table import print_table
from broker_store.cli.tls import tls_from_args
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.controller import GetMetaDataResponseHeader, ReplicaIdentity, ReplicasInfo
from broker_store.protocol.errors import BrokerResponseError, RocketMQError, TransportError
from broker_store.protocol.ha_status import EpochEntryCacheStatus, HAStatus, replica_in_sync

T = TypeVar("T")

MEMBER_COLUMNS = ("cluster", "group", "id", "addr", "role", "min", "max", "confirm", "behind", "in_sync", "epoch",
                  "epochs", "ha")
CONTROLLER_COLUMNS = ("group", "controller", "master", "masterAddr", "masterEpoch", "syncStateSet",
                      "syncStateSetEpoch", "notInSync")
GROUP_COLUMNS = ("group", "master", "masterEpoch", "syncStateSetEpoch", "inSync", "notInSync")
"""``controller-status``'s table of broker groups, as the controller holds them."""


def print_json(document: object) -> None:
    """``--json``: one document on stdout (what scripts and tests parse; the tables are for people)."""
    print(json.dumps(document, indent=2))


def records(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    """Rows as ``{column: cell}`` objects (``--json``); cells stay the table's strings ('-' for none)."""
    return [dict(zip(columns, row, strict=True)) for row in rows]


def controller_addrs(args: argparse.Namespace) -> list[str]:
    """``--controller`` split on ';', else the first name server (the embedded controller)."""
    if args.controller:
        return [a for a in args.controller.split(";") if a]
    return [args.namesrv.split(";")[0]]


async def first_answer(addrs: Sequence[str], ask: Callable[[str], Awaitable[T]]) -> tuple[str, T]:
    """``ask(addr)`` of the first controller that answers: the next is tried when one is unreachable or answers
    CONTROLLER_NOT_LEADER (a write sent to a follower); any other refusal is the answer and raised. The last error
    if none answers."""
    error: RocketMQError | None = None
    for addr in addrs:
        try:
            return addr, await ask(addr)
        except TransportError as exc:
            error = exc
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.CONTROLLER_NOT_LEADER:
                raise
            error = exc
    if error is None:
        raise ValueError("no controller address given")
    raise error


def member_rows(cluster: str, name: str, addrs: Mapping[int, str], status: Mapping[int, HAStatus],
                epochs: Mapping[int, EpochEntryCacheStatus]) -> list[tuple[str, ...]]:
    """Rows of one group (``MEMBER_COLUMNS``) from its members' answers, by name-server id (0 = the primary).

    A controller-mode group (some member answered GET_BROKER_EPOCH_CACHE) counts a replica in sync when the
    primary's SyncStateSet holds it; a static group by ``replica_in_sync`` of its max offset."""
    controlled = bool(epochs)
    primary = status.get(0)
    rows: list[tuple[str, ...]] = []
    for listed_id, st in sorted(status.items()):
        behind: int | str = "-"
        if primary is not None and primary.max_offset >= 0 and st.max_offset >= 0:
            behind = max(primary.max_offset - st.max_offset, 0)
        if listed_id == 0:
            in_sync = (f"{max(len(st.sync_state_set) - 1, 0)} replica(s) in SyncStateSet" if controlled
                       else f"{st.in_sync_replicas} replica(s) in sync")
            ha = st.ha_address
        else:
            if not st.connected:
                in_sync = "no"
            elif controlled:
                in_sync = "yes" if primary is not None and st.broker_id in primary.sync_state_set else "catching up"
            else:
                in_sync = "yes" if primary is not None and replica_in_sync(
                    st.max_offset, primary.max_offset, primary.ha_max_gap_not_in_sync) else "behind"
            ha = f"follows {st.ha_address}"
        if st.last_error:
            ha += f" ({st.last_error})"
        shown_id = str(listed_id) if st.broker_id in (-1, listed_id) or not controlled \
            else f"{listed_id} (id {st.broker_id})"
        cache = epochs.get(listed_id)
        rows.append((cluster, name, shown_id, addrs[listed_id], f"{st.ha_role}/{st.role}", _offset(st.min_offset),
                     _offset(st.max_offset), _offset(st.confirm_offset), str(behind), in_sync,
                     str(st.epoch) if controlled else "-",
                     ",".join(f"{e.epoch}@{e.start_offset}" for e in cache.entries) or "-" if cache else "-", ha))
    return rows


def controller_row(name: str, controller: str, info: ReplicasInfo | None, error: str = "") -> tuple[str, ...]:
    """One group's row of ``CONTROLLER_COLUMNS``: the controller's master, epochs and SyncStateSet."""
    if info is None:
        return (name, controller, "-", "-", "-", "-", "-", f"unknown: {error}" if error else "unknown")
    sync_state_set = ",".join(str(r.broker_id) + ("" if r.alive else "(down)") for r in info.in_sync) or "-"
    others = ",".join(f"{r.broker_id}@{r.broker_address}{'' if r.alive else '(down)'}" for r in info.not_in_sync)
    return (name, controller, "-" if info.master_broker_id is None else str(info.master_broker_id),
            info.master_address or "-", str(info.master_epoch), sync_state_set, str(info.sync_state_set_epoch),
            others or "-")


def _offset(value: int) -> str:
    return str(value) if value >= 0 else "-"


def cmd_ha_status(args: argparse.Namespace) -> int:
    """Members of every broker group (``MEMBER_COLUMNS``); then, if some group is in controller mode, the
    controller's view of those groups (``CONTROLLER_COLUMNS``)."""
    from broker_store.client import Admin

    groups: list[tuple[str, str, dict[int, str], dict[int, HAStatus], dict[int, EpochEntryCacheStatus]]] = []
    credentials = credentials_from_args(args)
    with Admin(args.namesrv, tls=tls_from_args(args), credentials=credentials) as admin:
        info = admin.cluster_info()
        for cluster, names in sorted(info.cluster_addr_table.items()):
            for name in sorted(names):
                broker = info.broker_addr_table.get(name)
                addrs = dict(broker.broker_addrs) if broker else {}
                status: dict[int, HAStatus] = {}
                epochs: dict[int, EpochEntryCacheStatus] = {}
                for broker_id, addr in addrs.items():
                    try:
                        status[broker_id] = admin.ha_status(addr)
                    except RocketMQError as exc:
                        status[broker_id] = HAStatus.unreachable(str(exc))
                        continue
                    try:  # only controller-mode brokers serve it (others: REQUEST_CODE_NOT_SUPPORTED)
                        epochs[broker_id] = admin.epoch_cache(addr)
                    except RocketMQError:
                        pass
                groups.append((cluster, name, addrs, status, epochs))
    members = [row for cluster, name, addrs, status, epochs in groups
               for row in member_rows(cluster, name, addrs, status, epochs)]
    controlled = [name for _, name, _, _, epochs in groups if epochs]
    view = asyncio.run(_controller_view(controller_addrs(args), controlled, tls_from_args(args), credentials)) \
        if controlled else []
    if args.json:
        print_json({"members": records(MEMBER_COLUMNS, members), "controller": records(CONTROLLER_COLUMNS, view)})
        return 0
    print_table(MEMBER_COLUMNS, members, numeric=("min", "max", "confirm", "behind"))
    if view:
        print()
        print_table(CONTROLLER_COLUMNS, view, numeric=("masterEpoch", "syncStateSetEpoch"))
    return 0


async def _controller_view(addrs: Sequence[str], names: Sequence[str],
                           tls: TlsClientSettings | None = None,
                           credentials: SessionCredentials | None = None) -> list[tuple[str, ...]]:
    from broker_store.client.controller_admin import sync_state_data
    from broker_store.net.client import RemotingClient

    client = RemotingClient(tls=tls)
    try:
        addr, table = await first_answer(addrs, lambda a: sync_state_data(client, a, names, credentials=credentials))
        return [controller_row(name, addr, table.get(name)) for name in names]
    except RocketMQError as exc:
        return [controller_row(name, ";".join(addrs), None, f"{exc} (pass --controller)") for name in names]
    finally:
        await client.close()


def _controller_call(args: argparse.Namespace,
                     call: Callable[[object, list[str]], Awaitable[int]]) -> int:
    """Run ``call(client, controller addresses)`` on a fresh RemotingClient."""
    from broker_store.net.client import RemotingClient

    async def run() -> int:
        client = RemotingClient(tls=tls_from_args(args))
        try:
            return await call(client, controller_addrs(args))
        finally:
            await client.close()

    return asyncio.run(run())


def cmd_controller_status(args: argparse.Namespace) -> int:
    """Each controller's answer (its leader), how many answer, the health of the etcd members they name (their
    metadata's ``peers``; none for the embedded controller), then per broker group: master, epochs, SyncStateSet
    and the others. Exit 1 when no controller answers."""
    from broker_store.client.controller_admin import controller_metadata, sync_state_data
    from broker_store.deploy.etcd_members import healthy as etcd_healthy
    from broker_store.net.client import RemotingClient

    async def call(client: object, addrs: list[str]) -> int:
        assert isinstance(client, RemotingClient)
        credentials = credentials_from_args(args)
        report = await controller_report(addrs, lambda a: controller_metadata(client, a, credentials=credentials),
                                         lambda a: sync_state_data(client, a, credentials=credentials), etcd_healthy)
        if args.json:
            print_json(report)
        else:
            print_controller_report(report)
        return 0 if report["answering"] else 1

    return _controller_call(args, call)


async def controller_report(addrs: Sequence[str], metadata: Callable[[str], Awaitable[GetMetaDataResponseHeader]],
                            sync_state: Callable[[str], Awaitable[Mapping[str, ReplicasInfo]]],
                            etcd_healthy: Callable[[str], bool]) -> dict[str, Any]:
    """``controller-status``'s findings as one document (its ``--json``): each listed controller's answer,
    how many answer, the leaders they name, the etcd members' health and the broker groups (``GROUP_COLUMNS``)
    as the first answering controller holds them."""
    controllers: list[dict[str, Any]] = []
    leaders: set[str] = set()
    peers: set[str] = set()
    for addr in addrs:
        try:
            meta = await metadata(addr)
        except RocketMQError as exc:
            controllers.append({"addr": addr, "answering": False, "error": str(exc)})
            continue
        peers.update(p for p in (meta.peers or "").split(";") if p.startswith(("http://", "https://")))
        if meta.controller_leader_id:
            leaders.add(meta.controller_leader_id)
        controllers.append({"addr": addr, "answering": True, "leader": meta.controller_leader_id or None,
                            "isLeader": bool(meta.is_leader)})
    answering = [c["addr"] for c in controllers if c["answering"]]
    etcd = [{"url": url, "healthy": await asyncio.to_thread(etcd_healthy, url)} for url in sorted(peers)]
    groups: list[tuple[str, ...]] = []
    if answering:
        _, table = await first_answer(answering, sync_state)

        def ids(rows: Sequence[ReplicaIdentity]) -> str:
            return ",".join(f"{r.broker_id}@{r.broker_address}{'' if r.alive else '(down)'}" for r in rows) or "-"
        groups = [(name, "-" if info.master_broker_id is None else str(info.master_broker_id), str(info.master_epoch),
                   str(info.sync_state_set_epoch), ids(info.in_sync), ids(info.not_in_sync))
                  for name, info in sorted(table.items())]
    return {"controllers": controllers, "listed": len(addrs), "answering": len(answering),
            "leaders": sorted(leaders), "etcd": etcd, "groups": records(GROUP_COLUMNS, groups)}


def print_controller_report(report: Mapping[str, Any]) -> None:
    """``controller-status`` for people: a line per controller and etcd member, then the groups' table."""
    for c in report["controllers"]:
        if not c["answering"]:
            print(f"controller {c['addr']}: not answering ({c['error']})")
        else:
            print(f"controller {c['addr']}: leader {c['leader'] or 'none'} "
                  f"({'this one' if c['isLeader'] else 'another'})")
    print(f"controllers: {report['listed']} listed, {report['answering']} answering, leader "
          f"{', '.join(report['leaders']) or 'none'}")
    for member in report["etcd"]:  # the etcd members holding the state, as the controllers name them
        print(f"etcd {member['url']}: {'healthy' if member['healthy'] else 'not healthy (down, or no quorum)'}")
    if report["answering"]:
        print_table(GROUP_COLUMNS, [[g[c] for c in GROUP_COLUMNS] for g in report["groups"]],
                    numeric=("masterEpoch", "syncStateSetEpoch"))


def cmd_elect(args: argparse.Namespace) -> int:
    """An operator's election for one broker group (``--prefer ID``: that broker by force), sent to the first
    controller that answers."""
    from broker_store.client.controller_admin import elect_master
    from broker_store.net.client import RemotingClient

    async def call(client: object, addrs: list[str]) -> int:
        assert isinstance(client, RemotingClient)
        _, (header, elected) = await first_answer(
            addrs, lambda a: elect_master(client, a, args.cluster, args.broker_name, args.prefer,
                                          credentials=credentials_from_args(args)))
        print(f"{args.broker_name}: master {header.master_broker_id} at {header.master_address}, epoch "
              f"{header.master_epoch}{'' if elected else ' (unchanged: the master is alive)'}")
        return 0

    return _controller_call(args, call)


def setting_assignment(text: str) -> tuple[str, str]:
    """``--set KEY=VALUE`` (split at the first '='; the key stripped, the value as given)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def cmd_controller_config(args: argparse.Namespace) -> int:
    """Each controller's settings as ``key=value`` lines under a ``# controller ADDR`` line (settings are per
    controller); with ``--set KEY=VALUE ...`` first the update, sent to the first controller that takes it (the
    leader: followers refuse writes), then that controller's settings. Exit 1 when no controller answers or the
    update is refused (the refusal, naming the key, on stderr)."""
    from broker_store.client.controller_admin import controller_config, update_controller_config
    from broker_store.net.client import RemotingClient

    async def call(client: object, addrs: list[str]) -> int:
        assert isinstance(client, RemotingClient)
        credentials = credentials_from_args(args)
        update = dict(args.set or [])
        if update:
            addr, _ = await first_answer(addrs, lambda a: update_controller_config(client, a, update,
                                                                                         credentials=credentials))
            print(f"# controller {addr}: updated {', '.join(update)}")
            addrs = [addr]
        answering = 0
        for addr in addrs:
            try:
                entries = await controller_config(client, addr, credentials=credentials)
            except RocketMQError as exc:
                print(f"# controller {addr}: not answering ({exc})")
                continue
            answering += 1
            print(f"# controller {addr}")
            for key, value in entries.items():
                print(f"{key}={value}")
        return 0 if answering else 1

    return _controller_call(args, call)
