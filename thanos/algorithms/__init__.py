"""Pruning kernels: pure functions of tensors, one module per method."""
