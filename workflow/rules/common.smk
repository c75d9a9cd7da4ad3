# Configuration helpers and named input functions shared by all rules.
# Paths follow docs/cli.md ("Results layout"); every stage is a `python -m thanos <command>` call.

import json
import os
import re
from pathlib import Path

from snakemake.utils import validate

from thanos.sparsity import parse_sparsity

if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


validate(config, "../schemas/config.schema.yaml")

R = config["results"]
CHAIN = config["chain"]
GRANULARITY = config["granularity"]
CALIBRATED_METHODS = ("wanda", "sparsegpt", "thanos")
DEMO = config["demo"]
MODELS = config["models"]


class ConfigError(ValueError):
    pass


def _sparsity_text(key, value):
    """Validate a sparsity value and return its canonical text; the error names the config key."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        raise ConfigError(
            f"{key}: got {value}; quote n:m patterns in YAML ('2:4'), an unquoted 2:4 is read as the number 124"
        )
    try:
        return str(parse_sparsity(value))
    except ValueError as err:
        raise ConfigError(
            f"{key}: {err} (allowed: a fraction like 0.5, 'unstructured:0.5', 'N:M' like '2:4', 'structured:0.3')"
        ) from None


def _pattern_tag(sparsity):
    """0.5 -> u50, 2:4 -> 2-4, structured:0.3 -> s30 (for recipe names made by recipe_grid)."""
    pattern = parse_sparsity(sparsity)
    if pattern.kind == "nm":
        return f"{pattern.n}-{pattern.m}"
    return f"{pattern.kind[0]}{float(pattern.p) * 100:g}"


def _expand_recipes():
    recipes = {}
    for i, entry in enumerate(config["recipe_grid"]):
        alphas = entry.get("alpha", [None])
        for method in entry["methods"]:
            for j, sparsity in enumerate(entry["sparsities"]):
                text = _sparsity_text(f"recipe_grid[{i}].sparsities[{j}]", sparsity)
                for alpha in alphas:
                    name = f"{method}_{_pattern_tag(text)}"
                    if len(alphas) > 1:
                        name += f"_a{alpha:g}"
                    recipe = {"method": method, "sparsity": text}
                    if alpha is not None:
                        recipe["alpha"] = alpha
                    for key in ("blocksize", "damp"):
                        if key in entry:
                            recipe[key] = entry[key]
                    if name in recipes:
                        raise ConfigError(
                            f"recipe_grid[{i}] makes recipe {name!r} a second time: "
                            "list each method x sparsity x alpha once"
                        )
                    recipes[name] = recipe
    for name, recipe in config["recipes"].items():
        if name in recipes:
            raise ConfigError(
                f"recipes.{name}: recipe_grid already makes a recipe of that name: rename one of them"
            )
        recipes[name] = dict(recipe, sparsity=_sparsity_text(f"recipes.{name}.sparsity", recipe["sparsity"]))
    reserved = {"dense", "chains", "calib", "model", "data", "eval", "tables", "figures", "logs", "pruned"}
    for name in recipes:
        if name in reserved or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", name):
            raise ConfigError(f"recipe name {name!r} is reserved or invalid (reserved: {sorted(reserved)})")
    if not recipes:
        raise ConfigError("no recipes: define `recipes:` ({name: {method, sparsity}}) or `recipe_grid:`")
    return recipes


RECIPES = _expand_recipes()


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!x)x"


wildcard_constraints:
    model=_alternation(MODELS),
    recipe=_alternation(RECIPES),
    chain=_alternation(["dense", *RECIPES]),
    variant=_alternation(["dense", *RECIPES]),
    l=r"\d+",
    layer=r"[A-Za-z0-9_.]+",


# --- job environment (not params: changing the device does not invalidate finished results) -------
# Rules read these as shell variables; set here, they reach every job (local or re-parsed remotely).

EVAL_GPUS = config["eval_gpus"]
if EVAL_GPUS > 1 and config["device"] != "auto" and config["device"] != "cuda":
    raise ConfigError(
        f"eval_gpus: {EVAL_GPUS} spreads evaluated models over several GPUs, which needs device: auto or"
        f" cuda (got device: {config['device']}); set eval_gpus: 1"
    )
# The one place that decides how many GPUs a job asks for (the `gpu` resource of the rules: local
# `--resources gpu=K` caps, SLURM's --gpus). device: cpu asks for none, so CPU-only clusters accept the jobs.
JOB_GPUS = 0 if config["device"] == "cpu" else 1
EVAL_JOB_GPUS = 0 if config["device"] == "cpu" else EVAL_GPUS


def _slot_pool(count):
    """The GPU slot-pool wrapper of a job needing `count` GPUs (none on device: cpu)."""
    if config["device"] == "cpu":
        return ""
    return f"python -m thanos.devices --slots {config['gpu_slots']} --count {count} --"


JOB_ENV = {
    "THANOS_WF_DEVICE": config["device"],
    "THANOS_WF_GPU": _slot_pool(1),
    "THANOS_WF_EVAL_GPU": _slot_pool(EVAL_GPUS),
    # where an evaluation puts the model: one device, or spread over eval_gpus GPUs
    "THANOS_WF_EVAL_PLACEMENT": "--device-map auto" if EVAL_GPUS > 1 else f"--device {config['device']}",
    "THANOS_WF_ZEROSHOT_ENV": "env HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1" if config["zeroshot"]["offline"] else "",
}
os.environ.update(JOB_ENV)


envvars:
    "THANOS_WF_DEVICE",
    "THANOS_WF_GPU",
    "THANOS_WF_EVAL_GPU",
    "THANOS_WF_EVAL_PLACEMENT",
    "THANOS_WF_ZEROSHOT_ENV",


def retain(path, kind):
    """Mark an intermediate temp() when config retention.<kind> is false."""
    return path if config["retention"][kind] else temp(path)


# --- models ---------------------------------------------------------------------------------------


def _same_path(a, b):
    return os.path.normpath(a) == os.path.normpath(b)


TINY_MODELS = {os.path.normpath(m["path"]): m["tiny"] for m in MODELS.values() if "tiny" in m}


def _built_by_workflow(path):
    if DEMO["enabled"] and _same_path(path, DEMO["model_dir"]):
        return True
    return os.path.normpath(path) in TINY_MODELS


def model_path(wildcards):
    return MODELS[wildcards.model]["path"]


def model_dir_input(wildcards):
    """The model directory as an input when it is local or built by the workflow (not for hub ids)."""
    path = model_path(wildcards)
    return [path] if _built_by_workflow(path) or os.path.exists(path) else []


def tiny_model_options(wildcards):
    spec = TINY_MODELS[os.path.normpath(wildcards.tiny_path)]
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in sorted(spec.items()))


def model_info(model):
    """model_info.json of a model (a checkpoint: evaluated once the model-info job ran)."""
    with open(checkpoints.model_info.get(model=model).output[0]) as handle:
        return json.load(handle)


def info_file(wildcards):
    """model_info.json's path (without waiting for the checkpoint)."""
    return f"{R}/{wildcards.model}/model_info.json"


