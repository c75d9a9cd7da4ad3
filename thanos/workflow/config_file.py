"""A workflow config file read strictly, before Snakemake's reading of it is trusted: a key given twice in one
mapping (YAML keeps the last one and drops the first, a recipe or a whole ``calibration:`` block with it), a
file that is not there, not YAML (said with its line and column) or not a mapping of keys, each refused
naming the file and the fix. ``thanos workflow`` reads its ``--configfile`` files so before it starts
Snakemake, and the workflow's config check reads them so too (keys given twice: ``snakemake`` run as such)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from thanos.recipes.fields import ConfigError

FIX = "docs/configuration.md lists the keys"


class _Twice(yaml.YAMLError):
    """A key given twice in one mapping."""

    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(f"{key!r} is given twice, on line {first} and on line {line}")
        self.key, self.line, self.first = key, line, first


class _Strict(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML's safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool):
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _Twice(key, line, seen[key])
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The config in ``path`` (YAML or JSON), refused naming the file and the fix where it is not there, not
    a file, not UTF-8 YAML, not a mapping of keys, or gives a key twice in one mapping."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"--configfile {path}: no such file; give the path of a YAML config ({FIX})")
    if not file.is_file():
        raise ConfigError(f"--configfile {path}: not a file; give the path of a YAML config ({FIX})")
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_Strict)  # noqa: S506 - a safe loader
    except _Twice as err:
        raise ConfigError(
            f"{path}: line {err.line}: {err}; YAML keeps the last and drops the first: rename one of them or "
            "delete it"
        ) from None
    except yaml.MarkedYAMLError as err:
        where = (
            f"line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}: "
            if err.problem_mark
            else ""
        )
        problem = " ".join(str(err.problem or err).split())
        raise ConfigError(
            f"{path}: {where}not valid YAML ({problem}); indent with spaces, not tabs, and quote values "
            "holding ': ' or '#'"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:
        raise ConfigError(f"{path}: not readable YAML ({' '.join(str(err).split())})") from None
    if data is None:
        raise ConfigError(f"{path} is empty; give the config's keys ({FIX})")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: a YAML {type(data).__name__}, not a mapping of keys; give the config's keys ({FIX})"
        )
    return data
