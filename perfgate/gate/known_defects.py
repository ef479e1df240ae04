"""Known defects outside this project: a failure an entry explains is named, not hidden.

    [[tool.perfgate.known_defect]]
    name = "torch-int-mm-amx-strided-lhs"        # one word, the entry's id in verdicts
    title = "[CPU] torch._int_mm returns ..."    # the upstream report's title (or its link in `link`)
    link = "https://..."                         # optional
    cases = ["*-int8-dynamic+compile"]           # globs on the case id
    metrics = ["accuracy"]                       # the failing verdicts it explains (default: accuracy)
    device = "cpu"                               # glob on the case's device (default: any)
    cpu_features = ["amx_tile"]                  # CPU flags (Linux /proc/cpuinfo names) that must all be present;
                                                 # "!avx512f": a flag that must be absent
    packages = { torch = ">=2.13,<2.14" }        # PEP 440 ranges the installed versions must all meet
    record = { inductor_freezing = false }       # record fields the case must have (absent reads as false)
    workaround = "compile with inductor freezing"
    reproduction = "tests/gate/known_defects/int_mm_amx.py"  # standalone: exit 1 while the defect is present

Where an entry applies (the case, the machine and the packages match) a failing verdict on one of
its metrics becomes `known defect`, with the entry's title, link and workaround: it does not fail
the run, and the case keeps running every time. Where an entry applies and the case passes, a
`defect not seen` verdict says the defect looks fixed and the entry can go. A failure no entry
explains still fails. `tests/gate/test_known_defects.py` runs every entry's reproduction where it
applies, so an entry stays only while its defect reproduces.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.metadata
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet  # pytest's own dependency
from packaging.version import InvalidVersion, Version

from perfgate.cases.project import PolicyError
from perfgate.gate.metrics import METRIC_NAMES
from perfgate.gate.verdicts import DEFECT_NOT_SEEN, FAILING, IMPROVEMENT, KNOWN_DEFECT, UNCHANGED, Verdict
from perfgate.record import CaseRecord

_RECORD_FIELDS = frozenset(f.name for f in fields(CaseRecord))
# What an entry may leave out: the dataclass's defaults, as TOML would write them.
_DEFAULTS: dict[str, Any] = {"metrics": ["accuracy"], "device": "*", "cpu_features": [], "packages": {}, "record": {}}
_KEYS = (
    "name",
    "title",
    "link",
    "cases",
    "metrics",
    "device",
    "cpu_features",
    "packages",
    "record",
    "workaround",
    "reproduction",
)


@dataclass(frozen=True, kw_only=True)
class Host:
    """What an entry's conditions read of this machine: its CPU flags and installed versions."""

    cpu_features: frozenset[str]
    versions: Mapping[str, str | None] = field(default_factory=dict)

    def version(self, dist: str) -> str | None:
        if dist in self.versions:
            return self.versions[dist]
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None


@functools.lru_cache(maxsize=1)
def this_host() -> Host:
    """This machine, read once per process (py-cpuinfo, as the fingerprint reads it)."""
    from perfgate.measure.fingerprint import cpu_flags

    return Host(cpu_features=cpu_flags())


@dataclass(frozen=True, kw_only=True)
class KnownDefect:
    name: str
    title: str
    workaround: str
    cases: tuple[str, ...]
    metrics: tuple[str, ...] = ("accuracy",)
    device: str = "*"
    cpu_features: tuple[str, ...] = ()
    packages: Mapping[str, str] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict)
    link: str | None = None
    reproduction: str | None = None

    def machine_reason(self, host: Host) -> str | None:
        """Why this machine and its packages fall outside the entry, or None when they match."""
        missing = [f for f in self.cpu_features if not f.startswith("!") and f not in host.cpu_features]
        if missing:
            return f"this CPU has no {', '.join(missing)}"
        present = [f[1:] for f in self.cpu_features if f.startswith("!") and f[1:] in host.cpu_features]
        if present:
            return f"this CPU has {', '.join(present)}"
        for dist, spec in self.packages.items():
            have = host.version(dist)
            if have is None:
                return f"{dist} is not installed"
            try:
                # Pre-releases and source builds (2.14.0.dev..., 2.13.0a0+git...) count as their release line.
                ok = SpecifierSet(spec).contains(Version(have), prereleases=True)
            except InvalidVersion:
                ok = False
            if not ok:
                return f"{dist} {have} is outside {spec}"
        return None

    def applies(self, case_id: str, record: CaseRecord, host: Host) -> bool:
        if not any(fnmatch.fnmatchcase(case_id, p) for p in self.cases):
            return False
        if not fnmatch.fnmatchcase(record.device, self.device):
            return False
        for key, want in self.record.items():
            have = getattr(record, key, None)
            if (bool(have) if isinstance(want, bool) else have) != want:
                return False
        return self.machine_reason(host) is None

    def describe(self) -> str:
        where = f" ({self.link})" if self.link else ""
        return f"known defect {self.name}: {self.title}{where}; workaround: {self.workaround}"


