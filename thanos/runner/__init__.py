"""Running the workflow: the Snakemake run in this process, its progress, and one recipe in one call.

- ``one_recipe``: ``thanos.prune_model`` and ``thanos prune-model``: one model, one recipe, one call;
- ``run_workflow``: the package's Snakemake workflow run in this process (Snakemake's Python API);
- ``workflow_files``: where the ``Snakefile`` and ``workflow/`` are (a clone, or the installed copy);
- ``progress``: what the terminal shows of a run and of its failed jobs.

What a job and the workflow's parse import (the job worker, the GPU slot pool, granularity, failed jobs'
logs) is ``thanos.jobs``.

Imports: every layer below (``pruning``, ``files``, ``data``, ``report``, ``models``, ``stages``,
``evaluation``, ``demo``, ``jobs``). This ``__init__`` imports nothing.
"""
