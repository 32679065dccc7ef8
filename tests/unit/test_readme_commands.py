"""Every command the README's shell blocks show works as written after ``make`` (issue #18): it calls the project's
environment literally (``.venv/bin/python``, ``.venv/bin/spark-submit``; a bare ``python`` is the system's, which
lacks the dependencies), names a module, script or make target that exists, and its arguments parse with the
entry point's own argparse parser. Parsing is the dry form: each entry point runs in this process up to its
``parse_args`` and stops there, so nothing connects or starts (the whole file takes a few seconds).

How a line is read: backslash continuations joined, heredoc bodies skipped, comments dropped; ``[--opt V]`` is
taken as written without the brackets (``...`` dropped), ``a|b|c`` as its first alternative, and the
placeholders below replaced by a sample value.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELL_FENCES = {"", "bash", "sh", "shell"}
PLACEHOLDERS = {"N": "0", "R": "1000", "NAME": "source-to-target", "FILE": "offsets.json", "ID": "1"}
NOT_LITERAL = {"python", "python3", "spark-submit", "pip", "pytest", "ruff", "mypy"}


@dataclass(frozen=True)
class Command:
    """One logical command line of a README shell block."""

    line: int
    """README line number where the command starts."""
    words: tuple[str, ...]
    """The command's words, environment assignments and a trailing ``&`` removed, placeholders filled in."""


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, logical line) of every shell block: continuations joined, heredoc bodies skipped."""
    fence: str | None = None
    heredoc_end: str | None = None
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence not in SHELL_FENCES:
            continue
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        start, joined = pending if pending else (number, "")
        joined += line
        if joined.rstrip().endswith("\\"):
            pending = (start, joined.rstrip()[:-1] + " ")
            continue
        pending = None
        if (match := re.search(r"<<-?\s*'?(\w+)'?", joined)) is not None:
            heredoc_end = match.group(1)
        yield start, joined


def words_of(line: str) -> list[str]:
    """The line's words as a shell splits them, alternatives (unquoted ``a|b``) reduced to the first."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&")
    lexer.whitespace_split = True
    raw = list(lexer)
    words: list[str] = []
    skip_next = False
    for word in raw:
        if skip_next:
            skip_next = False
        elif word == "|":
            skip_next = True
        else:
            words.append(word)
    return words


def commands(text: str) -> list[Command]:
    found = []
    for number, line in shell_lines(text):
        program = re.sub(r"^(\s*[A-Z_][A-Z0-9_]*=\S*)*\s*", "", line).split(" ", 1)[0]
        if not (program.startswith(".venv/") or program == "make" or program in NOT_LITERAL):
            continue  # other programs (openssl, kill) and blocks of output or diagrams
        words = words_of(line)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words.pop(0)
        if words and words[-1] == "&":
            words.pop()
        filled = []
        for word in words:
            word = word.removeprefix("[").removesuffix("]")
            if word and word != "...":
                filled.append(PLACEHOLDERS.get(word, word))
        if filled:
            found.append(Command(number, tuple(filled)))
    return found


README_COMMANDS = commands(README.read_text())
PROJECT_COMMANDS = [c for c in README_COMMANDS if c.words[0].startswith(".venv/bin/")]
MAKE_COMMANDS = [c for c in README_COMMANDS if c.words[0] == "make"]


class _Parsed(BaseException):
    """Raised by the patched ``parse_args`` once the arguments parsed: the entry point goes no further."""


@contextlib.contextmanager
def parse_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        original(self, *args, **kwargs)
        raise _Parsed

    stderr = io.StringIO()
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        yield stderr


def entry_point(words: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """("module" or "script", its name, its arguments) of a ``.venv/bin/python`` or ``spark-submit`` line."""
    program, *rest = words
    if program == ".venv/bin/spark-submit":
        script = next(i for i, w in enumerate(rest) if w.endswith(".py"))
        return "script", rest[script], rest[script + 1:]
    assert program == ".venv/bin/python", f"{program}: not an interpreter make builds"
    if rest[0] == "-m":
        return "module", rest[1], rest[2:]
    return "script", rest[0], rest[1:]


def test_the_readme_shows_commands() -> None:
    # The reader works: a README whose blocks were all skipped would pass everything below.
    assert len(PROJECT_COMMANDS) >= 30 and len(MAKE_COMMANDS) >= 3
    assert any("--commit" in c.words for c in PROJECT_COMMANDS if "consume" in c.words)


@pytest.mark.parametrize("command", README_COMMANDS, ids=lambda c: f"line{c.line}")
def test_no_command_needs_an_activated_environment(command: Command) -> None:
    assert command.words[0] not in NOT_LITERAL, (
        f"README.md line {command.line}: {command.words[0]} is the system's; write .venv/bin/{command.words[0]}")


@pytest.mark.parametrize("command", MAKE_COMMANDS, ids=lambda c: f"line{c.line}")
def test_make_targets_exist(command: Command) -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    for word in command.words[1:]:
        if "=" not in word:
            assert word in targets, f"README.md line {command.line}: no make target {word!r}"


@pytest.mark.parametrize("command", PROJECT_COMMANDS, ids=lambda c: f"line{c.line}")
def test_command_parses_with_its_entry_point(command: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    where = f"README.md line {command.line}: {' '.join(command.words)}"
    if command.words[0] == ".venv/bin/spark-submit":
        # make installs pyspark into .venv, whose bin holds spark-submit beside the interpreter.
        assert (Path(sys.executable).parent / "spark-submit").exists(), where
    kind, name, args = entry_point(command.words)
    for arg in args:
        if arg.startswith("conf/"):
            assert (ROOT / arg).exists(), f"{where}: {arg} does not exist"
    if kind == "script":
        assert (ROOT / name).is_file(), f"{where}: no script {name}"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [name, *args])
    with parse_only(monkeypatch) as stderr:
        try:
            if kind == "module":
                runpy.run_module(name, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(str(ROOT / name), run_name="__main__")
        except _Parsed:
            return
        except SystemExit as exc:
            pytest.fail(f"{where}: exit {exc.code}: {stderr.getvalue().strip()}")
    pytest.fail(f"{where}: the entry point ended without parsing its arguments")
