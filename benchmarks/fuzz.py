"""Fuzzing at volume (docs/benchmarks.md, "Hostile input"): mutated inputs into every decoder of untrusted bytes, and
one line per decoder.

    .venv/bin/python benchmarks/fuzz.py                       # 100,000 inputs per decoder
    .venv/bin/python benchmarks/fuzz.py --inputs 2000         # a short run
    .venv/bin/python benchmarks/fuzz.py --decoders frames,headers --first 50000 --inputs 50000   # one piece

Inputs are mutations of valid seeds (``fuzz_mutations``: bit flips, overwritten, cut and inserted bytes,
truncation, length fields that lie, random bytes, and JSON/YAML documents with values of the wrong type), input
``i`` of decoder ``d`` drawn from ``random.Random(f"{--seed}/{d}/{i}")``: a run, or any piece of one
(``--first``), is repeated exactly.

Decoders behind a socket run against a live name server and two brokers (``tests/support/processes.py``'s
``LocalCluster``, 127.0.0.1 only; group ``fuzz-b`` has an HA secret so its HA port reads the hello). Each input
goes on a connection of its own: connect, write it, half-close, read until the server closes (the server has then
decoded all of it), reset. Those decoders:

- ``frames``: whole request frames mutated as bytes (length prefix, serialise type, JSON and binary headers,
  bodies) to the broker's remoting port;
- ``headers``: well-framed requests whose code, flags and extFields are mutated as values, or whose JSON header is
  mutated as bytes under a correct frame length (the typed header decoders, not the framing);
- ``batch-bodies``: SEND_BATCH_MESSAGE with a valid header and a mutated body;
- ``properties``: SEND_MESSAGE_V2 with mutated message properties (the header's ``i``), also decoded in process;
- ``ha-frames``: the HA ports (offset reports on ``fuzz-a``, the secret's hello and proof on ``fuzz-b``).

The others are the product's decoders called in process (``fuzz_targets``): stored messages (pull bodies and
CommitLog records), properties, route and other JSON bodies, every HA stream decoder, the checkpoint file, the
epoch file, the ACL file and the YAML configurations (broker, name server, controller, local clusters,
replicator).

A crash, in process: an exception other than the decoder's documented ones. Behind a socket: the broker or name
server process died or stopped answering, or logged a traceback (an unexpected exception in a handler). Hurt: a
well-behaved client on its own connection (the project's Producer and PullConsumer: send one message, pull it
back) failed or took longer than ``--stall`` s; it checks every ``--check-every`` s while hostile inputs run and
once after each decoder. Each decoder ends with the line ``fuzz <decoder>: inputs N, crashes C, hurt H`` (C and H
must be 0); the exit status is 1 when any is not. Requests that change the broker's configuration (topic and
group creation or deletion, broker config, ACL admin, controller requests) are never sent: they are
authorised admin actions, not hostile bytes, and would hurt the checking client by design. The brokers run with
``auto_create_topic_enable`` and ``auto_create_subscription_group`` off so random names do not pile up
metadata for the rest of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fuzz_mutations import mutate_bytes, pick, random_value
from benchmarks.fuzz_targets import Target, properties_seeds, targets
from broker_store.client import Admin, Producer, PullConsumer, PullStatus, new_message
from broker_store.ha import peer_auth
from broker_store.ha.wire import encode_report
from broker_store.protocol import headers
from broker_store.protocol.codes import RequestCode, SerializeType
from broker_store.protocol.errors import ProtocolError, RocketMQError
from broker_store.protocol.frame import RemotingCommand, encode_frame
from broker_store.protocol.message import encode_batch
from broker_store.protocol.properties import decode_properties, encode_properties
from tests.support.processes import GroupSpec, LocalCluster

HOST = "127.0.0.1"
TOPIC = "FuzzTopic"
"""Where the hostile sends that decode land (4 queues on each group)."""
HEALTH_TOPIC = "FuzzHealth"
HEALTH_GROUP = "fuzz-health"
SECRET = b"fuzz-ha-secret-0123456789"

# Requests that change what the broker serves: never sent (see the module docstring).
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
    RequestCode.DELETE_ACL_CONFIG, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
    *(code for code in RequestCode if 1000 < code < 1100),
})


# -- seeds of the socket decoders ------------------------------------------------------------------------------

def _send_header(properties: str = "TAGS\x01a\x02KEYS\x01k\x02", *,
                 batch: bool = False) -> headers.SendMessageRequestHeader:
    return headers.SendMessageRequestHeader(
        producer_group="fuzz-p", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4, queue_id=1,
        sys_flag=0, born_timestamp=1700000000000, flag=0, properties=properties, reconsume_times=0,
        unit_mode=False, batch=batch, max_reconsume_times=16, broker_name="fuzz-a")


def _heartbeat_body() -> bytes:
    return json.dumps({"clientID": "127.0.0.1@fuzz", "producerDataSet": [{"groupName": "fuzz-p"}],
                       "consumerDataSet": [{"groupName": HEALTH_GROUP, "consumeType": "CONSUME_PASSIVELY",
                                            "messageModel": "CLUSTERING",
                                            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                                            "subscriptionDataSet": [{"topic": TOPIC, "subString": "a || b",
                                                                     "tagsSet": ["a", "b"], "codeSet": [97, 98],
                                                                     "subVersion": 1, "expressionType": "TAG"}]}]}
                      ).encode()


def _batch_body() -> bytes:
    props = encode_properties({"TAGS": "a", "UNIQ_KEY": "0A0B0C0D000018B4AAC2000000000001"})
    return encode_batch([(b"m" * 16, props, 0), (b"", b"", 0), (bytes(range(40)), props, 3)])


def request_seeds() -> list[RemotingCommand]:
    """Valid requests of every data-plane code the broker serves."""
    send = _send_header()
    pull = headers.PullMessageRequestHeader(consumer_group=HEALTH_GROUP, topic=TOPIC, queue_id=0, queue_offset=0,
                                            max_msg_nums=8, sys_flag=0, commit_offset=0, suspend_timeout_millis=0,
                                            sub_version=1, subscription="*", expression_type="TAG")
    queue = headers.QueueRequestHeader(topic=TOPIC, queue_id=2)
    return [
        RemotingCommand(RequestCode.SEND_MESSAGE_V2, send.to_ext(headers.SEND_V2_NAMES), b"hello fuzz"),
        RemotingCommand(RequestCode.SEND_MESSAGE, send.to_ext(), b"hello"),
        RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, _send_header(batch=True).to_ext(headers.SEND_V2_NAMES),
                        _batch_body()),
        RemotingCommand(RequestCode.PULL_MESSAGE, pull.to_ext()),
        RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, headers.QueryConsumerOffsetRequestHeader(
            consumer_group=HEALTH_GROUP, topic=TOPIC, queue_id=0, set_zero_if_not_found=True).to_ext()),
        RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, headers.UpdateConsumerOffsetRequestHeader(
            consumer_group="fuzz-c", topic=TOPIC, queue_id=0, commit_offset=1).to_ext()),
        RemotingCommand(RequestCode.GET_MAX_OFFSET, queue.to_ext()),
        RemotingCommand(RequestCode.GET_MIN_OFFSET, queue.to_ext()),
        RemotingCommand(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, headers.SearchOffsetRequestHeader(
            topic=TOPIC, queue_id=1, timestamp=1700000000000).to_ext()),
        RemotingCommand(RequestCode.HEART_BEAT, {}, _heartbeat_body()),
        RemotingCommand(RequestCode.UNREGISTER_CLIENT, headers.UnregisterClientRequestHeader(
            client_id="127.0.0.1@gone", consumer_group="fuzz-gone").to_ext()),
        RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP, headers.GetConsumerListByGroupRequestHeader(
            consumer_group=HEALTH_GROUP).to_ext()),
        RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, headers.ConsumerSendMsgBackRequestHeader(
            offset=0, group=HEALTH_GROUP, delay_level=1, origin_topic=TOPIC, max_reconsume_times=2).to_ext()),
        RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG),
        RemotingCommand(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}),
        RemotingCommand(RequestCode.GET_BROKER_HA_STATUS),
        RemotingCommand(RequestCode.GET_ALL_CONSUMER_OFFSET),
        RemotingCommand(RequestCode.GET_ALL_DELAY_OFFSET),
    ]


def frame_seeds(requests: Sequence[RemotingCommand]) -> list[bytes]:
    """Each request as a JSON-header frame and as a binary-header (ROCKETMQ) frame, and two back to back."""
    out = []
    for cmd in requests:
        out.append(encode_frame(cmd))
        out.append(encode_frame(dataclasses.replace(cmd, serialize_type=SerializeType.ROCKETMQ, opaque=7)))
    out.append(out[0] + out[2])
    return out


def _safe_code(rng: random.Random) -> int:
    while True:
        code = rng.choice((rng.randrange(0, 1100), rng.randrange(-40000, 70000), -1, 0, 2**31 - 1))
        if code not in ADMIN_CODES:
            return code


def _reframe(header: bytes, body: bytes, serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


def make_header_input(requests: Sequence[RemotingCommand]) -> Callable[[random.Random], bytes]:
    """A request whose envelope and extFields are mutated as values (a third of the time: its JSON header
    mutated as bytes), always under a correct frame length; admin codes are never produced."""
    def make(rng: random.Random) -> bytes:
        cmd = dataclasses.replace(rng.choice(requests))
        ext = dict(cmd.ext_fields)
        for _ in range(rng.randint(1, 4)):
            action = rng.randrange(6)
            if action == 0 and ext:
                del ext[rng.choice(sorted(ext))]
            elif action in (1, 2) and ext:
                value = random_value(rng)
                ext[rng.choice(sorted(ext))] = value if isinstance(value, str) else json.dumps(value)
            elif action == 3:
                ext[rng.choice(("x", "topic", "queueId", "b", "e", "", "i"))] = str(random_value(rng))
            elif action == 4:
                cmd.code = _safe_code(rng)
            else:
                cmd.flag = rng.choice((0, 0, 1, 2, 3, -1, 2**31 - 1))
                cmd.version = rng.choice((0, -1, 395, 2**31 - 1))
        cmd.ext_fields = ext
        if cmd.code in ADMIN_CODES:
            cmd.code = RequestCode.GET_MAX_OFFSET
        if rng.random() < 0.5:
            cmd.serialize_type = SerializeType.ROCKETMQ if rng.random() < 0.3 else SerializeType.JSON
        try:
            frame = encode_frame(cmd)
        except ProtocolError:  # a value the binary header cannot carry: the JSON one can
            frame = encode_frame(dataclasses.replace(cmd, serialize_type=SerializeType.JSON))
        if rng.random() < 0.33:
            (header_len,) = struct.unpack_from(">I", frame, 4)
            kind, header_len = header_len >> 24, header_len & 0xFFFFFF
            header = frame[8:8 + header_len]
            mutated = mutate_bytes(rng, header, random_share=0.0)
            if kind == 0 and _code_of_json(mutated) in ADMIN_CODES:
                mutated = header
            return _reframe(mutated, frame[8 + header_len:], kind if kind == 0 else 0)
        return frame
    return make


def _code_of_json(header: bytes) -> int | None:
    try:
        code = json.loads(header).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, int) else None


def make_frame_input(seeds: Sequence[bytes]) -> Callable[[random.Random], bytes]:
    def make(rng: random.Random) -> bytes:
        raw = mutate_bytes(rng, pick(rng, seeds))
        # A flipped bit may turn a request into an admin one: those are not hostile input (module docstring).
        if len(raw) >= 8 and raw[4] == 0:
            header_len = int.from_bytes(raw[5:8], "big")
            if _code_of_json(raw[8:8 + header_len]) in ADMIN_CODES:
                return raw[:8]
        elif len(raw) >= 10 and raw[4] == 1 and struct.unpack_from(">h", raw, 8)[0] in ADMIN_CODES:
            return raw[:8]
        return raw
    return make


def make_batch_input() -> Callable[[random.Random], bytes]:
    header = _send_header(batch=True).to_ext(headers.SEND_V2_NAMES)
    seeds = [_batch_body(), encode_batch([(b"x" * 100, b"", 0)]),
             encode_batch([(b"y", encode_properties({"WAIT": "false", "DELAY": "2"}), 0)] * 5)]

    def make(rng: random.Random) -> bytes:
        body = mutate_bytes(rng, pick(rng, seeds))
        return encode_frame(RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, dict(header), body))
    return make


def make_properties_input() -> Callable[[random.Random], bytes]:
    seeds = properties_seeds()

    def make(rng: random.Random) -> bytes:
        raw = mutate_bytes(rng, pick(rng, seeds))
        try:
            decode_properties(raw)  # the in-process decoder on the same bytes; the broker gets them as text
        except ProtocolError:
            pass
        text = raw.decode("utf-8", "replace")
        ext = _send_header(text).to_ext(headers.SEND_V2_NAMES)
        code = RequestCode.SEND_MESSAGE_V2
        if rng.random() < 0.3:  # the same properties inside a batch body, as raw bytes
            ext["m"] = "true"
            return encode_frame(RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, ext,
                                                encode_batch([(b"b", raw[:32767], 0)])))
        return encode_frame(RemotingCommand(code, ext, b"properties fuzz"))
    return make


def ha_inputs() -> tuple[Callable[[random.Random], bytes], Callable[[random.Random], bytes]]:
    """(reports for the secretless HA port, hello + proof for the secret one)."""
    reports = [encode_report(0), encode_report(0) + encode_report(64), encode_report(10**6), b"\0" * 7]
    hello = peer_auth.encode_hello(bytes(range(16)), controller_mode=False)
    hellos = [hello, hello + bytes(32), peer_auth.encode_hello(bytes(16), controller_mode=True) + b"p" * 32]

    def plain(rng: random.Random) -> bytes:
        return mutate_bytes(rng, pick(rng, reports))

    def secret(rng: random.Random) -> bytes:
        return mutate_bytes(rng, pick(rng, hellos))
    return plain, secret


# -- the live cluster and its checking client --------------------------------------------------------------------

@dataclass
class Health:
    """The well-behaved client: send one message, pull it back, on connections of its own."""

    namesrv: str
    stall: float
    producer: Producer = field(init=False)
    consumer: PullConsumer = field(init=False)
    failures: list[str] = field(default_factory=list)
    checks: int = 0

    def __post_init__(self) -> None:
        self.producer = Producer(self.namesrv, "fuzz-health-p", send_timeout=self.stall, auto_create_topic=False)
        self.consumer = PullConsumer(self.namesrv, HEALTH_GROUP, request_timeout=self.stall,
                                     pull_timeout=self.stall, heartbeat_interval=None)

    def check(self) -> str | None:
        """None when the round trip worked within ``stall`` s, else what went wrong."""
        body = f"health {time.time_ns()}".encode()
        started = time.monotonic()
        try:
            sent = self.producer.send(new_message(HEALTH_TOPIC, body))
            pulled = self.consumer.pull(sent.message_queue, sent.queue_offset, 1, timeout=self.stall)
        except RocketMQError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            self.checks += 1
        took = time.monotonic() - started
        if pulled.status is not PullStatus.FOUND or pulled.messages[0].body != body:
            return f"pulled {pulled.status.name} instead of the message just sent"
        if took > self.stall:
            return f"send + pull took {took:.1f} s (stall limit {self.stall:g} s)"
        return None

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


class Checker(threading.Thread):
    """Runs ``Health.check`` every ``every`` s while hostile inputs run; ``take()`` hands over the failures."""

    def __init__(self, health: Health, every: float) -> None:
        super().__init__(daemon=True, name="fuzz-health")
        self.health = health
        self.every = every
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._failures: list[str] = []

    def run(self) -> None:
        while not self.done.wait(self.every):
            problem = self.health.check()
            if problem is not None:
                with self._lock:
                    self._failures.append(problem)

    def take(self) -> list[str]:
        with self._lock:
            out, self._failures = self._failures, []
        return out


def start_cluster(root: Path) -> LocalCluster:
    secret = root / "ha.secret"
    secret.write_bytes(SECRET)
    groups = [GroupSpec("fuzz-a"), GroupSpec("fuzz-b", ({"ha": {"ha_secret_file": secret}},))]
    cluster = LocalCluster(root, "fuzz", groups, auto_create_topic_enable=False, auto_create_subscription_group=False)
    cluster.start()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, 4)
        admin.create_topic(HEALTH_TOPIC, 2, broker_names=["fuzz-a"])
        admin.create_subscription_group({"groupName": HEALTH_GROUP})
        admin.create_subscription_group({"groupName": "fuzz-c"})
        admin.wait_for_route(HEALTH_TOPIC)
    return cluster


def log_sizes(cluster: LocalCluster) -> dict[str, int]:
    return {p.name: p.log_file.stat().st_size if p.log_file is not None and p.log_file.exists() else 0
            for p in cluster.processes()}


def new_tracebacks(cluster: LocalCluster, since: dict[str, int]) -> list[str]:
    """Each traceback logged since ``since`` (``log_sizes``), as its process, last frame and exception line:
    an unexpected exception in a handler or an HA link is a crash even when the broker keeps serving."""
    found = []
    for proc in cluster.processes():
        if proc.log_file is None or not proc.log_file.exists():
            continue
        with proc.log_file.open("rb") as log:
            log.seek(since.get(proc.name, 0))
            text = log.read().decode(errors="replace")
        for chunk in text.split("Traceback (most recent call last)")[1:]:
            lines = chunk.splitlines()
            frames = [line.strip() for line in lines if line.strip().startswith('File "')]
            error = next((line for line in lines if line and not line.startswith((" ", ":"))), "?")
            found.append(f"{proc.name}: {error} at {frames[-1] if frames else '?'}")
    return found


# -- running inputs -------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    inputs: int = 0
    crashes: int = 0
    hurt: int = 0
    detail: str = ""
    notes: list[str] = field(default_factory=list)


def input_rng(seed: int, name: str, index: int) -> random.Random:
    return random.Random(f"{seed}/{name}/{index}")


def whole_frames(data: bytes) -> bool:
    """Whether ``data`` is one or more complete remoting frames by their length prefixes (a request the broker
    can answer, unless it is garbage inside)."""
    pos = 0
    while pos + 4 <= len(data):
        (total,) = struct.unpack_from(">i", data, pos)
        if total < 4 or pos + 4 + total > len(data):
            return False
        pos += 4 + total
    return pos == len(data) > 0


async def _deliver(port: int, data: bytes, timeout: float, answer_wait: float) -> tuple[bool, str | None]:
    """Connect, write ``data``, half-close and read until the server closes: whether it answered anything, and
    None or what went wrong. With ``answer_wait``, the half-close waits that long for a first answer: a remoting
    server closes on end of stream (Netty's default, RocketMQ's too), dropping answers not written yet."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
    except (OSError, TimeoutError) as exc:
        return False, f"connect: {exc!r}"
    problem = None
    answered = False
    try:
        writer.write(data)
        if answer_wait > 0:
            try:
                async with asyncio.timeout(answer_wait):
                    answered = bool(await reader.read(1 << 16))
            except TimeoutError:
                pass
        writer.write_eof()
        async with asyncio.timeout(timeout):
            while await reader.read(1 << 16):
                answered = True
    except TimeoutError:
        problem = f"the server kept the connection {timeout:g} s after the input and end of stream"
    except OSError:
        pass  # reset by the server: it refused the bytes, which is its right
    finally:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # no TIME_WAIT left
        writer.transport.abort()
    return answered, problem


