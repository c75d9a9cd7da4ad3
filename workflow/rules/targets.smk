# What `rule all` (and the report) asks for: every recipe's model, every evaluation, the tables and figures.


def evaluations():
    names = []
    if config["perplexity"]["enabled"]:
        names.append("perplexity")
    if config["zeroshot"]["enabled"] and config["zeroshot"]["tasks"]:
        names.append("zeroshot")
    return names


def variants():
    """The recipes, and ``dense`` (the unpruned model) with evaluate_dense."""
    return ([DENSE] if config["evaluate_dense"] else []) + list(EVERY_RECIPE)


def shown_variants(wildcards=None):
    """The ``model/variant`` pairs the report shows: the config's models, their recipes and dense."""
    return [f"{model}/{variant}" for model in MODELS for variant in [DENSE, *EVERY_RECIPE]]


def eval_targets():
    return [
        PATHS.evaluation(model, variant, name)
        for model in MODELS
        for variant in variants()
        for name in evaluations()
    ]


def model_targets():
    return [PATHS.model_dir(model, recipe) for model in MODELS for recipe in EVERY_RECIPE]


def report_inputs(wildcards):
    return model_targets() + eval_targets()


def all_targets():
    targets = model_targets() + eval_targets()
    if config["report"]:
        targets += [PATHS.tables, PATHS.figures]
    return targets


def results_dir(wildcards, output):
    """The results root, for the report rules (takes `output`, see prune_out_dir)."""
    return PATHS.root
