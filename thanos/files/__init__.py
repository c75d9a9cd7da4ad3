"""The files of a run: what they are called, how they are written and trusted.

- ``layout``: every path under the results directory, which chain a block reads, reserved names;
- ``recipes``: a method, a pattern and hyper-parameters under a name (the name of a results folder),
  and the config's grid expanded into them;
- ``pruned_layers``: a recipe's per-layer files, and which of them are finished;
- ``atomic``: write to a temporary sibling, rename into place;
- ``digests``, ``fingerprint``: what an assembled model held, what an input model is;
- ``ledger``: whether an output is still current for its inputs, and why not (every resuming part asks it).

Imports: ``thanos.pruning`` and ``thanos.errors``. ``layout`` and ``recipes`` are torch-free (Snakemake
imports them when it parses the workflow). This ``__init__`` imports nothing.
"""
