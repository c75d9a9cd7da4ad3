"""CLI commands: one module per command, each with HELP, add_arguments(parser) and run(args).

A command parses its arguments and calls one function of a layer below (a stage, an evaluation, the
report, the runner); it may import any of them, never ``thanos.cli``.
"""
