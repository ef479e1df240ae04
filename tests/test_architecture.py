"""Import direction: perfgate's packages are stages, and a stage imports only the stages below it.

The order, bottom first (docs/architecture.md explains each): the root's record, results, files and
exitcodes; measure; cases; gate; quality; counts; ab; history; output; profile; run; dist; plugin; commands;
cli. An import of a later stage from an earlier one is an up-arrow and fails this test; imports
inside one stage are free. Every import counts: module level, inside functions and under
TYPE_CHECKING (a type-only import is still a dependency a reader must follow). No two modules
import each other, and perfgate never imports the repository's top-level `models` (the wheel
ships without it).

Imports the statements do not show count too: a subprocess started as `python -m perfgate.X` (or
`-m perfgate COMMAND`, which runs perfgate.commands.COMMAND; `-c CODE` counts CODE's imports), and
`from perfgate import Name` for a name perfgate/__init__.py serves lazily (`_LAZY`), which counts as
an import of the module that defines it.

House rules checked beside the direction (each with a commented list of the exceptions left):
argparse only in perfgate/commands/ and perfgate/cli.py; pytest (its modules, its plugins' modules,
its config and item API) only in perfgate/plugin/; tables drawn only in perfgate/output/ (see
`table_drawing`); no function longer than 100 lines; a CaseRecord is written once (frozen; no
attribute write or setattr to one outside perfgate/record.py: see `record_writes`).

Run it on any tree: `python tests/test_architecture.py [ROOT]` prints the up-arrows.
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    ("run",),
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


def lazy_names(root: Path) -> dict[str, str]:
    """perfgate/__init__.py's `_LAZY` table, read from the tree: name -> the module that defines it."""
    for node in ast.walk(ast.parse((root / "perfgate" / "__init__.py").read_text(encoding="utf8"))):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets):
                return {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(node.value.keys, node.value.values)}
    return {}


def _command_module(root: Path, command: str) -> str:
    """`python -m perfgate health` runs perfgate.commands.health (the cli finds one module per command)."""
    name = command.replace("-", "_")
    return f"perfgate.commands.{name}" if (root / "perfgate" / "commands" / f"{name}.py").is_file() else "perfgate.cli"


_MINUS_M = re.compile(r"(?:^|\s)-m\s+(perfgate(?:\.\w+)*)(?:\s+([a-z][\w-]*))?")


_MODULE_NAME = re.compile(r"perfgate(\.\w+)+")


