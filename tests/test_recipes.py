"""Recipes (thanos/recipes/recipe.py): the config's recipes expanded, named, checked and carried as one
object."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from thanos.cli import build_parser
from thanos.commands import _args
from thanos.pruning import methods
from thanos.pruning.sparsity import parse_sparsity
from thanos.recipes.fields import ConfigError
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.workflow.config import expand

REPO = Path(__file__).resolve().parents[1]


def config(**over) -> dict:
    return {"chain": "sequential", "recipe_grid": [], "recipes": {}} | over


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.5, "unstructured:0.5"), ("0.5", "unstructured:0.5"), ("2:4", "2:4"), (" 4 : 8 ", "4:8")]
    + [("structured:0.3", "structured:0.3"), ("unstructured:0.7", "unstructured:0.7")]
    + [(0.3333333333, "unstructured:0.3333333333")],  # the canonical text reads back exactly
)
def test_sparsity_is_parsed_once_and_its_text_is_canonical(value, text):
    recipe = Recipe("r", "wanda", value)
    assert recipe.sparsity == parse_sparsity(value) and str(recipe.sparsity) == text
    assert parse_sparsity(str(recipe.sparsity)) == recipe.sparsity


@pytest.mark.parametrize(
    ("value", "message"),
    [(124, "recipes.x.sparsity: got 124; quote n:m patterns")]
    + [("half", "recipes.x.sparsity: 'half' in 'half' is not a number")]  # the value named once
    + [(1.5, "recipes.x.sparsity"), ("4:2", "0 < n < m")],
)
def test_sparsity_errors_name_the_key(value, message):
    with pytest.raises(ConfigError, match="recipes.x.sparsity") as err:
        Recipe.from_dict({"method": "wanda", "sparsity": value}, key="recipes.x")
    assert message in str(err.value)


def test_defaults_are_filled_by_one_policy():
    """n:m is exact n:m for every method (alpha 0); Thanos structured keeps 10 % of the rows dense."""
    assert (Recipe(None, "thanos", "2:4").alpha, Recipe(None, "thanos", "2:4").blocksize) == (0.0, 512)
    assert (Recipe(None, "thanos", 0.5).alpha, Recipe(None, "thanos", 0.5).blocksize) == (0.0, 128)
    assert Recipe(None, "thanos", "structured:0.3").alpha == 0.1
    assert (Recipe(None, "sparsegpt", "2:4").alpha, Recipe(None, "sparsegpt", "2:4").blocksize) == (0.0, 128)
    assert Recipe(None, "wanda", 0.5).blocksize is None and Recipe(None, "wanda", 0.5).damp == 0.01
    neurons = Recipe(None, "thanos", "neurons:0.3")
    assert neurons.compact is True and Recipe(None, "thanos", "0.5").compact is False
    owl = Recipe(None, "wanda", 0.7, profile="owl")
    assert (owl.owl_m, owl.owl_lambda) == (5.0, 0.08) and Recipe(None, "wanda", 0.7).owl_m is None
    assert Recipe(None, "thanos", "2:4") == Recipe(None, "thanos", "2:4", alpha=0, blocksize=512, damp=0.01)


@pytest.mark.parametrize(
    ("recipe", "name"),
    [
        (Recipe(None, "thanos", "unstructured:0.5"), "thanos_u50"),
        (Recipe(None, "thanos", "unstructured:0.125"), "thanos_u12.5"),
        (Recipe(None, "thanos", "2:4"), "thanos_2-4"),
        (Recipe(None, "thanos", "2:4", alpha=0.1), "thanos_2-4_a0.1"),
        (Recipe(None, "thanos", "4:8", alpha=0.1, blocksize=64), "thanos_4-8_a0.1_B64"),
        (Recipe(None, "thanos", "structured:0.3"), "thanos_s30"),
        (Recipe(None, "thanos", "structured:0.3", alpha=0), "thanos_s30_a0"),
        (Recipe(None, "magnitude", "structured:0.3", damp=0.02), "magnitude_s30_damp0.02"),
        (Recipe(None, "wanda", 0.7, profile="owl"), "wanda_u70_owl"),
        (Recipe(None, "wanda", 0.7, profile="owl", owl_m=3), "wanda_u70_owl-m3"),
        (Recipe(None, "thanos", "neurons:0.3", compact=False), "thanos_n30_zeros"),
    ],
)
def test_one_naming_function_names_what_differs_from_the_defaults(recipe, name):
    assert recipe.name == recipe.default_name() == name
    back = from_name(name)
    assert back["method"] == recipe.method and back["sparsity"] == str(recipe.sparsity)
    assert back["alpha"] == (recipe.alpha if "_a" in name else None)
    assert ("profile" in back) == recipe.owl


def test_names_of_different_recipes_differ_and_foreign_names():
    exclude = Recipe(None, "thanos", "2:4", exclude=["self_attn"])
    assert exclude.name.startswith("thanos_2-4_x") and exclude.name != Recipe(None, "thanos", "2:4").name
    assert Recipe(None, "thanos", "2:4").default_name(always=("alpha",)) == "thanos_2-4_a0"
    assert from_name("my_recipe") is None
    assert from_name("obc_u50") is None  # not a method of thanos.pruning.methods


def test_expand_grid_then_named_recipes():
    grid = [
        {"methods": ["magnitude", "thanos"], "sparsities": ["0.5", "2:4"], "alpha": [0]},
        {"methods": ["thanos"], "sparsities": ["4:8"], "alpha": [0, 0.1], "blocksize": 64},
    ]
    named = {"mine": {"method": "sparsegpt", "sparsity": 0.6, "damp": 0.02}}
    recipes = expand(config(recipe_grid=grid, recipes=named))
    assert list(recipes) == [
        "magnitude_u50",
        "magnitude_2-4",
        "thanos_u50",
        "thanos_2-4",
        "thanos_4-8_a0_B64",
        "thanos_4-8_a0.1_B64",
        "mine",
    ]
    assert recipes["thanos_4-8_a0.1_B64"] == Recipe(
        "thanos_4-8_a0.1_B64", "thanos", "4:8", blocksize=64, alpha=0.1, chain="sequential"
    )
    # a grid's block size on a pattern its method runs without one is refused, as prune-model refuses it
    unused = [{"methods": ["thanos"], "sparsities": ["structured:0.3"], "blocksize": 64}]
    with pytest.raises(
        ConfigError, match=r"recipe_grid\[0\]: blocksize: thanos structured:0.3 does not use it"
    ):
        expand(config(recipe_grid=unused))
    assert str(recipes["mine"].sparsity) == "unstructured:0.6" and recipes["mine"].damp == 0.02
    assert recipes["magnitude_u50"].alpha == 0
    assert not recipes["magnitude_u50"].needs_calibration and recipes["mine"].needs_calibration


def test_a_distilled_recipe_distils_the_recipe_that_prunes_the_same_way():
    """A recipe with `distill` is trained from the model of the config's recipe that prunes the same way;
    without one, that recipe is added (its default name, or the distilled one's + _pruned), just before."""
    from thanos.workflow.config import distilled_from

    kd = {"tokens": 4096, "source": "data/train.jsonl", "lr": 3e-4}
    grid = [{"methods": ["wanda"], "sparsities": [0.5], "distill": kd}]
    named = {
        "t": {"method": "thanos", "sparsity": 0.5},
        "t_kd": {"method": "thanos", "sparsity": 0.5, "distill": kd},
        "n_kd": {"method": "thanos", "sparsity": "neurons:0.3", "distill": {"tokens": 100}},
    }
    recipes = expand(config(recipe_grid=grid, recipes=named))
    grid_name = "wanda_u50_kd4096-s" + recipes["t_kd"].distill.tag().split("-s")[1]
    assert list(recipes) == ["wanda_u50", grid_name, "t", "t_kd", "thanos_n30", "n_kd"]
    assert {name: distilled_from(r, recipes) for name, r in recipes.items() if r.distill} == {
        grid_name: "wanda_u50",
        "t_kd": "t",
        "n_kd": "thanos_n30",
    }
    assert recipes["t_kd"].distill.lr == 3e-4 and recipes["t_kd"].distill.steps == 1  # 8 windows, batch 8
    assert Recipe.from_json(recipes["t_kd"].to_json()).distill == recipes["t_kd"].distill
    taken = {"thanos_n30": {"method": "thanos", "sparsity": "neurons:0.3", "damp": 0.02}} | named
    assert "n_kd_pruned" in expand(config(recipes=taken))
    twice = named | {"n_kd2": {"method": "thanos", "sparsity": "neurons:0.3", "distill": {"tokens": 200}}}
    both = expand(config(recipes=twice))  # two distillations of one pruning: it is pruned once
    assert [n for n in both if not both[n].distill] == ["t", "thanos_n30"]
    assert distilled_from(both["n_kd2"], both) == "thanos_n30"
    for value, message in (
        ({"lr": 1e-4}, "recipes.x.distill: expected {tokens, source, lr, ...} (tokens needed)"),
        ({"tokens": 0}, "recipes.x.distill.tokens: got 0; give a whole number >= 1"),
        ({"tokens": 64, "lr": 0}, "recipes.x.distill.lr: got 0; give a positive learning rate"),
        ({"tokens": 64, "epochs": 2}, "recipes.x.distill: unknown option(s) epochs; allowed: tokens,"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            expand(config(recipes={"x": {"method": "wanda", "sparsity": 0.5, "distill": value}}))


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"recipes": {"x": {"method": "obs", "sparsity": 0.5}}}, "recipes.x.method: unknown method 'obs'"),
        ({"recipe_grid": [{"methods": ["wanda", "obc"], "sparsities": [0.5]}]}, "recipe_grid[0].methods[1]"),
        ({"recipe_grid": [{"methods": ["wanda"], "sparsities": [0.5, 124]}]}, "recipe_grid[0].sparsities[1]"),
        ({"recipes": {"dense": {"method": "wanda", "sparsity": 0.5}}}, "recipe name 'dense' is reserved"),
        ({"recipes": {"tiny": {"method": "wanda", "sparsity": 0.5}}}, "recipe name 'tiny' is reserved"),
        ({"recipes": {"a/b": {"method": "wanda", "sparsity": 0.5}}}, "recipe name 'a/b'"),
        ({}, "no recipes"),
        (
            {"recipe_grid": [{"methods": ["wanda"], "sparsities": ["0.5", 0.5]}]},
            "recipe_grid[0] makes recipe 'wanda_u50' a second time",
        ),
        (
            {
                "recipe_grid": [{"methods": ["wanda"], "sparsities": [0.5]}],
                "recipes": {"wanda_u50": {"method": "wanda", "sparsity": 0.6}},
            },
            "recipes.wanda_u50: recipe_grid already makes a recipe of that name",
        ),
    ],
)
def test_expand_errors_name_the_key(over, message):
    with pytest.raises(ConfigError) as err:
        expand(config(**over))
    assert message in str(err.value)


