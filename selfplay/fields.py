"""Reading a settings mapping into a frozen dataclass: the one check every `from_mapping` shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def field_values(cls: type, values: Mapping[str, Any] | None, unknown: str) -> dict[str, Any]:
    """`values` (a dict or an OmegaConf node; None = empty) as keyword arguments of dataclass `cls`.

    A key that names no field is a ValueError, never ignored: a typo in a config would otherwise
    leave its default in force without a word. `unknown` is the message, formatted with `unknown`
    (the stray keys) and `known` (the field names), both sorted."""
    values = dict(values.items()) if values else {}
    known = sorted(f.name for f in dataclasses.fields(cls))
    stray = sorted(set(values) - set(known))
    if stray:
        raise ValueError(unknown.format(unknown=stray, known=known))
    return values
