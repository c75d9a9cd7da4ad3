"""Moved to ``thanos.labels`` (the words of a method, a pattern, a recipe and a structure, in one place).

Kept only while ``thanos.runner.one_recipe`` imports ``LABELS`` from here; delete it once nothing does.
"""

from __future__ import annotations

from thanos.labels import LABELS, MethodLabel

__all__ = ["LABELS", "MethodLabel"]
