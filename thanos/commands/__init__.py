"""CLI commands: one module per command, each with HELP, add_arguments(parser) and run(args)."""
