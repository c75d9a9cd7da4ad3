"""Sparsity parsing with exact counts, and the streaming Hessian accumulator."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from thanos import HessianAccumulator, Sparsity, parse_sparsity
from thanos.pruning.sparsity import outlier_count, structured_count, unstructured_count


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (0.5, Sparsity("unstructured", p=Fraction(1, 2))),
        ("0.5", Sparsity("unstructured", p=Fraction(1, 2))),
        ("unstructured:0.3", Sparsity("unstructured", p=Fraction(3, 10))),
        ("2:4", Sparsity("nm", n=2, m=4)),
        (" 4 : 8 ", Sparsity("nm", n=4, m=8)),
        ("structured:0.3", Sparsity("structured", p=Fraction(3, 10))),
        (0, Sparsity("unstructured", p=Fraction(0))),
    ],
)
def test_parse(spec, expected: Sparsity) -> None:
    assert parse_sparsity(spec) == expected
    assert parse_sparsity(expected) is expected


def test_str_round_trips() -> None:
    for spec in ("2:4", "structured:0.3", "unstructured:0.5"):
        assert parse_sparsity(str(parse_sparsity(spec))) == parse_sparsity(spec)


@pytest.mark.parametrize(
    "spec", [1.0, -0.1, "1.5", "4:2", "2:2", "columns:0.3", "abc", float("nan"), True, None]
)
def test_parse_rejects(spec) -> None:
    with pytest.raises(ValueError, match="sparsity"):
        parse_sparsity(spec)


def test_exact_counts() -> None:
    assert unstructured_count(Fraction(57, 100), 10, 10) == 57
    assert outlier_count(Fraction(1, 10), 41) == 5
    assert outlier_count(Fraction(0), 41) == 0
    assert structured_count(Fraction(3, 10), Fraction(1, 10), 4096) == 1366  # ceil(1228.8 / 0.9)
    assert structured_count(Fraction(1, 2), Fraction(1, 2), 64) == 64


def test_accumulator_matches_definition_and_merges() -> None:
    g = torch.Generator().manual_seed(0)
    X = [torch.randn(7, 12, generator=g, dtype=torch.float64) for _ in range(6)]
    expected = 2.0 / 6 * sum(x.T @ x for x in X)
    one = HessianAccumulator(12)
    for x in X:
        one.add(x.float())
    torch.testing.assert_close(one.H.double(), expected, rtol=1e-5, atol=1e-5)
    assert one.H.dtype == torch.float32 and one.nsamples == 6

    left, right = HessianAccumulator(12), HessianAccumulator(12)
    left.add(torch.stack([x.float() for x in X[:2]]))  # a batch of two sequences
    for x in X[2:]:
        right.add(x.float())
    merged = left.merge(right)
    assert merged.nsamples == 6
    torch.testing.assert_close(merged.H, one.H, rtol=1e-6, atol=1e-6)


def test_accumulator_accepts_half_inputs_and_rejects_bad_shapes() -> None:
    acc = HessianAccumulator(8)
    acc.add(torch.ones(3, 8, dtype=torch.bfloat16))
    assert acc.H.dtype == torch.float32
    assert torch.equal(acc.H, torch.full((8, 8), 6.0))
    with pytest.raises(ValueError, match=r"\(tokens, 8\)"):
        acc.add(torch.ones(3, 9))
    with pytest.raises(ValueError, match="no calibration inputs"):
        _ = HessianAccumulator(4).H
    with pytest.raises(ValueError, match="cannot merge"):
        acc.merge(HessianAccumulator(4))


def test_accumulator_keeps_no_gradient_and_refuses_misuse() -> None:
    """A forward hook outside ``torch.no_grad`` hands the accumulator inputs that require a gradient: the
    running sum keeps no graph (it kept every batch's activations alive), and a spent or misbuilt
    accumulator is refused by name."""
    layer = torch.nn.Linear(8, 8)
    acc = HessianAccumulator(8)
    acc.add(layer(torch.randn(2, 5, 8)))
    assert not acc.sum.requires_grad and acc.sum.grad_fn is None
    acc.take()
    with pytest.raises(ValueError, match=r"was taken"):
        acc.add(torch.randn(3, 8))
    for columns in (2.5, True, None, "4", 0):
        with pytest.raises(ValueError, match="columns must be a positive integer"):
            HessianAccumulator(columns)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device 'meta'"):
        HessianAccumulator(8).add(torch.empty(3, 8, device="meta"))
    with pytest.raises(ValueError, match="floating-point"):
        HessianAccumulator(8).add(torch.ones(3, 8, dtype=torch.long))
