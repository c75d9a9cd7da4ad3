"""Running the workflow: the Snakemake run, its jobs' processes and devices, and one recipe in one call.

- ``one_recipe``: ``thanos.prune_model`` and ``thanos prune-model``: one model, one recipe, one call;
- ``run_workflow``: the package's Snakemake workflow run in this process (Snakemake's Python API);
- ``workflow_files``: where the ``Snakefile`` and ``workflow/`` are (a clone, or the installed copy);
- ``worker``: local jobs run in forks of one warm process;
- ``granularity``: how pruning becomes jobs (per layer, block or recipe);
- ``devices``: the GPU slot pool that gives each concurrent job its own device;
- ``progress``, ``joblogs``: what the terminal shows of a run and of its failed jobs.

Imports: every layer below (``pruning``, ``files``, ``data``, ``models``, ``stages``, ``evaluation``,
``report``, ``demo``); one edge up: the worker runs ``thanos.cli`` in its forked children. Snakemake
imports ``granularity``, ``devices``, ``joblogs`` and ``worker`` when it parses the workflow: they load
without torch. This ``__init__`` imports nothing.
"""
