"""The history store: real runs (tests/data/history-step, eight runs of the suite at eight commits)
validated and added as the hosted job does with `perfgate store add`, read back by `perfgate
history --store`, by pytest-benchmark's own storage and through gzip; each check the validation
makes fails on the realistic mistake made to a copy of a real artifact."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.history import store as history_store
from tests.helpers import empty_pyproject, needs_ruptures

DATA = Path(__file__).resolve().parents[1] / "data" / "history-step"
FP_ID = next(p.name for p in DATA.iterdir() if p.is_dir())
RUNS = sorted((DATA / FP_ID).glob("*.json"))


def _commit(path: Path) -> str:
    return json.loads(path.read_text())["commit_info"]["id"]


def _add(store: Path, run: Path, *extra: str, tier: str = "pr") -> int:
    return main(["store", "add", str(store), "--results", str(run), "--commit", _commit(run), "--tier", tier, *extra])


def test_real_runs_are_stored_numbered_and_read_back_by_perfgate_and_pytest_benchmark(tmp_path, capsys):
    store = tmp_path / "store"
    for run in RUNS:
        assert _add(store, run) == 0
    out = capsys.readouterr().out
    assert out.count("perfgate store: wrote") == 8
    files = sorted((store / FP_ID).iterdir())
    assert [f.name[:17] for f in files] == [f"{i:04d}_{_commit(r)[:12]}" for i, r in enumerate(RUNS, 1)]
    stored = json.loads(files[0].read_text())
    assert stored["perfgate_history"] == {
        "schema": 1,
        "commit": _commit(RUNS[0]),
        "fingerprint_id": FP_ID,
        "tier": "pr",
        "verdicts": [],
    }
    b = stored["benchmarks"][0]
    assert b["extra_info"]["samples_ms"] == [] and b["stats"]["data"] == []  # the figures stay
    assert b["extra_info"]["median_ms"] == json.loads(RUNS[0].read_text())["benchmarks"][0]["extra_info"]["median_ms"]
    assert files[0].stat().st_size < RUNS[0].stat().st_size * 0.7  # its samples were ~40%
    # The same commit and tier again: nothing written (a re-run workflow); another tier: a file.
    assert _add(store, RUNS[0]) == 0 and "already stored" in capsys.readouterr().out
    assert _add(store, RUNS[0], tier="all") == 0 and len(list((store / FP_ID).iterdir())) == 9
    capsys.readouterr()
    # pytest-benchmark reads the store as its own storage.
    from pytest_benchmark.storage.file import FileStorage

    loaded = list(FileStorage(store, logging.getLogger("t")).load())
    assert len(loaded) == 9 and all(data["benchmarks"] for _, data in loaded)
    # perfgate history reads it with --store (no baseline folder, no network), gzipped files too.
    history_store_file = files[-1]
    history_store_file.with_name(history_store_file.name + ".gz").write_bytes(
        gzip.compress(history_store_file.read_bytes())
    )
    history_store_file.unlink()
    argv = ["history", "--baselines", str(tmp_path / "none"), "--store", str(store), "--fingerprint", FP_ID]
    assert main([*argv, "--metric", "normalised_median", "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert len(series["points"]) == 8  # the run stored at two tiers is one run (same commit, same time)
    assert series["points"][-1]["source"].endswith(".json.gz")


@needs_ruptures
def test_the_change_point_names_its_commit_range_and_the_bisect_command(tmp_path, capsys):
    store = tmp_path / "store"
    for run in RUNS:
        assert _add(store, run) == 0
    capsys.readouterr()
    argv = ["history", "--baselines", str(tmp_path / "none"), "--store", str(store), "--fingerprint", FP_ID]
    assert (
        main([*argv, "--metric", "normalised_median", "--change-points", "--pyproject", str(empty_pyproject(tmp_path))])
        == 0
    )
    out = capsys.readouterr().out
    good, bad = _commit(RUNS[3])[:12], _commit(RUNS[4])[:12]  # runs 5-8 carry the injected slowdown
    assert f"commits {good}..{bad}" in out
    assert f"perfgate bisect {good} {bad} --case physicsnemo-block-tiny-baseline --device cpu" in out
    accepted = tmp_path / "pyproject.toml"
    accepted.write_text(
        f'[tool.perfgate]\naccepted_changes = [{{ case = "*physicsnemo*", commit = "{bad}", reason = "heavier" }}]\n'
    )
    assert main([*argv, "--metric", "normalised_median", "--change-points", "--pyproject", str(accepted)]) == 0
    assert "perfgate bisect" not in capsys.readouterr().out  # an accepted step needs no search


def _artifact(tmp_path: Path, edit=None, text_edit=None) -> Path:
    """A copy of a real run, changed as a mistake or an attack would change it."""
    data = json.loads(RUNS[0].read_text())
    if edit:
        edit(data)
    text = json.dumps(data)
    if text_edit:
        text = text_edit(text)
    out = tmp_path / "artifact" / "results.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    return out


def _fp(field, value):
    return lambda d: d["perfgate"].update({field: value})


MISTAKES = {
    "fingerprint-id-escapes-the-folder": (_fp("fingerprint_id", "../../main"), "is not one perfgate writes"),
    "fingerprint-id-of-another-machine": (
        _fp("fingerprint_id", "cpu-intel-xeon-f6m143-t2-0123456789"),
        "does not match its fingerprint block",
    ),
    "no-fingerprint-block": (lambda d: d.pop("perfgate"), "no perfgate fingerprint block"),
    "another-commit": (lambda d: d["commit_info"].update(id="f" * 40), "not " + _commit(RUNS[0])),
    "dirty-tree": (lambda d: d["commit_info"].update(dirty=True), "uncommitted changes"),
    "no-benchmarks": (lambda d: d.update(benchmarks=[]), "no benchmarks"),
    "plain-pytest-benchmark": (lambda d: d["benchmarks"][0].update(extra_info={}), "no perfgate median_ms"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_bad_artifact_is_refused_with_one_line_and_nothing_written(tmp_path, capsys, mistake):
    edit, message = MISTAKES[mistake]
    bad = _artifact(tmp_path, edit)
    store = tmp_path / "store"
    argv = ["store", "add", str(store), "--results", str(bad), "--commit", _commit(RUNS[0]), "--tier", "pr"]
    assert main(argv) == 4
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not store.exists() or not any(store.rglob("*.json"))
    good = _artifact(tmp_path)  # the unchanged copy passes: the check is the mistake's, not the copy's
    assert main([*argv[:4], str(good), *argv[5:]]) == 0


def test_size_tier_verdicts_and_main_are_checked(tmp_path, capsys):
    good = _artifact(tmp_path)
    commit = _commit(RUNS[0])
    with pytest.raises(history_store.StoreError, match="over the bound"):
        history_store.validate(good, None, commit=commit, tier="pr", max_bytes=1000)
    with pytest.raises(history_store.StoreError, match="--tier"):
        history_store.validate(good, None, commit=commit, tier="../pr")
    with pytest.raises(history_store.StoreError, match="--commit"):
        history_store.validate(good, None, commit=commit[:12], tier="pr")
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text(json.dumps({"fingerprint_id": "cpu-other-t2-0000000000", "verdicts": []}))
    with pytest.raises(history_store.StoreError, match="verdicts of cpu-other"):
        history_store.validate(good, verdicts, commit=commit, tier="pr")
    row = {"case": "c", "metric": "latency", "verdict": "regression", "change_pct": 12.0, "message": "m"}
    verdicts.write_text(json.dumps({"fingerprint_id": FP_ID, "verdicts": [row]}))
    kept = history_store.validate(good, verdicts, commit=commit, tier="pr")["perfgate_history"]["verdicts"]
    assert kept == [{"case": "c", "metric": "latency", "verdict": "regression", "change_pct": 12.0, "compared": None}]
    # On main: a clone whose main has the commit passes; one where it is only on a side branch fails.
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], check=True)
    subprocess.run([*git, "checkout", "-q", "-b", "side"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "side"], check=True)
    side = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    main_sha = subprocess.run([*git, "rev-parse", "main"], capture_output=True, text=True, check=True).stdout.strip()
    for sha, ok in ((main_sha, True), (side, False)):
        art = _artifact(tmp_path, lambda d, s=sha: d["commit_info"].update(id=s))
        if ok:
            history_store.validate(art, None, commit=sha, tier="pr", repo=repo, main_ref="main")
        else:
            with pytest.raises(history_store.StoreError, match="is not on main"):
                history_store.validate(art, None, commit=sha, tier="pr", repo=repo, main_ref="main")


def test_the_configured_store_is_read_when_present(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nhistory_store = ".perfgate/history"\n')
    for run in RUNS[:2]:
        assert _add(tmp_path / ".perfgate" / "history", run) == 0
    capsys.readouterr()
    assert main(["history", "--fingerprint", FP_ID, "--brief"]) == 0
    assert "physicsnemo-block [tiny] baseline" in capsys.readouterr().out
    shutil.rmtree(tmp_path / ".perfgate")
    assert main(["history", "--fingerprint", FP_ID, "--brief"]) == 4  # absent: nothing to read, said once
    assert main(["history", "--store", "missing", "--fingerprint", FP_ID]) == 4
    assert "--store missing: no such folder; fetch the store with: git fetch" in capsys.readouterr().err


@pytest.mark.parametrize(("value", "shown"), [("3", "3"), ('""', "''")], ids=["number", "empty"])
def test_a_bad_history_store_setting_is_one_line_for_history_and_report(tmp_path, monkeypatch, capsys, value, shown):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[tool.perfgate]\nhistory_store = {value}\n")
    line = f'[tool.perfgate] history_store: must be a folder, e.g. history_store = ".perfgate/history", got {shown}'
    history = ["history", "--fingerprint", FP_ID, "--pyproject", str(pyproject)]
    report = ["report", str(RUNS[-1]), "--no-history", "-o", str(tmp_path / "r.html"), "--pyproject", str(pyproject)]
    for argv in (history, report):
        assert main(argv) == 4
        assert capsys.readouterr().err == f"perfgate {argv[0]}: {pyproject} {line}\n"
    monkeypatch.chdir(tmp_path)  # the implicit ./pyproject.toml too
    assert main(["history", "--fingerprint", FP_ID]) == 4
    assert capsys.readouterr().err == f"perfgate history: pyproject.toml {line}\n"
    assert not (tmp_path / "r.html").exists()


def test_thinning_keeps_recent_runs_and_every_nightly(tmp_path):
    from datetime import UTC, datetime, timedelta

    from tests.history import year as history_year

    template = json.loads(history_year.CPU_BASELINE.read_text())
    template["benchmarks"] = template["benchmarks"][:3]  # a nightly of 3 cases, a PR run of 2
    store = tmp_path / "store"
    start = datetime(2026, 3, 1, tzinfo=UTC)
    written = history_year.store_runs(
        store, template, days=5, pushes_per_day=2, pr_cases=history_year.pr_tier_names(template, 2), start=start
    )
    assert len(written) == 15
    removed = history_store.thin(store, now=start + timedelta(days=5, hours=12), keep_days=2)
    # Days 0-2 are more than 2 days old: their 6 PR-tier runs go, their nightlies stay.
    assert len(removed) == 6 and all(p.name.endswith("-pr.json") for p in removed)
    left = sorted(p.name for p in store.rglob("*.json"))
    assert sum(n.endswith("-all.json") for n in left) == 5 and sum(n.endswith("-pr.json") for n in left) == 4
    assert main(["store", "thin", str(store), "--days", "0"]) == 4


def test_thinning_refuses_a_tier_no_stored_run_has_before_removing_anything(tmp_path, capsys):
    from datetime import UTC, datetime

    from tests.history import year as history_year

    template = json.loads(history_year.CPU_BASELINE.read_text())
    template["benchmarks"] = template["benchmarks"][:3]
    store = tmp_path / "store"
    start = datetime(2026, 3, 1, tzinfo=UTC)  # long ago: every run is older than --days
    pr = history_year.pr_tier_names(template, 2)
    history_year.store_runs(store, template, days=2, pushes_per_day=1, pr_cases=pr, start=start)
    before = sorted(p.name for p in store.rglob("*.json"))
    assert {n.rsplit("-", 1)[1] for n in before} == {"all.json", "pr.json"}
    assert main(["store", "thin", str(store), "--days", "1", "--keep-tier", "nightly"]) == 4
    assert capsys.readouterr().err == (
        f"perfgate store: --keep-tier nightly: no run in {store} has this tier, so none would be kept; its runs' "
        "tiers: all, pr (the nightly full matrix is 'all')\n"
    )
    assert sorted(p.name for p in store.rglob("*.json")) == before  # nothing removed
    assert main(["store", "thin", str(store), "--days", "1"]) == 0  # the default, all: the nightlies stay
    assert sorted(p.name for p in store.rglob("*.json")) == [n for n in before if n.endswith("-all.json")]
    assert main(["store", "thin", str(store), "--days", "1", "--keep-tier", "pr"]) == 4  # none is left


def test_every_file_read_from_an_artifact_or_the_data_branch_is_size_capped(tmp_path, monkeypatch):
    """results.json, verdicts.json and a stored run, plain or .json.gz (its decompressed size: a
    gzip bomb of a few KB must not fill the memory), are read up to perfgate.results.MAX_READ_BYTES."""

    from perfgate import results
    from perfgate.gate.verdict_file import load_verdicts

    assert results.MAX_READ_BYTES == 64 * 2**20
    monkeypatch.setattr(results, "MAX_READ_BYTES", 10_000)
    padded = json.dumps({"benchmarks": [], "pad": "x" * 20_000})
    bomb = tmp_path / "0001_0123456789ab-pr.json.gz"
    bomb.write_bytes(gzip.compress(padded.encode()))
    assert bomb.stat().st_size < 1_000  # small on disk, 20 KB once decompressed
    plain = tmp_path / "results.json"
    plain.write_text(padded)
    for path in (bomb, plain):
        with pytest.raises(results.ResultFileError, match="more than 10000 bytes"):
            results.read_benchmark_json(path)
    with pytest.raises(results.ResultFileError, match="more than 10000 bytes"):
        load_verdicts(plain)
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(b'{"benchmarks": []}'))
    assert results.read_benchmark_json(small) == {"benchmarks": []}


# --- the CPU runs: instruction counts kept (benchmark-cpu.yml on main) ----------------------------


def _counted(tmp_path: Path, name: str = "results.json", edit=None, **kw) -> Path:
    """A real CPU run counted as the count pass records it (tests.helpers.counted_run), changed by `edit`."""
    from tests.helpers import counted_run

    path = counted_run(tmp_path / "cpu" / name, commit=_commit(RUNS[0]), **kw)
    if edit:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return path


def _second_case_under(key: str):
    """The counted case again as another case, counted under `key` (a run that mixed two valgrinds)."""

    def edit(data):
        other = json.loads(json.dumps(data["benchmarks"][0]))
        other["name"] = other["name"].replace("physicsnemo-block", "physicsnemo-train")
        other["fullname"] = other["fullname"].replace("physicsnemo-block", "physicsnemo-train")
        other["extra_info"]["model"] = "physicsnemo-train"
        other["extra_info"]["instructions"]["key"] = key
        data["benchmarks"].append(other)

    return edit


CPU_MISTAKES = {
    "no-counts": ({"counted": False}, "a CPU run without instruction counts"),
    "two-keys": ({"edit": _second_case_under("vg3.22.0-other")}, "counts under 2 keys"),
    "count-without-key": (
        {"edit": lambda d: d["benchmarks"][0]["extra_info"]["instructions"].pop("key")},
        "without its count key",
    ),
}


@pytest.mark.parametrize("mistake", CPU_MISTAKES)
def test_a_cpu_run_is_kept_only_with_its_counts_under_one_key(tmp_path, capsys, mistake):
    kw, message = CPU_MISTAKES[mistake]
    store = tmp_path / "store"
    argv = ["store", "add", str(store), "--commit", _commit(RUNS[0]), "--tier", "cpu-pr", "--device-type", "cpu"]
    assert main([*argv, "--results", str(_counted(tmp_path, "bad.json", **kw))]) == 4
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not store.exists() or not any(store.rglob("*.json"))
    assert main([*argv, "--results", str(_counted(tmp_path))]) == 0  # the real counted run is kept
    assert main([*argv[:-1], "cuda", "--results", str(_counted(tmp_path))]) == 4  # not as a CUDA run
    assert "a cpu run where cuda was expected" in capsys.readouterr().err


def test_kept_counts_are_the_portable_baseline_of_the_stored_run(tmp_path):
    from perfgate.counts import suite
    from perfgate.gate.settings import GateSettings
    from perfgate.gate.verdicts import UNCHANGED
    from perfgate.results import load_records

    commit, store = _commit(RUNS[0]), tmp_path / "store"
    assert history_store.kept_counts(store, commit) == {}  # no store: none
    run = _counted(tmp_path)
    history_store.add_run(store, history_store.validate(run, None, commit=commit, tier="cpu-pr", device_type="cpu"))
    assert history_store.kept_counts(store, "f" * 40) == {}  # another commit: none
    ((key, content),) = history_store.kept_counts(store, commit).items()
    assert content["key"] == key and content["recorded_on"]["commit"] == commit
    # What --perfgate-baselines reads back, judging the same run unchanged.
    path = suite.portable_path(tmp_path / "baselines", key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(content))
    counts = suite.SessionCounts(
        config=suite.CountsConfig(), fields={}, skipped={}, portable=suite.load_portable(path), portable_path=path
    )
    ((cid, rec),) = load_records(run).items()
    assert [v.verdict for v in suite.portable_verdicts(counts, cid, "c", rec, GateSettings())] == [UNCHANGED]
    # A second CPU machine's run of the commit under another key, gzipped: both keys found.
    other = _counted(tmp_path, "other.json", key="3.22.0")
    data = history_store.validate(other, None, commit=commit, tier="cpu-pr", device_type="cpu")
    folder = store / "cpu-other-machine-t2-0123456789"
    folder.mkdir()
    (folder / f"0001_{commit[:12]}-cpu-pr.json.gz").write_bytes(gzip.compress(history_store.dumps(data).encode()))
    kept = history_store.kept_counts(store, commit)
    assert sorted(kept) == sorted([key, key.replace("vg3.19.0", "vg3.22.0")])
    assert all(list(c["cases"]) == [cid] for c in kept.values())
    # A GPU folder is never read for counts.
    (store / "cuda-h100-t26-0123456789").mkdir()
    shutil.copy(folder / f"0001_{commit[:12]}-cpu-pr.json.gz", store / "cuda-h100-t26-0123456789")
    assert len(history_store.kept_counts(store, commit)) == 2
