# Named input and parameter functions of the rules (no logic in the rules themselves): models, data
# sources, evaluation. Those of the pruning rules: rules/pruning_inputs.smk. Paths: PATHS (config.smk).

import json

# --- models ---------------------------------------------------------------------------------------


def _same_path(a, b):
    return os.path.normpath(a) == os.path.normpath(b)


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


# --- evaluation ------------------------------------------------------------------------------------


def eval_model(wildcards):
    if wildcards.variant == DENSE:
        return model_path(wildcards)
    return PATHS.model_dir(wildcards.model, wildcards.variant)


def eval_model_input(wildcards):
    if wildcards.variant == DENSE:
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
