"""The interleaved A/B worker's job (perfgate.ab.interleave): what `perfgate ab` writes for each worker
process and the worker reads back. Its own module so that the driver (perfgate.ab.run) writes a job
without importing the worker, torch and the timing loop with it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    """One worker process's job: both revisions' roots, where the result goes, the cases."""

    base: Path
    head: Path
    out: Path
    cases: list[str]
    device: str | None = None
    budget_s: float = 3.0  # timed seconds per case

    def write(self, path: Path) -> Path:
        fields = {**dataclasses.asdict(self), "base": str(self.base), "head": str(self.head), "out": str(self.out)}
        path.write_text(json.dumps(fields), encoding="utf8")
        return path

    @classmethod
    def read(cls, path: Path) -> Job:
        d = json.loads(path.read_text(encoding="utf8"))
        return cls(**{**d, "base": Path(d["base"]), "head": Path(d["head"]), "out": Path(d["out"])})
