"""How a pydantic validation error is told to a user: one line per problem naming the source (a file, a request),
the field path and the reason. The one formatter of every model the project validates (configuration files, the
ACL file, request bodies); ``config`` re-exports it.
"""

from __future__ import annotations

from pydantic import ValidationError


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def describe_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem: ``file: field.path: reason (got value)``."""
    lines = []
    for err in exc.errors():
        reason = err["msg"]
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        lines.append(f"{source}: {_loc(err['loc'])}: {reason}{shown}")
    return "\n".join(lines)