def test_unknown_method_lists_the_registry():
    with pytest.raises(ConfigError) as err:
        expand(config(recipes={"x": {"method": "obs", "sparsity": 0.5}}))
    assert ", ".join(methods.names()) in str(err.value)


def test_json_round_trip_and_form():
    recipe = Recipe("thanos_2-4", "thanos", "2:4", alpha=0.1, chain="sequential")
    text = recipe.to_json()
    # the exact text the workflow passes as a parameter: keys sorted, every option filled in
    expected = (
        '{"alpha": 0.1, "blocksize": 512, "chain": "sequential", "compact": false, "damp": 0.01, '
        '"method": "thanos", "name": "thanos_2-4", "profile": "uniform", "sparsity": "2:4"}'
    )
    assert text == expected
    assert Recipe.from_json(text) == recipe
    assert list(recipe.to_dict()) == sorted(recipe.to_dict())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("recipe.json", "--recipe: not JSON"),
        ('{"name": "r", "method": "thanos"}', "--recipe: sparsity is missing"),
        ('{"name": "r", "method": "thanos", "sparsity": 0.5, "beta": 1}', "unknown field(s) beta"),
        ('{"name": "r", "method": "obs", "sparsity": 0.5}', "--recipe.method: unknown method"),
        ('{"name": "r", "method": "wanda", "sparsity": 0.5, "alpha": "x"}', "--recipe.alpha"),
        (
            '{"name": "r", "method": "wanda", "sparsity": 0.5, "damp": 0}',
            "--recipe.damp: expected a number > 0",
        ),
        ('{"name": "r", "method": "thanos", "sparsity": "2:4", "alpha": 1}', "alpha must lie in [0, 1)"),
        ("[1, 2]", "--recipe: expected an object"),
    ],
)
def test_from_json_errors(text, message):
    with pytest.raises(ConfigError) as err:
        Recipe.from_json(text, key="--recipe")
    assert message in str(err.value)


