"""What one workflow job, and the workflow while Snakemake parses it, import: torch-free, fast to load.

- ``worker``: a job's ``python -m thanos`` forwarded to a warm process, which runs it in a fork
  (``thanos/__main__.py`` imports it first; the Snakefile's ``onstart`` and ``thanos prune-model`` start
  the worker);
- ``devices``: the GPU slot pool that gives each concurrent job its own device
  (``python -m thanos.jobs.devices -- python -m thanos <stage> ...``);
- ``granularity``: how pruning becomes jobs (per layer, block or recipe), read by the config rules;
- ``joblogs``: the ERROR lines of failed jobs' logs (the Snakefile's ``onerror``);
- ``interrupt``: a workflow's Ctrl-C said in one line, the jobs it ended not reported as errors;
- ``plan``: how the workflow's jobs run, decided once at parse (the device check, the granularity, each
  kind of job's GPUs, the environment every job reads).

What drives a whole run (Snakemake's API, progress lines, one recipe in one call) is ``thanos.runner``.

Imports: nothing of the package at import time but ``plan``'s ``thanos.recipes.recipe`` (torch-free); one edge
up: the worker runs ``thanos.cli`` in its forked children (and sets the evaluation's offline switches
there, ``thanos.evaluation``). This ``__init__`` imports nothing.
"""
