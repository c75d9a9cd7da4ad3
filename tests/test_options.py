"""Each option declared once (``thanos.options``): ``thanos distill``'s options and ``prune-model``'s
``--distill-*`` come from one declaration, ``prune_model``'s keywords are the request's fields, the
workflow's schema says what the declarations say, and a distilled recipe's config reaches ``thanos distill``
as it was given."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json

import pytest
import yaml
from conftest import REPO

from thanos.commands import distill, prune_model
from thanos.errors import OptionError
from thanos.options import command_line, declared, given, help_text
from thanos.pruning.structures import AXES
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import Recipe
from thanos.recipes.training import Distillation, Recovery
from thanos.runner import recipe_options, request
from thanos.runner.api import prune_model as prune_model_function
from thanos.workflow.config import expand, schema_problems


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
    fields = [*dataclasses.fields(recipe_options.RecipeOptions), *dataclasses.fields(request.SizeOptions)]
    assert sorted(recipe["properties"]) == sorted(f.name for f in fields)
    assert sorted(recipe["required"]) == ["method", "sparsity"]
    assert recipe["properties"]["axes"] == {"$ref": "#/definitions/axes"}
    axes = schema["definitions"]["axes"]["oneOf"]
    assert next(form for form in axes if form["type"] == "array")["items"]["enum"] == list(AXES)
    # the recipe's own fields are the same options, with the workflow's name and chain
    recipe_fields = {f.name for f in dataclasses.fields(Recipe)}
    assert recipe_fields - {f.name for f in dataclasses.fields(recipe_options.RecipeOptions)} == {
        "name",
        "chain",
    }


SAME_RECIPES = [  # accepted and refused alike by `thanos prune-model` and a workflow's recipes: entry
    {"method": "wanda", "sparsity": 0.5},
    {"method": "wanda", "sparsity": 0.5, "blocksize": 64},
    {"method": "wanda", "sparsity": 0.5, "damp": 0.1},
    {"method": "magnitude", "sparsity": "2:4", "alpha": 0.1},
    {"method": "thanos", "sparsity": 0.5, "width_multiple": 64},
    {"method": "thanos", "sparsity": "neurons:0.3", "width_multiple": 64},
    {"method": "thanos", "sparsity": "depth:2", "recover": True},
    {"method": "thanos", "sparsity": "depth:2", "compact": False},
    {"method": "thanos", "sparsity": "depth:2", "block_map": False},
    {"method": "thanos", "sparsity": "0.5", "block_map": False},
    {"method": "thanos", "sparsity": 0.0},
    {"method": "thanos", "sparsity": "structured:0"},
    {"method": "thanos", "sparsity": "2:4", "compact": True},
    {"method": "thanos", "sparsity": "0.5", "compact": False},
    {"method": "thanos", "sparsity": "neurons:0.3", "compact": False},
    {"method": "thanos", "sparsity": "vocab:0.3", "vocab_text": "t.txt"},
    {"method": "thanos", "sparsity": "0.5", "vocab_text": "t.txt"},
    {"method": "thanos", "sparsity": "depth:1+neurons:0.3", "vocab_text": "t.txt"},
    {"method": "thanos", "sparsity": "depth:1+neurons:0.3", "width_multiple": 16},
    {"method": "thanos", "sparsity": "depth:1+neurons:0.3", "recover": True},
    {"method": "thanos", "sparsity": "0.5", "profile": "owl"},
    {"method": "thanos", "sparsity": "2:4", "profile": "owl"},
    {"method": "thanos", "sparsity": "0.5", "owl_m": 5},
    {"method": "thanos", "sparsity": "params:0.25", "axes": "depth,neurons"},
    {"method": "thanos", "sparsity": "params:0.25", "axes": ["depth", "neurons"]},
    {"method": "thanos", "sparsity": "0.5", "axes": "depth"},
    {"method": "sparsegpt", "sparsity": "heads:0.5", "blocksize": 64},
    {"method": "thanos", "sparsity": "0.5", "recover": True},
    {"method": "magnitude", "sparsity": "0.5", "recover": True},
    {"method": "thanos", "sparsity": "vocab:0.3", "recover": True},
    {"method": "thanos", "sparsity": "vocab:0.3", "distill": {"tokens": 1000}},
    {"method": "thanos", "sparsity": "0.5", "exclude": ["lm_head"]},
    {"method": "nosuch", "sparsity": "0.5"},
]


def _workflow_refusal(entry: dict) -> str | None:
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    config = {"recipes": {"r": dict(entry)}}
    problems = [problem for problem in schema_problems(config, schema) if problem.startswith("recipes.")]
    if problems:
        return problems[0]
    try:
        expand(config)
    except (ConfigError, ValueError) as err:
        return str(err)
    return None


def _prune_model_refusal(entry: dict) -> str | None:
    options = {name: value for name, value in entry.items() if name not in ("method", "sparsity")}
    try:
        request.build_request("model", entry["method"], entry["sparsity"], options | {"out": "out"})
    except (OptionError, ConfigError, ValueError) as err:
        return str(err)
    return None


@pytest.mark.parametrize("entry", SAME_RECIPES, ids=lambda entry: json.dumps(entry))
def test_the_workflow_and_prune_model_accept_and_refuse_the_same_recipes(entry: dict) -> None:
    """A recipe is checked once, whichever door it comes in by: a workflow entry refuses what `thanos
    prune-model` refuses (an option its method or pattern does not use, a pattern that prunes nothing, a
    recovery with nothing to recover), with the same words after the option's name."""
    workflow, prune_model = _workflow_refusal(entry), _prune_model_refusal(entry)
    assert (workflow is None) == (prune_model is None), (workflow, prune_model)
    if workflow is not None and "is not of type" not in workflow and "expected a fraction" not in workflow:
        problem = prune_model.split(": ", 1)[1]  # its options named as flags there, as keys here
        assert problem.replace("--", "") in workflow, (workflow, prune_model)


