"""The recipe and its words: what one way of pruning is (``recipe``: a method, a pattern and its options,
parsed and checked once, defaults filled, named), the training it may add (``training``: recovery,
distillation), its checked fields (``fields``), its name read back (``names``), the stores it reads
(``reads``) and the words a method, a pattern, a recipe and a structure are shown in (``labels``).

Imports: ``thanos.errors``, ``thanos.options``, ``thanos.pruning`` (methods, patterns, structures) and
``thanos.files`` (names and layout); torch-free and pandas-free, so that the workflow's parse imports it.
"""
