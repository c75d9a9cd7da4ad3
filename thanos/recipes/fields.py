"""A config entry's fields checked: the error that names the key and the field (``ConfigError``), unknown
keys refused, numbers checked. Torch-free, as every module of ``thanos.recipes``."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """A recipe or config value that is not valid; the message names the key (``recipes.r1.alpha: ...``).
    ``field`` is the recipe's field at fault (``alpha``, ``recover.epochs``; None: the entry as a whole) and
    ``problem`` what is wrong with it, for a front that names fields in its own words (``prune_model``)."""

    def __init__(self, message: str, field: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.problem = message if problem is None else problem


def invalid(key: str, field: str, problem: str) -> ConfigError:
    """``key.field: problem`` as a ``ConfigError`` that knows its field."""
    return ConfigError(f"{key}.{field}: {problem}", field, problem)


def check_fields(key: str, data: dict[str, Any], cls: type, what: str) -> None:
    """Refuse the keys of ``data`` that are not fields of the dataclass ``cls``, naming them and the rest."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{key}: unknown {what}(s) {', '.join(unknown)}; allowed: {', '.join(known)}")


def finite(value: Any) -> bool:
    """A real number (not a bool), finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_number(key: str, field: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise invalid(key, field, f"expected a number, got {value!r}")
