# The config and the constants every rule reads: loaded, validated against the schema, then checked by
# thanos.recipes.recipe for what a schema cannot say (method names, recipe names, n:m patterns). Every path is
# built by thanos.files.layout (PATHS); every stage is a `python -m thanos <command>` call (docs/cli.md).

import os
import re
import shlex

import yaml

from snakemake.logging import logger

from thanos.files import digests
from thanos.files.layout import DENSE, MODEL_DIR_FORMAT, UNCALIBRATED, Layout, calibration_key
from thanos.errors import KeyWords, OptionError
from thanos.evaluation.zeroshot import check_task_names
from thanos.recipes.fields import ConfigError
from thanos.workflow.config import (
    Combined,
    OneCommand,
    builds,
    built_models,
    check_model_names,
    check_size_models,
    check_size_reach,
    distilled_from,
    expand,
    schema_problems,
    search_owners,
    with_defaults,
)
from thanos.workflow.config_file import read_config_file
from thanos.workflow.inputs import input_problems
from thanos.jobs import plan
from thanos.jobs.granularity import ALIASES

if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


# a key given twice in a config file (YAML keeps the last one and drops the first), refused naming its lines
for _file in workflow.overwrite_configfiles or (["config.yaml"] if os.path.isfile("config.yaml") else []):
    read_config_file(_file)

# the schema's problems in words, one line each naming the key (validate's own message is a schema dump);
# then the schema's defaults filled in (libyaml's loader: the pure-Python one took 30 ms of each start)
with open(workflow.source_path("../schemas/config.schema.yaml")) as _schema_file:
    _SCHEMA = yaml.load(_schema_file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
_problems = schema_problems(config, _SCHEMA)
if _problems:
    raise ConfigError("the config is not valid:\n  " + "\n  ".join(_problems))
with_defaults(config, _SCHEMA)

R = config["results"]
CHAIN = config["chain"]
# what is computed from a calibration (its tokens, the chains' stores, OWL plans, pruned layers) under a
# key of that calibration: another calibration is computed beside it, and the config changed back finds
# it again (nothing of it deleted); only the assembled models and their evaluations are redone
PATHS = Layout(R, sequential=CHAIN == "sequential", calibration=calibration_key(config["calibration"]))
DEMO = config["demo"]
MODELS = config["models"]
# every recipe of the config, in its order: a combined one (depth:4+neurons:0.3+vocab:0.3) runs as one job per
# part (rules/combined.smk), a vocabulary alone or a size (vocab:0.3, params:0.25) as one `thanos prune-model` job, a
# size's first candidates measured by jobs of their own (rules/search.smk), the others as the stages of the
# rules below
EVERY_RECIPE = expand(config)
COMBINED = {name: recipe for name, recipe in EVERY_RECIPE.items() if isinstance(recipe, Combined)}
ONE_COMMAND = {name: recipe for name, recipe in EVERY_RECIPE.items() if isinstance(recipe, OneCommand)}
SEARCHES = [name for name, recipe in ONE_COMMAND.items() if recipe.is_size]
# sizes that differ only in the parameters asked for share one search (its cost table), in the working
# directory of the first of them; they run one after another
SEARCH_OWNER = search_owners(ONE_COMMAND)
RECIPES = {
    name: recipe for name, recipe in EVERY_RECIPE.items() if name not in COMBINED and name not in ONE_COMMAND
}
DEPTH_RECIPES = [name for name, recipe in RECIPES.items() if recipe.sparsity.structure.whole_blocks]
OWL_RECIPES = [name for name, recipe in RECIPES.items() if recipe.owl]
# a distilled recipe's model is its pruned recipe's model distilled (rule distill): nothing of its own is
# pruned or assembled
DISTILLED = {name: distilled_from(recipe, RECIPES) for name, recipe in RECIPES.items() if recipe.distill}
PRUNED = [name for name in RECIPES if name not in DISTILLED]

# normalised path -> the spec of a tiny model (built by rule make_tiny_model) or a real one (downloaded and
# converted by rule real_model)
TINY_MODELS, REAL_MODELS = built_models(MODELS)

# results users copy from must be what was computed: an assembled model changed since (an edit in
# place, a truncation, a deleted file) stops the run here, named, before anything reads it
if not workflow.remote_exec:
    for _model in MODELS:
        for _recipe in EVERY_RECIPE:
            _dir = os.path.abspath(PATHS.model_dir(_model, _recipe))
            if _problems := digests.edited(_dir):
                raise ConfigError(
                    f"{_dir} is not what was computed: {'; '.join(_problems)}; delete {_dir} and run again: "
                    "it is reassembled from the pruned layers (copy a model before editing it)"
                )



def built_by_workflow(path):
    """Whether the workflow builds ``path`` itself: the demo's data (or a file in it) and model, a tiny or
    real model."""
    return builds(path, DEMO, TINY_MODELS.keys() | REAL_MODELS.keys())


check_size_models(MODELS, SEARCHES, built_by_workflow)
if SEARCHES and not workflow.remote_exec:  # a size beyond its axes' reach refused before any job (it
    # imports torch: a config without a size, and a job's process, whose run checks it, skip it)
    check_size_reach(MODELS, {name: ONE_COMMAND[name] for name in SEARCHES})


# every input the config names, checked for content (not empty, long enough for the windows asked) before
# any job starts: a run refused here (and by `snakemake -n`) deletes nothing; a job that failed on it would
# have had its outputs deleted by Snakemake first
if not workflow.remote_exec:
    if _problems := input_problems(config, EVERY_RECIPE, built_by_workflow):
        raise ConfigError(
            _problems[0] if len(_problems) == 1 else "the config's inputs:\n  " + "\n  ".join(_problems)
        )

# zero-shot task names lm-eval does not know, refused before any job: the evaluate job that fails on one
# has had its outputs (perplexity's too) deleted by Snakemake first (task YAMLs the workflow builds are
# checked once they are there)
_zeroshot = config["zeroshot"]
_tasks_dir = _zeroshot["include_path"]
if _zeroshot["enabled"] and not workflow.remote_exec and not (_tasks_dir and not os.path.isdir(_tasks_dir)):
    try:
        check_task_names(_zeroshot["tasks"], _tasks_dir)
    except OptionError as _err:
        raise ConfigError(_err.words(KeyWords("zeroshot"))) from None

if config["granularity"] in ALIASES:
    logger.warning("granularity: 'chain' is the old name of 'recipe' (one job per recipe); write 'recipe'")


def _local_gpus():
    """GPUs the jobs of this machine can use at once: --resources gpu=K, else the slot pool's devices."""
    given = getattr(workflow.global_resources.get("gpu"), "value", None)
    return plan.local_gpus(config["device"], given, config["gpu_slots"])


_CLUSTER = workflow.resource_settings.nodes is not None
plan.check_device(config["device"], local=not workflow.remote_exec and not _CLUSTER, gpus=_local_gpus)
GRANULARITY, GRANULARITY_REASON = plan.granularity(
    config["granularity"],
    [name for name, recipe in RECIPES.items() if recipe.recover is not None],
    remote=workflow.remote_exec,
    cluster=_CLUSTER,
    gpus=_local_gpus,
)
if config["granularity"] == "auto" and not (workflow.remote_exec and plan.GRANULARITY_ENV[0] in os.environ):
    logger.info(f"granularity: {GRANULARITY} ({GRANULARITY_REASON})")
check_model_names(MODELS, R)


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!x)x"


