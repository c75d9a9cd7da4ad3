"""Distillation of a pruned model toward the dense one, a wing of ``thanos.stages``: the stage
(``distill``: the student trained on the teacher's logits, resumable from its checkpoints), its files
(``files``: the run's record and checkpoints), its text (``text``: the token windows), its processes
(``ranks``: under torchrun, DDP or FSDP) and its training loop (``train``).

Imports what ``thanos.stages`` may import.
"""
