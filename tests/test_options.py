"""Each option declared once (``thanos.options``): ``thanos distill``'s options and ``prune-model``'s
``--distill-*`` come from one declaration, ``prune_model``'s keywords are the request's fields, the
workflow's schema says what the declarations say, and a distilled recipe's config reaches ``thanos distill``
as it was given."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest
import yaml
from conftest import REPO

from thanos.commands import distill, prune_model
from thanos.options import command_line, declared, given, help_text
from thanos.recipe import Distillation, Recovery
from thanos.runner import request
from thanos.runner.api import prune_model as prune_model_function


def parser_of(command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"thanos {command.__name__.rpartition('.')[2]}")
    command.add_arguments(parser)
    return parser


def actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_distill_and_prune_model_list_the_same_distillation_options() -> None:
    """`thanos distill --help` lists every `--distill-*` option of `prune-model --help` without the prefix,
    with the same help (the default in it), type and default; only `--tokens` is required (`prune-model`
    runs without distillation)."""
    alone, pruning = parser_of(distill), parser_of(prune_model)
    own, prefixed = actions(alone), actions(pruning)
    distill_flags = sorted(flag for flag in prefixed if flag.startswith("--distill-"))
    assert len(distill_flags) == len(declared(Distillation)) == 12
    for flag in distill_flags:
        one, other = own["--" + flag.removeprefix("--distill-")], prefixed[flag]
        same = ("help", "type", "default", "choices", "metavar", "nargs")
        assert {k: getattr(one, k) for k in same} == {k: getattr(other, k) for k in same}, flag
        assert one.required == (flag == "--distill-tokens") and not other.required
    shown = [" ".join(parser.format_help().split()) for parser in (alone, pruning)]
    for text in ("window length in tokens (default 512)", "peak learning rate of AdamW (default 1e-4)"):
        assert all(text in help for help in shown), text


def test_given_options_become_the_distillation_and_back() -> None:
    """The workflow's `distill:` keys (the fields) as `thanos distill`'s flags (``command_line``, what the
    rule's params give) parse back to the same options; only the options given reach the dataclass."""
    wanted = Distillation(tokens=4096, source="hf:a/b:en", lr=3e-4, warmup=0, hidden_weight=0.5, seed=3)
    words = ["--student", "s", "--teacher", "t", "--out", "o", *command_line(wanted)]
    args = parser_of(distill).parse_args(words)
    assert given(args, Distillation) == {
        "tokens": 4096, "source": "hf:a/b:en", "text_field": "text", "seqlen": 512, "batch_size": 8,
        "micro_batch": 1, "lr": 3e-4, "warmup": 0, "heldout": 8, "checkpoint_every": 50, "seed": 3,
        "hidden_weight": 0.5,
    }  # fmt: skip
    assert Distillation(**given(args, Distillation)) == wanted
    prefixed = parser_of(prune_model).parse_args(
        ["--model", "m", "--method", "wanda", "--sparsity", "0.5", "--out", "o", "--distill-lr", "0.01"]
    )
    assert given(prefixed, Distillation, "distill_") == {"lr": 0.01}


def test_prune_model_keywords_are_the_request_fields() -> None:
    """`thanos.prune_model`'s keywords, written out for readers and editors, are the request's fields (its
    own options and those of its groups but recovery's and distillation's, the entries of `recover` and
    `distill`): the same names and defaults (``sparsity`` may be left out: a ``Recipe`` as the method holds
    it)."""
    groups = [group for _, group, prefix in request.GROUPS if not prefix]
    fields = [*declared(request.PruneRequest), *(f for g in groups for f in dataclasses.fields(g))]
    parameters = dict(inspect.signature(prune_model_function).parameters)
    assert parameters.pop("stream").default is None  # where the progress goes: not part of the request
    assert sorted(parameters) == sorted(field.name for field in fields)
    for field in fields:
        parameter = parameters[field.name]
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        if field.name == "sparsity":
            default = None
        assert parameter.default == default, (field.name, parameter.default, default)
        positional = field.name in ("model", "method", "sparsity")
        assert (parameter.kind == inspect.Parameter.KEYWORD_ONLY) != positional, field.name


@dataclasses.dataclass(frozen=True)
class MoreOutput(request.Output):
    shards: int = 1  # a field without its keyword


@dataclasses.dataclass(frozen=True)
class OtherCalibration(request.CalibrationOptions):
    nsamples: int = 64  # a default the keyword does not have


@pytest.mark.parametrize("changed", [MoreOutput, OtherCalibration])
def test_a_keyword_out_of_step_is_found(changed: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: a field added to the request without its keyword, or a default changed in
    one place, is caught."""
    base = changed.__mro__[1]
    groups = tuple((title, changed if group is base else group, p) for title, group, p in request.GROUPS)
    monkeypatch.setattr(request, "GROUPS", groups)
    with pytest.raises(AssertionError):
        test_prune_model_keywords_are_the_request_fields()


SCHEMA_TYPES = {int: "integer", float: "number", str: "string"}


@pytest.mark.parametrize("cls, definition", [(Distillation, "distill"), (Recovery, "recover")])
def test_the_config_schema_says_what_the_declarations_say(cls: type, definition: str) -> None:
    """The workflow's `distill:` and `recover:` keys are the fields' names, with their types, choices and
    help texts (defaults included): a new option is one field, and this test says what the schema lacks."""
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    options = schema["definitions"][definition]
    options = next(form for form in options.get("oneOf", [options]) if form["type"] == "object")
    assert list(options["properties"]) == [field.name for field in declared(cls)]
    assert options.get("required", []) == [f.name for f in declared(cls) if f.default is dataclasses.MISSING]
    for field in declared(cls):
        key = options["properties"][field.name]
        typed = field.metadata["argparse"].get("type") or type(field.default)
        assert key["type"] == SCHEMA_TYPES[typed], field.name
        assert key.get("enum") == field.metadata["argparse"].get("choices"), field.name
        assert key["description"] == help_text(field), field.name


def test_a_config_recipe_takes_the_recipe_options() -> None:
    """A config recipe's keys are `prune_model`'s recipe keywords (``RecipeOptions``' fields) and a size's
    (``SizeOptions``': ``axes``)."""
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    recipe = schema["properties"]["recipes"]["additionalProperties"]
    fields = [*dataclasses.fields(request.RecipeOptions), *dataclasses.fields(request.SizeOptions)]
    assert sorted(recipe["properties"]) == sorted(f.name for f in fields)
    assert sorted(recipe["required"]) == ["method", "sparsity"]
