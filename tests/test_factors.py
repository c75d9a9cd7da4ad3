"""The inverse factors kept by their Hessian's bytes (``thanos.pruning.factors``): within a block, or while
a size's cost table keeps them, a layer that reads a Hessian already factored factors nothing and prunes
exactly as if it had (the kernels never write the factor); outside both, nothing is kept."""

from __future__ import annotations

import pytest
import torch

from thanos.pruning import factors, hessian, kept
from thanos.pruning.layer import prune_layer

KEPT = factors._factors.values  # the factors kept, by key


def _hessian(b: int, seed: int) -> torch.Tensor:
    """H of inputs with heavy-tailed per-feature scales (outlier features: log-normal), the same for a
    seed."""
    generator = torch.Generator().manual_seed(seed)
    scales = (1.5 * torch.randn(b, generator=generator)).exp()
    X = torch.randn(4 * b, b, generator=generator) * scales
    return 2 * X.T @ X / X.shape[0]


@pytest.fixture
def factored(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The dampings of the factorisations run (none kept before)."""
    runs: list[float] = []
    original = hessian.inverse_cholesky

    def counted(H: torch.Tensor, damp: float = 0.01, **kwargs: object) -> hessian.InverseFactor:
        runs.append(damp)
        return original(H, damp, **kwargs)

    monkeypatch.setattr(factors, "inverse_cholesky", counted)
    factors._factors.trim(0)
    return runs


@pytest.mark.parametrize(
    "method, sparsity",
    [(m, p) for m in ("thanos", "sparsegpt") for p in ("0.5", "2:4", "structured:0.25")]
    + [("thanos", "heads:0.5")],
)
def test_a_kept_factor_prunes_as_a_new_one(factored, method, sparsity):
    H = _hessian(64, seed=1)
    W = torch.randn(48, 64, generator=torch.Generator().manual_seed(2))
    heads = (8, 4) if sparsity.startswith("heads") else None
    alone = prune_layer(W, H, method, sparsity, heads=heads)
    assert len(factored) == 1 and not KEPT  # outside a block: factored, nothing kept
    with factors.block():
        first = prune_layer(W, H, method, sparsity, heads=heads)
        (factor,) = KEPT.values()
        U = factor.U.clone()
        again = prune_layer(W, H.clone(), method, sparsity, heads=heads)  # the same values, another tensor
        assert len(factored) == 2  # factored once in the block
        assert torch.equal(factor.U, U)  # the kernel left it as it was
    assert not KEPT  # dropped with the block
    for result in (first, again):
        assert torch.equal(result.weight, alone.weight) and torch.equal(result.mask, alone.mask)


def test_another_hessian_or_damping_is_factored_again(factored):
    H = _hessian(32, seed=3)
    with factors.block():
        one = factors.inverse_factor(H, 0.01)
        assert factors.inverse_factor(H.clone(), 0.01) is one
        other = H.clone()
        other[0, 0] = torch.nextafter(other[0, 0], torch.tensor(float("inf")))  # one bit
        assert factors.inverse_factor(other, 0.01) is not one
        assert len(KEPT) == 1  # the previous one dropped before it was formed
        assert factors.inverse_factor(H, 0.02) is not one
    assert factored == [0.01, 0.01, 0.02]


def test_a_table_keeps_factors_across_blocks_within_its_bytes(factored):
    """The first factors that fit are kept (a table's points pass over the blocks in the same order: the
    first blocks' factors are read by every later point)."""
    with kept.keeping(3 * 32 * 32 * 4):
        for seed in range(5):
            with factors.block():
                factors.inverse_factor(_hessian(32, seed=seed))
        assert len(KEPT) == 3  # the first three
        for seed in range(5):  # the next point
            with factors.block():
                factors.inverse_factor(_hessian(32, seed=seed))
        assert len(factored) == 5 + 2  # the first three kept: the last two factored again
        with factors.block():
            factors.inverse_factor(_hessian(64, seed=9))  # beyond the bytes kept: not kept
        assert len(KEPT) == 3 and all(f.U.shape[0] == 32 for f in KEPT.values())
    assert not KEPT  # the table measured: every one dropped
