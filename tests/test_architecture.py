"""Import direction: perfgate's packages are stages, and a stage imports only the stages below it.

The order, bottom first (docs/architecture.md explains each): the root's record, results, files and
exitcodes; measure; cases; gate; quality; ab; history; output; profile; dist; plugin; commands;
cli. An import of a later stage from an earlier one is an up-arrow and fails this test; imports
inside one stage are free. Every import counts: module level, inside functions and under
TYPE_CHECKING (a type-only import is still a dependency a reader must follow). No two modules
import each other, and perfgate never imports the repository's top-level `models` (the wheel
ships without it).

Run it on any tree: `python tests/test_architecture.py [ROOT]` prints the up-arrows.
"""

from __future__ import annotations

import ast
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom first. The root's own modules sit at the bottom: every stage may read a record or write a file.
STAGES = (
    ("record", "results", "files", "exitcodes", "extras", "__init__"),
    ("measure",),
    ("cases",),
    ("gate",),
    ("quality",),
    ("counts",),
    ("ab",),
    ("history",),
    ("output",),
    ("profile",),
    ("dist",),
    ("plugin",),
    ("commands",),
    ("cli", "__main__"),
)
LEVEL = {name: i for i, names in enumerate(STAGES) for name in names}


def stage(module: str) -> str:
    """'perfgate.gate.decide' -> 'gate'; 'perfgate' (the package itself) -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules(root: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted((root / "perfgate").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imported(module: str, source: str, root: Path, *, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in `source`, wherever it stands, relative ones resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                # `from perfgate import gate` imports the module perfgate.gate, `from perfgate import x` a name
                sub = f"{target}.{alias.name}"
                as_path = root / Path(*sub.split("."))
                yield node.lineno, sub if as_path.with_suffix(".py").is_file() or as_path.is_dir() else target


def violations(root: Path = ROOT) -> list[str]:
    """One line per up-arrow or import of `models`: 'file:line: importer (stage) -> imported (stage)'."""
    out = []  # one line per import statement and imported module
    for module, path in modules(root):
        source = path.read_text(encoding="utf8")
        for line, target in sorted(set(imported(module, source, root, is_package=path.name == "__init__.py"))):
            where = f"{path.relative_to(root)}:{line}"
            if target == "models" or target.startswith("models."):
                out.append(f"{where}: {module} imports the repository's {target}")
            elif target == "perfgate" or target.startswith("perfgate."):
                low, high = stage(module), stage(target)
                if LEVEL.get(high, -1) > LEVEL.get(low, -1):
                    out.append(f"{where}: {module} ({low}) -> {target} ({high})")
    return out


# String-key reads of result data: x["key"] and x.get("key") whose key is a CaseRecord field or a
# key of pytest-benchmark's result file. Only the loader (perfgate/results.py) and the record
# (perfgate/record.py) turn those keys into typed values; everyone else reads attributes.
BENCHMARK_KEYS = frozenset(
    {
        # the file
        "benchmarks", "machine_info", "commit_info", "datetime", "version",
        # one benchmark
        "extra_info", "stats", "name", "fullname", "group", "params", "param",
        # its stats
        "median", "mean", "stddev", "iqr", "q1", "q3", "ops", "data", "iterations", "outliers",
        "ld15iqr", "hd15iqr", "iqr_outliers", "stddev_outliers", "total",
    }
)  # fmt: skip
LOADER = ("perfgate/results.py", "perfgate/record.py")


def _result_keys() -> frozenset[str]:
    sys.path.insert(0, str(ROOT))
    from perfgate.record import FIELD_NAMES

    return FIELD_NAMES | BENCHMARK_KEYS


def key_reads(root: Path = ROOT) -> list[str]:
    """'file:line: key' for every string-key read of result data outside the loader and the record."""
    keys, out = _result_keys(), []
    for _, path in modules(root):
        rel = path.relative_to(root).as_posix()
        if rel in LOADER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                receiver, key = node.value, node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                receiver, key = node.func.value, node.args[0] if node.args else None
            else:
                continue
            if isinstance(receiver, ast.Name) and receiver.id.isupper():
                continue  # a module's constant table (TAIL_MIN_SAMPLES["p90_ms"]), not data read from a file
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in keys:
                out.append(f"{rel}:{node.lineno}: {key.value}")
    return out


# The reads the counter finds that are no reads of a result file: dicts that merely share a key
# name with the record (a name-based count cannot tell them apart). Each module may keep at most
# this many; a new read of result data anywhere else fails the test below: read it through
# perfgate.results (`benchmarks`, `Benchmark.record`, `RunInfo`) instead.
KEY_READ_EXCEPTIONS = {
    # `perfgate profile`'s own report (per-block timings, roofline, memory), not a result file.
    "perfgate/commands/profile.py": 22,
    "perfgate/profile/run.py": 8,
    "perfgate/profile/layers.py": 7,
    "perfgate/profile/precision.py": 2,
    "perfgate/output/html.py": 3,  # the profile section's rows and a record's peak_basis table
    # The interleaved A/B worker's per-round lines (ab.interleave), a protocol of their own.
    "perfgate/ab/verdicts.py": 6,
    # The portable instruction-count file and the [tool.perfgate.counts] table.
    "perfgate/counts/suite.py": 6,
    "perfgate/counts/worker.py": 1,  # a Case sent to the valgrind process
    # A record's dict fields read inside: the pooled re-measurement, the telemetry summary.
    "perfgate/gate/decide.py": 4,
    # The gate-quality experiment's own --json report and rows.
    "perfgate/quality/experiment.py": 5,
    "perfgate/commands/gate_quality.py": 3,
    # measure.stats' summary and a conversion's info, before they become the record.
    "perfgate/cases/runner.py": 4,
    "perfgate/cases/flops.py": 4,
    # Torch profiler events, /proc/cpuinfo, `perfgate models` and `doctor` rows, report rows.
    "perfgate/measure/op_counts.py": 2,
    "perfgate/measure/device_time.py": 1,
    "perfgate/measure/fingerprint.py": 1,
    "perfgate/commands/models.py": 4,
    "perfgate/commands/doctor.py": 1,
    "perfgate/output/report_sections.py": 1,
    # What an xdist worker ships to the controller (its device), the [tool.perfgate] table.
    "perfgate/plugin/xdist.py": 2,
    "perfgate/plugin/hooks.py": 1,
    "perfgate/plugin/configure.py": 1,  # the [tool.perfgate] table's tolerance table
    # The timed-rounds loop's per-round times by step name ("reference", "step"), not a record.
    "perfgate/measure/core.py": 4,
    # ModelSpec's refusal of the old `step=` keyword (the step kind's former name).
    "perfgate/cases/workload.py": 1,
    # The count-quality experiment's calibration and summary rows (its own JSON lines).
    "perfgate/counts/quality.py": 2,
}


def key_reads_per_module(root: Path = ROOT) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in key_reads(root):
        counts[line.split(":", 1)[0]] = counts.get(line.split(":", 1)[0], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def mutual_imports(root: Path = ROOT) -> list[tuple[str, str]]:
    """Pairs of perfgate modules that import each other (a cycle a reader cannot start from)."""
    graph = {
        module: {
            t for _, t in imported(module, path.read_text(encoding="utf8"), root, is_package=path.name == "__init__.py")
        }
        for module, path in modules(root)
    }
    return sorted((a, b) for a, targets in graph.items() for b in targets if a < b and a in graph.get(b, ()))


def test_no_two_modules_import_each_other(tmp_path: Path) -> None:
    assert mutual_imports() == []
    root = _tree(tmp_path)
    workload = root / "perfgate" / "cases" / "workload.py"  # steps imports workload: importing steps back is a cycle
    workload.write_text(
        workload.read_text() + "\n\ndef _kinds():\n    from perfgate.cases import steps\n\n    return steps\n"
    )
    assert mutual_imports(root) == [("perfgate.cases.steps", "perfgate.cases.workload")]


def key_reads_over_budget(root: Path = ROOT) -> list[str]:
    """The reads of every module that has more than KEY_READ_EXCEPTIONS allows it (none: 0)."""
    over = {m for m, n in key_reads_per_module(root).items() if n > KEY_READ_EXCEPTIONS.get(m, 0)}
    return [line for line in key_reads(root) if line.split(":", 1)[0] in over]


def test_result_data_is_read_through_the_loader_only() -> None:
    found = key_reads_over_budget()
    assert not found, "string-key reads of result data; read them through perfgate.results:\n" + "\n".join(found)


def test_the_key_read_check_fails_on_a_new_extra_info_read(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    shard = root / "perfgate" / "dist" / "shard.py"
    shard.write_text(shard.read_text() + '\n\ndef _wall(b):\n    return b["extra_info"].get("case_wall_s")\n')
    found = key_reads_over_budget(root)
    assert sorted(line.split(": ", 1)[1] for line in found) == ["case_wall_s", "extra_info"], found
    assert all(line.startswith("perfgate/dist/shard.py:") for line in found)


def test_the_tests_mirror_the_packages() -> None:
    """tests/<stage>/ for each stage's tests; `models` for the families, `ci` for the workflows."""
    packages = {p.name for p in (ROOT / "perfgate").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    assert folders - packages <= {"models", "ci"}, sorted(folders - packages - {"models", "ci"})
    assert all((ROOT / "tests" / f / "__init__.py").is_file() for f in folders)  # tests.<stage>.test_x, unique names


def test_every_module_belongs_to_a_stage() -> None:
    unknown = {stage(m) for m, _ in modules(ROOT)} - set(LEVEL)
    assert not unknown, f"perfgate/{sorted(unknown)[0]}: add it to STAGES here and to docs/architecture.md"


def test_imports_only_point_down_and_never_at_models() -> None:
    assert violations() == []


def _tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "perfgate", tmp_path / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_check_fails_on_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stats = root / "perfgate" / "measure" / "stats.py"
    stats.write_text(
        stats.read_text() + "\n\ndef _late():\n    from perfgate.plugin import hooks\n\n    return hooks\n"
    )
    assert len(found := violations(root)) == 1
    assert "perfgate.measure.stats (measure) -> perfgate.plugin.hooks (plugin)" in found[0]


def test_the_check_fails_on_a_relative_or_package_import_upward_and_on_models(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    decide = root / "perfgate" / "gate" / "decide.py"
    decide.write_text(decide.read_text() + "\nfrom ..output import text\nfrom perfgate import commands\n")
    core = root / "perfgate" / "measure" / "core.py"
    core.write_text(core.read_text() + "\nimport models.physicsnemo_block\n")
    found = violations(root)
    assert len(found) == 3, found
    assert any("perfgate.gate.decide (gate) -> perfgate.output.text (output)" in f for f in found)
    assert any("perfgate.gate.decide (gate) -> perfgate.commands (commands)" in f for f in found)
    assert any("imports the repository's models.physicsnemo_block" in f for f in found)


if __name__ == "__main__":
    tree = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    found = violations(tree)
    print("\n".join(found))
    print(f"{len(found)} up-arrow(s)")
    reads = key_reads_per_module(tree)
    print("\n".join(f"{n:4d} {m}" for m, n in reads.items()))
    print(f"{sum(reads.values())} string-key read(s) of result data outside perfgate/results.py and perfgate/record.py")