def explain(
    case_id: str,
    record: CaseRecord,
    verdicts: Sequence[Verdict],
    defects: Sequence[KnownDefect],
    host: Host,
    judged: Callable[[str], bool] = lambda metric: True,
) -> list[Verdict]:
    """The case's verdicts with every failure an applying entry explains turned into `known defect`,
    and a `defect not seen` verdict for each applying entry whose metrics were all judged and passed
    (`judged`: whether the run judged a metric at all; a metric left unjudged proves nothing)."""
    applying = [d for d in defects if d.applies(case_id, record, host)]
    if not applying:
        return list(verdicts)
    out, seen = [], set()
    for v in verdicts:
        d = next((d for d in applying if v.verdict in FAILING and v.metric in d.metrics), None)
        if d is None:
            out.append(v)
            continue
        seen.add(d.name)
        out.append(replace(v, verdict=KNOWN_DEFECT, message=f"{d.describe()}; {v.message}"))
    for d in applying:
        if d.name not in seen and all(_passed(m, record, verdicts, judged) for m in d.metrics):
            versions = ", ".join(f"{p} {host.version(p)}" for p in d.packages) or "these packages"
            out.append(
                Verdict(
                    case=verdicts[0].case if verdicts else case_id,
                    metric=d.metrics[0],
                    verdict=DEFECT_NOT_SEEN,
                    message=f"known defect {d.name} did not show here ({versions}): it looks fixed; remove its "
                    f"[[tool.perfgate.known_defect]] entry ({d.title})",
                )
            )
    return out


def _passed(metric: str, record: CaseRecord, verdicts: Sequence[Verdict], judged: Callable[[str], bool]) -> bool:
    """The run judged `metric` and it passed: accuracy is checked without a verdict when within its
    tolerance (so its figures must be there); the others must have an unchanged or better verdict."""
    if not judged(metric):
        return False
    if metric == "accuracy":
        return bool(record.accuracy)
    return any(v.metric == metric and v.verdict in (UNCHANGED, IMPROVEMENT) for v in verdicts)


def _strings(raw: Any, where: str, key: str, *, empty: bool = True) -> tuple[str, ...]:
    if isinstance(raw, str) or not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise PolicyError(f'{where}: {key} must be a list of strings, e.g. {key} = ["..."], got {raw!r}')
    if not raw and not empty:
        raise PolicyError(f"{where}: {key} must name at least one")
    return tuple(raw)


def parse_one(raw: Any, where: str) -> KnownDefect:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a table ([[tool.perfgate.known_defect]])")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(_KEYS)}")
    for key in ("name", "title", "workaround", "cases"):
        if key not in raw:
            raise PolicyError(f"{where}: {key} is missing; an entry needs name, title, workaround and cases")
    for key in ("name", "title", "workaround", "link", "device", "reproduction"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise PolicyError(f"{where}: {key} must be a non-empty string, got {raw[key]!r}")
    values = {**_DEFAULTS, **raw}  # every key checked by its kind below, then handed to the dataclass
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in ("cases", "metrics", "cpu_features"):
            out[key] = _strings(value, where, key, empty=key == "cpu_features")
        elif key in ("packages", "record"):
            if not isinstance(value, Mapping):
                example = {
                    "packages": 'packages = { torch = ">=2.13,<2.14" }',
                    "record": "record = { inductor_freezing = false }",
                }
                raise PolicyError(f"{where}: {key} must be a table, e.g. {example[key]}")
            out[key] = dict(value)
        else:
            out[key] = value
    bad = [f for f in out["cpu_features"] if not re.fullmatch(r"!?[a-z0-9_]+", f)]  # Linux's flag names
    if bad:
        why = f'cpu_features entry {bad[0]!r} is no flag; write "avx2" (present) or "!avx512f" (absent)'
        raise PolicyError(f"{where}: {why}")
    bad = [m for m in out["metrics"] if m not in METRIC_NAMES]
    if bad:
        raise PolicyError(f"{where}: metric {bad[0]!r} is none of {', '.join(METRIC_NAMES)}")
    for dist, spec in out["packages"].items():
        try:
            SpecifierSet(spec)
        except (InvalidSpecifier, TypeError):
            why = f'packages.{dist} = {spec!r} is no version range; write e.g. ">=2.13,<2.14"'
            raise PolicyError(f"{where}: {why}") from None
    unknown = sorted(set(out["record"]) - _RECORD_FIELDS)
    if unknown:
        raise PolicyError(f"{where}: record.{unknown[0]} is no field of the case record (perfgate.record.CaseRecord)")
    return KnownDefect(**out)


def parse(raw: Any, source: str = "[tool.perfgate]") -> tuple[KnownDefect, ...]:
    """`[[tool.perfgate.known_defect]]` entries, each checked (PolicyError, one line naming the entry)."""
    if not isinstance(raw, list):
        raise PolicyError(f"{source} known_defect: must be an array of tables ([[tool.perfgate.known_defect]])")
    out = tuple(parse_one(r, f"{source} known_defect #{i + 1}") for i, r in enumerate(raw))
    names = [d.name for d in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise PolicyError(f"{source} known_defect: the name {dup!r} is used twice; give each entry its own")
    return out
