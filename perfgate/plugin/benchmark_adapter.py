"""The one module that touches pytest-benchmark's internals; every other perfgate module goes through it.

Written against pytest-benchmark 5.3.1 (pyproject allows >=5.3; none of what follows is its public
API, so a new release is checked here first: `tests/plugin/test_benchmark_adapter.py` exercises each
use against the installed version). pytest-benchmark is perfgate's results format (its table, JSON,
--benchmark-save/compare/histogram), not its timer; the private uses, and why each is needed:

- `config._benchmarksession` (its `BenchmarkSession`): the run's JSON is built from `.benchmarks`
  and `.get_machine_info()` exactly as `handle_saving` builds it (`run_json`: a baseline, an
  xdist worker's shipment and a shard file are that JSON); `.compared_mapping` names the files a
  --benchmark-compare table read (`compared_files`); `.json`, `.save`, `.autosave`, `.storage` are
  where the user asked results to go, which the merged xdist run and the torchrun aggregate are
  written to instead of one process's results (`write_requested`, `save`); in an xdist worker
  `.disabled`, `.xdist_warning`, `.json`/`.save`/`.autosave`/`.compare`, `.compared_mapping` and
  `.histogram` undo its "disabled under xdist" (perfgate times the cases itself and refuses
  contended set-ups) and leave the writing to the controller (`enable_in_worker`, `drop_compare`).
- `benchmark._make_stats` and `benchmark._mode` (its `BenchmarkFixture`): `benchmark.pedantic`
  times with a host timer only, so perfgate's samples (CUDA events, re-measured rounds) go in
  through the Metadata object pedantic fills (`feed`); `_mode` marks the fixture used, else it warns
  "fixture was not used at all" (`feed`, `mark_used`).
- Its own `pytest_benchmark_compare_machine_info` warns with both machine_infos dumped whenever they
  differ at all; it runs after perfgate's, which makes them equal (`silence_machine_info_compare`).
- Its options are read when its `BenchmarkSession` is built (its trylast pytest_configure), so
  perfgate's tryfirst configure may still point them elsewhere (`point_outputs`).
- Its writers, `BenchmarkSession.save_json` (--benchmark-json) and `FileStorage.save`
  (--benchmark-save/-autosave), open the target with open('wb') and write into it: a run killed
  mid-write left a truncated file (a --benchmark-compare or history reader then failed on it). Both
  are replaced on the run's instances by writers through `perfgate.files` (`write_atomically`,
  from perfgate's pytest_sessionstart, once the session exists), keeping their signatures, their
  log lines and FileStorage's naming: `storage.get(f"{storage._next_num}_{name}.json")` (the folder
  of the machine id if one is set, the next four-digit number), written without clobber as its
  `assert not output_file.exists()` meant (`save_to_storage`). Elasticsearch storage is left as it is.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Protocol

import pytest

from perfgate import extras, files

WRITTEN_AGAINST = "5.3.1"
FLOOR = "5.3"  # pyproject's; before it --benchmark-json was an open file, not a path (write_requested)
MODE = "perfgate"  # what pytest-benchmark's messages name as the way the fixture was used


def version_problem(installed: str) -> str | None:
    """Why this pytest-benchmark cannot serve perfgate, or None. A Python with its own packages
    (PERFGATE_SKIP_INSTALL=1; the GPU image of 2026-11-27 had 5.2.3) gets a line instead of a
    TypeError at the end of a run."""
    from packaging.version import Version  # pytest's own dependency

    if Version(installed) >= Version(FLOOR):
        return None
    return (
        f"perfgate: pytest-benchmark {installed} is installed; perfgate needs {FLOOR} or later: "
        f"pip install 'pytest-benchmark>={FLOOR}'"
    )


def check_installed() -> None:
    """A usage error (one line) where the installed pytest-benchmark is below perfgate's floor."""
    import importlib.metadata

    try:
        installed = importlib.metadata.version("pytest-benchmark")
    except importlib.metadata.PackageNotFoundError:
        return  # not installed: pytest reports the missing `benchmark` fixture itself
    if (problem := version_problem(installed)) is not None:
        raise pytest.UsageError(problem)


def benchmark_session(config: pytest.Config) -> Any | None:
    """pytest-benchmark's BenchmarkSession of this run; None when pytest-benchmark is not loaded."""
    return getattr(config, "_benchmarksession", None)


def feed(benchmark: Any, samples_ms: list[float], extra_info: dict[str, Any]) -> None:
    """Hand perfgate's samples to pytest-benchmark so its table, JSON, save and compare work."""
    if benchmark.disabled:
        return
    stats = benchmark._make_stats(1)  # one iteration per round: each sample is one step
    for ms in samples_ms:
        stats.update(ms / 1e3)
    mark_used(benchmark)
    benchmark.extra_info.update(extra_info)


def mark_used(benchmark: Any) -> None:
    """The fixture counts as used (a case that failed before it was fed gets no second warning)."""
    benchmark._mode = MODE


def has_results(config: pytest.Config) -> bool:
    bs = benchmark_session(config)
    return bool(bs is not None and bs.benchmarks)


def run_json(config: pytest.Config) -> dict[str, Any]:
    """This process's results as pytest-benchmark writes them (with the raw data and the blocks the
    pytest_benchmark_update_json hooks add), also when no case ran."""
    bs = config._benchmarksession  # type: ignore[attr-defined]
    commit = config.hook.pytest_benchmark_generate_commit_info(config=config)
    data = config.hook.pytest_benchmark_generate_json(
        config=config,
        benchmarks=bs.benchmarks,
        include_data=True,
        machine_info=bs.get_machine_info(),
        commit_info=commit,
    )
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=bs.benchmarks, output_json=data)
    return data


