"""Recovery of broker_store.store after crashes: torn tails, corruption, lost checkpoints, kill -9."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_store.protocol.message import decode_stored_messages, encode_properties, tags_hash_code
from broker_store.store import FlushMode, GetStatus, MessageStore, PutStatus, StoreConfig
from broker_store.store.checkpoint import CHECKPOINT_FILE
from tests.support.store_hooks import crash

SEG = 16 * 1024
BORN = "127.0.0.1:4000"
HOST = "127.0.0.1:10911"


def open_store(d: Path, **kw: object) -> MessageStore:
    params: dict[str, object] = {"commit_log_segment_size": SEG, "consume_queue_segment_entries": 32,
                                 "flush_interval_ms": 60_000, "retention_interval_ms": 0}
    params.update(kw)
    store = MessageStore(StoreConfig(store_dir=d, **params), store_host=HOST)
    store.start()
    return store


Written = list[tuple[int, int, str, int, int, bytes]]  # (phys, end, topic, queue, queue offset, record)


def write_messages(store: MessageStore, rng: random.Random, n: int) -> Written:
    out: Written = []
    for i in range(n):
        topic = f"Rc{i % 2}"
        queue_id = rng.randrange(3)
        tags = rng.choice(["a", "b", None])
        props = encode_properties({"TAGS": tags} if tags else {"K": str(i)})
        count = rng.choice([1, 1, 3])
        entries = [(rng.randbytes(rng.randrange(1, 1500)), props, i, tags_hash_code(tags) if tags else 0)
                   for _ in range(count)]
        r = store.put_messages(topic, queue_id, entries, born_timestamp=i, born_host=BORN)
        assert r.status is PutStatus.PUT_OK
        for k in range(count):
            phys = int(r.msg_ids[k][16:], 16)
            record = store.read_record(phys)
            assert record is not None
            out.append((phys, phys + len(record), topic, queue_id, r.queue_offset + k, record))
    return out


def check_survivors(store: MessageStore, expected: Written) -> None:
    """Exactly ``expected`` is readable, through the ConsumeQueues, byte-identical."""
    by_queue: dict[tuple[str, int], list[bytes]] = {}
    for _, _, topic, queue_id, queue_offset, record in expected:
        lst = by_queue.setdefault((topic, queue_id), [])
        assert queue_offset == len(lst)
        lst.append(record)
    for topic in ("Rc0", "Rc1"):
        for queue_id in range(3):
            want = by_queue.get((topic, queue_id), [])
            assert store.get_max_offset(topic, queue_id) == len(want)
            got = []
            offset = 0
            while True:
                g = store.get_messages(topic, queue_id, offset, 16)
                if g.status is not GetStatus.FOUND:
                    break
                pos = 0
                for m in decode_stored_messages(g.body):
                    got.append(bytes(g.body[pos:pos + m.store_size]))
                    pos += m.store_size
                offset = g.next_begin_offset
            assert got == want, (topic, queue_id)
    for phys, _, _, _, _, record in expected:
        assert store.read_record(phys) == record


def surviving(written: Written, valid_end: int) -> Written:
    return [w for w in written if w[1] <= valid_end]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), cut=st.floats(0, 1), mode=st.sampled_from(["truncate", "garbage", "flip",
                                                                            "zeros"]),
       keep_checkpoint=st.booleans())
def test_longest_valid_prefix_survives_and_queues_are_rebuilt(seed: int, cut: float, mode: str,
                                                              keep_checkpoint: bool) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        store = open_store(d)
        written = write_messages(store, rng, 30)
        store.shutdown()  # clean: the checkpoint says everything so far is safe
        safe = written[-1][1]
        store = open_store(d)
        written += write_messages(store, rng, 30)
        end = store.max_physical_offset
        crash(store)  # no final flush, no new checkpoint
        if not keep_checkpoint:
            (d / CHECKPOINT_FILE).unlink()
        last_start = end - end % SEG if end % SEG else end - SEG
        last = d / "commitlog" / f"{last_start:020d}"
        size = end - last_start  # the written part (segment files are full size, the rest a hole of zeros)
        lo = max(last_start, safe)  # corruption below the checkpoint is not looked for (by design)
        point = lo + int(cut * (last_start + size - lo))
        victim = next((w for w in written if w[0] <= point < w[1]), None)
        if victim is not None and mode in ("garbage", "zeros"):
            # BODYCRC covers only the body: rewriting a record's topic/properties tail is undetectable in
            # the V1 format (as in RocketMQ), so damage the record where the checks can see it
            body_len = int.from_bytes(victim[5][84:88], "big")
            point = min(point, victim[0] + 88 + body_len - 1) if body_len else victim[0] + 4
        if mode == "truncate":
            os.truncate(last, point - last_start)
            valid_end = point
        elif mode == "garbage":
            original = last.read_bytes()[point - last_start:point - last_start + 1]
            os.truncate(last, point - last_start)
            garbage = bytearray(rng.randbytes(rng.randrange(1, 3000)))
            if original and garbage[0] == original[0]:
                garbage[0] ^= 0xFF  # do not rebuild the byte that was cut off
            with open(last, "ab") as f:
                f.write(garbage)
            valid_end = point
        elif mode == "zeros":  # page cache never written back: zero-filled tail
            with open(last, "r+b") as f:
                f.seek(point - last_start)
                f.write(b"\0" * (size - (point - last_start)))
            valid_end = point
        else:  # flip one body byte of the record holding `point`
            if victim is None:
                valid_end = end
            else:
                body_len = int.from_bytes(victim[5][84:88], "big")
                body_at = victim[0] + 88 + body_len // 2
                if body_len == 0:
                    valid_end = end
                else:
                    with open(d / "commitlog" / f"{victim[0] - victim[0] % SEG:020d}", "r+b") as f:
                        f.seek(body_at - (victim[0] - victim[0] % SEG))
                        b = f.read(1)
                        f.seek(-1, 1)
                        f.write(bytes([b[0] ^ 0x40]))
                    valid_end = victim[0]
        expected = surviving(written, valid_end)
        store = open_store(d)
        check_survivors(store, expected)
        max_after = store.max_physical_offset
        assert max_after == (expected[-1][1] if expected else 0) or max_after % SEG == 0
        # the store keeps working where the valid prefix ended
        more = write_messages(store, rng, 5)
        check_survivors(store, expected + more)
        store.shutdown()
        store = open_store(d)
        check_survivors(store, expected + more)
        store.shutdown()


def test_lost_consume_queues_are_rebuilt_from_scratch(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(7), 80)
    store.shutdown()
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / CHECKPOINT_FILE).unlink()
    store = open_store(tmp_path)
    check_survivors(store, written)
    store.shutdown()


def test_corrupt_checkpoint_means_full_scan(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(8), 40)
    crash(store)
    raw = bytearray((tmp_path / CHECKPOINT_FILE).read_bytes())
    raw[10] ^= 0xFF
    (tmp_path / CHECKPOINT_FILE).write_bytes(bytes(raw))
    store = open_store(tmp_path)
    check_survivors(store, written)
    store.shutdown()


def test_checkpoint_after_clean_shutdown_skips_scan(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_messages(store, random.Random(9), 30)
    end = store.max_physical_offset
    store.shutdown()
    from broker_store.store.checkpoint import load_checkpoint

    cp = load_checkpoint(tmp_path)
    assert cp is not None and cp.safe_offset == end


CHILD = textwrap.dedent("""
    import sys, random
    from pathlib import Path
    from broker_store.store import MessageStore, StoreConfig, FlushMode
    d, seed = Path(sys.argv[1]), int(sys.argv[2])
    store = MessageStore(StoreConfig(store_dir=d, commit_log_segment_size=64 * 1024,
                                     flush_mode=FlushMode.SYNC_FLUSH,
                                     consume_queue_segment_entries=100, flush_interval_ms=20),
                         store_host="127.0.0.1:10911")
    store.start()
    rng = random.Random(seed)
    print("READY", flush=True)
    i = 0
    while True:
        n = rng.choice([1, 1, 4])
        entries = [(rng.randbytes(rng.randrange(1, 3000)), b"", i, 0) for _ in range(n)]
        r = store.put_messages("Kill", i % 3, entries, born_timestamp=i, born_host="127.0.0.1:1")
        assert r.status.name == "PUT_OK", r
        if store.wait_for_flush(r.end_offset).result():
            ids = ",".join(r.msg_ids)
            print(f"ACK {i % 3} {r.queue_offset} {seed} {i} {ids}", flush=True)
        i += 1
