"""Recipes (thanos/files/recipes.py): the config's recipes expanded, named, checked and carried as one
object."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from thanos.cli import build_parser
from thanos.commands import _args
from thanos.files.recipes import ConfigError, Recipe, expand, from_name, grid_name, pattern_tag, sparsity_text
from thanos.pruning import methods

REPO = Path(__file__).resolve().parents[1]


def config(**over) -> dict:
    return {"chain": "sequential", "recipe_grid": [], "recipes": {}} | over


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.5, "unstructured:0.5"), ("0.5", "unstructured:0.5"), ("2:4", "2:4"), (" 4 : 8 ", "4:8")]
    + [("structured:0.3", "structured:0.3"), ("unstructured:0.7", "unstructured:0.7")],
)
def test_sparsity_text_is_canonical(value, text):
    assert sparsity_text("k", value) == text


@pytest.mark.parametrize(
    ("value", "message"),
    [(124, "recipes.x.sparsity: got 124; quote n:m patterns"), ("half", "recipes.x.sparsity: sparsity:")]
    + [(1.5, "recipes.x.sparsity"), ("4:2", "0 < n < m")],
)
def test_sparsity_errors_name_the_key(value, message):
    with pytest.raises(ConfigError, match="recipes.x.sparsity") as err:
        sparsity_text("recipes.x.sparsity", value)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("sparsity", "alpha", "several", "name"),
    [
        ("unstructured:0.5", None, False, "thanos_u50"),
        ("unstructured:0.125", 0, False, "thanos_u12.5"),
        ("2:4", 0.1, True, "thanos_2-4_a0.1"),
        ("structured:0.3", 0, True, "thanos_s30_a0"),
    ],
)
def test_grid_names_read_back(sparsity, alpha, several, name):
    assert grid_name("thanos", sparsity, alpha, several) == name
    back = from_name(name)
    assert back == {"method": "thanos", "sparsity": sparsity, "alpha": alpha if several else None}


def test_pattern_tag_and_foreign_names():
    assert [pattern_tag(s) for s in ("0.5", "4:8", "structured:0.25")] == ["u50", "4-8", "s25"]
    assert from_name("my_recipe") is None
    assert from_name("obc_u50") is None  # not a method of thanos.pruning.methods


def test_expand_grid_then_named_recipes():
    grid = [
        {"methods": ["magnitude", "thanos"], "sparsities": ["0.5", "2:4"], "alpha": [0]},
        {"methods": ["thanos"], "sparsities": ["structured:0.3"], "alpha": [0, 0.1], "blocksize": 64},
    ]
    named = {"mine": {"method": "sparsegpt", "sparsity": 0.6, "damp": 0.02}}
    recipes = expand(config(recipe_grid=grid, recipes=named))
    assert list(recipes) == [
        "magnitude_u50",
        "magnitude_2-4",
        "thanos_u50",
        "thanos_2-4",
        "thanos_s30_a0",
        "thanos_s30_a0.1",
        "mine",
    ]
    assert recipes["thanos_s30_a0.1"] == Recipe(
        "thanos_s30_a0.1", "thanos", "structured:0.3", blocksize=64, alpha=0.1, chain="sequential"
    )
    assert recipes["mine"].sparsity == "unstructured:0.6" and recipes["mine"].damp == 0.02
    assert recipes["magnitude_u50"].alpha == 0 and isinstance(recipes["magnitude_u50"].alpha, int)
    assert not recipes["magnitude_u50"].needs_calibration and recipes["mine"].needs_calibration


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
    # the exact text the workflow passes as a parameter: keys sorted, unset fields left out
    expected = (
        '{"alpha": 0.1, "chain": "sequential", "method": "thanos", "name": "thanos_2-4", "sparsity": "2:4"}'
    )
    assert text == expected
    assert Recipe.from_json(text) == recipe
    assert list(recipe.to_dict()) == sorted(recipe.to_dict())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("recipe.json", "--recipe-json: not JSON"),
        ('{"name": "r", "method": "thanos"}', "--recipe-json: sparsity is missing"),
        ('{"name": "r", "method": "thanos", "sparsity": 0.5, "beta": 1}', "unknown field(s) beta"),
        ('{"name": "r", "method": "obs", "sparsity": 0.5}', "--recipe-json.method: unknown method"),
        ('{"name": "r", "method": "wanda", "sparsity": 0.5, "alpha": "x"}', "--recipe-json.alpha"),
        ("[1, 2]", "--recipe-json: expected an object"),
    ],
)
def test_from_json_errors(text, message):
    with pytest.raises(ConfigError) as err:
        Recipe.from_json(text, key="--recipe-json")
    assert message in str(err.value)


@pytest.mark.parametrize("command", ["prune", "chain"])
def test_options_parse_back_through_the_commands(command):
    exclude = ("self_attn", r"mlp\.(gate|up) x")  # regex characters and a space survive the shell
    recipe = Recipe("r", "thanos", "structured:0.3", blocksize=64, alpha=0.1, damp=0.02, exclude=exclude)
    required = {
        "prune": ["--model", "m", "--block", "0", "--out-dir", "d"],
        "chain": ["--model", "m", "--pruned-root", "p", "--out", "o"],
    }[command]
    args = build_parser(command).parse_args([command, *required, *shlex.split(recipe.options())])
    assert _args.recipe(args) == {
        "method": "thanos",
        "sparsity": "structured:0.3",
        "blocksize": 64,
        "alpha": 0.1,
        "damp": 0.02,
        "exclude": list(exclude),
    }
    assert Recipe("r", "magnitude", "2:4").options() == "--method magnitude --sparsity 2:4"


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
