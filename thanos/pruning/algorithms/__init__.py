"""Pruning kernels: pure functions of tensors, one module per method (the paper's algorithms).

``thanos_blockwise``: Thanos' block-wise algorithms (a module name apart from the package's); ``solve_rows.c``
is the C source of its CPU row solver (``thanos_blockwise.native_solver``), built on first use.
"""
