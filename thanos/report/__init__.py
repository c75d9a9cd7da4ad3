"""Reporting: scan results/ (collect), the paper's tables (tables) and figures (figures), and the check
of the paper's orderings (orderings).

Imports: ``thanos.pruning`` and ``thanos.files`` (method labels, recipe names, the results layout).
"""

from thanos.report.collect import collect, collect_layers

__all__ = ["collect", "collect_layers"]
