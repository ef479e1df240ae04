"""The terminal's verdicts, from verdicts the gate itself gives: what needs attention first with the
gate's reason under each row, the unchanged counted per metric (listed on request), columns that
say what a change is of, and why a speedup cell is '-'."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from perfgate import gate
from perfgate.cases.runner import Case
from perfgate.gate.metrics import NORMALISED, RAW_MS
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdict_file import VerdictSet
from perfgate.output import terminal
from perfgate.record import CaseRecord
from perfgate.run import runner as runner_mod
from perfgate.run.config import RunConfig
from perfgate.run.runner import Host, Runner
from tests.helpers import bench, empty_pyproject
from tests.run.test_runner import _result

POLICY = Policy()
SETTINGS = GateSettings()


def _samples(med: float, seed: int, n: int = 30, cv: float = 0.02) -> list[float]:
    return list(np.random.default_rng(seed).normal(med, med * cv, n))


def _rec(name: str, samples: list[float], **kw) -> CaseRecord:
    return CaseRecord.from_extra_info(bench(name, samples, **kw)["extra_info"])


def _node(name: str) -> str:
    return f"benchmarks/test_models.py::test_step[{name}]"


@pytest.fixture(scope="module")
def verdicts() -> list[gate.Verdict]:
    """One run's verdicts as the gate gives them: a normalised latency regression, a raw-ms
    improvement, an unreliable case (the gate's own contention reason), and one without a baseline;
    memory, accuracy and speedup unchanged where judged."""
    out = []
    ref = _samples(2.0, seed=1)
    base = _rec("m-tiny-compile", _samples(10, seed=2), speedup=2.0, reference_ms=ref)
    slow = _rec("m-tiny-compile", _samples(15, seed=3), speedup=2.0, reference_ms=_samples(2.0, seed=4))
    out += gate.compare(_node("m-tiny-compile"), slow, base, POLICY)
    base = _rec("m-tiny-bf16", _samples(10, seed=5), speedup=1.5)
    fast = _rec("m-tiny-bf16", _samples(6, seed=6), speedup=1.5)
    out += gate.compare(_node("m-tiny-bf16"), fast, base, POLICY)
    busy = _rec("m-tiny-baseline", _samples(30, seed=7), contention_cores=1.4)
    busy = replace(busy, unreliable=gate.unreliable_reason(busy, SETTINGS))
    out += gate.compare(_node("m-tiny-baseline"), busy, _rec("m-tiny-baseline", _samples(10, seed=8)), POLICY)
    out += gate.compare(_node("m-tiny-int8-dynamic"), _rec("m-tiny-int8-dynamic", _samples(9, seed=9)), None, POLICY)
    return out


def _by(verdicts: list[gate.Verdict], verdict: str) -> list[gate.Verdict]:
    return [v for v in verdicts if v.verdict == verdict]


def test_the_gate_gives_the_mix_these_tests_read(verdicts):
    got = {(v.case.split("[")[1][:-1], v.metric): v.verdict for v in verdicts}
    assert got[("m-tiny-compile", "latency")] == gate.REGRESSION
    assert got[("m-tiny-bf16", "latency")] == gate.IMPROVEMENT
    assert got[("m-tiny-baseline", "latency")] == gate.UNRELIABLE
    assert got[("m-tiny-int8-dynamic", "latency")] == gate.NO_BASELINE
    assert all(v.message for v in verdicts)  # every verdict says why


def test_attention_first_each_row_followed_by_the_gates_reason(verdicts):
    lines = terminal.verdict_table(verdicts)
    assert lines[0].startswith("gate verdicts: 3 need attention (1 regression, 1 unreliable, 1 improvement)")
    start = lines.index("needs attention (regressions first):")
    rows = [i for i, line in enumerate(lines) if line.split(" ", 1)[0] in (gate.REGRESSION, gate.IMPROVEMENT)]
    rows += [i for i, line in enumerate(lines) if line.startswith(gate.UNRELIABLE + " ")]
    assert len(rows) == 3 and all(i > start for i in rows)
    order = [lines[i].split()[0] for i in sorted(rows)]
    assert order == [gate.REGRESSION, gate.UNRELIABLE, gate.IMPROVEMENT]  # the gate's order
    for v in _by(verdicts, gate.REGRESSION) + _by(verdicts, gate.UNRELIABLE) + _by(verdicts, gate.IMPROVEMENT):
        (i,) = [i for i in rows if lines[i].startswith(v.verdict + " ")]
        assert lines[i + 1].strip() == v.message, (lines[i], lines[i + 1])
        # The reason sits under the case column, not under the verdict word.
        assert lines[i + 1].index(v.message) == lines[i].index(v.case.split("[")[1][:-1])
    # The unreliable reason is the gate's contention reason.
    (busy,) = _by(verdicts, gate.UNRELIABLE)
    assert "other processes used 1.40 cores" in busy.message
    assert any(line.strip() == busy.message for line in lines)


def test_unchanged_and_no_baseline_are_counted_not_listed(verdicts):
    lines = terminal.verdict_table(verdicts, hint="--perfgate-show-unchanged")
    unchanged = Counter(v.metric for v in _by(verdicts, gate.UNCHANGED))
    assert unchanged == {"memory": 3, "accuracy": 3, "speedup": 2}  # the unreliable case's speedup is not judged
    per = ", ".join(f"{n} {m}" for m, n in unchanged.items())
    assert (
        f"unchanged: {per} (each within its tolerance; --perfgate-show-unchanged lists them with the reasons)" in lines
    )
    assert "no baseline (not compared): 1 case(s): m-tiny-int8-dynamic" in lines
    assert not any(line.startswith(gate.UNCHANGED + " ") for line in lines)  # no unchanged row
    assert not any(v.message in line for v in _by(verdicts, gate.UNCHANGED) for line in lines)
    attention_end = max(i for i, line in enumerate(lines) if line.startswith(gate.IMPROVEMENT + " "))
    assert lines.index(next(line for line in lines if line.startswith("unchanged:"))) > attention_end


def test_show_unchanged_lists_them_with_their_reasons(verdicts):
    lines = terminal.verdict_table(verdicts, show_unchanged=True)
    assert "unchanged and not compared:" in lines
    rows = [line for line in lines if line.startswith(gate.UNCHANGED + "  ")]
    assert len(rows) == len(_by(verdicts, gate.UNCHANGED))
    text = "\n".join(lines)
    for v in _by(verdicts, gate.UNCHANGED) + _by(verdicts, gate.NO_BASELINE):
        assert v.message in text, v.message
    # Rows sharing one reason are followed by it once, saying how many it covers.
    assert not any(line.startswith("unchanged:") for line in lines)


def test_columns_say_what_was_compared(verdicts):
    lines = terminal.verdict_table(verdicts)
    header = lines[lines.index("needs attention (regressions first):") + 1]
    assert header.split() == ["verdict", "case", "metric", "baseline", "current", "change", "change", "of"]
    (reg,) = [line for line in lines if line.startswith(gate.REGRESSION + " ")]
    (imp,) = [line for line in lines if line.startswith(gate.IMPROVEMENT + " ")]
    # On the CPU with reference samples the change is of the step/reference ratio; baseline and
    # current stay milliseconds, and the row says both.
    (v,) = _by(verdicts, gate.REGRESSION)
    assert reg.endswith(NORMALISED) and f"{v.baseline:.3f} ms" in reg and f"{v.current:.3f} ms" in reg
    assert f"{v.change_pct:+.1f}%" in reg
    raw_change = (v.current / v.baseline - 1) * 100
    assert abs(raw_change - v.change_pct) > 0.5  # the two differ: the column is needed
    assert imp.endswith(RAW_MS)
    mem = terminal.verdict_table(verdicts, show_unchanged=True)
    assert any(line.startswith("unchanged") and " memory " in line and line.endswith("peak MiB") for line in mem)
    assert any(" MiB " in line and " memory " in line for line in mem)


def test_memory_slack_is_explained_where_a_large_change_stays_unchanged():
    base, cur = _rec("m", [1.0], peak_mem_mib=2.3), _rec("m", [1.0], peak_mem_mib=7.5)
    (v,) = [x for x in gate.compare("c", cur, base, POLICY) if x.metric == "memory"]
    assert v.verdict == gate.UNCHANGED and v.change_pct > 200
    assert f"within {SETTINGS.memory_tolerance:.0%} + {SETTINGS.memory_slack_mib:g} MiB slack" in v.message
    assert any(v.message in line for line in terminal.verdict_table([v], show_unchanged=True))


def test_recap_line_counts_what_needs_attention(verdicts):
    assert terminal.recap_line(verdicts).startswith(
        "perfgate: 1 regression, 1 unreliable, 1 improvement need attention (listed under 'needs attention' above)"
    )
    calm = _by(verdicts, gate.UNCHANGED)
    assert terminal.recap_line(calm) == f"perfgate: nothing needs attention ({len(calm)} unchanged)"
    assert terminal.recap_line([]) is None


def test_a_speedup_dash_says_why(tmp_path, monkeypatch):
    """The session's in-run speedup: none after an unreliable eager run (the gate's own contention
    reason), none without an eager run; the table's notes say which."""
    contention = {"baseline": 1.4, "bf16": 0.0}
    medians = {"baseline": 10.0, "bf16": 8.0}

    def run_case(case, opts, progress=None):
        r = _result(case, medians[case.variant], None)
        r.record = replace(r.record, contention_cores=contention[case.variant])
        return r

    monkeypatch.setattr(runner_mod, "run_case", run_case)
    config = RunConfig(device="cpu", baselines_root=tmp_path)
    runner = Runner(config=config, host=Host.detect(config))
    records = {}
    for model in ("m", "n"):
        for variant in ("baseline", "bf16") if model == "m" else ("bf16",):
            case = Case(model=model, size="tiny", variant=variant, device="cpu")
            records[case.id] = runner.measure(case).record
    infos = {k: v.to_extra_info() for k, v in records.items()}
    assert infos["m-tiny-baseline"]["unreliable"] and "speedup" not in infos["m-tiny-bf16"]
    assert (
        infos["m-tiny-bf16"]["speedup_note"] == "the eager baseline of this run was unreliable (its verdict says why)"
    )
    assert infos["n-tiny-bf16"]["speedup_note"] == "no eager baseline of this model ran before it in this run"
    lines = terminal.run_lines(records, VerdictSet([], {}, "fp"))
    assert "  speedup -: the eager baseline of this run was unreliable (its verdict says why)" in lines
    assert "  speedup -: no eager baseline of this model ran before it in this run" in lines


def test_perfgate_compare_counts_the_unchanged_and_lists_them_on_request(real_run, tmp_path, capsys):
    """`perfgate compare` of a real run's JSON with itself: every verdict unchanged, counted; listed
    with --show-unchanged."""
    from perfgate.cli import main

    args = ["compare", str(real_run.results), str(real_run.results), "--pyproject", str(empty_pyproject(tmp_path))]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gate verdicts: 0 need attention; ") and "needs attention (regressions first):" not in out
    (count,) = [line for line in out if line.startswith("unchanged: ")]
    assert count.endswith("(each within its tolerance; --show-unchanged lists them with the reasons)")
    assert not any(line.startswith("unchanged  ") for line in out)
    assert main([*args, "--show-unchanged"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("unchanged  ")]
    assert "unchanged and not compared:" in out and rows
    assert len(rows) == sum(int(n) for n in re.findall(r"(\d+) \w+", count.split("(")[0]))
