# Input and parameter functions of the pruning rules (capture, propagate, prune, assemble). Which chain's
# stores a block reads, and every path, come from thanos.files.layout through PATHS (config.smk).

import functools

from thanos.files.layout import RECOVERED, UNCALIBRATED
from thanos.recipes.reads import recipe_reads
from thanos.files.pruned_layers import block_layers as block_layers_of


def needs_calibration(recipe):
    """Calibration tokens and the dense chain: the method's Hessians, or OWL's outlier ratios."""
    return RECIPES[recipe].needs_calibration


def needs_hessian(recipe):
    """The method prunes with Hessians (its jobs read hessians stores)."""
    return RECIPES[recipe].needs_hessian


def calibration_of(recipe):
    """The directory of a recipe's pruned layers under ``{recipe}/pruned/``: the calibration's key, so that
    another calibration prunes beside them, or ``uncalibrated`` for a recipe that reads none."""
    return PATHS.calibration if needs_calibration(recipe) else UNCALIBRATED


def recipe_json(wildcards):
    """The recipe as its jobs take it (--recipe JSON); a param, so editing a recipe reruns its jobs only."""
    return RECIPES[wildcards.recipe].to_json()


def pruned_block_outputs(model, recipe, block):
    """What a finished block of a recipe is, as job outputs: its layers' files, its directory, or (one
    job per recipe) the recipe's chain summary."""
    calibration = calibration_of(recipe)
    if GRANULARITY == "recipe":
        return [PATHS.chain_summary(model, recipe, calibration)]
    if GRANULARITY == "block":
        return [PATHS.pruned_block(model, recipe, block, calibration)]
    layers = recipe_layers(model, recipe, block)
    return [
        PATHS.pruned_layer(model, recipe, block, layer, ext, calibration)
        for layer in layers
        for ext in ("safetensors", "json")
    ]


def prune_inputs(wildcards):
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if needs_hessian(wildcards.recipe):
        inputs["hessians"] = PATHS.hessians(wildcards.model, wildcards.recipe, wildcards.l)
    if RECIPES[wildcards.recipe].owl:
        inputs["owl"] = PATHS.owl(wildcards.model, wildcards.recipe)
    return inputs


def hessians_option(wildcards, input):
    """--hessians of a prune job, --owl (``owl_option``) and --model-info: the job reads the layers' names
    from model_info.json instead of building the model (a param that takes ``input``: not recorded). Each
    only when its input is named: a SLURM job's own Snakemake first sees the inputs unnamed, while the
    model_info checkpoint is not yet known there."""
    hessians = f"--hessians {quoted(input.hessians)}" if "hessians" in input.keys() else ""
    info = f"--model-info {quoted(input.info)}" if "info" in input.keys() else ""
    return " ".join(option for option in (hessians, owl_option(input), info) if option)


def owl_option(input):
    """--owl FILE for an OWL recipe's prune, chain and assemble jobs (its per-block sparsities); it rides
    on options the rules already pass, so that the rules' code, hence finished results, do not change."""
    return f"--owl {quoted(input.owl)}" if "owl" in input.keys() else ""


# --- OWL -------------------------------------------------------------------------------------------


def owl_inputs(wildcards):
    """The dense chain's Hessians of every block (sequential chains: blocks >= 1 computed for OWL)."""
    model, recipe = wildcards.model, RECIPES[wildcards.recipe]
    reads = recipe_reads(recipe, model_info(model)["num_blocks"], PATHS.sequential)
    return {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "hessians": dense_stores(model, reads.owl),
    }


def recipe_layers(model, recipe, block):
    """The layers of block `block` the recipe prunes: the block's, less those its `exclude` patterns
    match (a pattern that matches no layer of the model is refused)."""
    info = model_info(model)
    return RECIPES[recipe].layers(block_layers_of(info, int(block)), info["layers"])


def block_layers(wildcards):
    return ",".join(recipe_layers(wildcards.model, wildcards.recipe, wildcards.l))


# Parameters that take `output`, although they do not need it: Snakemake records no such parameter, so
# results made before these paths came from PATHS are not rebuilt for a parameter it never stored.


def prune_out_dir(wildcards, output):
    return PATHS.pruned_block(wildcards.model, wildcards.recipe, wildcards.l, wildcards.calibration)


def pruned_root(wildcards, output):
    """The layers a recipe's model is assembled from: its pruned layers, or its recovered blocks."""
    root = PATHS.pruned(wildcards.model, wildcards.recipe, calibration_of(wildcards.recipe))
    return f"{root}/{RECOVERED}" if RECIPES[wildcards.recipe].recover is not None else root


