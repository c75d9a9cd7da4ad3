"""The workflow's config as recipes: ``expand`` makes the named ``Recipe`` of every ``recipe_grid`` and
``recipes`` entry, ``schema_problems`` says in words what the JSON schema refuses; the models the workflow
builds itself (``built_models``, ``builds``) and the model names it refuses (``check_model_names``).
Torch-free: the workflow's parse (workflow/rules/config.smk) imports it."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from thanos.files.layout import NOT_MODELS
from thanos.pruning import methods
from thanos.recipe import OWL_DEFAULTS, ConfigError, Recipe, check_sparsity

# the structures only ``thanos prune-model`` runs, and what the workflow says of them
PRUNE_MODEL_ONLY = {
    "depth": "(whole blocks removed) runs with `thanos prune-model --sparsity depth:K`; the workflow does "
    "not run depth recipes",
    "vocab": "(tokens removed) runs with `thanos prune-model --sparsity vocab:N` or `thanos prune-vocab`; "
    "the workflow does not run vocab recipes",
}


def expand(config: dict[str, Any]) -> dict[str, Recipe]:
    """The named recipes of a validated workflow config: ``recipe_grid`` entries first, then ``recipes``.
    A grid entry names its recipes by ``Recipe.default_name``, with the alpha always shown when the entry
    lists several alphas."""
    chain = config.get("chain") or "sequential"
    recipes: dict[str, Recipe] = {}
    for i, entry in enumerate(config.get("recipe_grid") or []):
        key = f"recipe_grid[{i}]"
        alphas = entry.get("alpha") or [None]
        options = {
            name: entry[name]
            for name in ("blocksize", "damp", "exclude", "profile", "recover", "distill", *OWL_DEFAULTS)
            if name in entry
        }
        for j, method in enumerate(entry["methods"]):
            try:
                methods.get(method, key=f"{key}.methods[{j}]")
            except ValueError as err:
                raise ConfigError(str(err)) from None
            for k, sparsity in enumerate(entry["sparsities"]):
                kind = check_sparsity(key, sparsity, f"sparsities[{k}]").kind
                if kind in PRUNE_MODEL_ONLY:
                    raise ConfigError(f"{key}.sparsities[{k}]: {sparsity} {PRUNE_MODEL_ONLY[kind]}")
                for alpha in alphas:
                    recipe = Recipe(None, method, sparsity, alpha=alpha, chain=chain, key=key, **options)
                    if len(alphas) > 1:
                        recipe = replace(recipe, name=recipe.default_name(always=("alpha",)))
                    if recipe.name in recipes:
                        raise ConfigError(
                            f"{key} makes recipe {recipe.name!r} a second time: "
                            "list each method x sparsity x alpha once"
                        )
                    recipes[recipe.name] = recipe
    for name, entry in (config.get("recipes") or {}).items():
        kind = str(entry.get("sparsity", "")).strip().lower().partition(":")[0]
        if kind in PRUNE_MODEL_ONLY:
            raise ConfigError(f"recipes.{name}.sparsity: {entry['sparsity']} {PRUNE_MODEL_ONLY[kind]}")
        if name in recipes:
            raise ConfigError(
                f"recipes.{name}: recipe_grid already makes a recipe of that name: rename one of them"
            )
        recipes[name] = Recipe.from_dict({**entry, "name": name, "chain": chain}, key=f"recipes.{name}")
    if not recipes:
        raise ConfigError("no recipes: define `recipes:` ({name: {method, sparsity}}) or `recipe_grid:`")
    return _with_pruned(recipes)


def _with_pruned(recipes: dict[str, Recipe]) -> dict[str, Recipe]:
    """``recipes`` with, before each distilled one, the recipe it distils (``Recipe.pruned``): the one of
    the config that prunes the same way, else added under its default name (evaluated and tabled beside
    the distilled one)."""
    found: dict[str, Recipe] = {}
    for name, recipe in recipes.items():  # one added recipe serves every distilled one that prunes its way
        if recipe.distill is not None and distilled_from(recipe, recipes | found) is None:
            pruned = recipe.pruned
            if pruned.name in recipes or pruned.name in found:
                pruned = replace(pruned, name=f"{name}_pruned")
            found[pruned.name] = pruned
        found[name] = recipe
    return found


def distilled_from(recipe: Recipe, recipes: dict[str, Recipe]) -> str | None:
    """The name of the recipe in ``recipes`` that ``recipe`` distils (prunes the same way, no distillation
    of its own); None for a recipe without ``distill``, or when there is none."""
    if recipe.distill is None:
        return None
    wanted = recipe.pruned.to_dict() | {"name": None}
    for name, other in recipes.items():
        if other.distill is None and other.to_dict() | {"name": None} == wanted:
            return name
    return None


def schema_problems(config: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What in ``config`` the workflow's JSON schema refuses, one line per problem naming the key
    (``recipes.r1.sparsity: ...``) in words instead of the schema's dump; an n:m pattern YAML read as a
    number (an unquoted ``2:4`` is 124 in YAML 1.1's base 60) says to quote it; ``--config key=true`` (text
    to Snakemake) says to write ``True``."""
    from jsonschema import Draft202012Validator

    problems = []
    validator = Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(map(str, error.absolute_path)) or "the config"
        value = error.instance
        if "sparsit" in key and isinstance(value, int) and not isinstance(value, bool) and value >= 60:
            n, m = divmod(value, 60)
            problems.append(f'{key}: {value} is how YAML reads an unquoted {n}:{m}; quote it: "{n}:{m}"')
            continue
        if (
            error.validator in ("oneOf", "anyOf")
            and "sparsit" in key
            and isinstance(value, str)
            and "+" in value
        ):
            text = (
                f"{value} is a combined recipe (each part run on the model the previous one wrote): it runs "
                f"with `thanos prune-model --sparsity {value}`; the workflow does not run combined recipes"
            )
        elif error.validator in ("oneOf", "anyOf") and "sparsit" in key:
            text = (
                'expected a fraction in (0, 1) or a string: 0.5, "2:4", "structured:0.3", "neurons:0.3", '
                '"heads:0.33", "kv_heads:0.25"'
            )
        elif error.validator in ("oneOf", "anyOf"):
            forms = error.schema.get("description", "see workflow/schemas/config.schema.yaml")
            text = f"{value!r} is none of the allowed forms ({forms})"
        elif error.validator == "type" and error.validator_value == "boolean" and isinstance(value, str):
            text = (
                f"{value!r} is text, not a yes/no value; write true or false in YAML, True or False after "
                "--config (Snakemake's --config reads only those two as yes/no)"
            )
        elif error.validator == "additionalProperties":
            allowed = ", ".join(sorted(error.schema.get("properties", {})))
            text = f"{error.message}; the keys allowed here: {allowed}"
        else:
            text = error.message
        problems.append(f"{key}: {text}" if key != "the config" else text)
    return problems


