"""How pruning becomes Snakemake jobs (config key ``granularity``), and what ``auto`` picks.

Granularity never changes what is computed (the files are the same byte for byte), only how many
processes compute it:

- ``layer``: one prune job per linear layer (7 per Llama block): most parallelism, one process start
  (seconds: importing torch, opening the checkpoint) per layer;
- ``block``: one prune job per block;
- ``recipe``: one job per (model, recipe) runs the recipe's whole chain in one process (capture, prune and
  propagate of every block after block 0), resuming at its last finished block.

``auto`` (the default) picks ``layer`` where jobs can run on many devices at once (a cluster executor,
or two or more local GPUs) and ``recipe`` otherwise: on one GPU or on the CPU the jobs of a block could
only queue for the same device, so a process start per layer is pure overhead (it dominates below hidden
size ~2048 on a CPU, where a layer prunes in milliseconds to a second). Recipes with recovery (``recover``)
train each block after pruning it, in the recipe's job: they need ``recipe``, which ``auto`` then picks.
"""

from __future__ import annotations

from collections.abc import Sequence

GRANULARITIES = ("layer", "block", "recipe")
ALIASES = {"chain": "recipe"}  # old name of recipe, accepted with a warning


def choose_granularity(
    requested: str, *, cluster: bool, gpus: int, recovered: Sequence[str] = ()
) -> tuple[str, str]:
    """``(granularity, reason)`` for the config value ``requested`` (``auto``, an alias or a granularity).

    Args:
        requested: the config's ``granularity``.
        cluster: jobs are submitted to a cluster (Snakemake runs with a non-local executor).
        gpus: GPUs jobs can use at once on this machine (0 on ``device: cpu``).
        recovered: the recipes with recovery: they train each block after pruning it, in the recipe's
            job, so they need granularity ``recipe`` (``auto`` chooses it).
    """
    requested = ALIASES.get(requested, requested)
    if requested in GRANULARITIES and recovered and requested != "recipe":
        raise ValueError(
            f"granularity: {requested}: recipes with recover ({', '.join(recovered)}) train each block after "
            "pruning it, in one job per recipe; set granularity: recipe (or auto)"
        )
    if requested in GRANULARITIES:
        return requested, "set in the config"
    if requested != "auto":
        raise ValueError(f"granularity: unknown {requested!r}; choose auto, {', '.join(GRANULARITIES)}")
    if recovered:
        return "recipe", "auto: recipes with recovery train each block after pruning it, in the recipe's job"
    if cluster:
        return "layer", "auto: jobs run on a cluster, one job per layer spreads a block over its nodes"
    if gpus >= 2:
        return "layer", f"auto: {gpus} GPUs, one job per layer prunes a block's layers side by side"
    where = "one GPU" if gpus == 1 else "the CPU"
    return "recipe", f"auto: everything runs on {where}, one process per recipe saves a start per layer"
