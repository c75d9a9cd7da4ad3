"""What a pruning method is: one ``Method`` per method, read by every other part of the package.

``prune_layer`` takes the defaults, the Hessian and factor requirements and the kernels from here; the
commands take their ``--method`` choices, the workflow its config check and which recipes need
calibration, the report its order; how a reader sees a method (label, colour, paper) is
``thanos.recipes.labels``. Adding a method is one entry in ``METHODS``, a kernel module and its label.
This module imports no torch: kernels are named as ``"module:function"`` and imported on first use, so
building the CLI parser or parsing the workflow config stays fast.

Every kernel of one pattern kind has the same call signature: ``kernel(problem) -> (W, mask)``, where
``problem`` is a ``thanos.pruning.kernels.Problem`` (the rows to prune, H, the inverse factor U, the pattern,
B, alpha) and ``mask`` is True where a weight was removed. Mask-only methods return ``problem.W`` unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from thanos.pruning.sparsity import Kind

KINDS: tuple[Kind, ...] = ("unstructured", "nm", "structured", "neurons", "heads", "kv_heads")
KERNEL_OF = {"neurons": "structured", "kv_heads": "heads"}  # kinds that share another kind's kernel


def _kernels(method: str) -> dict[Kind, str]:
    """``module:function`` per kind; ``neurons`` runs the structured kernel (whole columns, alpha 0),
    ``kv_heads`` the heads kernel (whole groups of heads)."""
    return {kind: f"thanos.pruning.kernels:{method}_{KERNEL_OF.get(kind, kind)}" for kind in KINDS}


@dataclass(frozen=True)
class Method:
    """A pruning method: what it needs, its defaults per pattern kind and its kernels.

    ``needs_hessian``: the layer Hessian H = (2/N) sum X X^T (so calibration data and the workflow's
    capture jobs); ``updates_weights``: the kept weights are updated, with U the upper Cholesky factor of
    the damped H^-1 (dead columns of W are zeroed first); ``kernels``: ``"module:function"`` per pattern
    kind; ``blocksize``/``alpha``: defaults per kind (a kind not listed: no blocks, alpha 0);
    ``alpha_in_label``: alpha is one of the method's own hyper-parameters, so tables and figures always
    show it (other methods show it only when it is > 0).
    """

    name: str
    needs_hessian: bool
    updates_weights: bool
    kernels: dict[Kind, str]
    blocksize: dict[Kind, int] = field(default_factory=dict)
    alpha: dict[Kind, float] = field(default_factory=dict)

    def default_blocksize(self, kind: Kind) -> int | None:
        return self.blocksize.get(kind)

    def default_alpha(self, kind: Kind) -> float:
        return self.alpha.get(kind, 0.0)


# In the order of the paper's tables (and of ours): baselines first, Thanos last.
METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            name="magnitude",  # Section 3.1: smallest |W_ij|, no update
            needs_hessian=False,
            updates_weights=False,
            kernels=_kernels("magnitude"),
        ),
        Method(
            name="sparsegpt",  # Section 3.3: OBS column by column, blocks of B
            needs_hessian=True,
            updates_weights=True,
            kernels=_kernels("sparsegpt"),
            blocksize={kind: 128 for kind in KINDS},
        ),
        Method(
            name="wanda",  # Section 3.4: |W_ij| ||X_j|| per output row, no update
            needs_hessian=True,
            updates_weights=False,
            kernels=_kernels("wanda"),
        ),
        Method(
            name="thanos",  # Section 4: Alg. 1 (unstructured), 8 (n:m), 2 (structured)
            needs_hessian=True,
            updates_weights=True,
            kernels=_kernels("thanos"),
            blocksize={"unstructured": 128, "nm": 512},  # the paper's defaults
            # structured: the paper's setting. n:m: 0, so that every row is n:m (the pattern 2:4 kernels
            # run); the paper's n:m variant keeps 10 % of the rows dense: alpha 0.1, asked for by name
            alpha={"structured": 0.1},
        ),
    )
}


def names() -> tuple[str, ...]:
    """Every method's name, in table order."""
    return tuple(METHODS)


def get(name: str, key: str = "method") -> Method:
    """The method called ``name``; a ValueError naming ``key`` and the choices otherwise."""
    method = METHODS.get(name) if isinstance(name, str) else None
    if method is None:
        raise ValueError(f"{key}: unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return method


def without_hessian() -> str:
    """The methods that run without a Hessian, for error messages: ``'magnitude'``."""
    return ", ".join(name for name, method in METHODS.items() if not method.needs_hessian) or "none"


@cache
def kernel(name: str, kind: Kind) -> Callable[[Any], Any]:
    """The kernel of method ``name`` for pattern ``kind``, imported on first use."""
    target = get(name).kernels.get(kind)
    if target is None:
        raise ValueError(f"method {name!r} has no kernel for {kind} sparsity")
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
