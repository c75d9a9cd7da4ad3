"""Reporting: scan results/ (collect), the paper's tables (tables) and figures (figures)."""

from thanos.report.collect import collect, collect_layers

__all__ = ["collect", "collect_layers"]
