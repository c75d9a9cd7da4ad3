"""Each option declared once, as the metadata of a dataclass field (``option``: its help text and how a
command line takes it; its name, default and whether it is required are the field's own), and what is
generated from those declarations: a command's ``argparse`` options (``add_options``: ``thanos
prune-model``'s from the request's fields, ``--recover-*`` and ``--distill-*`` from ``Recovery``'s and
``Distillation``'s, ``thanos distill``'s from ``Distillation``'s), the flags a command line gives for
values (``command_line``: the workflow's ``distill:`` keys as ``thanos distill``'s options), each flag's
words in errors (``flags``). Torch-free, stdlib only: ``--help`` and the workflow's parse import it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

SCALARS = (int, float, str)  # the types a command line takes from the default's type


def option(help: str, flag: str | None = None, **argparse_options: Any) -> dict[str, Any]:
    """A field's metadata declaring it an option: its ``help`` text, its ``flag`` where it is not ``--``
    and the field's name with dashes (``--no-disk-check``), and how the command line takes it
    (``argparse`` keywords: ``type``, ``choices``, ``action``, ``metavar``). A help text that does not
    say the default itself gets `` (default X)`` from the field's default (``help_text``)."""
    declared: dict[str, Any] = {"help": help, "argparse": argparse_options}
    return declared | ({"flag": flag} if flag is not None else {})


def declared(cls: type) -> tuple[dataclasses.Field, ...]:
    """The fields of ``cls`` declared as options (those with a help text), in their order."""
    return tuple(field for field in dataclasses.fields(cls) if "help" in field.metadata)


def named(cls: type, name: str) -> dataclasses.Field:
    """The declared field ``name`` of ``cls``."""
    return next(field for field in declared(cls) if field.name == name)


def has_default(field: dataclasses.Field) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


def flag(field: dataclasses.Field, prefix: str = "") -> str:
    """The field's flag on a command line: ``--`` and ``prefix`` + its name with dashes
    (``--distill-batch-size``), or the flag it declares."""
    return field.metadata.get("flag") or "--" + (prefix + field.name).replace("_", "-")


def flags(*classes: type) -> dict[str, str]:
    """The options of ``classes`` whose flag is not their name with dashes (``{"disk_check":
    "--no-disk-check"}``), for ``thanos.errors.FlagWords``."""
    return {
        field.name: field.metadata["flag"]
        for cls in classes
        for field in declared(cls)
        if "flag" in field.metadata
    }


def help_text(field: dataclasses.Field) -> str:
    """The field's help, with `` (default X)`` when it has a default worth saying (not None, not a switch's,
    not empty) and the help does not already say it."""
    text, default = field.metadata["help"], field.default
    if "default" in text or not isinstance(default, SCALARS) or isinstance(default, bool) or default == "":
        return text
    return f"{text} (default {_number(default) if isinstance(default, float) else default})"


def _number(value: float) -> str:
    """A float as a person writes it: 0.125, 2, 3e-3, 1.5e-4."""
    if value == 0 or abs(value) >= 0.01:
        return f"{value:g}"
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def add_option(
    parser: Any, field: dataclasses.Field, prefix: str = "", required: bool = True, help: str | None = None
) -> None:
    """``field`` as an option of ``parser`` (a parser or an argument group): its flag (``flag``), its help
    (``help_text``, or ``help`` where a command takes less than the field allows), its argparse keywords,
    the type of its default where it declares none; required when the field has no default and
    ``required``. Not given, it is None (the field's default applies where the values become the
    dataclass), so that what was given can be told from what was not."""
    given = dict(field.metadata["argparse"])
    if "action" not in given and "type" not in given and isinstance(field.default, SCALARS):
        given["type"] = type(field.default)
    given.setdefault("required", required and not has_default(field))
    parser.add_argument(
        flag(field, prefix), dest=prefix + field.name, default=None, help=help or help_text(field), **given
    )


def add_options(parser: Any, cls: type, prefix: str = "", required: bool = True) -> None:
    """Every declared option of ``cls`` (``add_option``)."""
    for field in declared(cls):
        add_option(parser, field, prefix, required)


def given(args: argparse.Namespace, cls: type, prefix: str = "") -> dict[str, Any]:
    """The options of ``cls`` given on the command line (``--distill-lr 3e-4`` -> ``{"lr": 3e-4}``)."""
    values = ((field.name, getattr(args, prefix + field.name, None)) for field in declared(cls))
    return {name: value for name, value in values if value is not None}


def command_line(value: Any, prefix: str = "") -> list[str]:
    """The options of ``value`` (a dataclass of declared options taking a value each) that are not None, as
    a command line built by ``add_options`` takes them: ``["--tokens", "131072", "--lr", "0.0003"]``."""
    words = []
    for field in declared(type(value)):
        option_value = getattr(value, field.name)
        if option_value is not None:
            words += [flag(field, prefix), str(option_value)]
    return words
