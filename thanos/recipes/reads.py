"""Which stores a recipe reads: the one answer to it (torch-free: the workflow's rules import it).

The workflow's recipe job (``recipe_inputs`` in workflow/rules/pruning_inputs.smk), the engine
(``thanos.stages.engine``), the chain stage (``thanos.stages.chain``: the stores whose modification times
guard its reuse) and ``prune-model``'s disk check ask ``recipe_reads``. It names stores as ``(kind, block)``
of the dense chain (``thanos.files.layout``); each caller makes them paths (``Layout.store(model, DENSE,
kind, block)``, or ``dense_dir / store_name(kind, block)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from thanos.files.layout import StoreKind

if TYPE_CHECKING:
    from thanos.recipes.recipe import Recipe

Store = tuple[StoreKind, int]  # a store of the dense chain: (kind, block)


@dataclass(frozen=True)
class RecipeReads:
    """What one recipe's run reads of what other steps wrote (the model aside): ``recipe_reads``."""

    recipe: Recipe
    num_blocks: int | Callable[[], int]  # or a function returning it, called only when an answer needs it
    sequential: bool  # the run's chain is sequential (else every block reads the dense chain)

    @property
    def depth_scores(self) -> bool:
        """A ``depth:k`` recipe: whole blocks removed, chosen by scores; it prunes no layer, has no chain."""
        return self.recipe.sparsity.structure.whole_blocks

    @property
    def calibrated(self) -> bool:
        """The recipe's chain calibrates its blocks on stores (its method prunes with Hessians)."""
        return self.recipe.needs_hessian and not self.depth_scores

    @property
    def own_chain(self) -> bool:
        """The recipe writes and reads its own sequential chain's stores (blocks >= 1),
        ``Layout.chain_dir(model, recipe)``."""
        return self.sequential and self.calibrated

    @property
    def tokens(self) -> bool:
        """The calibration tokens (the dense chain's block 0 embeds them; the assembly records them)."""
        return self.recipe.needs_calibration

    @property
    def calibration(self) -> tuple[Store, ...]:
        """The dense chain's stores the recipe's chain calibrates its blocks on: block 0's inputs and
        Hessians (the sequential chain computes the later blocks' in its own stores), or every block's
        Hessians (the dense chain); none for a method without a Hessian."""
        if not self.calibrated:
            return ()
        return (("inputs", 0), ("hessians", 0)) if self.own_chain else self._every("hessians")

    @property
    def targets(self) -> tuple[Store, ...]:
        """Recovery towards the dense model's outputs: the dense chain's inputs of blocks 1..L (block l's
        outputs are block l + 1's inputs)."""
        recover = self.recipe.recover
        if not self.calibrated or recover is None or recover.target != "dense":
            return ()
        return self._every("inputs", start=1, extra=1)

    @property
    def chain(self) -> tuple[Store, ...]:
        """The dense chain's stores the recipe's chain step reads, in the order its records list them."""
        return self.calibration + self.targets

    @property
    def owl(self) -> tuple[Store, ...]:
        """What an OWL recipe's per-block sparsities are computed from: every block's Hessians."""
        return self._every("hessians") if self.recipe.owl else ()

    @property
    def depth(self) -> tuple[Store, ...]:
        """What a ``depth:k`` recipe's blocks are scored on: the inputs of blocks 0..L."""
        return self._every("inputs", extra=1) if self.depth_scores else ()

    @property
    def dense(self) -> tuple[Store, ...]:
        """Every dense chain store the recipe's run reads (its chain, OWL's plan, depth's scores), each
        once."""
        return tuple(dict.fromkeys(self.chain + self.owl + self.depth))

    def _every(self, kind: StoreKind, start: int = 0, extra: int = 0) -> tuple[Store, ...]:
        count = self.num_blocks() if callable(self.num_blocks) else self.num_blocks
        return tuple((kind, block) for block in range(start, count + extra))


def recipe_reads(recipe: Recipe, num_blocks: int | Callable[[], int], sequential: bool) -> RecipeReads:
    """The stores ``recipe`` reads on a model of ``num_blocks`` blocks (``RecipeReads``). ``sequential``:
    the run's chain is sequential (the workflow's ``chain: sequential``, ``Layout.sequential``; the chain
    stage's ``--chain-dir``), else every block reads the dense chain.

    ``num_blocks`` may be a function that returns it, called only by the answers that depend on it: the
    workflow's rules read it from model_info.json, a checkpoint, and wait for it only then (a sequential
    recipe's job without recovery towards the dense model waits for none)."""
    return RecipeReads(recipe, num_blocks, sequential)
