"""Reporting: scan results/ (collect), the paper's tables (tables) and figures (figures: perplexity_figures,
layer_figures, plotting), the check of the paper's orderings (orderings) and what a finished run prints
(closing).

Imports: ``thanos.recipes.labels`` (the words every table and figure shows), ``thanos.pruning`` and
``thanos.files`` (recipe names, the results layout), ``thanos.recipes.recipe``. ``labels`` is only
``thanos.recipes.labels``' ``LABELS`` named here for an older import; it loads without pandas. This
``__init__`` imports nothing.
"""
