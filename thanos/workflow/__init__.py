"""The workflow's config: its recipes (``config``: every ``recipe_grid`` and ``recipes`` entry made the
recipe that ``thanos prune-model`` would run, refused as it refuses them; the schema's problems in words;
the models the workflow builds itself) and its inputs read for content before any job runs (``inputs``:
the texts long enough for their windows, the models' configs). What the workflow's parse
(workflow/rules/config.smk) imports; torch-free.

Imports: ``thanos.errors``, ``thanos.files``, ``thanos.pruning``, ``thanos.recipes``, ``thanos.data`` and
the request of ``thanos.runner`` (a config entry is checked by the code that checks ``prune_model``'s).
"""
