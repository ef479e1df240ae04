"""The `perfgate` console script: one subcommand per module in `perfgate.commands`.

A command module defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`.
Exit codes: the one table of perfgate.exitcodes (pytest's numbers): 0 ok, 1 regression, 4 bad input
(file, option or baseline; an output path that cannot be written too), 5 cannot run here.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import perfgate.commands
from perfgate import exitcodes
from perfgate.commands import CommandError
from perfgate.extras import MissingExtra
from perfgate.files import WriteError

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = (
    exitcodes.OK,
    exitcodes.FAILED,
    exitcodes.BAD_INPUT,
    exitcodes.UNAVAILABLE,
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option exits with the bad-input code of pytest runs (4), not argparse's 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="perfgate", description="Benchmarks, gate and profiles for real-time video and world models.")
    parser.add_argument("--version", action="version", version=f"perfgate {perfgate.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
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
    except MissingExtra as exc:  # an optional dependency: one line naming the extra, not a traceback
        print(f"perfgate {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except WriteError as exc:  # an output path that cannot be written: bad input, named with the fix
        print(f"perfgate {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `perfgate models | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
