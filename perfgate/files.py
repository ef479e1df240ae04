"""The one atomic writer: every file perfgate writes (baselines, verdicts, reports, rank files).

A reader sees the old file or the whole new one, never a part: the text goes to a temporary file
in the same folder (hidden, so `perfgate history` never reads it), is fsynced, then replaces the
target (`os.replace`) or, without clobber, is linked to it (`os.link` fails if the name exists:
recorded baselines are never overwritten). A writer killed in between leaves the old file intact
and at worst a hidden `.tmp` file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text(path: str | os.PathLike[str], text: str, *, clobber: bool = True) -> Path:
    """Write `text` atomically; FileExistsError when `clobber` is False and `path` exists."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results and reports are files to share
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if clobber:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike[str], data: Any, *, clobber: bool = True) -> Path:
    """`data` as indented JSON (anything else as its str()), atomically."""
    return write_text(path, json.dumps(data, indent=2, default=str) + "\n", clobber=clobber)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
