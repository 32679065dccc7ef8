"""Markdown tables of a pydantic settings model's keys: key (the YAML name, or the alias where the YAML uses it),
default and meaning (the field's docstring). Used by ``docgen.config_reference``."""

from __future__ import annotations

import enum
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

KiB = 1024
MiB = 1024 * KiB


def _size(value: int) -> str | None:
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        if value >= unit and value % unit == 0:
            return f"{value // unit} {name}"
    return None


def duration(seconds: float) -> str:
    """``604800`` -> ``7 days``, ``600`` -> ``10 minutes``, ``2.5`` -> ``2.5 seconds``."""
    for unit, name in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= unit and seconds % unit == 0:
            count = int(seconds // unit)
            return f"{count} {name}{'s' if count != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


def default_text(name: str, info: Any, *, durations: bool = False) -> str:
    """A field's default as the table shows it: ``required``, ``none``, a list, a size, a duration (``durations``:
    a float field whose name carries no unit is seconds, as the replicator's settings read ``"7 days"``), or the
    value."""
    if info.default_factory is not None:
        value = info.default_factory()
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None or value == "" or value == [] or value == {}:
        return "none"
    if isinstance(value, BaseModel):
        return "defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        value = value.value
    if durations and isinstance(value, float) and not name.endswith(("_ms", "_seconds", "_hours")):
        return duration(value)
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        return f"`{seconds} s`" if seconds == value.total_seconds() else f"`{value.total_seconds()} s`"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, int) and ("size" in name or "bytes" in name or "ahead" in name or "gap" in name):
        size = _size(value)
        if size is not None:
            return size
    if isinstance(value, (list, tuple, frozenset, set)):
        value = ", ".join(str(v) for v in value)
    return f"`{value}`"


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def model_table(model: type[BaseModel], *, prefix: str = "", by_alias: bool = False,
                skip: frozenset[str] = frozenset(), durations: bool = False) -> str:
    """One table row per field of ``model`` (in declaration order), ``prefix`` before each key; ``durations``: see
    ``default_text``."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        key = (info.alias or name) if by_alias else name
        meaning = info.description or ""
        if not meaning:
            raise ValueError(f"{model.__name__}.{name} has no docstring: the reference would show no meaning")
        lines.append(f"| `{prefix}{key}` | {default_text(name, info, durations=durations)} | {cell(meaning)} |")
    return "\n".join(lines)
