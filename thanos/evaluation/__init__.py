"""Evaluation of (pruned) models: WikiText-2 perplexity and lm-eval zero-shot accuracy.

Heavy imports (torch, transformers, datasets, lm_eval) happen inside the functions, so that the offline
switches can be set before anything imports the hub clients.

Imports: ``thanos.stages`` (device resolution) and the layers below it.
"""

from thanos.evaluation.loading import load_model, set_offline
from thanos.evaluation.perplexity import evaluate_perplexity
from thanos.evaluation.zeroshot import PAPER_TASKS, evaluate_zeroshot

__all__ = ["PAPER_TASKS", "evaluate_perplexity", "evaluate_zeroshot", "load_model", "set_offline"]
