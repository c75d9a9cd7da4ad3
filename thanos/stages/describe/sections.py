"""The model card's sections on what trained a pruned model after pruning: recovery (each block, toward the
dense model's outputs) and distillation (the whole model, toward the dense model's next-token distributions).
Each is empty for a model without it."""

from __future__ import annotations

import math
from typing import Any

from thanos.recipes.labels import counted, public_name

EBFT_ARXIV = "Guo et al. 2024, arXiv:2402.12419"
MINITRON_ARXIV = "Muralidharan et al. 2024, arXiv:2407.14679"
RECOVERY_TARGET_TEXT = {
    "dense": "the dense model's outputs of each block",
    "block": "the dense block applied to the pruned model's inputs of it",
}


def recovery_lines(report: dict[str, Any]) -> list[str]:
    """The model card's section on recovery (none for a recipe without it)."""
    recovery = report.get("recovery")
    if not recovery:
        return []
    options, blocks = recovery["options"], recovery["blocks"]
    closed = [1 - b["loss_after"] / b["loss_before"] for b in blocks if b["loss_before"] > 0]
    seconds = sum(b["seconds"] for b in blocks)
    lines = [
        "## Recovery",
        "",
        "After pruning, each block's kept weights were trained so that the block's outputs match the dense "
        f"model's again (block-wise reconstruction, EBFT: {EBFT_ARXIV}): "
        f"{counted(options['epochs'], 'epoch')} of Adam at learning rate {options['lr']:g} (decayed linearly "
        f"to 0), {options['batch_size']} calibration windows per step, target: "
        f"{RECOVERY_TARGET_TEXT[options['target']]}; the best epoch on {100 * options['holdout']:g} % of the "
        "windows held out was kept. Every pruned weight is still zero "
        "(the updates are masked). Norms, biases, mixture-of-experts routers and the layers the recipe "
        "excludes were not trained.",
        "",
        f"The blocks' validation loss went down by {100 * sum(closed) / max(len(closed), 1):.1f} % on "
        f"average ({counted(len(blocks), 'block')}, {seconds:.0f} s of training in all):",
        "",
        "| block | loss before | loss after | epochs kept | seconds |",
        "| --: | --: | --: | --: | --: |",
    ]
    for b in blocks:
        lines.append(
            f"| {b['block']} | {b['loss_before']:.4g} | {b['loss_after']:.4g} | {b['epochs_kept']} | "
            f"{b['seconds']:.1f} |"
        )
    return [*lines, ""]


def distillation_lines(report: dict[str, Any]) -> list[str]:
    """The model card's section on distillation (``thanos distill``; none for a model not distilled)."""
    distilled = report.get("distillation")
    if not distilled:
        return []
    options, source = distilled["options"], distilled["source"]
    before, best = distilled["heldout"][0], distilled["best"]
    ppl = {name: math.exp(min(value, 700)) for name, value in best.items() if name.endswith("_nll")}
    return [
        "## Distillation",
        "",
        "After pruning, the whole model was trained toward the dense model's next-token distributions (the "
        f"KL divergence, Minitron's logit loss: {MINITRON_ARXIV}) on {distilled['tokens']:,} tokens of "
        f"`{public_name(source['source'])}` (sha256 `{source['checksum'][:12]}...`): "
        f"{counted(distilled['steps'], 'step')} of AdamW, {counted(options['batch_size'], 'window')} of "
        f"{options['seqlen']} tokens each, learning rate "
        f"{options['lr']:g} after a warm-up, decayed on a cosine; {distilled['seconds']:.0f} s. Every zero "
        "that pruning wrote is still zero.",
        "",
        f"On {counted(distilled['heldout_windows'], 'window')} of that text held out from training: KL per "
        f"token {before['kl']:.4f} before, {best['kl']:.4f} after (the weights of step {best['step']}); "
        f"perplexity {math.exp(min(before['student_nll'], 700)):.2f} before, {ppl['student_nll']:.2f} after, "
        f"the dense model {ppl['teacher_nll']:.2f}.",
        "",
    ]