wildcard_constraints:
    model=_alternation(MODELS),
    recipe=_alternation(PRUNED),
    distilled=_alternation(DISTILLED),
    combined=_alternation(COMBINED),
    one=_alternation(ONE_COMMAND),
    search=_alternation(SEARCHES),
    candidate=r"[A-Za-z0-9_.-]+",
    part=r"\d+",
    chain=_alternation([DENSE, *PRUNED]),
    variant=_alternation([DENSE, *EVERY_RECIPE]),
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

plan.check_eval_gpus(config["eval_gpus"], config["device"])
EVAL_GPUS = config["eval_gpus"]
DISTILL_PROCESSES = config["distill_processes"]
# the GPUs each kind of job asks for (the `gpu` resource of the rules)
JOB_GPUS = plan.job_gpus(config["device"], 1)
EVAL_JOB_GPUS = plan.job_gpus(config["device"], EVAL_GPUS)
DISTILL_JOB_GPUS = plan.job_gpus(config["device"], DISTILL_PROCESSES)
# Scheduling: among the jobs ready to run, those that lead to pruned models (calibration, chains, OWL,
# pruning, assembly) go before evaluations, so a run ends on evaluations alone, which fill the cores to the
# end, instead of a last model's prune -> assemble -> evaluate chain running while the other cores idle.
PRUNING_FIRST = 1
FIGURE_PROCESSES = plan.figure_processes(_CLUSTER, workflow.resource_settings.cores)
JOB_ENV = plan.job_env(config, GRANULARITY, GRANULARITY_REASON)
os.environ.update(JOB_ENV)


envvars:
    "THANOS_WF_DEVICE",
    "THANOS_WF_GPU",
    "THANOS_WF_EVAL_GPU",
    "THANOS_WF_EVAL_PLACEMENT",
    "THANOS_WF_DISTILL_GPU",
    "THANOS_WF_DISTILL",
    "THANOS_WF_ZEROSHOT_ENV",
    "THANOS_WF_PPL_BATCH",
    "THANOS_WF_ZEROSHOT_BATCH",
    "THANOS_WF_GRANULARITY",
    "THANOS_WF_GRANULARITY_REASON",


def quoted(value):
    """A value quoted for the shell: every config string that reaches a `shell:` goes through it (or `:q`)."""
    return shlex.quote(str(value))


def retain(path, kind):
    """Mark an intermediate temp() when config retention.<kind> is false."""
    return path if config["retention"][kind] else temp(path)