def capture_inputs(wildcards):
    return {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "inputs": PATHS.inputs(wildcards.model, wildcards.chain, wildcards.l),
    }


def previous_block(wildcards):
    return int(wildcards.l) - 1


def propagate_inputs(wildcards):
    previous = previous_block(wildcards)
    inputs = {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "inputs": PATHS.inputs(wildcards.model, wildcards.chain, previous),
        "pruned": [],
    }
    if wildcards.chain != DENSE:
        inputs["pruned"] = pruned_block_outputs(wildcards.model, wildcards.chain, previous)
    return inputs


def pruned_dir_option(wildcards):
    if wildcards.chain == DENSE:
        return ""
    recipe = wildcards.chain
    block_dir = PATHS.pruned_block(wildcards.model, recipe, previous_block(wildcards), calibration_of(recipe))
    exclude = "".join(f" --exclude {quoted(p)}" for p in RECIPES[wildcards.chain].exclude)
    return f"--pruned-dir {quoted(block_dir)}{exclude}"


def dense_stores(model, stores):
    """Paths of the dense chain's stores ``(kind, block)`` of ``thanos.recipes.reads``."""
    return [PATHS.store(model, DENSE, kind, block) for kind, block in stores]


def recipe_inputs(wildcards):
    """granularity recipe: the dense chain's stores the recipe's job reads (``recipe_reads``: none without
    a Hessian; block 0's inputs and Hessians (sequential: the job computes the rest), or every block's
    Hessians; and the recovery targets), the OWL plan."""
    model, recipe = wildcards.model, RECIPES[wildcards.recipe]
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if recipe.owl:
        inputs["owl"] = PATHS.owl(model, wildcards.recipe)
    reads = recipe_reads(recipe, lambda: model_info(model)["num_blocks"], PATHS.sequential)
    for kind in ("inputs", "hessians"):
        stores = [(k, block) for k, block in reads.calibration if k == kind]
        if stores:
            inputs[kind] = dense_stores(model, stores)
    if reads.targets:  # recovery: the dense model's outputs of every block
        inputs["targets"] = dense_stores(model, reads.targets)
    return inputs


def recipe_store_options(wildcards):
    """The chain command's store options: the dense chain, and the recipe's own chain when sequential;
    an OWL recipe's owl.json."""
    owl = ""
    if RECIPES[wildcards.recipe].owl:
        owl = f"--owl {quoted(PATHS.owl(wildcards.model, wildcards.recipe))} "
    if not needs_hessian(wildcards.recipe):
        return owl.strip()
    options = f"{owl}--dense-dir {quoted(PATHS.chain_dir(wildcards.model, DENSE))}"
    if PATHS.sequential:
        options += f" --chain-dir {quoted(PATHS.chain_dir(wildcards.model, wildcards.recipe))}"
        if not config["retention"]["activations"]:
            options += " --drop-activations"
        if not config["retention"]["hessians"]:
            options += " --drop-hessians"
    return options


def recipe_pruned_root(wildcards):
    return PATHS.pruned(wildcards.model, wildcards.recipe, wildcards.calibration)


# --- assemble --------------------------------------------------------------------------------------


def depth_file(model, recipe):
    """A depth:K recipe's depth.json (rules/depth.smk), under its calibration's key."""
    return PATHS.depth(model, recipe, calibration_of(recipe))


def assemble_inputs(wildcards):
    model, recipe = wildcards.model, wildcards.recipe
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if recipe in DEPTH_RECIPES:  # whole blocks removed: its choice of blocks, no pruned layer
        inputs["depth"] = depth_file(model, recipe)
    elif GRANULARITY == "recipe":
        inputs["pruned"] = pruned_block_outputs(model, recipe, None)
    else:
        blocks = range(model_info(model)["num_blocks"])
        inputs["pruned"] = [f for block in blocks for f in pruned_block_outputs(model, recipe, block)]
    if needs_calibration(recipe):
        inputs["tokens"] = PATHS.tokens(model)
    if RECIPES[recipe].owl:
        inputs["owl"] = PATHS.owl(model, recipe)
    return inputs


def calibration_option(wildcards, input):
    """--calibration (provenance) of an assemble job, --owl (``owl_option``) and a depth recipe's --depth
    (riding on this option, as --owl does)."""
    tokens = f"--calibration {quoted(input.tokens)}" if "tokens" in input.keys() else ""
    depth = f"--depth {quoted(input.depth)}" if input.get("depth") else ""
    return " ".join(option for option in (tokens, owl_option(input), depth) if option)


