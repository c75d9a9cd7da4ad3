"""The embedded offline demo: Wikipedia data, a zero-shot task and a small Llama trained on CPU; and the
tiny random models of the tested model types (``tiny``, ``tested_models``) that the smoke workflow, the
tests and the benchmarks build.

Imports: ``thanos.files`` (atomic writes) and ``thanos.errors``.
"""
