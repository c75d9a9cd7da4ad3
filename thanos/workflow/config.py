"""The workflow's config as recipes: ``expand`` makes the named ``Recipe`` of every ``recipe_grid`` and
``recipes`` entry (a ``Combined`` for a combined pattern, ``depth:4+neurons:0.3``; a ``OneCommand`` for a
vocabulary or a size, ``vocab:0.3``, ``params:0.25``), ``schema_problems`` says
in words what the JSON schema refuses; the models the workflow builds itself (``built_models``, ``builds``)
and the model names it refuses (``check_model_names``). Torch-free: the workflow's parse
(workflow/rules/config.smk) imports it."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields, replace
from typing import Any

from thanos.errors import KeywordWords, OptionError
from thanos.files.layout import NOT_MODELS
from thanos.pruning import methods
from thanos.pruning.structures import STRUCTURES, kind_of
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import OWL_DEFAULTS, Recipe, check_sparsity
from thanos.runner.patterns import params_fraction
from thanos.runner.recipe_options import RecipeOptions, check_runnable

# a config entry's recipe options: ``thanos prune-model``'s (``RecipeOptions``' fields and a size's ``axes``)
_RECIPE_OPTIONS = ({f.name for f in fields(RecipeOptions)} | {"axes"}) - {"method", "sparsity"}
# the options of a config entry that a recipe run as one ``thanos prune-model`` job (``OneCommand``) passes on
ONE_COMMAND_OPTIONS = (
    "alpha",
    "blocksize",
    "damp",
    "exclude",
    "compact",
    "block_map",
    "width_multiple",
    "vocab_text",
    "axes",
)
# what such a recipe cannot take in the workflow, and why (after what ``thanos prune-model`` refuses too:
# OWL's options, a vocabulary's recovery and distillation)
ONE_COMMAND_REFUSED = {
    "recover": "run `thanos prune-model ... --recover` for a recovered params: recipe; the workflow does not "
    "pass recovery to that job yet",
    "distill": "distil the written model with a recipe of its own, or run `thanos prune-model ... "
    "--distill-tokens N`",
}


@dataclass(frozen=True)
class OneCommand:
    """A recipe of the workflow that one ``thanos prune-model`` job writes (workflow/rules/search.smk): a
    vocabulary alone (``vocab:0.3``; a combined pattern's vocab part is a ``Combined``'s last part job) or a
    size (``params:0.25``), whose candidates are measured first, each as a job of its own. ``options``: the
    entry's recipe options (``ONE_COMMAND_OPTIONS``) as the command takes them."""

    name: str
    method: str
    sparsity: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def is_size(self) -> bool:
        """A size target (``params:P``, read by the one reader of that grammar): its mix is searched."""
        return params_fraction(self.sparsity) is not None

    @property
    def needs_calibration(self) -> bool:
        return True  # the vocabulary's tokens and every candidate are chosen on the calibration text

    def flags(self) -> list[str]:
        """The recipe as ``thanos prune-model`` options: ``--method thanos --sparsity params:0.25 ...``."""
        words = ["--method", self.method, "--sparsity", self.sparsity]
        for name, value in self.options:
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                words.append(flag if value else "--no-" + name.replace("_", "-"))
            elif name == "exclude":
                for pattern in [value] if isinstance(value, str) else value:
                    words += [flag, str(pattern)]
            elif name == "axes":
                words += [flag, value if isinstance(value, str) else ",".join(map(str, value))]
            else:
                words += [flag, str(value)]
        return words

    def keywords(self) -> dict[str, Any]:
        """The recipe as ``thanos.prune_model``'s keywords after ``sparsity``."""
        return dict(self.options)

    def request(self, model: str, out: str = "out") -> Any:
        """The ``PruneRequest`` of this recipe on ``model`` (checked; nothing read from disk)."""
        from thanos.runner.request import build_request

        return build_request(model, self.method, self.sparsity, self.keywords() | {"out": out})


