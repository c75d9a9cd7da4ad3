"""The files that describe a written model, a wing of ``thanos.stages``: its card (``card``, with its
sections ``sections``), its achieved sparsity (``sparsity``: ``sparsity.json``, counted on the written
weights) and its provenance (``provenance``: the calibration, the package versions, the disk).

Imports what ``thanos.stages`` may import.
"""