""")


def test_kill_dash_nine_keeps_every_acked_message(tmp_path: Path) -> None:
    rng = random.Random(1234)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    acked: dict[int, tuple[int, int, bytes]] = {}  # phys -> (queue, queue offset, body)
    for round_ in range(3):
        seed = rng.randrange(10**6)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(seed)],
                                 stdout=subprocess.PIPE, env=env, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + rng.uniform(0.2, 0.8)
        lines = []
        while time.monotonic() < deadline:
            lines.append(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        lines.extend(child.stdout.readlines())  # acks printed before the kill
        child.stdout.close()
        # replay the child's generator to know each acked body
        gen = random.Random(seed)
        acks = [ln.split() for ln in lines if ln.startswith("ACK")]
        assert acks, f"round {round_}: child acked nothing"
        by_i = {int(a[4]): a for a in acks}
        for i in range(max(by_i) + 1):
            n = gen.choice([1, 1, 4])
            bodies = [gen.randbytes(gen.randrange(1, 3000)) for _ in range(n)]
            if i in by_i:
                _, q_text, qo_text, _, _, ids = by_i[i]
                for k, msg_id in enumerate(ids.split(",")):
                    acked[int(msg_id[16:], 16)] = (int(q_text), int(qo_text) + k, bodies[k])
        store = MessageStore(StoreConfig(store_dir=tmp_path, commit_log_segment_size=64 * 1024,
                                         consume_queue_segment_entries=100, flush_mode=FlushMode.SYNC_FLUSH),
                             store_host="127.0.0.1:10911")
        store.start()
        for phys, (q, qo, body) in acked.items():
            record = store.read_record(phys)
            assert record is not None, f"acked message at {phys} lost"
            msg = decode_stored_messages(record)[0]
            assert (msg.body, msg.queue_id, msg.queue_offset) == (body, q, qo)
            g = store.get_messages("Kill", q, qo, 1)
            assert g.status is GetStatus.FOUND and g.body == record
        store.shutdown()
