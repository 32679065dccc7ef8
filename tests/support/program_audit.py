"""Which external programs the project runs, read from its sources: the Python code (its ``subprocess`` argv
lists, ``asyncio.create_subprocess_exec`` and ``shutil.which`` look-ups), the shell scripts of ``.ci/`` and the
Makefile's recipes. ``tests/unit/test_system_tools.py`` holds each program found against ``.ci/system-tools``
(what the project installs), the machine kind's base image and the deliberately optional ones.

The readers are conservative on purpose: a list literal whose first item looks like a program name, in a module
that starts processes, counts as an invocation. A false find costs one line in the test's tables; a missed one
is a machine on which CI fails.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# What a program name looks like (``apt-get``, ``py-spy``, ``python3.11``); excludes flags, paths and variables.
_PROGRAM = re.compile(r"[a-z][a-z0-9._+-]*\Z")
_SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call", "create_subprocess_exec"}

# Shell words that are not programs: builtins and keywords of dash/bash, as these scripts use them.
SHELL_BUILTINS = frozenset({
    "[", "break", "case", "cd", "command", "continue", "declare", "do", "done", "echo", "elif", "else", "esac",
    "eval", "exec", "exit", "export", "false", "fi", "for", "function", "if", "in", "kill", "local", "printf",
    "read", "return", "set", "shift", "source", "test", "then", "trap", "true", "type", "umask", "unset", "until",
    "wait", "while",
})
# Words after which the next word is again in command position.
_PREFIXES = frozenset({"if", "then", "do", "else", "elif", "while", "until", "!", "exec", "nohup", "time"})


@dataclass(frozen=True)
class Invocation:
    """One place that runs (or looks up) an external program."""

    program: str
    """The program's name as invoked (``debootstrap``, ``ip``)."""
    where: str
    """``path:line`` of the invocation, relative to the project root."""


def python_invocations(text: str, where: str) -> list[Invocation]:
    """The programs a Python source runs or looks up, with their lines: the head of each argv given to a
    ``subprocess`` call, to ``asyncio.create_subprocess_exec`` or to a function of the module that makes one of
    those calls (a wrapper such as ``_run(step, argv)``), argv lists held in a module variable included
    (``cmd = ["ip", ...]``, ``[*chroot, ...]``), and each ``shutil.which`` look-up."""
    found: list[Invocation] = []
    if "subprocess" not in text and "which" not in text:
        return found  # nothing here starts or looks up a program: spare the walk
    tree = ast.parse(text)
    wrappers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                and any(isinstance(c, ast.Call) and _call_name(c.func) in _SUBPROCESS_CALLS for c in ast.walk(f))}
    held: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            held.setdefault(node.targets[0].id, node.value)

    def add(program: str | None, node: ast.AST) -> None:
        if program is not None and _PROGRAM.match(program):
            found.append(Invocation(program, f"{where}:{getattr(node, 'lineno', 0)}"))

    def argv_head(arg: ast.expr, depth: int = 0) -> None:
        if depth > 3:
            return
        if isinstance(arg, ast.Call) and _call_name(arg.func) == "" and getattr(arg.func, "id", "") == "list":
            arg = arg.args[0] if arg.args else arg  # list(argv)
        if isinstance(arg, ast.Name) and arg.id in held:
            argv_head(held[arg.id], depth + 1)
        elif isinstance(arg, ast.List | ast.Tuple) and arg.elts:
            head = arg.elts[0]
            if isinstance(head, ast.Starred):
                argv_head(head.value, depth + 1)
                return
            add(_text(head), arg)
            # ["sh", "-c", SCRIPT, ...]: the script's own commands count too.
            if _text(head) in {"sh", "bash"} and len(arg.elts) > 2 and _text(arg.elts[1]) == "-c":
                script = _text(arg.elts[2])
                found.extend(Invocation(p, f"{where}:{arg.lineno}") for p in shell_programs(script or ""))

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp) and "which" in text:
                # `[t for t in ("unshare", "nsenter") if shutil.which(t) is None]`: a look-up of each name.
                looked_up = {getattr(c.args[0], "id", "") for c in ast.walk(node)
                             if isinstance(c, ast.Call) and _call_name(c.func) == "which" and c.args}
                for generator in node.generators:
                    if getattr(generator.target, "id", None) in looked_up:
                        for program in _all_texts(generator.iter):
                            add(program, generator.iter)
            continue
        name = _call_name(node.func)
        if name == "which" and node.args:
            add(_text(node.args[0]), node)
        elif name == "create_subprocess_exec" and node.args:
            add(_text(node.args[0]), node)
        elif name in _SUBPROCESS_CALLS and node.args:
            argv_head(node.args[0])
        elif isinstance(node.func, ast.Name) and node.func.id in wrappers:
            for arg in node.args:
                argv_head(arg)
    return found