def search_owners(recipes: dict[str, Any]) -> dict[str, str]:
    """{size recipe: the size recipe whose working directory its search uses}: the first, in the config's
    order, of the sizes that differ from it only in the parameters asked for (the method and every option
    the same). Their searches share one cost table: its points are measured once, by the first one's
    ``search_candidate`` jobs, and every size of the group reads them (thanos.runner.size)."""
    owners: dict[str, str] = {}
    first: dict[str, str] = {}
    for name, recipe in recipes.items():
        if isinstance(recipe, OneCommand) and recipe.is_size:
            key = repr((recipe.method, sorted(recipe.options, key=lambda option: option[0])))
            owners[name] = first.setdefault(key, name)
    return owners


def _one_command(key: str, name: str | None, entry: dict[str, Any], sparsity: str) -> OneCommand:
    """The ``OneCommand`` of a config entry with a vocab pattern alone or a size, checked as ``thanos
    prune-model`` checks it (``build_request``: the pattern, the options, the mix of every axis a size may
    take); ``name`` None: the grid's name (``_one_command_name``)."""
    from thanos.runner.request import build_request

    given = {option: value for option, value in entry.items() if option in _RECIPE_OPTIONS}
    try:  # refused first as `thanos prune-model` refuses it, then what the workflow's job cannot pass on
        request = build_request("model", entry["method"], sparsity, given | {"out": "out"})
    except OptionError as err:
        raise ConfigError(f"{key}: {err.words(KeywordWords())}") from None
    except (ConfigError, ValueError) as err:
        raise ConfigError(f"{key}: {err}") from None
    if request.size is not None and request.size.sizes:
        each = ", ".join(str(goal) for goal in request.size.each())
        raise ConfigError(
            f"{key}.sparsity: {sparsity} asks for several sizes; the workflow takes one per recipe: give "
            f"{each} as recipes of their own"
        )
    refused = [option for option in ONE_COMMAND_REFUSED if entry.get(option) is not None]
    if refused:
        raise ConfigError(
            f"{key}.{refused[0]}: {sparsity} recipes run as one `thanos prune-model` job in the workflow, "
            f"which takes no {refused[0]} ({ONE_COMMAND_REFUSED[refused[0]]}); leave {refused[0]} out"
        )
    options = tuple(
        (option, entry[option]) for option in ONE_COMMAND_OPTIONS if entry.get(option) is not None
    )
    recipe = OneCommand(name or "", entry["method"], str(sparsity).strip(), options)
    recipe = replace(recipe, name=name or _one_command_name(recipe))
    Recipe(recipe.name, recipe.method, 0.5, key=key)  # the name checked as any recipe's
    return recipe


@dataclass(frozen=True)
class Combined:
    """A combined recipe of the workflow (``depth:4+neurons:0.3``): its ``parts`` in the order they run
    (``thanos.runner.recipe_options.RecipeOptions.recipes``: the recipes ``thanos prune-model`` runs), each
    part a job on the model the part before wrote (workflow/rules/combined.smk)."""

    name: str
    parts: tuple[Recipe, ...]

    @property
    def sparsity(self) -> str:
        """The parts' patterns joined in the order they run: ``depth:4+neurons:0.3``."""
        return "+".join(str(part.sparsity) for part in self.parts)

    @property
    def needs_calibration(self) -> bool:
        """Whether a part reads the calibration (every depth, and every Hessian method's, part does)."""
        return any(part.needs_calibration for part in self.parts)


def _one_command_kind(sparsity: Any) -> bool:
    """Whether ``sparsity`` runs as one ``thanos prune-model`` job: a size, or a vocabulary alone (one step
    of the engine; a combined recipe's vocabulary is a part job like its other parts)."""
    kinds = [kind_of(part) for part in str(sparsity).split("+")]
    alone = len(kinds) == 1 and kinds[0] in STRUCTURES and STRUCTURES[kinds[0]].tokens
    return "params" in kinds or alone


