"""Subcommands of the `perfgate` console script, discovered by module name (see perfgate.cli)."""