def compared_files(config: pytest.Config) -> list[str]:
    """The files pytest-benchmark's --benchmark-compare table compared with, if any."""
    bs = benchmark_session(config)
    return [str(p) for p in (getattr(bs, "compared_mapping", None) or {})]


def save(config: pytest.Config, data: dict[str, Any], name: str) -> None:
    """`data` saved as --benchmark-save NAME would save a run (into its storage), atomically."""
    bs = benchmark_session(config)
    if bs is not None:
        save_to_storage(bs.storage, data, name)


class Storage(Protocol):
    """pytest-benchmark's storage (`BenchmarkSession.storage`): a FileStorage, or Elasticsearch's."""

    def save(self, output_json: dict[str, Any], save: str) -> Any: ...


def save_to_storage(storage: Storage, data: dict[str, Any], name: str) -> Path | None:
    """`data` saved where pytest-benchmark's FileStorage.save puts a run saved as `name`: the next
    numbered NNNN_<name>.json of its folder, written through perfgate.files without clobber (a number
    another process took meanwhile moves this save to the next one, never over that file). Another
    storage (Elasticsearch) saves as it does; None then."""
    from pytest_benchmark.storage.file import FileStorage

    if not isinstance(storage, FileStorage):
        storage.save(data, name)
        return None
    for _ in range(100):
        path = storage.get(f"{storage._next_num}_{name}.json")
        try:
            files.write_json(path, data, clobber=False)
        except FileExistsError:
            continue
        storage.logger.info(f"Saved benchmark data in: {path}")
        return path
    raise FileExistsError(f"{storage}: no free number for {name!r} after 100 tries")


def write_atomically(config: pytest.Config) -> None:
    """pytest-benchmark's own writes of this run (--benchmark-json, --benchmark-save/-autosave; a
    torchrun rank's file) go through perfgate.files: a run killed mid-write leaves the earlier file."""
    bs = benchmark_session(config)
    if bs is None:
        return

    def save_json(output_json: dict[str, Any]) -> None:
        files.write_json(bs.json, output_json)
        bs.logger.info(f"Wrote benchmark data in: {bs.json}", purple=True)

    bs.save_json = save_json
    from pytest_benchmark.storage.file import FileStorage

    storage = bs.storage
    if isinstance(storage, FileStorage):  # another storage keeps its own save (save_to_storage calls it)
        storage.save = lambda output_json, save: save_to_storage(storage, output_json, save)  # type: ignore[method-assign]


def write_requested(config: pytest.Config, data: dict[str, Any]) -> Path | None:
    """`data` (a merged run) written where --benchmark-json and --benchmark-save/-autosave asked
    pytest-benchmark to write this run; the JSON file written, if any."""
    bs = benchmark_session(config)
    if bs is None:
        return None
    written = files.write_json(bs.json, data) if bs.json else None
    if bs.save or bs.autosave:
        save_to_storage(bs.storage, data, bs.save or bs.autosave)
    return written


def drop_compare(config: pytest.Config) -> bool:
    """No --benchmark-compare table (an xdist controller measures nothing to compare); whether one
    had been asked for."""
    bs = benchmark_session(config)
    if bs is None or not bs.compare:
        return False
    bs.compare, config.option.benchmark_compare = None, None
    return True


def enable_in_worker(config: pytest.Config) -> None:
    """In an xdist worker: take the samples again (pytest-benchmark disables itself under xdist),
    write nothing and compare nothing (the controller does, from the merged run)."""
    bs = benchmark_session(config)
    if bs is None:
        return
    bs.disabled = bool(config.getoption("benchmark_disable")) and not config.getoption("benchmark_enable")
    bs.xdist_warning = False
    bs.json = bs.save = bs.autosave = bs.compare = None
    bs.compared_mapping = {}
    bs.histogram = False


def silence_machine_info_compare(machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> None:
    """pytest-benchmark's own compare_machine_info hook (run after perfgate's) warns with both
    machine_infos dumped on one line (5 KB; and it raised where its storage lay outside the working
    directory) whenever they differ at all; made equal, it stays silent."""
    compared_benchmark["machine_info"] = machine_info


def point_outputs(config: pytest.Config, fingerprint_id: str, newest_baseline: Path | None) -> None:
    """Set before pytest-benchmark reads its options. Its own saves (--benchmark-save/-autosave) get
    a folder of their own per fingerprint, never the baselines' (an autosave there became the file
    --benchmark-compare used while the gate used another); a plain --benchmark-compare compares with
    the gate's newest baseline file; bare histogram prefixes go under .perfgate/histograms."""
    root = Path(config.rootpath)
    config.option.benchmark_storage = f"file://{root / '.perfgate' / 'benchmarks' / fingerprint_id}"
    if config.getoption("benchmark_compare", None) is True and newest_baseline is not None:
        config.option.benchmark_compare = str(newest_baseline.resolve())
    prefixes = config.getoption("benchmark_histogram", None)
    if prefixes:
        config.option.benchmark_histogram = histogram_prefixes(prefixes, root)


def histogram_prefixes(prefixes: list[str], rootpath: Path) -> list[str]:
    """--benchmark-histogram's SVGs go to FILENAME-PREFIX-group.svg relative to the working folder:
    a bare prefix (its default is benchmark_<time>) is put under .perfgate/histograms instead of
    littering the repository's root; a prefix with a folder in it is where the user asked. pygal is
    checked here: a missing one crashed pytest-benchmark after the whole run."""
    if importlib.util.find_spec("pygal") is None:
        raise pytest.UsageError(f"perfgate: {extras.message('pygal', '--benchmark-histogram')}")
    return [p if Path(p).parent != Path(".") else str(rootpath / ".perfgate" / "histograms" / p) for p in prefixes]
