"""The shell commands of the README and the documentation pages (``docs/*.md``) as words, for the tests that check
they work as written: backslash
continuations joined, heredoc bodies skipped, comments dropped; ``[--opt V]`` is taken as written without the
brackets (``...`` dropped), ``a|b|c`` as its first alternative, and the placeholders in ``PLACEHOLDERS`` replaced
by a sample value. Only lines that run the project's environment (``.venv/...``), ``make`` or a program of
``NOT_LITERAL`` are read; other programs (openssl, kill) and blocks of output or diagrams are not."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SHELL_FENCES = {"", "bash", "sh", "shell"}
PLACEHOLDERS = {"N": "0", "R": "1000", "NAME": "source-to-target", "FILE": "offsets.json", "ID": "1"}
NOT_LITERAL = {"python", "python3", "spark-submit", "pip", "pytest", "ruff", "mypy"}


@dataclass(frozen=True)
class Command:
    """One logical command line of a shell block of the README or a documentation page."""

    path: str
    """The file it is in, relative to the repository's root (``README.md``, ``docs/brokers.md``)."""
    line: int
    """Line number in that file where the command starts."""
    words: tuple[str, ...]
    """The command's words, environment assignments and a trailing ``&`` removed, placeholders filled in."""

    @property
    def where(self) -> str:
        return f"{self.path} line {self.line}"


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


def commands(text: str, path: str = "README.md") -> list[Command]:
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
            found.append(Command(path, number, tuple(filled)))
    return found


def documented_files() -> list[Path]:
    """The README and every documentation page, the README first, pages by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def readme_commands() -> list[Command]:
    """Every command of the shell blocks of the README and the documentation pages, in file order."""
    return [command for path in documented_files()
            for command in commands(path.read_text(), str(path.relative_to(ROOT)))]
