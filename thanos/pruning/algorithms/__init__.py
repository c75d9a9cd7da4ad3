"""Pruning kernels: pure functions of tensors, one module per method (the paper's algorithms).

``solve_rows.c`` is the C source of Thanos' CPU row solver (``thanos.native_solver``), built on first use.
"""