def test_one_exclude_pattern_given_as_a_string_is_one_pattern() -> None:
    """``prune_model(..., exclude="self_attn")``: one pattern, as ``--exclude self_attn`` is (it was split
    into its characters, and refused as leaving no layer to prune)."""
    from thanos.runner.recipe_options import RecipeOptions

    (one,) = RecipeOptions(method="thanos", sparsity=0.5, exclude="self_attn").recipes()
    (two,) = RecipeOptions(method="thanos", sparsity=0.5, exclude=["self_attn", "mlp.up"]).recipes()
    assert one.exclude == ("self_attn",) and two.exclude == ("self_attn", "mlp.up")


def test_a_streamed_source_names_its_dataset() -> None:
    """``distill.source: "hf:"`` names no dataset: refused at the config check, where the distillation job
    failed after the pruning with ``IndexError: list index out of range``."""
    from thanos.recipes.fields import ConfigError
    from thanos.recipes.training import Distillation

    for source in ("hf:", "hf: :en"):
        with pytest.raises(ConfigError, match=r"recipes\.x\.distill\.source: got 'hf:.*'; names no dataset"):
            Distillation.parse("recipes.x", {"tokens": 64, "source": source})
    assert (
        Distillation.parse("recipes.x", {"tokens": 64, "source": "hf:allenai/c4:en"}).source
        == "hf:allenai/c4:en"
    )


def test_cores_are_those_this_process_may_run_on() -> None:
    """The default and the most --cores give are the CPUs of this process's affinity (a SLURM job's
    allocation), not the machine's; more asked are said, not used."""
    import os

    usable = len(os.sched_getaffinity(0))
    assert request.Resources().cores == request.Resources().threads == usable
    asked = request.Resources(cores=usable + 97)
    assert asked.threads == usable
    assert (
        asked.cores_text
        == f"{usable} core{'s' * (usable > 1)} (--cores {usable + 97}: this process may run on {usable})"
    )
    assert request.Resources(cores=1).cores_text == "1 core"
    with pytest.raises(OptionError, match="cores"):
        request.Resources(cores=0)


def test_compact_given_to_a_recipe_that_keeps_every_shape_is_refused() -> None:
    """``--no-compact`` with ``0.5`` was taken without a word, where every other option a recipe does not
    use is refused; the workflow's entry refuses it alike."""
    entry = {"method": "thanos", "sparsity": "0.5", "compact": False}
    said = _prune_model_refusal(entry)
    assert said is not None and "0.5 keeps every tensor's shape" in said, said
    assert _workflow_refusal(entry) is not None