async def run_socket_inputs(name: str, makers: Sequence[tuple[Callable[[random.Random], bytes], int]], seed: int,
                            first: int, count: int, concurrency: int, timeout: float, *,
                            remoting_ports: frozenset[int] = frozenset(), answer_wait: float = 0.25,
                            ) -> tuple[int, int, list[str]]:
    """Deliver inputs ``first .. first + count - 1``, input i made by ``makers[i % len(makers)]`` and sent to its
    port; on ``remoting_ports`` whole frames wait ``answer_wait`` s for an answer before the end of stream (see
    ``_deliver``). Returns how many the server answered with some bytes (decoded far enough to reply), how many
    went wrong (no connection, or not closed after the input and end of stream) and the first few of those."""
    next_index = first
    problems: list[str] = []
    unanswered = answers = 0

    async def worker() -> None:
        nonlocal next_index, unanswered, answers
        while next_index < first + count:
            index = next_index
            next_index += 1
            make, port = makers[index % len(makers)]
            data = make(input_rng(seed, name, index))
            wait = answer_wait if port in remoting_ports and whole_frames(data) else 0.0
            answered, problem = await _deliver(port, data, timeout, wait)
            answers += answered
            if problem is not None:
                unanswered += 1
                if len(problems) < 5:
                    problems.append(f"input {index} ({data[:64]!r}): {problem}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers, unanswered, problems


def fuzz_socket(name: str, makers: Sequence[tuple[Callable[[random.Random], bytes], int]], cluster: LocalCluster,
                health: Health, checker: Checker, args: argparse.Namespace) -> Outcome:
    before = log_sizes(cluster)
    remoting = frozenset(_port(b.listen) for b in cluster.brokers)
    answers, unanswered, problems = asyncio.run(run_socket_inputs(
        name, makers, args.seed, args.first, args.inputs, args.concurrency, args.timeout, remoting_ports=remoting,
        answer_wait=args.answer_wait))
    outcome = Outcome(args.inputs, detail=f"{answers} answered")
    dead = [p.name for p in cluster.processes() if not p.running()]
    tracebacks = new_tracebacks(cluster, before)
    hurt = checker.take()
    final = health.check()
    if final is not None:
        hurt.append(f"after the inputs: {final}")
    outcome.crashes = len(dead) + len(tracebacks) + unanswered
    outcome.hurt = len(hurt)
    outcome.notes += [f"process died: {d}" for d in dead] + problems + hurt[:5]
    outcome.notes += [f"{count} x traceback {where}" for where, count in Counter(tracebacks).most_common(5)]
    if dead:
        cluster.stop()
        cluster.start()
    return outcome


def fuzz_in_process(target: Target, args: argparse.Namespace) -> Outcome:
    outcome = Outcome(args.inputs)
    for index in range(args.first, args.first + args.inputs):
        raw = target.make(input_rng(args.seed, target.name, index))
        try:
            target.decode(raw)
        except target.allowed:
            pass
        except Exception as exc:  # noqa: BLE001 - any other exception is what this run looks for
            outcome.crashes += 1
            if len(outcome.notes) < 5:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                outcome.notes.append(f"input {index} {raw[:120]!r}: {type(exc).__name__}: {exc} "
                                     f"({where.filename}:{where.lineno})")
    return outcome


SOCKET_DECODERS = ("frames", "headers", "batch-bodies", "properties", "ha-frames")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per decoder (default 100000)")
    parser.add_argument("--first", type=int, default=0, help="index of the first input (a piece of a run)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--decoders", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections at once (socket decoders)")
    parser.add_argument("--timeout", type=float, default=5.0, help="s a socket input may take")
    parser.add_argument("--answer-wait", type=float, default=0.25,
                        help="s a whole request frame waits for its answer before the end of stream")
    parser.add_argument("--stall", type=float, default=5.0, help="s a checking send + pull may take")
    parser.add_argument("--check-every", type=float, default=0.5, help="s between checking round trips")
    parser.add_argument("--root", type=Path, default=None, help="cluster and scratch directory (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = args.root or Path(tmp)
        in_process = targets(root)
        known = [*SOCKET_DECODERS, *(t.name for t in in_process)]
        chosen = [d for d in args.decoders.split(",") if d] or known
        unknown = set(chosen) - set(known)
        if unknown:
            parser.error(f"unknown decoders {sorted(unknown)}; known: {known}")
        failed = False
        if any(d in SOCKET_DECODERS for d in chosen):
            failed |= run_socket_decoders([d for d in chosen if d in SOCKET_DECODERS], root, args)
        for target in in_process:
            if target.name in chosen:
                started = time.monotonic()
                outcome = fuzz_in_process(target, args)
                failed |= report(target.name, outcome, time.monotonic() - started)
    return 1 if failed else 0


def run_socket_decoders(names: Sequence[str], root: Path, args: argparse.Namespace) -> bool:
    cluster = start_cluster(root)
    health = Health(cluster.namesrv_addr, args.stall)
    checker = Checker(health, args.check_every)
    failed = False
    try:
        first_problem = health.check()
        if first_problem is not None:
            raise RuntimeError(f"the checking client fails before any fuzzing: {first_problem}")
        checker.start()
        requests = request_seeds()
        a, b = cluster.groups["fuzz-a"][0], cluster.groups["fuzz-b"][0]
        ha_plain, ha_secret = ha_inputs()
        remoting = _port(a.listen)
        makers: dict[str, list[tuple[Callable[[random.Random], bytes], int]]] = {
            "frames": [(make_frame_input(frame_seeds(requests)), remoting)],
            "headers": [(make_header_input(requests), remoting)],
            "batch-bodies": [(make_batch_input(), remoting)],
            "properties": [(make_properties_input(), remoting)],
            # even inputs: offset reports to the secretless HA port; odd: hello and proof to the secret one
            "ha-frames": [(ha_plain, a.ha_port), (ha_secret, b.ha_port)],
        }
        for name in names:
            started = time.monotonic()
            outcome = fuzz_socket(name, makers[name], cluster, health, checker, args)
            failed |= report(name, outcome, time.monotonic() - started, health.checks)
    finally:
        checker.done.set()
        checker.join(timeout=args.stall * 3)
        health.close()
        cluster.stop()
    return failed


def _port(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def report(name: str, outcome: Outcome, seconds: float, checks: int | None = None) -> bool:
    for note in outcome.notes:
        print(f"  {name}: {note}", flush=True)
    extra = f", {outcome.detail}" if outcome.detail else ""
    extra += f", {checks} checking round trips so far" if checks is not None else ""
    print(f"  ({name}: {seconds:.1f} s, {outcome.inputs / max(seconds, 1e-9):.0f} inputs/s{extra})", flush=True)
    print(f"fuzz {name}: inputs {outcome.inputs}, crashes {outcome.crashes}, hurt {outcome.hurt}", flush=True)
    return outcome.crashes > 0 or outcome.hurt > 0


if __name__ == "__main__":
    sys.exit(main())
