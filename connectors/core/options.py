"""Spark data source options read into the connectors' pydantic settings models.

Used on the driver by every connector's reader and writer options (``from_options``). Spark hands a
data source its options as strings with case-insensitive names; a settings model declares each option
once, as a field (type, default, constraints, docstring) whose Spark name is the field's alias
(camelCase of the field name, ``connectors.core.settings_base.SettingsModel``). ``given_options`` picks the options a
model knows from what the user gave, ``validate_options`` validates them with pydantic's lax coercion
("3" -> 3, "true" -> True) and reports a problem as ``ReplicatorConfigError`` naming the option as the user spells
it. The link YAML is validated by the same models (``LinkConfig`` derives from the reader's and writer's
settings), so an option and its YAML key cannot disagree on a default or a bound.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from connectors.core.errors import ReplicatorConfigError
from connectors.core.settings_base import combine_errors, error_reason

M = TypeVar("M", bound=BaseModel)


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case keys (Spark option names are case-insensitive), None values dropped."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def option_name(model: type[BaseModel], field: str) -> str:
    """The Spark option name of a model field (its alias), or the field name when it has none."""
    info = model.model_fields.get(field)
    return (info.alias if info is not None else None) or field


def given_options(model: type[BaseModel], options: Mapping[str, str], *,
                  derived: Collection[str] = ()) -> dict[str, str]:
    """``{field name: value}`` of the options (lower-cased keys, ``lowered``) that name a field of
    ``model``; empty values count as not given. ``derived``: fields computed by the caller, never
    taken from an option of the same name. Options the model does not know are left to the caller."""
    values: dict[str, str] = {}
    for field, info in model.model_fields.items():
        if field in derived:
            continue
        value = options.get((info.alias or field).lower())
        if value:
            values[field] = value
    return values


def validate_options(model: type[M], values: Mapping[str, Any]) -> M:
    """``model`` from field values (option strings and values derived by the caller); a validation
    error becomes one ``ReplicatorConfigError`` naming the first bad option (every problem listed)."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        raise options_error(model, exc) from exc


def options_error(model: type[BaseModel], exc: ValidationError) -> ReplicatorConfigError:
    """``exc`` as a ``ReplicatorConfigError`` whose field is the Spark option name."""
    entries: list[tuple[str, str]] = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        loc = [str(p) for p in error["loc"] if not str(p).startswith("function-")]
        field = str(ctx["field"]) if error["type"] == "replicator_field" else (loc[0] if loc else "options")
        reason = "required (or give config + link)" if error["type"] == "missing" else error_reason(error)
        entries.append((option_name(model, field), reason))
    first_field, first_reason = combine_errors(entries)
    return ReplicatorConfigError(first_reason, field=first_field)
