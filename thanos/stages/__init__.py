"""Pipeline stages: one function per stage, reading inputs from disk and writing outputs atomically.

- ``calibrate``: calibration token windows (C4 or local files) -> tokens.zarr
- ``embed``: tokens -> block 0 inputs
- ``capture``: dense block l over its inputs -> one fp32 Hessian per input group
- ``prune``: original weights (lazy) + Hessians -> pruned layers (safetensors + stats json)
- ``propagate``: block l (pruned or dense) over its inputs -> block l + 1 inputs
- ``owl_plan``: the dense Hessians of every block + the weights -> a recipe's OWL sparsity per block
  (owl.json; the ``owl`` stage)

- ``model_info``: a model's layout, checked -> model_info.json
- ``chain``: a whole recipe (or the dense chain) block by block in one process (``memory``: its
  malloc set-up and resident set size, flat in depth)
- ``engine``: every stage of one recipe in one process, each kept while its inputs stay the same
  (``outputs``: whether a store is finished; ``thanos.files.ledger``: whether an output is current):
  ``thanos prune-model`` and the workflow's recipe job
- ``assemble``: original tensors + pruned layers -> a Hugging Face model directory and its report;
  ``achieved_sparsity``: its ``sparsity.json``, counted on the written weights; ``card``: its model card
  (README.md); ``provenance``: what its report records of where it came from (calibration, versions)
- ``publish``: an assembled model -> a verified copy in the user's output directory (``thanos prune-model``)

Import the stage you need (e.g. ``from thanos.stages.capture import capture``); modules are independent.
Imports: ``thanos.pruning``, ``thanos.files``, ``thanos.recipes`` (the recipe, and the words the model
card says a method and a pattern in), ``thanos.events`` (what the stages report while they run, through an
``on_event`` parameter), ``thanos.data``, ``thanos.models`` and ``thanos.errors``.
"""
