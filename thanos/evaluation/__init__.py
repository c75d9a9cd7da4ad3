"""Evaluation of (pruned) models: WikiText-2 perplexity and lm-eval zero-shot accuracy.

Heavy imports (torch, transformers, datasets, lm_eval) happen inside the functions, so that the offline
switches can be set before anything imports the hub clients.

Imports: ``thanos.stages`` (device resolution) and the layers below it. This ``__init__`` imports nothing:
``zeroshot``'s task names are checked where Snakemake parses the workflow, without torch.
"""