def _combined(key: str, name: str | None, entry: dict[str, Any], sparsity: str, chain: str) -> Combined:
    """The ``Combined`` recipe of a config entry with a combined ``sparsity``: its parts built as ``thanos
    prune-model`` builds them (``RecipeOptions.recipes``: the same recipes, so the same models); ``name``
    None: ``{method}_{part}+{part}`` of the parts' default names."""
    if entry.get("distill") is not None:
        raise ConfigError(
            f"{key}.distill: a combined recipe ({sparsity}) is distilled by `thanos prune-model --sparsity "
            f"{sparsity} --distill-tokens ...`; the workflow does not distil combined recipes yet"
        )
    known = {f.name for f in fields(RecipeOptions)} - {"method", "sparsity"}
    options = {option: value for option, value in entry.items() if option in known}
    try:
        parts = RecipeOptions(entry["method"], sparsity, **options).recipes()
    except OptionError as err:
        raise ConfigError(f"{key}: {err.words(KeywordWords())}") from None
    except ConfigError as err:
        raise ConfigError(f"{key}: {err}") from None
    parts = tuple(replace(part, chain=chain) for part in parts)
    method = parts[0].method
    name = name or f"{method}_" + "+".join(part.name.removeprefix(f"{method}_") for part in parts)
    Recipe(name, method, 0.5, key=key)  # the name checked as any recipe's
    return Combined(name, parts)


def expand(config: dict[str, Any]) -> dict[str, Recipe | Combined | OneCommand]:
    """The named recipes of a validated workflow config: ``recipe_grid`` entries first, then ``recipes``.
    A grid entry names its recipes by ``Recipe.default_name``, with the alpha always shown when the entry
    lists several alphas; a combined pattern (``depth:4+neurons:0.3``) makes a ``Combined``."""
    chain = config.get("chain") or "sequential"
    recipes: dict[str, Recipe | Combined | OneCommand] = {}
    for i, entry in enumerate(config.get("recipe_grid") or []):
        key = f"recipe_grid[{i}]"
        alphas = entry.get("alpha") or [None]
        options = {
            name: entry[name]
            for name in (
                "blocksize",
                "damp",
                "exclude",
                "axes",
                "profile",
                "recover",
                "distill",
                *OWL_DEFAULTS,
            )
            if name in entry
        }
        for j, method in enumerate(entry["methods"]):
            try:
                methods.get(method, key=f"{key}.methods[{j}]")
            except ValueError as err:
                raise ConfigError(str(err)) from None
            for k, sparsity in enumerate(entry["sparsities"]):
                if _one_command_kind(sparsity):
                    if len(alphas) > 1:
                        raise ConfigError(
                            f"{key}.alpha: {sparsity} runs as one `thanos prune-model` job, with one alpha; "
                            "give one, or a recipe of its own per alpha under recipes:"
                        )
                    single = {"alpha": alphas[0]} if alphas[0] is not None else {}
                    one = _one_command(key, None, options | single | {"method": method}, sparsity)
                    _add(recipes, one.name, one, key)
                    continue
                _no_axes(key, options, sparsity)
                if "+" in str(sparsity):
                    combined = _combined(key, None, entry | {"method": method}, sparsity, chain)
                    _add(recipes, combined.name, combined, key)
                    continue
                check_sparsity(key, sparsity, f"sparsities[{k}]")
                for alpha in alphas:
                    recipe = Recipe(None, method, sparsity, alpha=alpha, chain=chain, key=key, **options)
                    recipe = _runnable(key, recipe, sparsity, options | {"alpha": alpha})
                    if len(alphas) > 1:
                        recipe = replace(recipe, name=recipe.default_name(always=("alpha",)))
                    _add(recipes, recipe.name, recipe, key)
    for name, entry in (config.get("recipes") or {}).items():
        key, sparsity = f"recipes.{name}", entry.get("sparsity", "")
        if name in recipes:
            raise ConfigError(f"{key}: recipe_grid already makes a recipe of that name: rename one of them")
        if _one_command_kind(sparsity):
            recipes[name] = _one_command(key, name, entry, sparsity)
            continue
        _no_axes(key, entry, sparsity)
        if "+" in str(sparsity):
            recipes[name] = _combined(key, name, entry, sparsity, chain)
        else:
            recipe = Recipe.from_dict({**entry, "name": name, "chain": chain}, key=key)
            recipes[name] = _runnable(key, recipe, sparsity, entry)
    if not recipes:
        raise ConfigError("no recipes: define `recipes:` ({name: {method, sparsity}}) or `recipe_grid:`")
    return _with_pruned(recipes)


