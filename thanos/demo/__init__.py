"""The embedded offline demo: Wikipedia data, a zero-shot task and a small Llama trained on CPU.

Imports: ``thanos.files`` (atomic writes) and ``thanos.errors``.
"""
