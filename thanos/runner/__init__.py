"""One recipe in one call, and where the workflow's files are.

- ``one_recipe``: ``thanos.prune_model`` and ``thanos prune-model``: one model, one recipe, one call, every
  stage in this process (``thanos.stages.engine``), then the evaluations, the publish and the summary;
- ``progress``: what the terminal shows of that run, and the log file that gets the rest;
- ``workdir_lock``: one run at a time in a working directory;
- ``workflow_files``: where the ``Snakefile`` and ``workflow/`` are (a clone, or the installed copy).

What a job and the workflow's parse import (the job worker, the GPU slot pool, granularity, failed jobs'
logs) is ``thanos.jobs``.

Imports: every layer below (``pruning``, ``files``, ``data``, ``report``, ``models``, ``stages``,
``evaluation``, ``demo``, ``jobs``). This ``__init__`` imports nothing.
"""
