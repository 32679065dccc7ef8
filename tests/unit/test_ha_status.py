"""protocol.ha_status, the one owner of the GET_BROKER_HA_STATUS / GET_BROKER_EPOCH_CACHE bodies and of the in-sync
rule, and the ha-status command's rows built from them (cli_ha), without sockets."""

from __future__ import annotations

import json

import pytest

from broker_store.cli.ha import controller_row, member_rows
from broker_store.protocol.controller import ReplicaIdentity, ReplicasInfo
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.ha_status import (
    OPEN_END_OFFSET,
    EpochEntryCacheStatus,
    HALinkStatus,
    HAStatus,
    replica_in_sync,
)

GAP = 1000


def test_the_in_sync_rule_is_strictly_less_than_the_gap_and_needs_an_ack() -> None:
    assert replica_in_sync(5000, 5000, GAP)
    assert replica_in_sync(4001, 5000, GAP)
    assert not replica_in_sync(4000, 5000, GAP)  # exactly the gap behind: out (RocketMQ's strict <)
    assert not replica_in_sync(-1, 0, GAP)  # no report yet
    assert replica_in_sync(0, 0, GAP)


PRIMARY = HAStatus(role="PRIMARY", ha_role="SYNC_MASTER", ha_address="127.0.0.1:10912", min_offset=0, max_offset=5000,
                   links=(HALinkStatus("127.0.0.1:5555#1", 4500, 500, True), HALinkStatus("127.0.0.1:5556#2", -1, -1,
                                                                                           False)),
                   ha_max_gap_not_in_sync=GAP, stage="PRIMARY", epoch=3, broker_id=2, confirm_offset=4500,
                   sync_state_set=(2, 3), sync_state_set_epoch=7)


def test_a_status_survives_its_json_and_keeps_rocketmqs_field_names() -> None:
    body = PRIMARY.to_json()
    assert HAStatus.from_json(body) == PRIMARY
    data = json.loads(body)
    assert data["master"] is True and data["masterCommitLogMaxOffset"] == 5000 and data["inSyncSlaveNums"] == 1
    assert data["haConnectionInfo"][0] == {"addr": "127.0.0.1:5555#1", "slaveAckOffset": 4500, "diff": 500,
                                           "inSync": True}
    assert (data["confirmOffset"], data["syncStateSet"], data["syncStateSetEpoch"], data["brokerId"]) == \
        (4500, [2, 3], 7, 2)
    replica = HAStatus(role="REPLICA", ha_role="SLAVE", ha_address="127.0.0.1:10912", min_offset=0, max_offset=10,
                       connected=True)
    data = json.loads(replica.to_json())
    assert data["master"] is False and data["masterCommitLogMaxOffset"] == -1
    assert data["haClientRuntimeInfo"] == {"masterAddr": "127.0.0.1:10912", "maxOffset": 10, "isActivated": True}
    assert HAStatus.from_json(replica.to_json()) == replica


def test_a_body_from_an_older_broker_reads_with_defaults_and_unknown_fields_are_ignored() -> None:
    older = {"master": False, "haClientRuntimeInfo": {"isActivated": True}, "role": "REPLICA", "haRole": "SLAVE",
             "haAddress": "h:1", "minOffset": 0, "maxOffset": 7, "futureField": {"x": 1}}
    status = HAStatus.from_json(json.dumps(older).encode())
    assert status.connected and status.max_offset == 7
    assert (status.broker_id, status.confirm_offset, status.sync_state_set, status.epoch) == (-1, -1, (), 0)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"haConnectionInfo": [{"addr": "a"}]}',
                                  b'{"maxOffset": "x"}'])
def test_a_malformed_status_is_a_protocol_error_naming_the_source(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="GET_BROKER_HA_STATUS body from 1.2.3.4:5"):
        HAStatus.from_json(body, "1.2.3.4:5")


def test_epoch_entries_end_where_the_next_begins_and_the_newest_is_open() -> None:
    cache = EpochEntryCacheStatus.of("c", "g", 2, 9000, [(1, 0), (2, 4096), (4, 8000)])
    assert [(e.epoch, e.start_offset, e.end_offset) for e in cache.entries] == \
        [(1, 0, 4096), (2, 4096, 8000), (4, 8000, OPEN_END_OFFSET)]
    data = json.loads(cache.to_json())
    assert set(data) == {"clusterName", "brokerName", "brokerId", "maxOffset", "epochList"}
    assert data["epochList"][-1] == {"epoch": 4, "startOffset": 8000, "endOffset": (1 << 63) - 1}
    assert EpochEntryCacheStatus.from_json(cache.to_json()) == cache
    assert EpochEntryCacheStatus.of("c", "g", 1, 0, []).entries == ()
    with pytest.raises(ProtocolError, match="GET_BROKER_EPOCH_CACHE body from b:1 is malformed"):
        EpochEntryCacheStatus.from_json(b'{"epochList": []}', "b:1")


