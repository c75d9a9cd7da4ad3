"""The results layout (thanos/files/layout.py): which chain a block reads, and the paths docs/cli.md
documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from thanos.files.layout import (
    DENSE,
    NOT_MODELS,
    RESERVED,
    UNCALIBRATED,
    Layout,
    calibration_key,
    chain_of,
    reads_dense_chain,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("block", "sequential", "chain"),
    [(0, True, DENSE), ("0", True, DENSE), (1, True, "thanos_u50"), (3, False, DENSE), (0, False, DENSE)],
)
def test_block_zero_and_dense_chains_read_the_dense_stores(block, sequential, chain):
    assert chain_of("thanos_u50", block, sequential) == chain
    assert reads_dense_chain(block, sequential) == (chain == DENSE)
    paths = Layout("results", sequential=sequential)
    assert paths.hessians("m", "thanos_u50", block) == f"results/m/chains/{chain}/hessians_{block}.zarr"
    assert paths.inputs("m", DENSE, block) == f"results/m/chains/dense/inputs_{block}.zarr"


def test_documented_paths():
    """Every path the rules build from a Layout is the one the results layout of docs/cli.md shows."""
    text = (REPO / "docs" / "cli.md").read_text()
    tree = re.search(r"## Results layout\n.*?```\n(.*?)```", text, re.S).group(1)
    paths = Layout("results", calibration="{calibration}")
    m, r, v = "{model}", "{recipe}", "{variant}"
    documented = [
        paths.model_info(m),
        paths.tokens(m),
        paths.store(m, DENSE, "inputs", "{l}"),
        paths.store(m, r, "inputs", "{l}"),
        paths.pruned_layer(m, r, "{l}", "{layer}", "safetensors", "{calibration}"),
        paths.chain_summary(m, r, "{calibration}"),
        paths.owl(m, r),
        paths.depth(m, r, "{calibration}"),
        paths.part(m, r, "{i}") + "/model/",
        paths.model_dir(m, r) + "/",
        paths.evaluation(m, v, "perplexity"),
        paths.tables + "/",
        paths.figures + "/",
        paths.logs + "/",
    ]
    for path in documented:
        assert path.replace("{variant}", "{recipe}") in tree or path.replace("{variant}", "dense") in tree, (
            path
        )


CALIBRATION = {"source": "data/calib.jsonl", "nsamples": 128, "seqlen": 2048, "seed": 0, "text_field": "text"}


def test_each_calibration_has_its_own_tokens():
    """The workflow's tokens are kept per calibration: any field changed gives another store, the same
    calibration (the source spelled another way) the same one."""
    key = calibration_key(CALIBRATION)
    assert key.startswith("128x2048-") and len(key) == len("128x2048-") + 8
    assert calibration_key({**CALIBRATION, "source": "./data//calib.jsonl"}) == key
    changed = [{"source": "data/other.jsonl"}, {"nsamples": 64}, {"seqlen": 1024}, {"seed": 1}]
    keys = {calibration_key(CALIBRATION | change) for change in [*changed, {"text_field": "content"}]}
    assert len(keys) == 5 and key not in keys
    assert Layout("results", calibration=key).tokens("m") == f"results/m/calib/{key}/tokens.zarr"
    assert Layout("results").tokens("m") == "results/m/calib/tokens.zarr"  # prune-model's working directory


def test_what_a_calibration_computes_is_kept_under_its_key():
    """The chains' stores, OWL plans and pruned layers of a keyed layout (the workflow) sit under the
    calibration's key; a recipe that reads none under ``uncalibrated``; prune-model's layout (no key) as
    before."""
    keyed, plain = Layout("results", calibration="8x32-0123abcd"), Layout("results")
    assert keyed.hessians("m", "t", 1) == "results/m/calib/8x32-0123abcd/chains/t/hessians_1.zarr"
    assert keyed.owl("m", "t") == "results/m/calib/8x32-0123abcd/owl/t.json"
    assert keyed.pruned_block("m", "t", 2, "8x32-0123abcd") == "results/m/t/pruned/8x32-0123abcd/block2"
    assert keyed.chain_summary("m", "mag", UNCALIBRATED) == "results/m/mag/pruned/uncalibrated/chain.json"
    assert plain.hessians("m", "t", 1) == "results/m/chains/t/hessians_1.zarr"
    assert plain.pruned_layer("m", "t", 0, "q", "json") == "results/m/t/pruned/block0/q.json"
    assert plain.owl("m", "t") == "results/m/t/owl.json"


def test_reserved_names_cover_the_results_directories():
    assert set(NOT_MODELS) <= set(RESERVED)
    assert {DENSE, "chains", "calib", "pruned", "model", "eval", "tiny", "demo"} <= set(RESERVED)


def test_configuration_page_lists_the_reserved_names():
    text = (REPO / "docs" / "configuration.md").read_text()
    listed = re.search(r"\(`thanos\.files\.layout\.RESERVED`\):\n`([^`]*)`", text).group(1).split()
    assert listed == list(RESERVED)
