"""Spark data source options: case-insensitive strings, read into typed values.

Used on the driver by every connector's reader and writer options (``from_options``).
"""

from __future__ import annotations

from collections.abc import Mapping

from connectors.core.errors import ConfigError


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case keys (Spark option names are case-insensitive), None values dropped."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Read a boolean option ("true"/"false", any case); ConfigError naming the option otherwise."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"must be true or false, got {raw!r}", field=name)
    return value == "true"


def parse_int(options: Mapping[str, str], name: str, default: int | None, *, minimum: int = 0) -> int | None:
    """Read an integer option >= ``minimum``; ConfigError naming the option otherwise."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise ConfigError(f"must be an integer, got {raw!r}", field=name) from exc
    if value < minimum:
        raise ConfigError(f"must be >= {minimum}, got {value}", field=name)
    return value
