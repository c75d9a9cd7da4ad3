"""The patterns of ``prune_model``'s ``sparsity`` beyond one structure: a combined recipe
(``depth:4+neurons:0.3+vocab:0.3``, its parts in the order they run) and a size asked for (``params:0.25``:
the mix chosen by ``thanos.runner.size``). Torch-free: the command's ``--help`` imports it.
"""

from __future__ import annotations

from typing import Any

from thanos.errors import Option, OptionError
from thanos.pruning.sparsity import parse_sparsity

# a combined recipe's parts run in this order whatever the order written (``thanos.runner.combined``);
# the vocabulary last, on the model the width parts wrote
ORDER = {"depth": 0, "heads": 1, "kv_heads": 1, "neurons": 2, "vocab": 3}
JOINED = "depth:K, heads:P (or kv_heads:P), neurons:P and vocab:P (or vocab:N)"


def combined_parts(sparsity: Any) -> list[str] | None:
    """The parts of a combined pattern (``depth:4+neurons:0.3``) in the order they run; None for one
    pattern. Refused: a part that removes no structure (unstructured, n:m, structured), a kind twice."""
    if not isinstance(sparsity, str) or "+" not in sparsity:
        return None
    if any(not part.strip() for part in sparsity.split("+")):
        raise OptionError(
            Option("sparsity", repr(sparsity)),
            f"a part is empty; join {JOINED} with '+', e.g. depth:4+neurons:0.3",
        )
    try:
        parts = [parse_sparsity(part) for part in sparsity.split("+")]
    except ValueError as err:
        raise OptionError(Option("sparsity", repr(sparsity)), str(err)) from None
    for part in parts:
        if part.kind not in ORDER:
            raise OptionError(
                Option("sparsity", repr(sparsity)),
                f"{part} cannot be combined; a combined recipe joins {JOINED} with '+', e.g. "
                "depth:4+neurons:0.3",
            )
    ranks = [ORDER[part.kind] for part in parts]
    if len(set(ranks)) != len(ranks):
        raise OptionError(
            Option("sparsity", repr(sparsity)), "each of depth, heads, neurons and vocab at most once"
        )
    return [str(part) for part in sorted(parts, key=lambda part: ORDER[part.kind])]
