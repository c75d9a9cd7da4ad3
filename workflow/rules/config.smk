# The config and the constants every rule reads: loaded, validated against the schema, then checked by
# thanos.recipe for what a schema cannot say (method names, recipe names, n:m patterns). Every path is
# built by thanos.files.layout (PATHS); every stage is a `python -m thanos <command>` call (docs/cli.md).

import os
import re
import shlex

import yaml

from snakemake.logging import logger
from snakemake.utils import validate

from thanos.files import digests
from thanos.files.layout import DENSE, MODEL_DIR_FORMAT, NOT_MODELS, UNCALIBRATED, Layout, calibration_key
from thanos.recipe import ConfigError
from thanos.workflow_config import distilled_from, expand, schema_problems
from thanos.workflow_inputs import input_problems
from thanos.jobs.devices import resolve_devices
from thanos.jobs.granularity import ALIASES, choose_granularity

if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


# the schema's problems in words, one line each naming the key (validate's own message is a schema dump)
_problems = schema_problems(config, yaml.safe_load(open(workflow.source_path("../schemas/config.schema.yaml"))))
if _problems:
    raise ConfigError("the config is not valid:\n  " + "\n  ".join(_problems))
validate(config, "../schemas/config.schema.yaml")  # fills in the defaults

R = config["results"]
CHAIN = config["chain"]
# what is computed from a calibration (its tokens, the chains' stores, OWL plans, pruned layers) under a
# key of that calibration: another calibration is computed beside it, and the config changed back finds
# it again (nothing of it deleted); only the assembled models and their evaluations are redone
PATHS = Layout(R, sequential=CHAIN == "sequential", calibration=calibration_key(config["calibration"]))
DEMO = config["demo"]
MODELS = config["models"]
RECIPES = expand(config)
OWL_RECIPES = [name for name, recipe in RECIPES.items() if recipe.owl]
# a distilled recipe's model is its pruned recipe's model distilled (rule distill): nothing of its own is
# pruned or assembled
DISTILLED = {name: distilled_from(recipe, RECIPES) for name, recipe in RECIPES.items() if recipe.distill}
PRUNED = [name for name in RECIPES if name not in DISTILLED]

TINY_MODELS = {}  # normalised path -> the tiny model's spec (built by rule make_tiny_model)
_TINY_OWNERS = {}
for _name, _model in MODELS.items():
    if "tiny" in _model:
        _path = os.path.normpath(_model["path"])
        if _path in TINY_MODELS and TINY_MODELS[_path] != _model["tiny"]:
            raise ConfigError(
                f"models.{_TINY_OWNERS[_path]} and models.{_name} build different tiny models at the same"
                f" path {_model['path']!r}; give each its own path (one spec per path)"
            )
        TINY_MODELS[_path] = _model["tiny"]
        _TINY_OWNERS[_path] = _name
# normalised path -> the real model's spec (downloaded and converted by rule real_model)
REAL_MODELS = {os.path.normpath(_m["path"]): _m["real"] for _m in MODELS.values() if "real" in _m}

# results users copy from must be what was computed: an assembled model changed since (an edit in
# place, a truncation, a deleted file) stops the run here, named, before anything reads it
if not workflow.remote_exec:
    for _model in MODELS:
        for _recipe in RECIPES:
            _dir = os.path.abspath(PATHS.model_dir(_model, _recipe))
            if _problems := digests.edited(_dir):
                raise ConfigError(
                    f"{_dir} is not what was computed: {'; '.join(_problems)}; delete {_dir} and run again: "
                    "it is reassembled from the pruned layers (copy a model before editing it)"
                )



def built_by_workflow(path):
    """Whether the workflow builds ``path`` itself: the demo's data (or a file in it) and model, a tiny or
    real model."""
    path = os.path.normpath(path)
    if DEMO["enabled"]:
        data_dir = os.path.normpath(DEMO["data_dir"])
        if path in (data_dir, os.path.normpath(DEMO["model_dir"])) or path.startswith(data_dir + os.sep):
            return True
    return path in TINY_MODELS or path in REAL_MODELS


# every input the config names, checked for content (not empty, long enough for the windows asked) before
# any job starts: a run refused here (and by `snakemake -n`) deletes nothing; a job that failed on it would
# have had its outputs deleted by Snakemake first
if not workflow.remote_exec:
    if _problems := input_problems(config, RECIPES, built_by_workflow):
        raise ConfigError(
            _problems[0] if len(_problems) == 1 else "the config's inputs:\n  " + "\n  ".join(_problems)
        )

if config["granularity"] in ALIASES:
    logger.warning("granularity: 'chain' is the old name of 'recipe' (one job per recipe); write 'recipe'")


def _local_gpus():
    """GPUs the jobs of this machine can use at once: --resources gpu=K, else the slot pool's devices."""
    if config["device"] == "cpu":
        return 0
    given = getattr(workflow.global_resources.get("gpu"), "value", None)
    if given is not None:
        return int(given)
    return len(resolve_devices(config["gpu_slots"]))


# device: cuda on a machine whose jobs would see no GPU fails in the first job: said now, naming the key
# (a cluster's nodes have their own GPUs; --resources gpu=K says K are there)
if (
    str(config["device"]).startswith("cuda")
    and not workflow.remote_exec
    and workflow.resource_settings.nodes is None
    and _local_gpus() == 0
):
    raise ConfigError(
        f"device: {config['device']}, but the jobs of this machine would see no GPU (none in "
        "CUDA_VISIBLE_DEVICES or from nvidia-smi, no --resources gpu=K); set device: cpu or auto, or run on "
        "a GPU machine (on a cluster: --profile workflow/profiles/slurm)"
    )