def built_models(models: dict[str, Any]) -> tuple[dict[str, dict], dict[str, dict]]:
    """The models the workflow builds, by normalised path: the tiny ones' specs (rule make_tiny_model) and
    the real ones' (rule real_model); two models building different tiny models at one path are refused."""
    tiny: dict[str, dict] = {}
    owners: dict[str, str] = {}
    for name, model in models.items():
        if "tiny" not in model:
            continue
        path = os.path.normpath(model["path"])
        if path in tiny and tiny[path] != model["tiny"]:
            raise ConfigError(
                f"models.{owners[path]} and models.{name} build different tiny models at the same"
                f" path {model['path']!r}; give each its own path (one spec per path)"
            )
        tiny[path], owners[path] = model["tiny"], name
    real = {os.path.normpath(model["path"]): model["real"] for model in models.values() if "real" in model}
    return tiny, real


def builds(path: str, demo: dict[str, Any], built: Collection[str]) -> bool:
    """Whether the workflow builds ``path`` itself: the demo's data (or a file in it) and model when the
    demo is enabled, or one of the models ``built`` (normalised paths, ``built_models``)."""
    path = os.path.normpath(path)
    if demo["enabled"]:
        data_dir = os.path.normpath(demo["data_dir"])
        if path in (data_dir, os.path.normpath(demo["model_dir"])) or path.startswith(data_dir + os.sep):
            return True
    return path in built


def check_model_names(models: Collection[str], results: str) -> None:
    """Refuse a model named as a directory of the report (``tables``, ``figures``, ... under ``results``)."""
    taken = sorted(set(models) & set(NOT_MODELS))
    if taken:
        raise ConfigError(
            f"models: {', '.join(taken)} names a directory of the report ({', '.join(NOT_MODELS)} under"
            f" {results}); rename the model"
        )