def info_path(wildcards):
    return checkpoints.model_info.get(model=wildcards.model).output[0]


# --- local data sources ----------------------------------------------------------------------------


def _local_source(path, hub_names=()):
    if path is None or path in hub_names:
        return []
    if DEMO["enabled"]:
        data_dir = os.path.normpath(DEMO["data_dir"])
        if os.path.normpath(path) == data_dir or os.path.normpath(path).startswith(data_dir + os.sep):
            return [DEMO["data_dir"]]
    return [path]


def calibration_source_input(wildcards):
    return _local_source(config["calibration"]["source"], ("c4",))


def perplexity_source_input(wildcards):
    return _local_source(config["perplexity"]["source"], ("wikitext2",))


def zeroshot_include_input(wildcards):
    return _local_source(config["zeroshot"]["include_path"])


# --- recipes and chains ----------------------------------------------------------------------------


def needs_calibration(recipe):
    return RECIPES[recipe]["method"] in CALIBRATED_METHODS


def recipe_options(wildcards):
    """The recipe's prune options (a param: changing them reruns this recipe's jobs only)."""
    recipe = RECIPES[wildcards.recipe]
    options = [f"--method {recipe['method']}", f"--sparsity {recipe['sparsity']}"]
    options += [f"--{key} {recipe[key]}" for key in ("blocksize", "alpha", "damp") if key in recipe]
    return " ".join(options)


