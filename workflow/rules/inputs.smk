# Named input and parameter functions of the rules (no logic in the rules themselves): models, data
# sources, evaluation. Those of the pruning rules: rules/pruning_inputs.smk. Paths: PATHS (config.smk).

import json
import shlex

from thanos.files.fingerprint import model_fingerprint, record
from thanos.options import command_line
from thanos.recipes.training import streamed_dataset

# --- models ---------------------------------------------------------------------------------------


def model_path(wildcards):
    return MODELS[wildcards.model]["path"]


def _fingerprint_local_models():
    """Record the fingerprint (name, size, mtime_ns of each file) of every local model directory the
    workflow does not build; a changed one is rewritten, newer than every result, so they rerun."""
    recorded = set()
    for name, model in MODELS.items():
        path = model["path"]
        if built_by_workflow(path) or not os.path.isdir(path):
            continue
        changed = record(PATHS.fingerprint(name), model_fingerprint(path))
        if changed:
            logger.warning(
                f"models.{name}: files of {path} changed since the last run ({', '.join(changed[:5])}):"
                " everything computed from this model reruns"
            )
        recorded.add(name)
    return recorded


FINGERPRINTED = _fingerprint_local_models()


def model_dir_input(wildcards):
    """The model directory as an input when it is local or built by the workflow (not for hub ids), and
    the fingerprint of a local one (rewritten when its files change: every job reading the model reruns)."""
    path = model_path(wildcards)
    if wildcards.model in FINGERPRINTED:
        return [path, PATHS.fingerprint(wildcards.model)]
    return [path] if built_by_workflow(path) or os.path.exists(path) else []


def _options(spec):
    """A model spec of the config as command-line options: {num_blocks: 2} -> --num-blocks 2."""
    return " ".join(f"--{key.replace('_', '-')} {quoted(value)}" for key, value in sorted(spec.items()))


def tiny_model_options(wildcards):
    return _options(TINY_MODELS[os.path.normpath(wildcards.tiny_path)])


def real_model_options(wildcards):
    return _options(REAL_MODELS[os.path.normpath(wildcards.real_path)])


def model_info(model):
    """model_info.json of a model (a checkpoint: evaluated once the model-info job ran)."""
    with open(checkpoints.model_info.get(model=model).output[0]) as handle:
        return json.load(handle)


def info_file(wildcards):
    """model_info.json's path (without waiting for the checkpoint)."""
    return PATHS.model_info(wildcards.model)


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


# --- distillation ---------------------------------------------------------------------------------


def distill_student(wildcards):
    """The model a distilled recipe trains: its pruned recipe's assembled model."""
    return PATHS.model_dir(wildcards.model, DISTILLED[wildcards.distilled])


def distill_source_input(wildcards):
    source = RECIPES[wildcards.distilled].distill.source
    return [] if streamed_dataset(source) else _local_source(source, ("c4",))  # hf:NAME: streamed


def distill_options(wildcards):
    """The recipe's `distill` options (the config's keys: the fields of thanos.recipes.training.Distillation) as the
    `thanos distill` flags declared by the same fields (--tokens 131072 --lr 0.0003 ...)."""
    return shlex.join(command_line(RECIPES[wildcards.distilled].distill))


def distill_work(wildcards, output):
    """The checkpoints' directory (takes `output`, see compute_dtype: a later version moving it does not
    invalidate finished models)."""
    return PATHS.distill_work(wildcards.model, wildcards.distilled)


def distill_flags(wildcards, output):
    """`--keep all` where config retention.distill_checkpoints keeps the checkpoints (`thanos distill`
    deletes them once the model is written by default), `--shard` when config distill_shard asks for FSDP
    (takes `output`, see compute_dtype)."""
    keep = ["--keep", "all"] if config["retention"]["distill_checkpoints"] else []
    return " ".join(keep + (["--shard"] if config["distill_shard"] else []))


def distill_threads(wildcards, threads):
    """Each process's threads: the job's, shared among its processes."""
    return max(1, threads // DISTILL_PROCESSES)


# --- evaluation ------------------------------------------------------------------------------------


def eval_model(wildcards):
    if wildcards.variant == DENSE:
        return model_path(wildcards)
    return PATHS.model_dir(wildcards.model, wildcards.variant)


def eval_model_input(wildcards):
    """The evaluated model; also model_info.json for the dense one, so that a model refused there (a NaN
    or Inf tensor) is never evaluated."""
    if wildcards.variant == DENSE:
        return [*model_dir_input(wildcards), info_file(wildcards)]
    return [eval_model(wildcards)]


def perplexity_options(wildcards):
    options = []
    for key in ("seqlen", "max_windows"):
        if config["perplexity"].get(key):
            options.append(f"--{key.replace('_', '-')} {config['perplexity'][key]}")
    return " ".join(options)


def zeroshot_options(wildcards):
    zs = config["zeroshot"]
    options = [f"--tasks {quoted(','.join(zs['tasks']))}"]
    if zs["include_path"]:
        options.append(f"--include-path {quoted(zs['include_path'])}")
    if zs["limit"]:
        options.append(f"--limit {zs['limit']}")
    return " ".join(options)
