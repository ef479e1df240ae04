"""The one atomic writer: every file perfgate writes (baselines, verdicts, reports, rank files).

A reader sees the old file or the whole new one, never a part: the text goes to a temporary file
in the same folder (hidden, so `perfgate history` never reads it), is fsynced, then replaces the
target (`os.replace`) or, without clobber, is linked to it (`os.link` fails if the name exists:
recorded baselines are never overwritten). A writer killed in between leaves the old file intact
and at worst a hidden `.tmp` file. A link is written through, never replaced; a pipe or a device
(`--benchmark-json /dev/stdout`) is written into as pytest-benchmark itself would.

A target that cannot be written (a folder, a path through a file, no permission, a full disk) is a
WriteError: one line naming the target (never the temporary file), the reason and the fix; the
`perfgate` commands print it and exit 4 (bad input).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class WriteError(OSError):
    """`path` cannot be written; str() is one line naming it, the reason and the fix. An OSError,
    so callers that catch one still do."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(
            exc.errno, f"{path}: cannot write it ({unwritable_reason(path, exc)}); choose a writable file path"
        )
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError's own reduce would call __init__(errno, message): rebuilt from what it holds instead,
        # so the one line survives a trip between processes (a worker's error read by its parent).
        return (_rebuilt_write_error, (self.path, self.errno, self.strerror))


def _rebuilt_write_error(path: Path, code: int | None, message: str) -> WriteError:
    err = WriteError.__new__(WriteError)
    OSError.__init__(err, code, message)
    err.path = path
    return err


def unwritable_reason(path: Path, exc: OSError) -> str:
    """Why `path` (a file or folder to create) cannot be written, as `exc` says it: in terms of the
    path given (it is a folder, a parent is a file) rather than the temporary file."""
    if path.is_dir():
        return "it is a folder"
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    return exc.strerror or type(exc).__name__


def check_target(path: str | os.PathLike[str]) -> None:
    """WriteError now for a target that no write can succeed on (a folder, a path through a file),
    before the work that makes its text (a report of a hundred cases takes seconds to draw)."""
    path = Path(path)
    if path.is_dir():
        raise WriteError(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    if any(p.exists() and not p.is_dir() for p in path.parents):
        raise WriteError(path, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)))


def unwritable_folder(folder: str | os.PathLike[str]) -> str | None:
    """Why no file can be written in `folder` (made where missing), or None: a probe file is
    written and removed in the deepest folder that exists, so nothing is left behind (checked
    before a run's hours of measurement, not after)."""
    folder = Path(folder).absolute()
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{existing} is not a folder" if existing is not None else "no such folder"
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".perfgate-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write in {existing}: {exc.strerror or type(exc).__name__}"
    return None


def write_text(path: str | os.PathLike[str], text: str, *, clobber: bool = True) -> Path:
    """Write `text` atomically; FileExistsError when `clobber` is False and `path` exists;
    WriteError when `path` cannot be written. A link is written through (the file it names is
    replaced, never the link); a pipe or a device (`--json /dev/stdout`, a shell's `>(...)`) is
    written into as it stands: there is no file to replace."""
    return _write_checked(Path(path), text, clobber=clobber)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, clobber: bool = True) -> Path:
    """`data` written as `write_text` writes text (a pickle a tool would have written in place:
    line_profiler's stats, torch's CUDA memory snapshot)."""
    return _write_checked(Path(path), data, clobber=clobber)


def _write_checked(path: Path, data: str | bytes, *, clobber: bool) -> Path:
    try:
        if _is_stream(path):
            if not clobber:
                raise FileExistsError(errno.EEXIST, "exists", str(path))
            with _open(path, data) as fh:
                fh.write(data)
            return path
        _write(Path(os.path.realpath(path)) if path.is_symlink() else path, data, clobber=clobber)
        return path
    except FileExistsError as exc:
        if not clobber and path.exists():
            raise  # the name is taken: the caller chooses another (a recorded baseline is never overwritten)
        raise WriteError(path, exc) from None
    except OSError as exc:
        raise WriteError(path, exc) from None


def _open(path: Path | int, data: str | bytes) -> Any:
    """`path` (a name or a descriptor) opened for writing `data`: bytes as they are, text as UTF-8."""
    return open(path, "wb") if isinstance(data, bytes) else open(path, "w", encoding="utf8")


def _is_stream(path: Path) -> bool:
    """Whether `path` names something that exists and is neither a file nor a folder (a pipe, a
    character device; followed through links, as open() follows them)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write(path: Path, data: str | bytes, *, clobber: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results and reports are files to share
        with _open(fd, data) as fh:
            fh.write(data)
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


def write_or_keep(
    write: Callable[[], Path | None], keep: Callable[[], Path | None], errors: tuple[type[Exception], ...] = (OSError,)
) -> tuple[Path | None, Path | None, str | None]:
    """`write()`, or where it fails (its folder gone read-only or full since the run started) `keep()`,
    which writes the same data elsewhere: (written, None, None), or (None, kept or None where that
    failed too, the first line of why `write` failed). The caller words the one line; nothing
    measured is lost where either can be written."""
    try:
        return write(), None, None
    except errors as exc:
        why = first_line(exc)
        try:
            return None, keep(), why
        except errors:
            return None, None, why


def first_line(exc: BaseException) -> str:
    """An error's message as one line (its class name where it has none)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def write_json(path: str | os.PathLike[str], data: Any, *, clobber: bool = True) -> Path:
    """`data` as indented JSON (anything else as its str()), atomically."""
    return write_text(path, json.dumps(data, indent=2, default=str) + "\n", clobber=clobber)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
