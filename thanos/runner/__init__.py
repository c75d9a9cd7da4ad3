"""The front hall: one recipe in one call, ``thanos.prune_model`` and ``thanos prune-model``.

- ``request``: the request both fronts build (its fields declare the command's options once), checked once;
- ``checks``: the checks before the first step (the model, the output, the sources, the disk) -> the ``Plan``;
- ``console``: what the terminal shows before, on failure and after (``progress``: while it runs, from the
  stages' events, ``thanos.events``; and the run's log file);
- ``one_recipe``: one recipe run, every stage in this process (``thanos.stages.engine``), the publish and
  the evaluations (``evaluations``); ``combined``: a combined recipe, one request per part;
- ``api``: the public ``prune_model`` and ``execute``;
- ``disk``, ``workdirs``: the disk estimate, the working directories (one run per working directory:
  ``thanos.files.locks``); ``workflow_files``: where the ``Snakefile`` and ``workflow/`` are (a
  clone, or installed).

What a job and the workflow's parse import (the job worker, the GPU slot pool, granularity, failed jobs'
logs) is ``thanos.jobs``.

Imports: every layer below. This ``__init__`` imports nothing.
"""
