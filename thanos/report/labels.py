"""How a reader sees a pruning method: its label, its colour, whether its label shows alpha, its paper.

Tables and figures label and colour a method's rows from here, the model card names the method and
cites its paper, ``thanos prune-model`` prints the label. What a method computes (its Hessian, defaults
and kernels) is ``thanos.pruning.methods``; every method there has one entry here, in the same order
(the order of the paper's tables: baselines first, Thanos last). Torch-free, pandas-free.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodLabel:
    """``alpha_in_label``: alpha is one of the method's own hyper-parameters, so tables and figures always
    show it (other methods show it only when it is > 0); ``reference``: the method's paper, cited by the
    model card (Thanos: the card's BibTeX)."""

    label: str
    color: str
    alpha_in_label: bool = False
    reference: str = ""


LABELS: dict[str, MethodLabel] = {
    "magnitude": MethodLabel(label="Magnitude", color="#7f7f7f"),
    "sparsegpt": MethodLabel(
        label="SparseGPT",
        color="#1f77b4",
        reference="Frantar and Alistarh, SparseGPT: Massive Language Models Can Be Accurately Pruned in "
        "One-Shot (ICML 2023)",
    ),
    "wanda": MethodLabel(
        label="Wanda",
        color="#2ca02c",
        reference="Sun et al., A Simple and Effective Pruning Approach for Large Language Models (ICLR 2024)",
    ),
    "thanos": MethodLabel(label="Thanos", color="#d62728", alpha_in_label=True),
}
