"""The in-process decoders ``benchmarks/fuzz.py`` feeds: the product's own decoders of files, bodies and streams
that arrive from outside, each with valid seeds, how to mutate them, and the error types its docstring allows.

A crash is any other exception (``struct.error``, ``KeyError``, ``OverflowError``...). Each target is a pure
function of the input bytes except ``yaml-configs``, which goes through the real loaders and so through one
scratch file (``load_yaml`` and ``load_replicator_config`` take paths).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.fuzz_mutations import mutate_bytes, mutate_document, pick
from broker_store.acl.plain_file import parse_plain_acl
from broker_store.config import BrokerConfig, ControllerConfig, LocalClustersConfig, NamesrvConfig, load_yaml
from broker_store.ha import peer_auth
from broker_store.ha.errors import HAProtocolError
from broker_store.ha.wire import BatchDecoder, ReportDecoder, encode_batch, encode_heartbeat, encode_report
from broker_store.ha.wire_epoch import (
    PrimaryStreamDecoder,
    ReplicaHandshake,
    ReplicaStreamDecoder,
    encode_primary_handshake,
    encode_replica_ack,
    encode_replica_handshake,
    encode_transfer,
)
from broker_store.protocol.errors import ConfigError, CorruptRecordError, ProtocolError
from broker_store.protocol.message import (
    decode_stored_message,
    decode_stored_messages,
    encode_stored_message,
    stored_record_spans,
)
from broker_store.protocol.properties import decode_properties, encode_properties
from broker_store.protocol.route import BrokerData, ClusterInfo, QueueData, TopicRouteData, loads_rocketmq
from broker_store.protocol.topic import DataVersion, TopicConfigTable, decode_register_broker_body
from broker_store.store.checkpoint import CHECKPOINT_SIZE, CHECKPOINT_V1_SIZE, Checkpoint
from broker_store.store.epoch_cache import EpochCache, EpochEntry
from broker_store.store.epoch_file import decode_epoch_file, encode_epoch_file, entry_lines_crc
from connectors.core.config import load_replicator_config
from connectors.core.errors import ReplicatorConfigError

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """One decoder under fuzz: ``make(rng)`` gives an input, ``decode(raw)`` runs the product's decoder on it
    and must raise nothing but ``allowed``."""

    name: str
    make: Callable[[random.Random], bytes]
    decode: Callable[[bytes], object]
    allowed: tuple[type[BaseException], ...]


def _from_seeds(seeds: Sequence[bytes], fixup: Callable[[random.Random, bytes], bytes] | None = None,
                docs: Sequence[Any] = (), dump: Callable[[Any], bytes] | None = None,
                ) -> Callable[[random.Random], bytes]:
    """Inputs from ``seeds``: byte mutations, plus (with ``docs`` and ``dump``) structural mutations of the
    parsed documents half of the time; ``fixup`` (e.g. recomputing a checksum) half of the time, so the checks
    behind the checksum are reached too."""
    def make(rng: random.Random) -> bytes:
        if docs and dump is not None and rng.random() < 0.5:
            raw = dump(mutate_document(rng, rng.choice(docs)))
            if rng.random() < 0.3:
                raw = mutate_bytes(rng, raw)
        else:
            raw = mutate_bytes(rng, pick(rng, seeds))
        if fixup is not None and rng.random() < 0.5:
            raw = fixup(rng, raw)
        return raw
    return make


# -- stored messages (pull bodies, CommitLog records) ------------------------------------------------------

def stored_seeds() -> list[bytes]:
    props = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "C0A80001000018B4AAC2"})
    records = [encode_stored_message(topic=b"TopicTest", queue_id=i, queue_offset=i * 7, physical_offset=i * 300,
                                     body=bytes(range(i * 20 % 256)) * 2, properties=props if i % 2 else b"",
                                     born_ip=b"\x7f\0\0\x01", born_port=5000 + i, store_ip=b"\x7f\0\0\x01",
                                     store_port=10911, sys_flag=0) for i in range(4)]
    compressed = encode_stored_message(topic=b"T", queue_id=0, queue_offset=0, physical_offset=0,
                                       body=zlib.compress(b"x" * 500), properties=props, sys_flag=0x1)
    return [records[0], b"".join(records), compressed, records[1] + compressed]


def _decode_stored(raw: bytes) -> object:
    spans = stored_record_spans(raw)
    messages = decode_stored_messages(raw)
    single = decode_stored_message(raw) if raw else None
    return spans, messages, single


# -- properties ----------------------------------------------------------------------------------------------

def properties_seeds() -> list[bytes]:
    return [encode_properties({"TAGS": "a", "KEYS": "k", "WAIT": "true"}), b"TAGS\x01x\x02", b"\x01\x02\x02\x01",
            encode_properties({"ROCKETMQ_REPLICATOR_SOURCE": "src,dst", "DELAY": "3", "UNIQ_KEY": "00" * 16})]


# -- route and other JSON bodies --------------------------------------------------------------------------

def route_docs() -> list[Any]:
    route = TopicRouteData(queue_datas=(QueueData("b-a", 8, 8, 6), QueueData("b-b", 4, 4, 6, 0)),
                           broker_datas=(BrokerData("c", "b-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}),
                                         BrokerData("c", "b-b", {0: "127.0.0.1:10931"})))
    cluster = ClusterInfo(broker_addr_table={"b-a": BrokerData("c", "b-a", {0: "127.0.0.1:10911"})},
                          cluster_addr_table={"c": ("b-a",)})
    topics = {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
                                         "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}},
              "dataVersion": {"timestamp": 1700000000000, "counter": 3}}
    register = {"topicConfigSerializeWrapper": topics, "filterServerList": []}
    return [loads_rocketmq(route.encode()), loads_rocketmq(cluster.encode()), topics, register]


def _json_dump(doc: Any) -> bytes:
    # json, not orjson: a mutated document may hold integers past 64 bits, which a hostile peer can send.
    return json.dumps(doc, ensure_ascii=False).encode()


def route_seeds() -> list[bytes]:
    route = TopicRouteData(queue_datas=(QueueData("b-a", 8, 8, 6),),
                           broker_datas=(BrokerData("c", "b-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}),))
    # RocketMQ writes brokerAddrs with bare numeric keys: the decoder's own preprocessing is under test too.
    return [route.encode(), route.encode().replace(b'"0":', b"0:").replace(b'"1":', b"1:"),
            *(_json_dump(doc) for doc in route_docs())]


def _decode_json_bodies(raw: bytes) -> object:
    return [decode(raw) for decode in (TopicRouteData.decode, ClusterInfo.decode, TopicConfigTable.decode,
                                       DataVersion.decode, decode_register_broker_body)]


# -- HA streams ----------------------------------------------------------------------------------------------

def ha_seeds() -> list[bytes]:
    epochs = EpochCache([EpochEntry(1, 0), EpochEntry(2, 4096), EpochEntry(5, 9000)])
    last = EpochEntry(5, 9000)
    replica = encode_replica_handshake(ReplicaHandshake(1, False, False))
    primary = encode_primary_handshake(12000, epochs)
    hello = peer_auth.encode_hello(bytes(16), controller_mode=True)
    return [encode_report(0) + encode_report(4096), replica + encode_replica_ack(100) + encode_replica_ack(200),
            primary + encode_transfer(9000, b"x" * 40, last, 9000) + encode_transfer(9040, b"", last, 9040),
            encode_batch(0, b"y" * 30) + encode_heartbeat(30), hello, hello + bytes(32)]


def _decode_ha(raw: bytes) -> object:
    """Every HA stream decoder, fed ``raw`` whole and then in two pieces (a split may land anywhere)."""
    cut = (len(raw) * 7) // 13
    out: list[object] = []
    for make in (ReportDecoder, BatchDecoder, ReplicaStreamDecoder, PrimaryStreamDecoder):
        for pieces in ((raw,), (raw[:cut], raw[cut:])):
            decoder = make()
            try:
                for piece in pieces:
                    out.extend(decoder.feed(piece))
            except HAProtocolError:
                pass
    out.append(peer_auth.decode_hello(raw[:peer_auth.HELLO_SIZE]))
    return out


# -- checkpoint and epoch files ------------------------------------------------------------------------------

def checkpoint_seeds() -> list[bytes]:
    v2 = Checkpoint(4096, 4000, 0, 1700000000000, 4096).encode()
    unknown = Checkpoint(10**12, 10**12, 10**9, 1, None).encode()
    v1 = v2[:CHECKPOINT_V1_SIZE - 8] + zlib.crc32(v2[:CHECKPOINT_V1_SIZE - 8]).to_bytes(4, "big") + bytes(4)
    return [v2, unknown, v1]


def _checkpoint_crc(_rng: random.Random, raw: bytes) -> bytes:
    for size in (CHECKPOINT_SIZE, CHECKPOINT_V1_SIZE):
        if len(raw) == size:
            body = raw[:size - 8]
            return body + zlib.crc32(body).to_bytes(4, "big") + raw[size - 4:]
    return raw


def _decode_checkpoint(raw: bytes) -> object:
    checkpoint = Checkpoint.decode(raw)
    if checkpoint is not None and Checkpoint.decode(checkpoint.encode()) != checkpoint:
        raise AssertionError(f"{checkpoint} does not survive encode/decode")
    return checkpoint


def epoch_seeds() -> list[bytes]:
    return [encode_epoch_file(EpochCache([EpochEntry(1, 0), EpochEntry(3, 1024), EpochEntry(4, 99999)])),
            encode_epoch_file(EpochCache()), b"1\n0\n2-77\n"]


def _epoch_crc(_rng: random.Random, raw: bytes) -> bytes:
    lines = raw.split(b"\n", 2)
    if len(lines) < 3:
        return raw
    return lines[0] + b"\n" + str(entry_lines_crc(lines[2])).encode() + b"\n" + lines[2]


# -- ACL file and YAML configurations ------------------------------------------------------------------------

ACL_SEED = b"""globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.0.*
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def _yaml_dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def yaml_seeds() -> list[bytes]:
    broker = BrokerConfig(broker_name="b-a", listen="127.0.0.1:10911", store_dir=Path("/tmp/fuzz-never-written"),
                          namesrv_addrs=["127.0.0.1:9876"])
    namesrv = NamesrvConfig(listen="127.0.0.1:9876")
    return [_yaml_dump(broker.model_dump(mode="json", exclude_defaults=True)),
            _yaml_dump({**broker.model_dump(mode="json", exclude_defaults=True),
                        "ha": {"role": "ASYNC_MASTER", "ha_transfer_batch_size": 32768}, "acl_enable": False}),
            _yaml_dump(namesrv.model_dump(mode="json", exclude_defaults=True)),
            (ROOT / "conf" / "cluster-local.yaml").read_bytes(), (ROOT / "conf" / "cluster-ha.yaml").read_bytes(),
            (ROOT / "conf" / "replicator.yaml").read_bytes()]