def _no_axes(key: str, entry: dict[str, Any], sparsity: Any) -> None:
    """Refuse ``axes`` on a recipe that is not a size, as ``thanos prune-model`` does."""
    if entry.get("axes") is not None:
        raise ConfigError(f"{key}.axes: is for params:P; {sparsity} names its mix")


def _runnable(key: str, recipe: Recipe, sparsity: Any, given: dict[str, Any]) -> Recipe:
    """``recipe`` refused as ``thanos prune-model`` refuses it (``check_runnable``: an option the method or
    the pattern does not use, a pattern that prunes nothing), the entry's key named."""
    try:
        return check_runnable(recipe, sparsity, given)
    except OptionError as err:
        raise ConfigError(f"{key}: {err.words(KeywordWords())}") from None


def _one_command_name(recipe: OneCommand) -> str:
    """A grid's name of a ``OneCommand``: ``{method}_params0.25`` (``_`` and the axes when restricted), else
    the parts' default names joined as a combined recipe's (``thanos_d4+v30``)."""
    from thanos.runner.recipe_options import RecipeOptions

    options = recipe.keywords()
    if recipe.is_size:
        axes = options.pop("axes", None)
        words = axes.split(",") if isinstance(axes, str) else list(axes or ())
        suffix = "_" + "-".join(str(word).strip() for word in words) if words else ""
        tags = {"alpha": "a", "blocksize": "B", "damp": "damp", "width_multiple": "w"}
        suffix += "".join(f"_{tags[k]}{v:g}" for k, v in options.items() if k in tags)
        suffix += "".join(f"_{k}{str(v).lower()}" for k, v in options.items() if k not in tags)
        return f"{recipe.method}_params{recipe.sparsity.partition(':')[2].strip()}{suffix}"
    known = {f.name for f in fields(RecipeOptions)} - {"method", "sparsity"}
    parts = RecipeOptions(recipe.method, recipe.sparsity, **{k: v for k, v in options.items() if k in known})
    prefix = f"{recipe.method}_"
    return prefix + "+".join(part.name.removeprefix(prefix) for part in parts.recipes())


def _add(recipes: dict[str, Any], name: str, recipe: Any, key: str) -> None:
    """``recipe`` added under ``name``; a name made a second time is refused, naming the entry."""
    if name in recipes:
        raise ConfigError(
            f"{key} makes recipe {name!r} a second time: list each method x sparsity x alpha once"
        )
    recipes[name] = recipe


def _with_pruned(recipes: dict[str, Any]) -> dict[str, Any]:
    """``recipes`` with, before each distilled one, the recipe it distils (``Recipe.pruned``): the one of
    the config that prunes the same way, else added under its default name (evaluated and tabled beside
    the distilled one)."""
    found: dict[str, Any] = {}
    for name, recipe in recipes.items():  # one added recipe serves every distilled one that prunes its way
        if (
            isinstance(recipe, Recipe)
            and recipe.distill is not None
            and distilled_from(recipe, recipes | found) is None
        ):
            pruned = recipe.pruned
            if pruned.name in recipes or pruned.name in found:
                pruned = replace(pruned, name=f"{name}_pruned")
            found[pruned.name] = pruned
        found[name] = recipe
    return found