def _is_module(root: Path, name: str) -> bool:
    """`name` is a module or package of the tree (a string naming it is how a launcher imports it)."""
    path = root / Path(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def hidden_imports(source: str, root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for the imports no import statement shows: subprocesses started with
    `-m perfgate.X` (an argv list or a command line), `-c CODE` (CODE's imports), and names served
    by perfgate/__init__.py's `_LAZY` (`from perfgate import ModelSpec`, `perfgate.ModelSpec`).
    Docstrings do not count: they describe a command, they do not run it."""
    tree, lazy = ast.parse(source), lazy_names(root)
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }

    def text(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):  # [python, "-m", "perfgate.counts.worker", ...]
            words = [text(e) for e in node.elts]
            for i, (flag, arg) in enumerate(zip(words, words[1:])):
                if flag == "-m" and arg is not None and (arg == "perfgate" or arg.startswith("perfgate.")):
                    command = words[i + 2] if arg == "perfgate" and i + 2 < len(words) else None
                    yield node.lineno, _command_module(root, command) if command else arg
                elif flag == "-c" and arg is not None:
                    yield from ((node.lineno, t) for _, t in imported("__main__", arg, root))
        elif (value := text(node)) is not None and id(node) not in docstrings:  # "python -m perfgate.ab.x ..."
            # A module named to be run or imported (a launcher's table); _LAZY's own targets count at their users.
            if _MODULE_NAME.fullmatch(value) and _is_module(root, value) and value not in set(lazy.values()):
                yield node.lineno, value
            for m in _MINUS_M.finditer(value):
                yield (
                    node.lineno,
                    _command_module(root, m.group(2)) if m.group(1) == "perfgate" and m.group(2) else m.group(1),
                )
        elif isinstance(node, ast.ImportFrom) and node.module == "perfgate" and not node.level:
            yield from ((node.lineno, lazy[a.name]) for a in node.names if a.name in lazy)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "perfgate":
            if node.attr in lazy:
                yield node.lineno, lazy[node.attr]


def violations(root: Path = ROOT) -> list[str]:
    """One line per up-arrow or import of `models`: 'file:line: importer (stage) -> imported (stage)'.
    perfgate/__init__.py's own `_LAZY` table is no arrow: it names what the package serves, and each
    use of a name counts where it is used, as an import of the module behind it."""
    out = []  # one line per import statement and imported module
    for module, path in modules(root):
        source = path.read_text(encoding="utf8")
        found = [*imported(module, source, root, is_package=path.name == "__init__.py"), *hidden_imports(source, root)]
        for line, target in sorted(set(found)):
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
    # `perfgate profile`'s report.json as the page's template reads it (output/ sits below profile/, so
    # it gets the JSON form of perfgate.profile.report): the throughput row and the peak_basis table.
    "perfgate/output/html.py": 3,
    # The [tool.perfgate.counts] table (its `instructions` globs and `ops`).
    "perfgate/counts/suite.py": 2,
    "perfgate/counts/worker.py": 1,  # a Case sent to the valgrind process
    # The gate-quality report's noise block, built by perfgate.quality.rates just before it is printed.
    "perfgate/commands/gate_quality.py": 1,
    # measure.stats' summary and a conversion's info, before they become the record.
    "perfgate/cases/runner.py": 4,
    "perfgate/cases/flops.py": 4,
    # Torch profiler events, /proc/cpuinfo, `perfgate models` and `doctor` rows, report rows.
    "perfgate/measure/op_counts.py": 2,
    "perfgate/measure/device_time.py": 2,  # the busy time per name and per marked step
    "perfgate/measure/fingerprint.py": 1,
    "perfgate/commands/models.py": 4,
    "perfgate/commands/doctor.py": 1,
    "perfgate/commands/_gpu_check.py": 1,  # a JUnit XML testcase's `name` attribute (--tier-time)
    "perfgate/output/report_sections.py": 1,
    "perfgate/plugin/configure.py": 1,  # the [tool.perfgate] table's tolerance table
    # The timed-rounds loop's per-round times by step name ("reference", "step"), not a record.
    "perfgate/measure/core.py": 4,
    # ModelSpec's refusal of the old `step=` keyword (the step kind's former name).
    "perfgate/cases/workload.py": 1,
    # The count-quality experiment's calibration and summary rows (its own JSON lines), and its table.
    "perfgate/counts/quality.py": 1,
    "perfgate/output/count_quality.py": 1,
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


# Up-arrows left, each 'importer -> imported' (none: the count launcher moved beside its worker in
# counts/, and the plugin names its own pytest worker in the RunContext it passes down).
UP_ARROW_EXCEPTIONS: frozenset[str] = frozenset()


def new_violations(root: Path = ROOT) -> list[str]:
    return [v for v in violations(root) if v.split(": ", 1)[1] not in UP_ARROW_EXCEPTIONS]


def test_imports_only_point_down_and_never_at_models() -> None:
    assert new_violations() == []
    stale = UP_ARROW_EXCEPTIONS - {v.split(": ", 1)[1] for v in violations()}
    assert not stale, f"exceptions that match no import any more: remove them: {sorted(stale)}"


def test_a_module_named_in_a_string_counts_as_an_import(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rounds = root / "perfgate" / "measure" / "rounds.py"
    rounds.write_text(rounds.read_text() + '\n\nLAUNCH = ("perfgate.plugin.hooks",)\n')
    assert [v.split(": ", 1)[1] for v in new_violations(root)] == [
        "perfgate.measure.rounds (measure) -> perfgate.plugin.hooks (plugin)"
    ]


def test_the_check_counts_subprocesses_and_lazy_names_as_imports(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stats = root / "perfgate" / "measure" / "stats.py"
    stats.write_text(
        stats.read_text()
        + "\n\ndef _late():\n    from perfgate import ModelSpec\n\n    return ModelSpec\n"
        + '\n\nRUN = ["python", "-m", "perfgate.ab.interleave"]\n'
        + 'HEALTH = "python -m perfgate health --device cuda"\n'
        + 'CODE = ["python", "-c", "from perfgate.plugin import hooks"]\n'
    )
    found = sorted(v.split(": ", 1)[1] for v in new_violations(root) if v.startswith("perfgate/measure/stats.py:"))
    assert found == [
        "perfgate.measure.stats (measure) -> perfgate.ab.interleave (ab)",
        "perfgate.measure.stats (measure) -> perfgate.cases.workload (cases)",
        "perfgate.measure.stats (measure) -> perfgate.commands.health (commands)",
        "perfgate.measure.stats (measure) -> perfgate.plugin.hooks (plugin)",
    ], found


def _calls_or_imports(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, kind, name): 'import' of a module, 'attr' for an attribute read, 'name' for a bare name used."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, "import", a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, "import", node.module
            yield from ((node.lineno, "name", a.name) for a in node.names)
        elif isinstance(node, ast.Attribute):
            yield node.lineno, "attr", node.attr
        elif isinstance(node, ast.Name):
            yield node.lineno, "name", node.id


def _outside(root: Path, allowed: tuple[str, ...]) -> Iterator[tuple[str, ast.AST]]:
    for _, path in modules(root):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(allowed):
            yield rel, ast.parse(path.read_text(encoding="utf8"))


def argparse_outside_commands(root: Path = ROOT) -> list[str]:
    """'file:line' for each argparse import outside perfgate/commands/ and perfgate/cli.py: a module
    that parses a command line is a command; the logic it runs belongs to a stage."""
    return [
        f"{rel}:{line}: argparse"
        for rel, tree in _outside(root, ("perfgate/commands/", "perfgate/cli.py"))
        for line, kind, name in _calls_or_imports(tree)
        if kind == "import" and name.split(".")[0] == "argparse"
    ]


PYTEST_MODULES = frozenset({"pytest", "_pytest", "pluggy", "pytest_benchmark", "xdist"})
# pytest's config, terminal and item API: reading these means holding pytest's objects.
PYTEST_API = frozenset({"getoption", "getini", "pluginmanager", "get_terminal_writer", "get_closest_marker", "hook"})


def pytest_outside_plugin(root: Path = ROOT) -> list[str]:
    """'file:line: what' for each use of pytest outside perfgate/plugin/: an import of pytest or one of
    its plugins' modules, or a call into pytest's config/item API (`config.getoption`, ...)."""
    return [
        f"{rel}:{line}: {name}"
        for rel, tree in _outside(root, ("perfgate/plugin/",))
        for line, kind, name in sorted(set(_calls_or_imports(tree)))
        if (kind == "import" and name.split(".")[0] in PYTEST_MODULES) or (kind == "attr" and name in PYTEST_API)
    ]


TABLE_HELPERS = frozenset({"text_table"})  # perfgate/output/text.py's table renderer
_ALIGNED = re.compile(r"^(.?[<>^]\d|[1-9])")  # `{x:<7}`, `{x:>8.3f}`, `{x:8}`; not `{n:04d}` (zero padding)


def table_drawing(root: Path = ROOT) -> list[str]:
    """'file:line: what' for each table drawn outside perfgate/output/. Drawing a table is any of:
    using output/text's table renderer (TABLE_HELPERS) anywhere but output/ and commands/ (a command
    prints what output/ draws); aligning columns by hand (an f-string width such as `{x:<7}`,
    `str.ljust/rjust/center`); defining a table's column headers (a module constant named `*HEADERS`).
    A stage returns data (records, rows of values); output/ turns them into tables."""
    out = []
    for rel, tree in _outside(root, ("perfgate/output/",)):
        command = rel.startswith(("perfgate/commands/", "perfgate/cli.py"))
        for line, kind, name in sorted(set(_calls_or_imports(tree))):
            if name in TABLE_HELPERS and kind in ("name", "attr") and not command:
                out.append(f"{rel}:{line}: {name}")
            elif kind == "attr" and name in ("ljust", "rjust", "center"):
                out.append(f"{rel}:{line}: str.{name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
                spec = "".join(str(v.value) for v in node.format_spec.values if isinstance(v, ast.Constant))
                if _ALIGNED.match(spec):
                    out.append(f"{rel}:{node.lineno}: column width {spec!r}")
        for node in getattr(tree, "body", []):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id.endswith("HEADERS") for t in node.targets
            ):
                out.append(f"{rel}:{node.lineno}: {node.targets[0].id}")  # type: ignore[attr-defined]
    return sorted(set(out))


# The uses left, by file (none: the count pass's pytest glue is perfgate/plugin/counting.py, the
# count-quality experiment's command line perfgate/commands/count_quality.py).
HOUSE_RULE_EXCEPTIONS: dict[str, tuple[str, ...]] = {
    "argparse": (),
    "pytest": (),
    "tables": (),
}


def house_rule_breaches(root: Path = ROOT) -> dict[str, list[str]]:
    found = {
        "argparse": argparse_outside_commands(root),
        "pytest": pytest_outside_plugin(root),
        "tables": table_drawing(root),
    }
    return {
        rule: [f for f in lines if f.split(":", 1)[0] not in HOUSE_RULE_EXCEPTIONS[rule]]
        for rule, lines in found.items()
    }


def test_argparse_pytest_and_tables_stay_in_their_stage() -> None:
    found = house_rule_breaches()
    assert found == {"argparse": [], "pytest": [], "tables": []}, (
        "argparse belongs in perfgate/commands/, pytest in perfgate/plugin/, table drawing in perfgate/output/"
    )


def test_the_house_rules_fail_on_a_planted_breach(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    decide = root / "perfgate" / "gate" / "decide.py"
    decide.write_text(
        decide.read_text()
        + "\n\ndef _cli(argv):\n    import argparse\n\n    return argparse.ArgumentParser().parse_args(argv)\n"
        + "\n\ndef _smoke(config):\n    return config.getoption('perfgate_smoke')\n"
        + "\n\nDECIDE_HEADERS = ('case', 'verdict')\n"
        + "\n\ndef _line(case, verdict):\n    return f'{case:<40} {verdict}'\n"
    )
    shard = root / "perfgate" / "dist" / "shard.py"
    shard.write_text(shard.read_text() + "\nimport pytest\nfrom perfgate.output.text import text_table\n")
    found = {
        rule: sorted(f"{line.split(':', 1)[0]}: {line.split(': ', 1)[1]}" for line in lines)
        for rule, lines in house_rule_breaches(root).items()
    }
    assert found == {
        "argparse": ["perfgate/gate/decide.py: argparse"],
        "pytest": ["perfgate/dist/shard.py: pytest", "perfgate/gate/decide.py: getoption"],
        "tables": [
            "perfgate/dist/shard.py: text_table",
            "perfgate/gate/decide.py: DECIDE_HEADERS",
            "perfgate/gate/decide.py: column width '<40'",
        ],
    }, found


# A record is written once (issue 38): CaseRecord is a frozen dataclass, and a producer builds it
# whole or makes a new one with dataclasses.replace. Frozen makes a write a runtime error; this
# makes one visible in the source too, in code no test runs (a GPU path, a torchrun merge).
# The writes found that are to no record: objects of their own with a field's name.
RECORD_WRITE_EXCEPTIONS = frozenset(
    {
        "perfgate/output/site.py: s.unit =",  # a chart's Series (perfgate.history.series)
        "perfgate/quality/inject.py: setattr(torch.nn.functional, ...)",  # patching torch to slow an op down
    }
)


def _record_fields(root: Path) -> tuple[frozenset[str], bool]:
    """CaseRecord's field names and whether its @dataclass says frozen=True, read from the tree's
    perfgate/record.py (the source, so a planted tree is read as it stands)."""
    tree = ast.parse((root / "perfgate" / "record.py").read_text(encoding="utf8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CaseRecord")
    names = frozenset(
        st.target.id for st in cls.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
    )
    frozen = any(
        isinstance(d, ast.Call)
        and any(k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True for k in d.keywords)
        for d in cls.decorator_list
    )
    return names, frozen


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement (plain, augmented or annotated) assigns to; [] for any other node."""
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []


def _writes(tree: ast.AST, names: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(line, what) for each write that could be to a record: `x.field = ...` (also augmented, annotated
    or in a tuple) of a CaseRecord field's name on anything but self/cls, `setattr(x, name, ...)` on
    anything but self with a field's name or a computed one, `object.__setattr__` on anything but self."""

    def own(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in ("self", "cls")

    for node in ast.walk(tree):
        for target in _targets(node):
            for t in ast.walk(target):
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.ctx, ast.Store)
                    and t.attr in names
                    and not own(t.value)
                ):
                    yield t.lineno, f"{ast.unparse(t)} ="
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        receiver, name = node.args[0], node.args[1]
        if isinstance(node.func, ast.Name) and node.func.id == "setattr" and not own(receiver):
            if not isinstance(name, ast.Constant) or name.value in names:
                yield node.lineno, f"setattr({ast.unparse(receiver)}, ...)"
        elif ast.unparse(node.func) == "object.__setattr__" and not own(receiver):
            yield node.lineno, f"object.__setattr__({ast.unparse(receiver)}, ...)"


def record_writes(root: Path = ROOT) -> list[str]:
    """'file:line: what' for each write to a record after it is built, outside perfgate/record.py
    and RECORD_WRITE_EXCEPTIONS; and perfgate/record.py itself when CaseRecord is not frozen."""
    names, frozen = _record_fields(root)
    out = [] if frozen else ["perfgate/record.py:0: CaseRecord is not @dataclass(frozen=True, ...)"]
    for rel, tree in _outside(root, ("perfgate/record.py",)):
        for line, what in sorted(set(_writes(tree, names))):
            if f"{rel}: {what}" not in RECORD_WRITE_EXCEPTIONS:
                out.append(f"{rel}:{line}: {what}")
    return out


def test_records_are_written_once() -> None:
    from dataclasses import FrozenInstanceError

    from perfgate.record import CaseRecord

    found = record_writes()
    assert not found, "build the record whole, or a new one with dataclasses.replace(record, ...):\n" + "\n".join(found)
    with pytest.raises(FrozenInstanceError):
        CaseRecord().median_ms = 1.0
    names, _ = _record_fields(ROOT)
    writes = {
        f"{rel}: {what}" for rel, tree in _outside(ROOT, ("perfgate/record.py",)) for _, what in _writes(tree, names)
    }
    stale = RECORD_WRITE_EXCEPTIONS - writes
    assert not stale, f"exceptions that match no write any more: remove them: {sorted(stale)}"


def test_the_record_write_check_fails_on_a_planted_breach(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    shard = root / "perfgate" / "dist" / "shard.py"
    shard.write_text(
        shard.read_text()
        + "\n\ndef _mark(b, why, key):\n    b.record.unreliable = why\n    rec = b.record\n    rec.median_ms += 1.0\n"
        + "    rec.speedup, rec.speedup_note = None, why\n    setattr(rec, key, None)\n"
        + "    object.__setattr__(rec, 'n', 0)\n    return rec\n"
    )
    record = root / "perfgate" / "record.py"
    record.write_text(
        record.read_text().replace(
            "@dataclass(frozen=True, kw_only=True)\nclass CaseRecord", "@dataclass(kw_only=True)\nclass CaseRecord"
        )
    )
    found = [line.split(": ", 1)[1] for line in record_writes(root)]
    assert found == [
        "CaseRecord is not @dataclass(frozen=True, ...)",
        "b.record.unreliable =",
        "rec.median_ms =",
        "rec.speedup =",
        "rec.speedup_note =",
        "setattr(rec, ...)",
        "object.__setattr__(rec, ...)",
    ], found
    assert all(line.startswith("perfgate/dist/shard.py:") for line in record_writes(root)[1:])


# The plugin's Session has one writer (issue 38): perfgate/plugin/hooks.py, the adapter, keeps the
# selection's skips, the runner, the cases' outcomes and the compared files' machines; the case runner
# (perfgate.run) keeps its own state, and the run's outcome is built once, frozen. A write to a
# Session field elsewhere (an assignment, an item assignment, a mutating call) is named here.
SESSION_OWNER = "perfgate/plugin/hooks.py"
SESSION_WRITE_EXCEPTIONS = frozenset(
    {
        "perfgate/plugin/xdist.py: session.cases =",  # a shard narrows the selection (its configure hook)
    }
)
_MUTATORS = frozenset(
    {"append", "extend", "update", "pop", "popitem", "add", "discard", "setdefault", "clear", "insert"}
)


def _session_fields(root: Path) -> frozenset[str]:
    tree = ast.parse((root / "perfgate" / "plugin" / "session.py").read_text(encoding="utf8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    return frozenset(
        st.target.id for st in cls.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
    )


def session_writes(root: Path = ROOT) -> list[str]:
    """'file:line: what' for each write to a field of the plugin's Session outside its owner."""
    names, out = _session_fields(root), []

    def field_of(node: ast.expr) -> ast.Attribute | None:
        node = node.value if isinstance(node, ast.Subscript) else node
        own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        return node if isinstance(node, ast.Attribute) and node.attr in names and not own else None

    for rel, tree in _outside(root, (SESSION_OWNER, "perfgate/plugin/session.py")):
        for node in ast.walk(tree):
            found = [
                f for t in _targets(node) for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if (f := field_of(e))
            ]
            found = [f"{ast.unparse(f)} =" for f in found]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
                if (f := field_of(node.func.value)) is not None:
                    found.append(f"{ast.unparse(f)}.{node.func.attr}(...)")
            out += [f"{rel}:{node.lineno}: {w}" for w in found if f"{rel}: {w}" not in SESSION_WRITE_EXCEPTIONS]
    return sorted(set(out))


def test_the_session_has_one_writer() -> None:
    found = session_writes()
    assert not found, f"only {SESSION_OWNER} writes the Session; return the value to it instead:\n" + "\n".join(found)


def test_the_session_writer_check_fails_on_a_planted_breach(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    for rel, line in (
        (
            "perfgate/plugin/xdist.py",
            "def _late(session, o):\n    session.outcomes.append(o)\n    session.runner = None\n",
        ),
        ("perfgate/plugin/counting.py", "def _skip(s, case, why):\n    s.unrunnable[case.id] = why\n"),
        ("perfgate/output/terminal.py", "def _note(run, line):\n    run.compared_elsewhere += [line]\n"),
    ):
        path = root / rel
        path.write_text(path.read_text() + "\n\n" + line)
    found = [line.split(": ", 1)[1] for line in session_writes(root)]
    assert found == [
        "run.compared_elsewhere =",
        "s.unrunnable =",
        "session.outcomes.append(...)",
        "session.runner =",
    ], found


def _tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "perfgate", tmp_path / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_check_fails_on_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stats = root / "perfgate" / "measure" / "stats.py"
    stats.write_text(
        stats.read_text() + "\n\ndef _late():\n    from perfgate.plugin import hooks\n\n    return hooks\n"
    )
    assert len(found := new_violations(root)) == 1
    assert "perfgate.measure.stats (measure) -> perfgate.plugin.hooks (plugin)" in found[0]


def test_the_check_fails_on_a_relative_or_package_import_upward_and_on_models(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    decide = root / "perfgate" / "gate" / "decide.py"
    decide.write_text(decide.read_text() + "\nfrom ..output import text\nfrom perfgate import commands\n")
    core = root / "perfgate" / "measure" / "core.py"
    core.write_text(core.read_text() + "\nimport models.physicsnemo_block\n")
    found = new_violations(root)
    assert len(found) == 3, found
    assert any("perfgate.gate.decide (gate) -> perfgate.output.text (output)" in f for f in found)
    assert any("perfgate.gate.decide (gate) -> perfgate.commands (commands)" in f for f in found)
    assert any("imports the repository's models.physicsnemo_block" in f for f in found)


MAX_FUNCTION_LINES = 100
# Each with the length it may not grow beyond (none left: count_cases was split, issue 38).
LONG_FUNCTION_EXCEPTIONS: dict[str, int] = {}


def _declarative(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An option table: every statement one call (`add_argument(...)`), a name bound to one (a group)
    or an import (of a default it shows)."""
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    return all(
        isinstance(st, (ast.Import, ast.ImportFrom))
        or (isinstance(st, (ast.Expr, ast.Assign)) and isinstance(st.value, ast.Call))
        for st in body
    )


def long_functions(root: Path = ROOT) -> list[str]:
    """'file name: N lines' for each function over MAX_FUNCTION_LINES, declarative option tables apart."""
    out = []
    for _, path in modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _declarative(node):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(root).as_posix()} {node.name}: {n} lines")
    return out


def test_no_function_is_longer_than_100_lines() -> None:
    def allowed(line: str) -> bool:  # "perfgate/x.py name: N lines"
        where, length = line.split(": ", 1)
        return int(length.split()[0]) <= LONG_FUNCTION_EXCEPTIONS.get(where, MAX_FUNCTION_LINES)

    found = [f for f in long_functions() if not allowed(f)]
    assert not found, "split these into named steps:\n" + "\n".join(found)


def test_the_length_check_fails_on_a_new_long_function(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stats = root / "perfgate" / "measure" / "stats.py"
    body = "".join(f"    x += {i}\n" for i in range(MAX_FUNCTION_LINES))
    stats.write_text(stats.read_text() + f"\n\ndef _long(x):\n{body}    return x\n")
    assert "perfgate/measure/stats.py _long: 102 lines" in long_functions(root)


# Parameters typed plain `Any` at the stage boundaries: a public function or method (its name not
# starting with `_`) takes `x: Any`, `*args`/`**kwargs` apart. Each stage may keep at most this many
# (the count of 2026-11-27, issue 38; 89 once the runner, the evidence and pytest's objects were
# typed; 86 once the profile's report and the A/B worker's model spec were); a new one fails: give it
# its type (a record, a Mapping, a Protocol for pytest's objects). mypy does not count them
# (tests/test_types.py holds its errors).
ANY_PARAMETER_BUDGET = {
    "ab": 0, "cases": 4, "counts": 6, "dist": 2, "files": 1, "gate": 5, "history": 4, "measure": 22,
    "output": 17, "plugin": 8, "profile": 7, "quality": 8, "results": 2,
}  # fmt: skip


def any_parameters(root: Path = ROOT) -> list[tuple[str, str]]:
    """(stage, 'file:line: function(parameter)') for each public function's parameter typed plain `Any`."""
    out = []
    for module, path in modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                a = node.args
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                    if isinstance(arg.annotation, ast.Name) and arg.annotation.id == "Any":
                        where = f"{path.relative_to(root).as_posix()}:{arg.lineno}"
                        out.append((stage(module), f"{where}: {node.name}({arg.arg})"))
    return out


def any_parameters_over_budget(root: Path = ROOT) -> dict[str, list[str]]:
    per_stage: dict[str, list[str]] = {}
    for name, line in any_parameters(root):
        per_stage.setdefault(name, []).append(line)
    return {s: lines for s, lines in per_stage.items() if len(lines) > ANY_PARAMETER_BUDGET.get(s, 0)}


def test_no_new_any_parameter_at_a_stage_boundary() -> None:
    assert any_parameters_over_budget() == {}


def test_the_any_count_fails_on_a_new_any_parameter(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    decide = root / "perfgate" / "gate" / "decide.py"
    decide.write_text(decide.read_text() + "\n\ndef judge_one(record: Any, *rest: Any) -> None:\n    return None\n")
    over = any_parameters_over_budget(root)
    assert list(over) == ["gate"], over
    planted = [line for line in over["gate"] if "judge_one" in line]  # *rest: Any does not count
    assert len(planted) == 1 and planted[0].startswith("perfgate/gate/decide.py:"), planted


if __name__ == "__main__":
    tree = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    found = violations(tree)
    print("\n".join(found))
    print(f"{len(found)} up-arrow(s), counting subprocesses and lazy names ({len(UP_ARROW_EXCEPTIONS)} allowed)")
    for rule, lines in house_rule_breaches(tree).items():
        print(*(f"{rule}: {line}" for line in lines), sep="\n") if lines else None
    print(*long_functions(tree), sep="\n")
    print(f"{len(any_parameters(tree))} public parameter(s) typed plain Any")
    reads = key_reads_per_module(tree)
    print("\n".join(f"{n:4d} {m}" for m, n in reads.items()))
    print(f"{sum(reads.values())} string-key read(s) of result data outside perfgate/results.py and perfgate/record.py")
    writes = session_writes(tree)
    print(*writes, sep="\n") if writes else None
    allowed = len(SESSION_WRITE_EXCEPTIONS)
    print(f"{len(writes)} write(s) to the plugin's Session outside {SESSION_OWNER} ({allowed} allowed)")