_CONFIG_MODELS = (BrokerConfig, NamesrvConfig, ControllerConfig, LocalClustersConfig)


def yaml_config_decoder(scratch: Path) -> Callable[[bytes], object]:
    """The real loaders of every YAML configuration (the four ``load_yaml`` models and the replicator's
    ``load_replicator_config``) over the input, written to ``scratch``. Loading validates only: no store dir
    or port is touched."""
    def decode(raw: bytes) -> object:
        scratch.write_bytes(raw)
        out: list[object] = []
        for model in _CONFIG_MODELS:
            try:
                out.append(load_yaml(scratch, model))
            except ConfigError:
                pass
        out.append(load_replicator_config(scratch))
        return out
    return decode


def targets(scratch_dir: Path) -> list[Target]:
    """Every in-process target, in the order ``fuzz.py`` prints them."""
    acl_doc = yaml.safe_load(ACL_SEED)
    yaml_docs = [yaml.safe_load(seed) for seed in yaml_seeds()]
    return [
        Target("stored-messages", _from_seeds(stored_seeds()), _decode_stored, (ProtocolError,)),
        Target("properties-in-process", _from_seeds(properties_seeds()), decode_properties, (ProtocolError,)),
        Target("route-json", _from_seeds(route_seeds(), docs=route_docs(), dump=_json_dump), _decode_json_bodies,
               (ProtocolError,)),
        Target("ha-streams", _from_seeds(ha_seeds()), _decode_ha, (HAProtocolError,)),
        Target("checkpoint-file", _from_seeds(checkpoint_seeds(), fixup=_checkpoint_crc), _decode_checkpoint, ()),
        Target("epoch-file", _from_seeds(epoch_seeds(), fixup=_epoch_crc), decode_epoch_file, (CorruptRecordError,)),
        Target("acl-file", _from_seeds([ACL_SEED], docs=[acl_doc], dump=_yaml_dump),
               lambda raw: parse_plain_acl(raw, "plain_acl.yml"), (ConfigError,)),
        Target("yaml-configs", _from_seeds(yaml_seeds(), docs=yaml_docs, dump=_yaml_dump),
               yaml_config_decoder(scratch_dir / "fuzz-config.yaml"), (ConfigError, ReplicatorConfigError)),
    ]