# auto is resolved once, by the Snakemake process that schedules the jobs; jobs that Snakemake re-parses
# (cluster jobs) take its choice from the environment, so both see the same rules.
if workflow.remote_exec and "THANOS_WF_GRANULARITY" in os.environ:
    GRANULARITY = os.environ["THANOS_WF_GRANULARITY"]
    GRANULARITY_REASON = os.environ.get("THANOS_WF_GRANULARITY_REASON", "")
else:
    try:
        GRANULARITY, GRANULARITY_REASON = choose_granularity(
            config["granularity"],
            cluster=workflow.resource_settings.nodes is not None,
            gpus=_local_gpus(),
            recovered=[name for name, recipe in RECIPES.items() if recipe.recover is not None],
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if config["granularity"] == "auto":
        logger.info(f"granularity: {GRANULARITY} ({GRANULARITY_REASON})")

if set(MODELS) & set(NOT_MODELS):
    raise ConfigError(
        f"models: {', '.join(sorted(set(MODELS) & set(NOT_MODELS)))} names a directory of the report"
        f" ({', '.join(NOT_MODELS)} under {R}); rename the model"
    )


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!x)x"


wildcard_constraints:
    model=_alternation(MODELS),
    recipe=_alternation(PRUNED),
    distilled=_alternation(DISTILLED),
    chain=_alternation([DENSE, *PRUNED]),
    variant=_alternation([DENSE, *RECIPES]),
    l=r"\d+",
    layer=r"[A-Za-z0-9_.]+",
    calibration=_alternation([PATHS.calibration, UNCALIBRATED]),


def compute_dtype(wildcards, output):
    """The config's compute_dtype, as the stage jobs take it (--compute-dtype, --dtype). Like the device, it
    does not invalidate finished results (a parameter that takes `output` is not recorded: results of a
    version without it are kept); a recipe job's chain records the dtype it resolved to and starts again
    when it changes, and every store names the dtype it was computed in (attribute compute_dtype)."""
    return config["compute_dtype"]


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
DISTILL_PROCESSES = config["distill_processes"]
DISTILL_JOB_GPUS = 0 if config["device"] == "cpu" else DISTILL_PROCESSES
# Scheduling: among the jobs ready to run, those that lead to pruned models (calibration, chains, OWL,
# pruning, assembly) go before evaluations, so a run ends on evaluations alone, which fill the cores to the
# end, instead of a last model's prune -> assemble -> evaluate chain running while the other cores idle.
PRUNING_FIRST = 1
# The figures job runs last, alone: a local run draws them with up to 8 of its cores (a process each; more
# would only plot figures that another process saves), a cluster job or a run without --cores with one.
if workflow.resource_settings.nodes is None:
    FIGURE_PROCESSES = min(workflow.resource_settings.cores or 1, 8)
else:
    FIGURE_PROCESSES = 1


def _slot_pool(count):
    """The GPU slot-pool wrapper of a job needing `count` GPUs (none on device: cpu)."""
    if config["device"] == "cpu":
        return ""
    return f"python -m thanos.jobs.devices --slots {config['gpu_slots']} --count {count} --"


JOB_ENV = {
    "THANOS_WF_DEVICE": config["device"],
    "THANOS_WF_GPU": _slot_pool(1),
    "THANOS_WF_EVAL_GPU": _slot_pool(EVAL_GPUS),
    # where an evaluation puts the model: one device, or spread over eval_gpus GPUs
    "THANOS_WF_EVAL_PLACEMENT": "--device-map auto" if EVAL_GPUS > 1 else f"--device {config['device']}",
    # a distillation job: its GPUs, and its processes (data parallel through torchrun when several, each
    # a Python of its own: not forked from the local run's warm worker)
    "THANOS_WF_DISTILL_GPU": _slot_pool(DISTILL_PROCESSES),
    "THANOS_WF_DISTILL": (
        f"env THANOS_WORKER=off python -m torch.distributed.run --standalone --nproc-per-node {DISTILL_PROCESSES}"
        if DISTILL_PROCESSES > 1
        else "python"
    ),
    "THANOS_WF_ZEROSHOT_ENV": "env HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1" if config["zeroshot"]["offline"] else "",
    "THANOS_WF_GRANULARITY": GRANULARITY,
    "THANOS_WF_GRANULARITY_REASON": GRANULARITY_REASON,
}
os.environ.update(JOB_ENV)


envvars:
    "THANOS_WF_DEVICE",
    "THANOS_WF_GPU",
    "THANOS_WF_EVAL_GPU",
    "THANOS_WF_EVAL_PLACEMENT",
    "THANOS_WF_DISTILL_GPU",
    "THANOS_WF_DISTILL",
    "THANOS_WF_ZEROSHOT_ENV",
    "THANOS_WF_GRANULARITY",
    "THANOS_WF_GRANULARITY_REASON",


def quoted(value):
    """A value quoted for the shell: every config string that reaches a `shell:` goes through it (or `:q`)."""
    return shlex.quote(str(value))


def retain(path, kind):
    """Mark an intermediate temp() when config retention.<kind> is false."""
    return path if config["retention"][kind] else temp(path)
