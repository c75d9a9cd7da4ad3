"""Whole blocks removed, a wing of ``thanos.stages``: which blocks a ``depth:k`` recipe removes
(``blocks``: scored on the dense chain's stores) and the linear maps that replace them (``maps``: fitted
on the calibration activations, folded into the block before).

Imports what ``thanos.stages`` may import.
"""
