"""The base of every settings model of the connectors and the validators they share.

Used by ``connectors.core.config`` (the link YAML) and ``connectors.core.sync_settings`` (the polling
connectors' settings under a link); kept apart so both import it and neither imports the other's models
in a circle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import validate_topic

_DURATION_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
_DURATION_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*")


class SettingsModel(BaseModel):
    """Frozen, unknown keys forbidden. YAML keys are the field names; the camelCase aliases are the same
    settings' Spark option names (``connectors.core.options``), never accepted from YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, validate_by_name=True,
                              validate_by_alias=False, use_attribute_docstrings=True)


def field_error(field_path: str, reason: str) -> PydanticCustomError:
    """A validation error that ``load_replicator_config`` reports at ``<model path>.<field_path>``."""
    return PydanticCustomError("replicator_field", "{reason}", {"field": field_path, "reason": reason})


def check_topic(value: str) -> str:
    """``value`` if it is a valid RocketMQ topic (or group) name, else ``ValueError`` saying why."""
    try:
        validate_topic(value)
    except ProtocolError as exc:
        raise ValueError(str(exc)) from exc
    return value


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``re.compile`` with a ``ValueError`` naming the pattern."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


def parse_duration(value: Any) -> float:
    """Seconds (> 0) from a number or a string like ``"5 seconds"``, ``"500 milliseconds"``, ``"1 minute"``,
    ``"7 days"``."""
    if isinstance(value, bool):
        raise ValueError("expected seconds as a number or a string like '5 seconds'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value)
        unit = (match.group(2) or "seconds").lower() if match else ""
        if not match or unit not in _DURATION_UNITS:
            raise ValueError(f"{value!r} is not a duration like '5 seconds', '500 milliseconds' or "
                             f"'1 minute' (units: {sorted(set(_DURATION_UNITS))})")
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise ValueError("expected seconds as a number or a string like '5 seconds'")
    if seconds <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return seconds


def error_reason(error: Mapping[str, Any]) -> str:
    """The reason of one pydantic error as the config and option errors word it."""
    reason = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "enum":
        reason = f"{reason} (got {error.get('input')!r})"
    return reason


def combine_errors(entries: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(field, reason) pairs as one error: the first field, its reason and every other one after "also"."""
    (first_field, first_reason), others = entries[0], entries[1:]
    if others:
        first_reason += "; also " + "; ".join(f"{f}: {r}" for f, r in others)
    return first_field, first_reason
