"""Which stores a recipe reads (thanos/recipes/reads.py): the one answer the workflow's recipe job, the
engine, the chain stage and prune-model's disk check share."""

from __future__ import annotations

import pytest

from thanos.recipes.reads import recipe_reads
from thanos.recipes.recipe import Recipe

BLOCK0 = (("inputs", 0), ("hessians", 0))
HESSIANS = (("hessians", 0), ("hessians", 1), ("hessians", 2))
OUTPUTS = (("inputs", 1), ("inputs", 2), ("inputs", 3))


def recipe(**fields) -> Recipe:
    return Recipe.from_dict({"name": "r", "sparsity": 0.5, **fields})


@pytest.mark.parametrize(
    ("fields", "sequential", "chain", "own_chain"),
    [
        ({"method": "magnitude"}, True, (), False),
        ({"method": "magnitude"}, False, (), False),
        ({"method": "thanos"}, True, BLOCK0, True),
        ({"method": "thanos"}, False, HESSIANS, False),
        ({"method": "wanda", "recover": True}, True, BLOCK0 + OUTPUTS, True),
        ({"method": "wanda", "recover": True}, False, HESSIANS + OUTPUTS, False),
        ({"method": "wanda", "recover": {"target": "block"}}, True, BLOCK0, True),
    ],
)
def test_the_chain_reads_block_zero_or_every_block_and_the_recovery_targets(
    fields, sequential, chain, own_chain
):
    reads = recipe_reads(recipe(**fields), 3, sequential)
    assert reads.chain == chain
    assert reads.own_chain == own_chain
    assert reads.tokens == (fields["method"] != "magnitude")
    assert reads.owl == reads.depth == ()


def test_owl_and_depth_read_every_block_and_the_union_names_each_store_once():
    owl = recipe_reads(recipe(method="wanda", sparsity=0.7, profile="owl"), 3, sequential=True)
    assert owl.owl == HESSIANS
    assert owl.dense == (*BLOCK0, ("hessians", 1), ("hessians", 2))
    depth = recipe_reads(recipe(method="sparsegpt", sparsity="depth:1"), 3, sequential=True)
    assert depth.chain == () and not depth.own_chain  # whole blocks removed: no chain
    assert depth.depth == depth.dense == (("inputs", 0), *OUTPUTS)


def test_the_number_of_blocks_is_asked_only_when_the_answer_depends_on_it():
    """The workflow reads it from a checkpoint: a sequential recipe's job must not wait for it."""

    def unknown() -> int:
        raise AssertionError("asked for the number of blocks")

    assert recipe_reads(recipe(method="thanos"), unknown, sequential=True).chain == BLOCK0
    assert recipe_reads(recipe(method="magnitude"), unknown, sequential=False).chain == ()
    assert recipe_reads(recipe(method="thanos"), lambda: 3, sequential=False).chain == HESSIANS