def distilled_from(recipe: Recipe, recipes: dict[str, Any]) -> str | None:
    """The name of the recipe in ``recipes`` that ``recipe`` distils (prunes the same way, no distillation
    of its own); None for a recipe without ``distill``, or when there is none."""
    if recipe.distill is None:
        return None
    wanted = recipe.pruned.to_dict() | {"name": None}
    for name, other in recipes.items():
        if isinstance(other, Recipe) and other.distill is None and other.to_dict() | {"name": None} == wanted:
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
        if error.validator in ("oneOf", "anyOf") and "sparsit" in key:
            text = (
                'expected a fraction in (0, 1) or a string: 0.5, "2:4", "structured:0.3", "neurons:0.3", '
                '"heads:0.33", "kv_heads:0.25", "depth:6", "vocab:0.3", structures joined with + '
                '("depth:4+neurons:0.3"), or a size alone ("params:0.25")'
            )
        elif error.validator in ("oneOf", "anyOf"):
            forms = error.schema.get("description", "see workflow/schemas/config.schema.yaml")
            text = f"{value!r} is none of the allowed forms ({forms})"
        elif error.validator == "type" and error.validator_value == "boolean" and isinstance(value, str):
            text = (
                f"{value!r} is text, not a yes/no value; write true or false in YAML, True or False after "
                "--config (Snakemake's --config reads only those two as yes/no)"
            )
        elif error.validator == "pattern":  # a key whose form the schema's description says
            text = f"{value!r}: expected {error.schema.get('description', error.message)}"
        elif error.validator == "additionalProperties":
            allowed = ", ".join(sorted(error.schema.get("properties", {})))
            text = f"{error.message}; the keys allowed here: {allowed}"
        else:
            text = error.message
        problems.append(f"{key}: {text}" if key != "the config" else text)
    return problems


def with_defaults(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Fill in ``config`` the schema's defaults: each property's ``default`` where the object holding it
    lacks it, at every level the schema validates (as ``snakemake.utils.validate`` does, without loading and
    compiling the schema a second time). ``config`` is valid (``schema_problems`` found nothing)."""
    from jsonschema import Draft202012Validator, validators

    properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator: Any, given: dict, instance: Any, subschema: dict) -> Any:
        if isinstance(instance, dict):
            for name, property_schema in given.items():
                if "default" in property_schema:
                    instance.setdefault(name, property_schema["default"])
        yield from properties(validator, given, instance, subschema)

    validators.extend(Draft202012Validator, {"properties": set_defaults})(schema).validate(config)


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


def check_size_models(
    models: dict[str, Any],
    sizes: Collection[str],
    built: Callable[[str], bool],
    exists: Callable[[str], bool] = os.path.isdir,
) -> None:
    """Refuse a size (``params:P``) on a model that is not a local directory and that the workflow does not
    build (a hub id): its search reads the model's config and tokenizer from disk (``built(path)``: whether
    the workflow builds it)."""
    if not sizes:
        return
    for name, model in models.items():
        path = model["path"]
        if not exists(path) and not built(path):
            raise ConfigError(
                f"models.{name}.path: {path} is not a local directory, and recipes {', '.join(sizes)} "
                "(params:P) search it from its files; download it (huggingface-cli download, or "
                "save_pretrained) and give the directory"
            )


def check_size_reach(
    models: dict[str, Any], searches: dict[str, OneCommand], exists: Callable[[str], bool] = os.path.isdir
) -> None:
    """Refuse, before any job runs, a size beyond what its axes can remove from a local model, naming that
    most and the size to ask for, as ``thanos prune-model`` refuses it (``reachable``; a model the workflow
    builds is checked by its search's job once it is built; without a size nothing is imported)."""
    if not searches:
        return
    from thanos.runner.size import reachable

    for name, recipe in searches.items():
        for model, entry in models.items():
            if not exists(entry["path"]):
                continue
            request = recipe.request(entry["path"])
            try:
                reachable(entry["path"], request.size)
            except OptionError as err:
                raise ConfigError(f"recipe {name} on models.{model}: {err.words(KeywordWords())}") from None