def recipe_json(wildcards):
    return json.dumps(
        {"name": wildcards.recipe, **RECIPES[wildcards.recipe], "chain": CHAIN}, sort_keys=True
    )


def chain_of(recipe, block):
    """Which chain's stores block `block` of `recipe` reads: block 0 and the dense chain are shared."""
    return "dense" if CHAIN == "dense" or int(block) == 0 else recipe


def tokens_path(model):
    return f"{R}/{model}/calib/tokens.zarr"


def inputs_path(model, chain, block):
    return f"{R}/{model}/chains/{'dense' if int(block) == 0 else chain}/inputs_{block}.zarr"


def hessians_path(model, recipe, block):
    return f"{R}/{model}/chains/{chain_of(recipe, block)}/hessians_{block}.zarr"


def chain_marker(model, recipe):
    """granularity chain: the summary the chain job writes after its last block."""
    return f"{R}/{model}/{recipe}/pruned/chain.json"


def chain_pruned_root(wildcards):
    return f"{R}/{wildcards.model}/{wildcards.recipe}/pruned"


def pruned_block_outputs(model, recipe, block):
    if GRANULARITY == "chain":
        return [chain_marker(model, recipe)]
    root = f"{R}/{model}/{recipe}/pruned/block{block}"
    if GRANULARITY == "block":
        return [root]
    layers = model_info(model)["layers"]
    return [f"{root}/{layer}.{ext}" for layer in layers for ext in ("safetensors", "json")]


def prune_inputs(wildcards):
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if needs_calibration(wildcards.recipe):
        inputs["hessians"] = hessians_path(wildcards.model, wildcards.recipe, wildcards.l)
    return inputs


def hessians_option(wildcards, input):
    return f"--hessians {input.hessians}" if "hessians" in input.keys() else ""


def block_layers(wildcards):
    return ",".join(model_info(wildcards.model)["layers"])


def capture_inputs(wildcards):
    return {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "inputs": inputs_path(wildcards.model, wildcards.chain, wildcards.l),
    }


def propagate_inputs(wildcards):
    previous = int(wildcards.l) - 1
    inputs = {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "inputs": inputs_path(wildcards.model, wildcards.chain, previous),
        "pruned": [],
    }
    if wildcards.chain != "dense":
        inputs["pruned"] = pruned_block_outputs(wildcards.model, wildcards.chain, previous)
    return inputs


def previous_block(wildcards):
    return int(wildcards.l) - 1


def pruned_dir_option(wildcards):
    if wildcards.chain == "dense":
        return ""
    return f"--pruned-dir {R}/{wildcards.model}/{wildcards.chain}/pruned/block{int(wildcards.l) - 1}"


def assemble_inputs(wildcards):
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if GRANULARITY == "chain":
        inputs["pruned"] = [chain_marker(wildcards.model, wildcards.recipe)]
    else:
        num_blocks = model_info(wildcards.model)["num_blocks"]
        inputs["pruned"] = [
            f
            for block in range(num_blocks)
            for f in pruned_block_outputs(wildcards.model, wildcards.recipe, block)
        ]
    if needs_calibration(wildcards.recipe):
        inputs["tokens"] = tokens_path(wildcards.model)
    return inputs


