"""Reporting: how a method is shown (labels), scan results/ (collect), the paper's tables (tables) and
figures (figures), and the check of the paper's orderings (orderings).

Imports: ``thanos.pruning`` and ``thanos.files`` (recipe names, the results layout). ``labels`` imports
nothing and loads without pandas (the model card and ``thanos prune-model`` name methods with it). This
``__init__`` imports nothing.
"""