def _call_name(func: ast.expr) -> str:
    """``run``/``Popen``/... for ``subprocess.X`` (or ``asyncio.create_subprocess_exec``), ``which`` for
    ``shutil.which``; empty for any other call."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "subprocess" and func.attr in _SUBPROCESS_CALLS:
            return func.attr
        if func.value.id == "asyncio" and func.attr == "create_subprocess_exec":
            return func.attr
        if func.value.id == "shutil" and func.attr == "which":
            return "which"
    if isinstance(func, ast.Name) and func.id == "create_subprocess_exec":
        return func.id
    return ""


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _all_texts(node: ast.expr) -> list[str]:
    """The items of a literal tuple or list of program-like strings, else none (a comprehension over other data)."""
    if not isinstance(node, ast.Tuple | ast.List) or not node.elts:
        return []
    texts = [_text(e) for e in node.elts]
    return [t for t in texts if t is not None and _PROGRAM.match(t)] if None not in texts else []


def shell_programs(script: str) -> list[str]:
    """The programs a shell text runs: the first word of each simple command (``command -v X`` counts X), less
    builtins, keywords, variables, paths, case patterns and the script's own functions."""
    own = set(re.findall(r"^\s*([A-Za-z_][\w-]*)\s*\(\)\s*\{", script, re.MULTILINE))
    text = "\n".join(_strip_comment(line) for line in script.replace("\\\n", " ").splitlines())
    text = re.sub(r"\$\{[^}]*\}", "$V", _unquote(text))   # ${VAR:-default}, ${#array[@]}
    programs: list[str] = []
    depth = 0
    for segment, delimiter in re.findall(r"([^;|&(){}\n`]*)(\$\(|&&|\|\||[;|&(){}\n`]|$)", text):
        is_case_pattern = delimiter == ")" and depth == 0
        if delimiter in ("$(", "("):
            depth += 1
        elif delimiter == ")" and depth:
            depth -= 1
        words = segment.split()
        while words and (re.match(r"\w+=", words[0]) or words[0] in _PREFIXES or re.match(r"\d*[<>]", words[0])):
            words = words[2:] if re.fullmatch(r"\d*[<>]&?", words[0]) else words[1:]
        if not words or is_case_pattern:
            continue
        if words[0] == "command" and len(words) > 2 and words[1] == "-v":
            words = words[2:]
        program = words[0]
        if program in SHELL_BUILTINS or program in own or not _PROGRAM.match(program):
            continue
        programs.append(program)
    return programs


def _unquote(text: str) -> str:
    """``text`` with quoted data dropped: a single-quoted string is literal data; of a double-quoted one only its
    command substitutions ``$(...)`` run, so they are kept (their own quotes dropped the same way)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
            out.append("''")
            continue
        if ch != '"':
            out.append(ch)
            i += 1
            continue
        i += 1
        while i < len(text) and text[i] != '"':
            if text[i] == "\\":
                i += 2
            elif text.startswith("$(", i):
                depth, j = 1, i + 2
                while j < len(text) and depth:
                    depth += {"(": 1, ")": -1}.get(text[j], 0)
                    j += 1
                out.append(" " + _unquote(text[i:j]) + " ")
                i = j
            else:
                i += 1
        i += 1
        out.append(" QUOTED ")  # a word, never a program: what follows a quoted word is its argument
    return "".join(out)


def _strip_comment(line: str) -> str:
    """The line without its comment: a ``#`` at the start or after a blank, outside quotes (as these scripts
    write them)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def makefile_recipes(text: str) -> str:
    """The shell of a Makefile's recipes (tab-indented lines, continuations joined, ``@``/``-`` prefixes dropped,
    ``$$`` unescaped); make variables such as ``$(PY)`` stay ``$(...)`` and are skipped as variables."""
    lines: list[str] = []
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.startswith("\t"):
            body = line[1:].lstrip("@-+ ")
            body = re.sub(r"\$\((\w+)\)", "MAKEVAR_", body).replace("$$", "$")
            lines.append(body)
    return "\n".join(lines)


def project_invocations(root: Path, python_dirs: Iterable[str], shell_files: Iterable[str],
                        makefile: str) -> Iterator[Invocation]:
    """Every invocation in the project at ``root``: the Python files under ``python_dirs`` (and ``setup.py``),
    the shell scripts ``shell_files`` and the recipes of ``makefile``."""
    paths = sorted(p for d in python_dirs for p in (root / d).rglob("*.py"))
    for path in [*paths, root / "setup.py"]:
        if path.is_file():
            yield from python_invocations(path.read_text(), str(path.relative_to(root)))
    for rel in shell_files:
        for program in shell_programs((root / rel).read_text()):
            yield Invocation(program, rel)
    for program in shell_programs(makefile_recipes((root / makefile).read_text())):
        yield Invocation(program, makefile)
