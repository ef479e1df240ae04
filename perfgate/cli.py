"""The `perfgate` console script: one subcommand per module in `perfgate.commands`.

A command module defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`.
Exit codes: 0 ok, 1 regression, 2 bad input (file, option or baseline), 3 cannot run here.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

import perfgate.commands

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = 0, 1, 2, 3


class CommandError(Exception):
    """A user error: printed as one line, exit code 2 unless `code` says otherwise."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def load_models(model_files: Sequence[str] = ()) -> None:
    """Register the models the project in the current directory names: pyproject.toml
    [tool.perfgate] registries and model_files, then `model_files` given on the command line."""
    from pathlib import Path

    from perfgate.gate.policy import PolicyError, load_table
    from perfgate.workload import RegistryError, load_registries

    try:
        table = load_table(Path.cwd() / "pyproject.toml")
        load_registries(table.get("registries", []), [*table.get("model_files", []), *model_files], Path.cwd())
    except (PolicyError, RegistryError, FileNotFoundError) as exc:
        raise CommandError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="Benchmarks, gate and profiles for real-time video and world models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(perfgate.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"perfgate.commands.{info.name}")
        p = sub.add_parser(info.name.replace("_", "-"), help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except CommandError as exc:
        print(f"perfgate {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:  # `perfgate models | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
