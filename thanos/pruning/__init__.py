"""The math of pruning one layer: pure functions of tensors, no files, no models, no config objects.

- ``layer``: ``prune_layer(W, H, method, sparsity, ...)``, the one entry point (checks, dead columns,
  damping, outlier rows, the kernel call, stats);
- ``methods``: what a method is (Hessian needed, defaults, kernels, labels), torch-free;
- ``sparsity``: the patterns and their exact integer counts, torch-free;
- ``hessian``: H = (2/N) sum X X^T and the inverse Cholesky factor;
- ``owl``: OWL's per-block sparsities from the blocks' outlier ratios (Yin et al., ICML 2024);
- ``kernels``: the one call signature of every kernel, over ``algorithms/`` (one module per method,
  the paper's algorithms; the Thanos row solver's C source beside them).

Imports: ``thanos.errors`` only. Every other layer may import this one. This ``__init__`` imports
nothing, so that the torch-free modules load without torch.
"""
