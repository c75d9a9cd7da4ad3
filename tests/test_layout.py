"""The results layout (thanos/files/layout.py): which chain a block reads, and the paths docs/cli.md
documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from thanos.files.layout import DENSE, NOT_MODELS, RESERVED, Layout, chain_of, reads_dense_chain

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
    paths = Layout("results")
    m, r, v = "{model}", "{recipe}", "{variant}"
    documented = [
        paths.model_info(m),
        paths.tokens(m),
        paths.store(m, DENSE, "inputs", "{l}"),
        paths.store(m, r, "inputs", "{l}"),
        paths.pruned_layer(m, r, "{l}", "{layer}", "safetensors"),
        paths.chain_summary(m, r),
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


def test_reserved_names_cover_the_results_directories():
    assert set(NOT_MODELS) <= set(RESERVED)
    assert {DENSE, "chains", "calib", "pruned", "model", "eval", "tiny", "demo"} <= set(RESERVED)


def test_configuration_page_lists_the_reserved_names():
    text = (REPO / "docs" / "configuration.md").read_text()
    listed = re.search(r"\(`thanos\.files\.layout\.RESERVED`\):\n`([^`]*)`", text).group(1).split()
    assert listed == list(RESERVED)
