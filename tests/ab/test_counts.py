"""`perfgate ab --counts` (perfgate.ab.counts): which base the head's counts are judged against, with
each pytest process replaced by a fake that writes what a real one writes: a real counted run's
results file (tests.helpers.counted_run) and the verdicts the run's own gate gives it against the
count baselines it was pointed at (perfgate.counts.suite.portable_verdicts, written as the verdicts
file is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.ab import counts as ab_counts
from perfgate.ab.run import ABError, Side
from perfgate.counts import suite
from perfgate.exitcodes import FAILED, OK
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdict_file import VerdictSet, verdicts_json
from perfgate.gate.verdicts import REGRESSION, UNCHANGED
from perfgate.history import store as history_store
from perfgate.results import case_records, read_benchmark_json
from tests.helpers import counted_run

BASE_SHA, HEAD_SHA = "b" * 40, "c" * 40
KEY = json.loads(next((Path(__file__).resolve().parents[2] / "baselines" / "counts").glob("*.json")).read_text())["key"]


def side(name: str, sha: str, root: Path) -> Side:
    return Side(name=name, label=f"{name} ({sha[:10]})", sha=sha, root=root, cache=root / "cache")


class FakePytest:
    """One pytest process per call: the side's counts (`scale` per side, `valgrind` names another
    key) and, gated, the instruction verdicts against `--perfgate-baselines DIR/counts/<key>.json`."""

    def __init__(self, scale: dict[str, float] | None = None, valgrind: dict[str, str] | None = None) -> None:
        self.scale, self.valgrind = scale or {}, valgrind or {}
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, s: Side, args, out: Path) -> ab_counts.Ran:
        self.calls.append((s.name, list(args)))
        results = counted_run(
            out / "results.json", commit=s.sha, scale=self.scale.get(s.name, 1.0), key=self.valgrind.get(s.name)
        )
        verdicts = []
        if "--perfgate-no-gate" not in args:
            baselines = Path(args[args.index("--perfgate-baselines") + 1])
            for cid, rec in case_records(read_benchmark_json(results)).items():
                path = suite.portable_path(baselines, rec.instructions.key)
                counts = suite.SessionCounts(
                    config=suite.CountsConfig(),
                    fields={},
                    skipped={},
                    portable=suite.load_portable(path),
                    portable_path=path,
                )
                verdicts += suite.portable_verdicts(
                    counts, cid, f"benchmarks/test_models.py::test_step[{cid}]", rec, GateSettings()
                )
        (out / "verdicts.json").write_text(json.dumps(verdicts_json(VerdictSet(verdicts=verdicts))))
        rc = FAILED if any(v.verdict == REGRESSION for v in verdicts) else OK
        return ab_counts.Ran(rc=rc, results=results, verdicts=out / "verdicts.json", wall_s=12.5)


def kept_store(tmp_path: Path, commit: str = BASE_SHA) -> dict:
    """The counts kept for `commit`: a counted run of it stored as history.yml stores it."""
    run = counted_run(tmp_path / "main-run" / "results.json", commit=commit)
    data = history_store.validate(run, None, commit=commit, tier="cpu-pr", device_type="cpu")
    history_store.add_run(tmp_path / "store", data)
    return history_store.kept_counts(tmp_path / "store", commit)


def no_checkout() -> Side:
    raise AssertionError("the base was checked out although its counts are kept")


def test_kept_counts_judge_the_head_in_one_process(tmp_path):
    kept = kept_store(tmp_path)
    fake = FakePytest(scale={"head": 1.03})
    head = side("head", HEAD_SHA, tmp_path)
    said: list[str] = []
    got = ab_counts.run_counts(
        head, BASE_SHA, no_checkout, kept, ["--perfgate-models", "physicsnemo-block"], tmp_path / "work",
        runner=fake, predict=lambda k: KEY, say=said.append,
    )  # fmt: skip
    assert [name for name, _ in fake.calls] == ["head"]
    args = fake.calls[0][1]
    assert args[args.index("--perfgate-baselines") + 1] == str(tmp_path / "work" / "baselines")
    assert "--perfgate-gate-metrics" in args and "instructions" in args
    assert got.path == ab_counts.KEPT and got.line == f"base: kept counts of {BASE_SHA[:12]} under {KEY}"
    assert said == [f"perfgate ab --counts: {got.line}"]
    assert [(v.metric, v.verdict) for v in got.verdicts] == [("instructions", REGRESSION)]
    assert got.rc == FAILED and got.key == KEY and got.base_pass_s == 61.0 and got.base_process_s is None
    assert got.as_json()["base"]["path"] == "kept" and got.as_json()["head"]["process_wall_s"] == 12.5
    # The same code: unchanged, exit 0.
    same = ab_counts.run_counts(
        head,
        BASE_SHA,
        no_checkout,
        kept,
        [],
        tmp_path / "work2",
        runner=FakePytest(),
        predict=lambda k: KEY,
        say=said.append,
    )
    assert [v.verdict for v in same.verdicts] == [UNCHANGED] and same.rc == OK


def test_none_kept_counts_the_base_in_its_worktree_first(tmp_path):
    fake = FakePytest(scale={"head": 1.03})
    base = side("base", BASE_SHA, tmp_path / "base-tree")
    got = ab_counts.run_counts(
        side("head", HEAD_SHA, tmp_path), BASE_SHA, lambda: base, {}, [], tmp_path / "work",
        runner=fake, say=lambda line: None,
    )  # fmt: skip
    assert [name for name, _ in fake.calls] == ["base", "head"]
    assert "--perfgate-no-gate" in fake.calls[0][1] and "--perfgate-no-gate" not in fake.calls[1][1]
    assert got.path == ab_counts.COUNTED and got.line == f"base: counted here, none kept for {BASE_SHA[:12]}"
    written = suite.load_portable(suite.portable_path(tmp_path / "work" / "baselines", KEY))
    assert written["recorded_on"]["commit"] == BASE_SHA and list(written["cases"]) == [
        "physicsnemo-block-tiny-baseline"
    ]
    assert [v.verdict for v in got.verdicts] == [REGRESSION] and got.rc == FAILED and got.base_process_s == 12.5


def test_counts_kept_under_another_key_are_not_compared(tmp_path):
    kept = kept_store(tmp_path)
    other = KEY.replace("vg3.19.0", "vg3.22.0")
    fake = FakePytest()
    base = side("base", BASE_SHA, tmp_path / "base-tree")
    said: list[str] = []
    got = ab_counts.run_counts(
        side("head", HEAD_SHA, tmp_path), BASE_SHA, lambda: base, kept, [], tmp_path / "work",
        runner=fake, predict=lambda k: other, say=said.append,
    )  # fmt: skip
    assert [name for name, _ in fake.calls] == ["base", "head"] and got.path == ab_counts.COUNTED
    assert got.notes == [f"this machine counts under {other}; counts of {BASE_SHA[:12]} are kept under {KEY}"]
    assert "none kept under this machine's key" in got.line and [v.verdict for v in got.verdicts] == [UNCHANGED]
    # Not predicted, found after the head's run: the base counted here and the head judged again.
    fake = FakePytest(valgrind={"head": "3.22.0", "base": "3.22.0"})
    got = ab_counts.run_counts(
        side("head", HEAD_SHA, tmp_path), BASE_SHA, lambda: base, kept, [], tmp_path / "work3",
        runner=fake, predict=lambda k: None, say=said.append,
    )  # fmt: skip
    assert [name for name, _ in fake.calls] == ["head", "base", "head"] and got.key == other
    assert got.notes == [f"the head counted under {other}, not among the kept keys ({KEY})"]
    assert [v.verdict for v in got.verdicts] == [UNCHANGED]


def test_a_side_that_counted_nothing_is_one_line(tmp_path):
    def nothing(s: Side, args, out: Path) -> ab_counts.Ran:
        return ab_counts.Ran(rc=4, results=out / "missing.json", verdicts=out / "missing.json", wall_s=1.0)

    base = side("base", BASE_SHA, tmp_path)
    with pytest.raises(ABError, match=r"base \(base \(bbbbbbbbbb\)\): counted nothing \(pytest exit 4\)"):
        ab_counts.run_counts(base, BASE_SHA, lambda: base, {}, [], tmp_path / "w", runner=nothing, say=lambda x: None)


def test_the_selection_defaults_to_the_cpu_pull_request_tier():
    assert ab_counts.selection_of(["--perfgate-models", "physicsnemo-block"]) == [
        "--perfgate-device", "cpu", "--perfgate-tier", "cpu-pr", "--perfgate-models", "physicsnemo-block",
    ]  # fmt: skip
    assert ab_counts.selection_of(["--perfgate-tier=all"]) == ["--perfgate-device", "cpu", "--perfgate-tier=all"]
