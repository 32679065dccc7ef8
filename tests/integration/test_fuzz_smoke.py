"""benchmarks/fuzz.py at a tiny input count, so its machinery (seeds, mutations, the live cluster, the checking
client, crash and hurt accounting) keeps working between the long runs; and its in-process accounting counts an
undocumented exception as a crash."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from benchmarks import fuzz
from benchmarks.fuzz_targets import Target


def test_every_decoder_runs_a_few_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = fuzz.main(["--inputs", "40", "--root", str(tmp_path), "--seed", "3"])
    out = capsys.readouterr().out
    lines = re.findall(r"^fuzz (\S+): inputs (\d+), crashes (\d+), hurt (\d+)$", out, re.MULTILINE)
    assert {name for name, *_ in lines} == {*fuzz.SOCKET_DECODERS, "stored-messages", "properties-in-process",
                                            "route-json", "ha-streams", "checkpoint-file", "epoch-file", "acl-file",
                                            "yaml-configs"}, out
    assert all((inputs, crashes, hurt) == ("40", "0", "0") for _name, inputs, crashes, hurt in lines), out
    assert status == 0


def test_an_undocumented_exception_is_a_crash() -> None:
    def decode(raw: bytes) -> object:
        if raw[:1] == b"\xff":
            raise KeyError("boom")
        raise ValueError("documented")

    target = Target("t", lambda rng: bytes([rng.choice((0, 0xFF))]), decode, (ValueError,))
    args = argparse.Namespace(inputs=50, first=0, seed=1)
    outcome = fuzz.fuzz_in_process(target, args)
    expected = sum(fuzz.input_rng(1, "t", i).choice((0, 0xFF)) == 0xFF for i in range(50))
    assert outcome.crashes == expected > 0
    assert "KeyError" in outcome.notes[0]


def test_tracebacks_logged_during_a_decoder_are_crashes(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("2026 INFO old\nTraceback (most recent call last):\n"
                   "  File \"x.py\", line 1, in f\nKeyError: 'old'\n")

    class Proc:
        name, log_file = "b", log

    class Cluster:
        def processes(self) -> list[Proc]:
            return [Proc()]

    since = fuzz.log_sizes(Cluster())  # type: ignore[arg-type]
    with log.open("a") as out:
        out.write("2026 ERROR handler failed\nTraceback (most recent call last):\n  File \"a.py\", line 3, in g\n"
                  "    h()\n  File \"b.py\", line 9, in h\n    pack(x)\nstruct.error: 'i' format requires\n"
                  "2026 INFO next\n")
    assert fuzz.new_tracebacks(Cluster(), since) == [  # type: ignore[arg-type]
        "b: struct.error: 'i' format requires at File \"b.py\", line 9, in h"]