def chain_inputs(wildcards):
    """granularity chain: the shared dense stores the recipe's chain job reads (none for magnitude)."""
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if needs_calibration(wildcards.recipe):
        dense = f"{R}/{wildcards.model}/chains/dense"
        if CHAIN == "dense":
            blocks = range(model_info(wildcards.model)["num_blocks"])
            inputs["hessians"] = [f"{dense}/hessians_{block}.zarr" for block in blocks]
        else:
            inputs["inputs"] = f"{dense}/inputs_0.zarr"
            inputs["hessians"] = f"{dense}/hessians_0.zarr"
    return inputs


def chain_options(wildcards):
    """The chain command's store options: dense stores, and the recipe's own chain when sequential."""
    if not needs_calibration(wildcards.recipe):
        return ""
    options = f"--dense-dir {R}/{wildcards.model}/chains/dense"
    if CHAIN == "sequential":
        options += f" --chain-dir {R}/{wildcards.model}/chains/{wildcards.recipe}"
        if not config["retention"]["activations"]:
            options += " --drop-activations"
        if not config["retention"]["hessians"]:
            options += " --drop-hessians"
    return options


def calibration_option(wildcards, input):
    return f"--calibration {input.tokens}" if "tokens" in input.keys() else ""


def intermediates(wildcards):
    """Paths whose disk use the pruning report lists."""
    paths = [f"{R}/{wildcards.model}/{wildcards.recipe}/pruned"]
    if needs_calibration(wildcards.recipe):
        paths += [tokens_path(wildcards.model), f"{R}/{wildcards.model}/chains/dense"]
        if CHAIN == "sequential":
            paths.append(f"{R}/{wildcards.model}/chains/{wildcards.recipe}")
    return " ".join(paths)


# --- evaluation and targets ------------------------------------------------------------------------


def eval_model(wildcards):
    if wildcards.variant == "dense":
        return model_path(wildcards)
    return f"{R}/{wildcards.model}/{wildcards.variant}/model"


def eval_model_input(wildcards):
    if wildcards.variant == "dense":
        return model_dir_input(wildcards)
    return [eval_model(wildcards)]


def perplexity_options(wildcards):
    seqlen = config["perplexity"].get("seqlen")
    return f"--seqlen {seqlen}" if seqlen else ""


def zeroshot_options(wildcards):
    zs = config["zeroshot"]
    options = [f"--tasks {','.join(zs['tasks'])}"]
    if zs["include_path"]:
        options.append(f"--include-path {zs['include_path']}")
    if zs["limit"]:
        options.append(f"--limit {zs['limit']}")
    return " ".join(options)


def evaluations():
    names = []
    if config["perplexity"]["enabled"]:
        names.append("perplexity")
    if config["zeroshot"]["enabled"] and config["zeroshot"]["tasks"]:
        names.append("zeroshot")
    return names


def variants():
    return (["dense"] if config["evaluate_dense"] else []) + list(RECIPES)


def eval_targets():
    return [
        f"{R}/{model}/{variant}/eval/{name}.json"
        for model in MODELS
        for variant in variants()
        for name in evaluations()
    ]


def model_targets():
    return [f"{R}/{model}/{recipe}/model" for model in MODELS for recipe in RECIPES]


def results_dir(wildcards, output):
    """The results directory (the parent of the tables/figures output)."""
    return os.path.dirname(output[0]) or "."


def pruned_root(wildcards, output):
    return os.path.join(os.path.dirname(output[0]), "pruned")


def prune_out_dir(wildcards, output):
    return os.path.dirname(output.weight)


def report_inputs(wildcards):
    return model_targets() + eval_targets()


def all_targets():
    targets = model_targets() + eval_targets()
    if config["report"]:
        targets += [f"{R}/tables", f"{R}/figures"]
    return targets