def intermediates(wildcards):
    """Paths whose disk use the pruning report lists."""
    model, recipe = wildcards.model, wildcards.recipe
    paths = [PATHS.pruned(model, recipe, calibration_of(recipe))]
    if needs_calibration(recipe):
        paths += [PATHS.tokens(model), PATHS.chain_dir(model, DENSE)]
        if recipe_reads(RECIPES[recipe], 0, PATHS.sequential).own_chain:
            paths.append(PATHS.chain_dir(model, recipe))
    return " ".join(quoted(path) for path in paths)


# --- depth -----------------------------------------------------------------------------------------


def depth_inputs(wildcards):
    """The dense chain's inputs of every block and the last block's output (``RecipeReads.depth``)."""
    model, recipe = wildcards.model, RECIPES[wildcards.recipe]
    reads = recipe_reads(recipe, lambda: model_info(model)["num_blocks"], PATHS.sequential)
    return {"info": info_path(wildcards), "model": model_dir_input(wildcards), "inputs": dense_stores(model, reads.depth)}


# --- combined recipes ------------------------------------------------------------------------------


def combined_part(wildcards):
    """(the combined recipe, the index of the part a job runs, its recipe): its {part}, or the last part
    (rule combined_model)."""
    combined = COMBINED[wildcards.combined]
    i = int(wildcards.part) if "part" in wildcards.keys() else len(combined.parts) - 1
    return combined, i, combined.parts[i]


def part_model(wildcards, i):
    """The model part ``i`` of the job's combined recipe writes (read by the parts after it)."""
    return f"{PATHS.part(wildcards.model, wildcards.combined, i)}/model"


def part_inputs(wildcards):
    """The first part: the input model, and what it reads of the workflow's calibration (the tokens and
    the dense chain's stores its recipe reads, ``thanos.recipes.reads``); a later part: the part before's model
    (and every earlier part's, whose reports the last one records: retention deletes them once it is
    written) and the calibration text it calibrates on (a vocabulary: its tokens are chosen by it, or by its
    own local ``vocab_text``)."""
    _, i, part = combined_part(wildcards)
    if i > 0:
        earlier = [part_model(wildcards, j) for j in range(i)]
        inputs = {"model": earlier[-1], "earlier": earlier, "source": calibration_source_input(wildcards)}
        if part.vocab_text is not None and str(part.vocab_text).lower() != "c4":  # a vocabulary's own text
            inputs["vocab_text"] = part.vocab_text
        return inputs
    model = wildcards.model
    inputs = {"info": info_path(wildcards), "model": model_dir_input(wildcards)}
    if part.needs_calibration:
        reads = recipe_reads(part, lambda: model_info(model)["num_blocks"], PATHS.sequential)
        inputs["tokens"] = PATHS.tokens(model)
        inputs["dense"] = dense_stores(model, reads.dense)
    return inputs


def part_read_model(wildcards):
    """The model the part reads: the input model, or the part before's."""
    _, i, _ = combined_part(wildcards)
    return model_path(wildcards) if i == 0 else part_model(wildcards, i - 1)


def part_recipe(wildcards):
    """The part's recipe as JSON (a param: editing the combined recipe reruns its parts from the first
    changed one)."""
    return combined_part(wildcards)[2].to_json()


def part_work(wildcards, output):
    """The part's working directory (takes ``output``: see compute_dtype)."""
    return PATHS.part(wildcards.model, wildcards.combined, combined_part(wildcards)[1])


def part_calibration(wildcards):
    """A later part's calibration (a param: another calibration reruns it); the first reads the
    workflow's (its inputs)."""
    if combined_part(wildcards)[1] == 0:
        return ""
    return calibration_flags("--source")


def calibration_flags(source_flag):
    """The workflow's calibration as a command's options, its text given by ``source_flag``."""
    calibration = config["calibration"]
    return (
        f"{source_flag} {quoted(calibration['source'])} --nsamples {calibration['nsamples']}"
        f" --seqlen {calibration['seqlen']} --seed {calibration['seed']}"
        f" --text-field {quoted(calibration['text_field'])}"
    )