@pytest.mark.parametrize("command", ["prune", "chain", "owl"])
def test_a_job_takes_the_recipe_as_one_argument(command):
    exclude = ("self_attn", r"mlp\.(gate|up) x")  # regex characters and a space survive the shell
    recipe = Recipe("r", "thanos", "structured:0.3", blocksize=64, alpha=0.1, damp=0.02, exclude=exclude)
    required = {
        "prune": ["--model", "m", "--block", "0", "--out-dir", "d"],
        "chain": ["--model", "m", "--pruned-root", "p", "--out", "o"],
        "owl": ["--model", "m", "--hessians", "h", "--out", "o"],
    }[command]
    line = shlex.join([command, *required, "--recipe", recipe.to_json()])
    assert _args.recipe(build_parser(command).parse_args(shlex.split(line))) == recipe


def test_the_stage_commands_build_the_same_recipe_from_options():
    options = ["--method", "thanos", "--sparsity", "2:4", "--alpha", "0.1", "--exclude", "self_attn"]
    args = build_parser("prune").parse_args(
        ["prune", "--model", "m", "--block", "0", "--out-dir", "d", *options]
    )
    assert _args.recipe(args) == Recipe(None, "thanos", "2:4", alpha=0.1, exclude=["self_attn"])
    both = build_parser("prune").parse_args(
        ["prune", "--model", "m", "--block", "0", "--out-dir", "d", "--recipe", "{}", "--method", "wanda"]
    )
    with pytest.raises(ConfigError, match="not both"):
        _args.recipe(both)