def _replica(broker_id: int, max_offset: int, connected: bool = True) -> HAStatus:
    return HAStatus(role="REPLICA", ha_role="SYNC_MASTER", ha_address="127.0.0.1:10912", min_offset=0,
                    max_offset=max_offset, connected=connected, ha_max_gap_not_in_sync=GAP, epoch=3,
                    broker_id=broker_id, confirm_offset=max_offset)


def test_rows_of_a_controller_mode_group_count_the_primarys_sync_state_set() -> None:
    addrs = {0: "p:1", 3: "r:3", 4: "r:4", 5: "r:5"}
    status = {0: PRIMARY, 3: _replica(3, 5000), 4: _replica(4, 4990), 5: _replica(5, 100, connected=False)}
    epochs = {i: EpochEntryCacheStatus.of("c", "g", i, 5000, [(1, 0), (3, 4096)]) for i in (0, 3)}
    rows = {r[2]: r for r in member_rows("c", "g", addrs, status, epochs)}
    assert rows["0 (id 2)"][3:] == ("p:1", "SYNC_MASTER/PRIMARY", "0", "5000", "4500", "0",
                                    "1 replica(s) in SyncStateSet", "3", "1@0,3@4096", "127.0.0.1:10912")
    assert rows["3"][8:11] == ("0", "yes", "3")
    assert rows["4"][8:] == ("10", "catching up", "3", "-", "follows 127.0.0.1:10912")  # not in {2, 3}
    assert rows["5"][9] == "no"


def test_rows_of_a_static_group_apply_the_in_sync_rule_and_show_no_epochs() -> None:
    primary = HAStatus(role="PRIMARY", ha_role="SYNC_MASTER", ha_address="h:2", min_offset=0, max_offset=5000,
                       ha_max_gap_not_in_sync=GAP, broker_id=0, confirm_offset=5000)
    status = {0: primary, 1: _replica(1, 4001), 2: _replica(2, 4000), 3: HAStatus.unreachable("timed out")}
    rows = {r[2]: r for r in member_rows("c", "g", {0: "a", 1: "b", 2: "c", 3: "d"}, status, {})}
    assert rows["0"][9:12] == ("0 replica(s) in sync", "-", "-")
    assert rows["1"][9] == "yes" and rows["2"][9] == "behind"
    assert rows["3"][4:9] == ("?/?", "-", "-", "-", "-") and rows["3"][12].endswith("(timed out)")


def test_the_controller_row_shows_master_epochs_and_sync_state_set() -> None:
    info = ReplicasInfo(2, "p:1", 3, 7, (ReplicaIdentity("g", 2, "p:1", True), ReplicaIdentity("g", 3, "r:3", False)),
                        (ReplicaIdentity("g", 4, "r:4", True),))
    assert controller_row("g", "c:1", info) == ("g", "c:1", "2", "p:1", "3", "2,3(down)", "7", "4@r:4")
    assert controller_row("g", "c:1;c:2", None, "refused")[-1] == "unknown: refused"


def test_controller_status_reports_one_document_and_prints_a_table_for_people(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``controller-status --json`` is the document scripts parse; without it the same findings as lines and a rich
    table (the groups' cells once separated by tabs)."""
    import asyncio

    from broker_store.cli.ha import controller_report, print_controller_report
    from broker_store.protocol.controller import GetMetaDataResponseHeader
    from broker_store.protocol.errors import TransportError

    info = ReplicasInfo(2, "p:1", 3, 7, (ReplicaIdentity("g", 2, "p:1", True),),
                        (ReplicaIdentity("g", 4, "r:4", False),))

    async def metadata(addr: str) -> GetMetaDataResponseHeader:
        if addr == "c:2":
            raise TransportError("cannot connect to c:2")
        return GetMetaDataResponseHeader(controller_leader_id="c1", is_leader=addr == "c:1",
                                         peers="http://127.0.0.1:2379;c:1")

    async def sync_state(addr: str) -> dict[str, ReplicasInfo]:
        return {"g": info}

    report = asyncio.run(controller_report(["c:1", "c:2", "c:3"], metadata, sync_state, lambda url: True))
    assert json.loads(json.dumps(report)) == report
    assert (report["listed"], report["answering"], report["leaders"]) == (3, 2, ["c1"])
    assert report["controllers"][1] == {"addr": "c:2", "answering": False, "error": "cannot connect to c:2"}
    assert report["etcd"] == [{"url": "http://127.0.0.1:2379", "healthy": True}]
    assert report["groups"] == [{"group": "g", "master": "2", "masterEpoch": "3", "syncStateSetEpoch": "7",
                                 "inSync": "2@p:1", "notInSync": "4@r:4(down)"}]
    print_controller_report(report)
    out = capsys.readouterr().out
    assert "\t" not in out and "controllers: 3 listed, 2 answering, leader c1" in out
    assert "controller c:2: not answering (cannot connect to c:2)" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["group", "master"])
    assert lines[header + 2].split() == ["g", "2", "3", "7", "2@p:1", "4@r:4(down)"]