def part_options(wildcards, input, output):
    """The first part's --model-info, --tokens and --dense-dir (the workflow's); the last part's --combined,
    --base-model and --earlier (what its report records of the whole); retention's --drop-* (takes
    ``input``: not recorded)."""
    combined, i, _ = combined_part(wildcards)
    options = []
    if "info" in input.keys():  # the first part (named once the model_info checkpoint is known)
        options += ["--model-info", input.info]
        if "tokens" in input.keys():
            options += ["--tokens", input.tokens, "--dense-dir", PATHS.chain_dir(wildcards.model, DENSE)]
    if i == len(combined.parts) - 1:
        earlier = input.earlier if "earlier" in input.keys() else []
        options += ["--combined", combined.sparsity, "--base-model", model_path(wildcards), "--earlier", *earlier]
    retention = config["retention"]
    for kind, key in (("activations", "activations"), ("hessians", "hessians"), ("layers", "pruned_layers")):
        if not retention[key]:
            options.append(f"--drop-{kind}")
    return " ".join(quoted(option) for option in options)


# --- recipes one `thanos prune-model` job writes (a vocabulary alone, a size: rules/search.smk) ---------


def one_command_recipe(wildcards):
    """The ``OneCommand`` of the job: {one} (rule one_command) or {search} (rule search_candidate)."""
    return ONE_COMMAND[wildcards.one if "one" in wildcards.keys() else wildcards.search]


def one_command_inputs(wildcards):
    """The input model, its facts (the model_info checkpoint: a size's candidates are known from them), the
    calibration text and the vocabulary's (``vocab_text``, a local one); a size's prune-model job, every
    candidate the search starts from (measured by rule search_candidate)."""
    recipe = one_command_recipe(wildcards)
    inputs = {
        "info": info_path(wildcards),
        "model": model_dir_input(wildcards),
        "source": calibration_source_input(wildcards),
    }
    text = recipe.keywords().get("vocab_text")
    if text is not None and str(text).lower() != "c4":  # missing: Snakemake names it; changed: reruns
        inputs["vocab_text"] = text
    if "one" in wildcards.keys() and recipe.is_size:
        owner = SEARCH_OWNER[recipe.name]
        planned = first_candidates(wildcards.model, owner)
        inputs["candidates"] = [PATHS.candidate(wildcards.model, owner, name) for name in planned]
        group = [name for name in SEARCHES if SEARCH_OWNER[name] == owner]
        if recipe.name != owner:  # after the size before it in the group: one search at a time in its directory
            inputs["after"] = PATHS.model_dir(wildcards.model, group[group.index(recipe.name) - 1])
    return inputs


@functools.lru_cache(maxsize=None)
def first_candidates(model, name):
    """{candidate name: explicit mix} a size's search measures first (read from the model's config and
    tokenizer once its facts are known: thanos.runner.size.planned_candidates)."""
    from thanos.errors import OptionError
    from thanos.runner.size import planned_candidates
    from thanos.runner.size_search import candidate_name

    request = ONE_COMMAND[name].request(MODELS[model]["path"])
    try:
        planned = planned_candidates(request)
    except OptionError:  # a size beyond the model's reach: its job refuses it, named (a model the workflow
        return {}  # builds: the config's check, check_size_reach, could not read it)
    return {candidate_name(pattern): pattern for pattern in planned}


def one_command_flags(wildcards):
    """The recipe as prune-model's options (a param: another recipe reruns the job)."""
    return " ".join(quoted(word) for word in one_command_recipe(wildcards).flags())


def one_command_calibration(wildcards):
    """The workflow's calibration as prune-model's options (a param: another calibration reruns the job)."""
    return calibration_flags("--calibration")


def one_command_work(wildcards, output):
    """The recipe's working directory, a size's that of the first size of its search (SEARCH_OWNER; takes
    ``output``: not recorded, see compute_dtype)."""
    name = one_command_recipe(wildcards).name
    return PATHS.one_command(wildcards.model, SEARCH_OWNER.get(name, name))


def one_command_out(wildcards, output):
    """The model the prune-model job writes."""
    return output[0]


def candidate_option(wildcards, output):
    """The candidate a search_candidate job measures and the working directory of its stages."""
    pattern = first_candidates(wildcards.model, wildcards.search)[wildcards.candidate]
    work = os.path.join(os.path.dirname(output[0]), "work")
    return f"--candidate {quoted(pattern)} --candidate-work {quoted(work)}"


def candidate_model(wildcards, output):
    """--out of a candidate job: the search's model, which the prune-model job writes (the candidate writes
    only its measurement)."""
    return PATHS.model_dir(wildcards.model, wildcards.search)
