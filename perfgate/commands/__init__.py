"""One module per `perfgate` subcommand, found by perfgate.cli (HELP, add_arguments, run); what they share."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from perfgate.exitcodes import BAD_INPUT as EXIT_BAD_INPUT


class CommandError(Exception):
    """A user error: printed as one line, exit code 4 (bad input) unless `code` says otherwise."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def project_file(given: str | os.PathLike[str] | None) -> Path:
    """The pyproject.toml a command reads: --pyproject as given, which must be a file (a missing one
    would silently mean the defaults), else ./pyproject.toml, whose absence means the defaults."""
    if given is None:
        return Path("pyproject.toml")
    path = Path(given)
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise CommandError(
            f"--pyproject {path}: {what}; give the project's pyproject.toml, or leave the option out to read "
            "./pyproject.toml"
        )
    return path


def load_models(model_files: Sequence[str] = ()) -> None:
    """Register the models the project in the current directory names (perfgate.cases.project),
    then `model_files` given on the command line; a bad registry is a CommandError."""
    from perfgate.cases.project import PolicyError, load_models
    from perfgate.cases.workload import RegistryError

    try:
        load_models(model_files=model_files)
    except (PolicyError, RegistryError, FileNotFoundError) as exc:
        raise CommandError(str(exc)) from None