def test_schema_leaves_methods_and_recipe_names_to_the_package():
    """The schema lists neither the methods nor the reserved names: thanos/pruning/methods.py and
    thanos/files/layout.py are their one place, checked by ``expand`` after the schema."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert "enum" not in schema["definitions"]["method"]
    assert "propertyNames" not in schema["properties"]["recipes"]
    text = json.dumps(schema)
    for name in methods.names():
        assert f'"{name}"' not in text
    from thanos.jobs.granularity import ALIASES, GRANULARITIES

    assert schema["properties"]["granularity"]["enum"] == ["auto", *GRANULARITIES, *ALIASES]


@pytest.mark.slow
def test_the_schemas_problems_are_named_in_words(tmp_path):
    """What the schema refuses is one line per key, in words: an n:m pattern YAML read as a number (an
    unquoted 2:4 is 124) says to quote it; a real Snakemake run of such a config stops with that line."""
    from conftest import snakemake

    from thanos.workflow.config import schema_problems

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    grid = [{"methods": ["wanda"], "sparsities": [248, "half"]}]
    bad = base | {"recipes": {"r1": {"method": "thanos", "sparsity": 124}}, "recipe_grid": grid, "chian": 1}
    problems = schema_problems(bad, schema)
    assert 'recipes.r1.sparsity: 124 is how YAML reads an unquoted 2:4; quote it: "2:4"' in problems
    assert 'recipe_grid.0.sparsities.0: 248 is how YAML reads an unquoted 4:8; quote it: "4:8"' in problems
    assert any(
        p.startswith("recipe_grid.0.sparsities.1: expected a fraction in (0, 1) or a string")
        for p in problems
    )
    assert any("'chian' was unexpected" in p and "the keys allowed here:" in p for p in problems), problems
    assert schema_problems(base, schema) == []
    assert schema_problems(base | {"results": " "}, schema) == [  # the results under `/`, the root
        "results: ' ': expected the directory that everything is written to (relative to the working "
        "directory), not empty"
    ]
    assert schema_problems(base | {"zeroshot": {"tasks": []}}, schema) == [  # zero-shot silently skipped
        "zeroshot.tasks: [] should be non-empty"
    ]
    assert schema_problems(base | {"assemble": {"max_shard_size": "0"}}, schema)[0].startswith(
        "assemble.max_shard_size: '0': expected largest safetensors shard"  # a model of shards of one tensor
    )
    text = base | {"distill_shard": "true"}  # `--config distill_shard=true`: Snakemake passes the text
    assert schema_problems(text, schema) == [
        "distill_shard: 'true' is text, not a yes/no value; write true or false in YAML, True or False after "
        "--config (Snakemake's --config reads only those two as yes/no)"
    ]
    combined = base | {"recipes": {"c": {"method": "thanos", "sparsity": "depth:4+neurons:0.3"}}}
    assert schema_problems(combined, schema) == []  # the workflow runs combined recipes
    size = base | {"recipes": {"p": {"method": "thanos", "sparsity": "params:0.3", "axes": ["depth"]}}}
    assert schema_problems(size, schema) == []  # and sizes and vocabularies (rules/search.smk)
    vocab = base | {"recipes": {"v": {"method": "thanos", "sparsity": "depth:2+vocab:0.3"}}}
    assert schema_problems(vocab, schema) == []
    mixed = base | {"recipes": {"p": {"method": "thanos", "sparsity": "params:0.3+depth:2"}}}
    assert schema_problems(mixed, schema)[0].startswith("recipes.p.sparsity: expected a fraction in (0, 1)")

    config = tmp_path / "unquoted.yaml"
    config.write_text(f"results: {tmp_path}/results\nrecipes:\n  r1: {{method: thanos, sparsity: 2:4}}\n")
    run = snakemake(tmp_path, {}, "-n", "--configfile", str(config), check=False)
    assert run.returncode != 0
    assert (
        'recipes.r1.sparsity: 124 is how YAML reads an unquoted 2:4; quote it: "2:4"'
        in run.stderr + run.stdout
    )
    twice = tmp_path / "twice.yaml"  # YAML keeps the second r1 and drops the first: refused, both lines named
    twice.write_text(
        "recipes:\n  r1: {method: wanda, sparsity: 0.5}\n  r1: {method: thanos, sparsity: 0.6}\n"
    )
    run = snakemake(tmp_path, {}, "-n", "--configfile", str(twice), check=False)
    assert run.returncode != 0
    assert (
        f"{twice}: line 3: 'r1' is given twice, on line 2 and on line 3; YAML keeps the last"
        in run.stdout + run.stderr
    )


@pytest.mark.slow
def test_a_size_beyond_reach_of_a_model_the_workflow_builds_is_refused_by_its_job(tmp_path: Path) -> None:
    """A model the workflow builds (``tiny:``) is not there when the config is read: a size beyond its reach
    is refused by the size's job, its error on the terminal, where the search's input function stopped the
    run with Snakemake's InputFunctionException and a traceback once the model's facts were computed."""
    from conftest import snakemake, workflow_config, write_corpus

    corpus = write_corpus(tmp_path / "calib.jsonl", docs=16)
    tiny = {"family": "llama", "hidden_size": 32, "num_blocks": 2}
    models = {"tiny": {"path": "models/tiny", "tiny": tiny}}
    recipes = {"far": {"method": "thanos", "sparsity": "params:0.99"}}
    run = snakemake(tmp_path, workflow_config(corpus, models, recipes), check=False)
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "InputFunctionException" not in output and "Traceback" not in output
    assert "rule one_command failed; its error" in output, output[-3000:]
    assert re.search(r"ERROR: --sparsity params:0.99 asks for .*; ask for params:[\d.]+ or less", output)


def test_vocabularies_and_sizes_are_workflow_recipes():
    """``vocab:`` alone and ``params:P`` expand to ``OneCommand`` recipes with ``thanos prune-model``'s
    options (a combined pattern's vocabulary is its last part, a ``Combined``'s); what that job cannot take
    is refused naming the key."""
    from thanos.workflow.config import Combined, OneCommand, expand

    grid = [{"methods": ["thanos"], "sparsities": ["params:0.25", "vocab:0.3"], "damp": 0.02}]
    recipes = {"p": {"method": "thanos", "sparsity": "params:0.3", "axes": ["depth", "vocab"]}}
    expanded = expand({"recipes": recipes, "recipe_grid": grid})
    assert all(isinstance(recipe, OneCommand) for recipe in expanded.values())
    assert list(expanded) == ["thanos_params0.25_damp0.02", "thanos_v30_damp0.02", "p"]
    assert expanded["p"].is_size and not expanded["thanos_v30_damp0.02"].is_size
    assert expanded["p"].flags() == [
        "--method",
        "thanos",
        "--sparsity",
        "params:0.3",
        "--axes",
        "depth,vocab",
    ]
    assert expanded["thanos_params0.25_damp0.02"].flags()[-2:] == ["--damp", "0.02"]
    texts = {"v": {"method": "thanos", "sparsity": "vocab:0.3", "vocab_text": "prose.jsonl"}}
    assert expand({"recipes": texts})["v"].flags()[-2:] == ["--vocab-text", "prose.jsonl"]
    combined = expand({"recipes": {"v": texts["v"] | {"sparsity": "depth:2+vocab:0.3"}}})["v"]
    assert isinstance(combined, Combined) and combined.parts[-1].vocab_text == "prose.jsonl"
    refused = {
        "recover": ("recipes.r.recover: params:0.3 recipes run as one `thanos prune-model` job", True),
        "axes": ("recipes.r: axes=depth: is for params:P; vocab:0.3 names its mix", ["depth"]),
        "vocab_text": ("recipes.r: vocab_text=prose.jsonl: chooses the tokens of a vocab", "prose.jsonl"),
    }
    for option, (message, value) in refused.items():
        sparsity = {"axes": "vocab:0.3", "vocab_text": "depth:2+neurons:0.3"}.get(option, "params:0.3")
        entry = {"method": "thanos", "sparsity": sparsity, option: value}
        if option == "recover":  # on the axes recovery trains: what the workflow's job cannot pass on
            entry["axes"] = ["heads", "neurons"]
        with pytest.raises(ConfigError, match=re.escape(message)):
            expand({"recipes": {"r": entry}})
    idle = "recipes.r: recover with sparsity=params:0.3: its cost table measures each axis alone, and depth"
    with pytest.raises(ConfigError, match=re.escape(idle)):  # first as `thanos prune-model` refuses it
        expand({"recipes": {"r": {"method": "thanos", "sparsity": "params:0.3", "recover": True}}})
    with pytest.raises(ConfigError, match=re.escape("recipes.r.vocab_text: only vocab:N and vocab:p")):
        expand({"recipes": {"r": {"method": "thanos", "sparsity": "neurons:0.3", "vocab_text": "p.txt"}}})
    with pytest.raises(ConfigError, match=re.escape("recipes.r: axes=width")):
        expand({"recipes": {"r": {"method": "thanos", "sparsity": "params:0.3", "axes": ["width"]}}})

    from thanos.workflow.config import check_size_models

    models = {"hub": {"path": "HuggingFaceTB/SmolLM2-135M"}}
    with pytest.raises(
        ConfigError, match=re.escape("models.hub.path: HuggingFaceTB/SmolLM2-135M is not a local")
    ):
        check_size_models(models, ["p"], lambda path: False)
    check_size_models(models, [], lambda path: False)  # no size: hub ids are fine
    check_size_models(models, ["p"], lambda path: True)  # built by the workflow


def test_a_size_beyond_reach_is_refused_by_the_config(tmp_path: Path) -> None:
    """A size recipe beyond what its axes remove from a local model is refused with the config, before any
    job (it was refused by its search's input function once the model's facts were computed), naming the
    recipe, the model, the most and the size to ask for, in the config's words; one within reach passes,
    and a model the workflow has not built yet is left to its job."""
    from helpers.vocabulary import bpe_model

    from thanos.workflow.config import check_size_reach, expand

    models = {"tiny": {"path": str(bpe_model(tmp_path / "dense"))}, "later": {"path": str(tmp_path / "no")}}
    far = expand({"recipes": {"far": {"method": "thanos", "sparsity": "params:0.99", "axes": ["depth"]}}})
    message = r"recipe far on models.tiny: sparsity=params:0.99 asks for [\d,]+ of the [\d,]+ parameters, "
    message += r"and the most depth can remove is .*; ask for params:[\d.]+ or less, or allow more "
    message += r"axes \(axes\)"
    with pytest.raises(ConfigError, match=message):
        check_size_reach(models, far)
    near = expand({"recipes": {"near": {"method": "thanos", "sparsity": "params:0.1"}}})
    check_size_reach(models, near)
