"""The method registry (thanos/pruning/methods.py): every registered method, for every pattern kind, through
``prune_layer`` with its defaults; the registry and the layout load without torch."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from thanos import METHODS, prune_layer
from thanos.pruning import methods
from thanos.pruning.kernels import Problem
from thanos.pruning.sparsity import exact, neuron_count, parse_sparsity, structured_count
from thanos.recipes.labels import LABELS

C, B = 24, 32
PATTERNS = {
    "unstructured": "0.5",
    "nm": "2:4",
    "structured": "structured:0.25",
    "neurons": "neurons:0.25",
    "heads": "heads:0.25",  # 8 heads of 4 columns in 2 groups: 1 of each group's 4
    "kv_heads": "kv_heads:0.25",  # 1 of 4 groups of 2 heads
}
HEADS = {"heads": (8, 2), "kv_heads": (8, 4)}  # (query heads, key/value groups) of the layer


def layer() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    W = torch.randn(C, B, generator=g)
    X = torch.randn(B, 256, generator=g) * torch.linspace(0.2, 3.0, B).unsqueeze(1)
    return W, 2 * X @ X.T / 8


@pytest.mark.parametrize("kind", methods.KINDS)
@pytest.mark.parametrize("name", methods.names())
def test_every_method_prunes_every_pattern_exactly(name: str, kind: str) -> None:
    """The kernel of each (method, kind) gives the pattern's exact counts with the method's defaults."""
    spec = methods.get(name)
    W, H = layer()
    result = prune_layer(W, H if spec.needs_hessian else None, name, PATTERNS[kind], heads=HEADS.get(kind))
    alpha = exact(spec.default_alpha(kind))
    assert result.stats.alpha == float(alpha) and result.stats.blocksize == (
        None if spec.default_blocksize(kind) is None else min(spec.default_blocksize(kind), B)
    )
    dense = result.mask.sum(dim=1) == 0
    assert int(dense.sum()) == math.ceil(alpha * C)
    assert torch.equal(result.weight[dense], W[dense]), "outlier rows stay as they were"
    rows = result.mask[~dense]
    assert bool((result.weight[result.mask] == 0).all())
    if kind == "unstructured":
        assert int(rows.sum()) == rows.shape[0] * B // 2
    elif kind == "nm":
        assert bool((rows.reshape(rows.shape[0], -1, 4).sum(dim=2) == 2).all())
    else:
        columns = rows.all(dim=0)
        count = {"neurons": neuron_count(exact(0.25), B), "heads": 2 * 4, "kv_heads": 2 * 4}.get(
            kind, structured_count(exact(0.25), alpha, B)
        )
        assert int(columns.sum()) == count
        assert torch.equal(rows, columns.expand_as(rows))
    if not spec.updates_weights:
        assert torch.equal(result.weight[~result.mask], W[~result.mask]), "mask-only: kept weights unchanged"


def test_registry_facts() -> None:
    assert METHODS == methods.names() == ("magnitude", "sparsegpt", "wanda", "thanos")
    assert tuple(LABELS) == METHODS, "every method has its label, in table order"
    assert [m for m in METHODS if not methods.get(m).needs_hessian] == ["magnitude"]
    thanos = methods.get("thanos")
    assert (thanos.default_blocksize("unstructured"), thanos.default_blocksize("nm")) == (128, 512)
    assert thanos.default_blocksize("structured") is None
    # n:m is exact n:m unless alpha is asked for (the paper's variant: 0.1); structured keeps 10 % dense
    assert (thanos.default_alpha("unstructured"), thanos.default_alpha("nm")) == (0.0, 0.0)
    assert thanos.default_alpha("structured") == 0.1
    assert methods.get("sparsegpt").default_blocksize("nm") == 128
    for name in METHODS:
        for kind in methods.KINDS:
            assert callable(methods.kernel(name, kind))


def test_unknown_method_and_missing_kernel(monkeypatch) -> None:
    W, H = layer()
    with pytest.raises(ValueError, match="method: unknown method 'obc'; choose one of magnitude, sparsegpt"):
        prune_layer(W, H, "obc", 0.5)
    partial = methods.Method(
        name="unstructured_only",
        needs_hessian=False,
        updates_weights=False,
        kernels={"unstructured": "thanos.pruning.kernels:magnitude_unstructured"},
    )
    monkeypatch.setitem(methods.METHODS, partial.name, partial)
    assert int(prune_layer(W, None, partial.name, 0.5).mask.sum()) == C * B // 2
    with pytest.raises(ValueError, match="has no kernel for nm sparsity"):
        prune_layer(W, None, partial.name, "2:4")


def test_kernels_share_one_signature() -> None:
    """Every kernel takes one ``Problem`` and returns (W, mask): a new method's kernel can rely on it."""
    W, H = layer()
    U = torch.linalg.cholesky(torch.linalg.inv(H + 0.01 * H.diag().mean() * torch.eye(B)), upper=True)
    for name in METHODS:
        for kind, pattern in PATTERNS.items():
            heads = HEADS.get(kind)
            problem = Problem(W.clone(), H, U, parse_sparsity(pattern), 16, exact(0), 1 << 20, heads)
            weight, mask = methods.kernel(name, kind)(problem)
            assert weight.shape == mask.shape == (C, B) and mask.dtype == torch.bool


def test_torch_free_modules() -> None:
    """What the workflow's config parsing and the CLI parsers import loads without torch."""
    code = (
        "import sys; import thanos.pruning.methods, thanos.recipes.recipe, thanos.files.layout; "
        "import thanos.commands._args, thanos.recipes.labels; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
