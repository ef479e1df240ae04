"""The instruction gate's quality experiment without valgrind: slowdowns sized by instructions, every
pair of unchanged processes judged, the table. Deterministic: counts in, verdicts out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from perfgate import exitcodes
from perfgate.cli import main as cli
from perfgate.counts import quality as cq
from perfgate.counts.launcher import CaseCount, CountPass
from perfgate.output.count_quality import markdown
from perfgate.quality import inject

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize(
    ("share", "target", "every"),
    [(0.40, 0.01, 40), (0.40, 0.02, 20), (0.40, 0.05, 8), (0.10, 0.01, 10), (0.10, 0.05, 2), (0.03, 0.05, 1)],
)
def test_every_nth_call_grows_the_step_by_the_target(share, target, every):
    assert inject.every_nth(share, target) == every


def test_every_nth_refuses_a_share_or_target_of_zero():
    with pytest.raises(ValueError, match="share and target"):
        inject.every_nth(0.0, 0.01)


def test_a_local_slowdown_picks_the_leaf_repeats_and_period_closest_to_the_target():
    # qkv: one extra call is 3% of the step, norm 0.4%: 1% is norm x5 every 2 steps (exactly 1%)
    # rather than qkv every 5 steps (0.6%) or every 2 (1.5%).
    p = inject.local_plan({"attn.qkv": 0.03, "norm1": 0.004}, 0.01, steps=10)
    assert (p["leaf"], p["times"], p["every"]) == ("norm1", 5, 2)
    assert p["predicted"] == pytest.approx(0.01)
    big = inject.local_plan({"attn.qkv": 0.03}, 0.05, steps=10)
    assert big["every"] in (1, 2, 5, 10) and 10 % big["every"] == 0  # the window holds whole periods
    assert big["predicted"] == pytest.approx(0.05, rel=0.25)


def test_a_sized_op_slowdown_doubles_every_nth_call_and_counts_them():
    lin = nn.Linear(4, 4)
    x = torch.ones(1, 4)
    step, undo, seen = inject.apply({"kind": "op", "op": "linear", "every": 3}, lambda: lin(x), lin)
    try:
        for _ in range(9):
            step()
    finally:
        undo()
    assert (seen.calls, seen.doubled) == (9, 3)
    assert torch.nn.functional.linear is not None and torch.nn.functional.linear.__name__ == "linear"


def test_a_sized_local_slowdown_repeats_the_leaf_after_every_nth_step():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.ones(1, 4)
    calls = []
    model[2].register_forward_pre_hook(lambda m, a: calls.append(1))
    step, _, seen = inject.apply({"kind": "local", "leaf": "2", "every": 2, "times": 3}, lambda: model(x), model)
    calls.clear()  # apply ran one step to find the leaf's input
    for _ in range(4):
        step()
    assert (seen.calls, seen.doubled) == (4, 2)
    assert len(calls) == 4 + 2 * 3


def _pass(per_case: dict[str, int], **extra) -> CountPass:
    p = CountPass(valgrind="3.19.0", torch="2.13.0+cpu", virtual_cpu={"brand": "x", "simd": ["avx2"]})
    for case, total in per_case.items():
        p.counts[case] = CaseCount(
            case=case, instructions=total, steps=10, functions={}, wall_s=12.0, **extra.get(case, {})
        )
    return p


def _line(name: str, condition: str, p: CountPass, **kw) -> dict:
    return {
        "process": name,
        "condition": condition,
        "wall_s": 100.0,
        "cases": {c: cq._entry(p, c) for c in p.counts},
        **kw,
    }


def test_the_plan_sizes_each_slowdown_from_the_calibration_process():
    cal = _pass(
        {"block": 1_000_000, "noattn": 2_000_000},
        block={
            "windows": {"linear": 1_400_000, "sdpa": 1_100_000, "leaf:fc1": 20_000},
            "calls_per_window": {"linear": 40, "sdpa": 10},
        },
        noattn={
            "windows": {"linear": 2_200_000, "sdpa": 2_000_000, "leaf:fc1": 40_000},
            "calls_per_window": {"linear": 30, "sdpa": 0},
        },
    )
    line = json.loads(json.dumps(_line(cq.CALIBRATE, cq.CALIBRATE, cal)))  # through JSON, as the file holds it
    plan = cq.plan(line["cases"], ["linear", "sdpa", "local"], [1, 5], steps=10)
    assert plan["linear:1"]["block"]["every"] == 40  # a 40% share: every 40th call for 1%
    assert plan["linear:5"]["block"]["every"] == 8
    assert plan["sdpa:1"]["block"]["every"] == 10
    assert plan["sdpa:1"]["noattn"] == {"skip": "the step never calls sdpa"}
    assert plan["local:1"]["block"]["kind"] == "local" and plan["local:1"]["block"]["predicted"] == pytest.approx(0.01)


def test_every_pair_of_eleven_unchanged_processes_is_judged_at_each_tolerance():
    totals = [3_000_000] * 10 + [3_021_000]  # the last process 0.7% above the others
    unchanged = [_line(f"unchanged-{i + 1}", "unchanged", _pass({"block": t})) for i, t in enumerate(totals)]
    u = cq.unchanged_pairs(unchanged, "block", [0.01, 0.005])
    assert (u["processes"], u["pairs"]) == (11, 55)
    assert u["false_alarms"] == {0.01: 0, 0.005: 10}  # the 10 pairs with the last one, at 0.5% only
    assert u["max_spread"] == pytest.approx(0.007)


def test_a_slowdown_is_judged_against_every_unchanged_process_and_the_table_says_so():
    unchanged = [_line(f"unchanged-{i + 1}", "unchanged", _pass({"block": 1_000_000})) for i in range(3)]
    slowed = _line(
        "linear:1",
        "linear",
        _pass({"block": 1_008_000}, block={"injected": {"calls": 40, "doubled": 1}}),
        specs={"block": {"kind": "op", "op": "linear", "every": 40, "share": 0.4, "predicted": 0.01}},
    )
    s = cq.summarise([*unchanged, slowed], [0.01, 0.005])
    d = s["rows"][0]["detection"]
    assert d["caught"] == {0.01: 0, 0.005: 3} and d["comparisons"] == 3
    assert d["growth_median"] == pytest.approx(0.008)
    table = markdown(s)
    assert "| linear | block | 1 call in 40 twice (1 of 40 in the window) | 1% | +1.00% | +1.00% |" in table
    assert "0 of 3 | 3 of 3 |" in table and "| block | 3 | 3 | 0.0000% | 0 of 3 | 0 of 3 |" in table


def test_unchanged_processes_are_spread_between_the_slowdowns():
    assert cq.order(4, ["linear:1", "sdpa:1", "local:1"]) == [
        "calibrate",
        "unchanged-1",
        "unchanged-2",
        "linear:1",
        "unchanged-3",
        "sdpa:1",
        "unchanged-4",
        "local:1",
    ]


# The real producer's output: the instruction gate's three quality runs of 2026-11-26 (--out files).
RUNS = [
    Path(__file__).resolve().parents[2] / "docs" / "data" / name
    for name in (
        "counts-quality-2026-11-26.jsonl",
        "counts-quality-2-2026-11-26.jsonl",
        "counts-quality-3-2026-11-26.jsonl",
    )
]


def test_the_pooled_table_counts_each_distinct_slowdown_once_by_the_growth_it_achieved():
    p = cq.pooled([cq.read_lines(f) for f in RUNS], [0.01, 0.005])
    by = {(b["from"], b["below"]): b for b in p["bins"]}
    # SDPA is 2.4% of the empty-cache world model's step: its 1.5%, 3% and 5% targets repeat the 2% slowdown.
    assert p["repeats"] == 3
    assert p["unchanged_pairs"] == 55 + 55 + 10 + 10 + 3 + 3 and p["false_alarms"] == {0.01: 0, 0.005: 0}
    top = by[(0.01, None)]
    assert top["slowdowns"] == 54 and top["caught"] == {0.01: 54, 0.005: 54}
    assert top["lower_bound"][0.005] == pytest.approx(0.05 ** (1 / 54))  # all caught: the exact bound is alpha^(1/n)
    assert by[(0.0075, 0.01)]["caught"] == {0.01: 0, 0.005: 8}
    assert by[(None, 0.005)]["slowdowns"] == 1 and by[(None, 0.005)]["caught"][0.005] == 0  # pos_enc: +0.445%


def test_pooled_prints_the_table_and_names_a_missing_file(capsys, tmp_path):
    assert cli(["count-quality", "--pooled", *map(str, RUNS)]) == 0
    assert "| 1% and more | 54 | 54 (94.6%) | 54 (94.6%) |" in capsys.readouterr().out
    assert cli(["count-quality", "--pooled", str(RUNS[0]), str(tmp_path / "nosuch.jsonl")]) == exitcodes.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--pooled:" in err and "nosuch.jsonl is not a file" in err


def test_a_repeated_slowdown_missed_once_counts_as_missed():
    run = cq.read_lines(RUNS[2])
    again = json.loads(json.dumps(run))  # the same run counted again, where one slowdown went unseen
    base = next(ln for ln in again if ln["process"] == "unchanged-1")
    slowed = next(ln for ln in again if ln["process"] == "linear:5")
    case = "owl-world-model-tiny-cacheframes0-baseline"
    slowed["cases"][case]["per_step"] = base["cases"][case]["per_step"]
    once = cq.pooled([run], [0.005])["bins"][0]
    twice = cq.pooled([run, again], [0.005])
    assert twice["bins"][0]["slowdowns"] == once["slowdowns"]  # each slowdown once
    assert twice["bins"][0]["caught"][0.005] == once["caught"][0.005] - 1


def test_a_corrupt_line_is_one_line_naming_the_file_and_the_file_stays(capsys, tmp_path):
    out = tmp_path / "cq.jsonl"
    text = RUNS[2].read_text() + '{"process": "local:5", "cond'  # a process killed mid-write
    out.write_text(text)
    assert cli(["count-quality", "--pooled", str(out)]) == exitcodes.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()[-1]
    n = text.count("\n") + 1
    assert f"{out}:{n} is not a JSON line" in err and "Traceback" not in err
    assert out.read_text() == text


def test_an_unknown_case_or_a_slowdown_without_calibration_is_one_line_and_counts_nothing(capsys, tmp_path):
    out = tmp_path / "cq.jsonl"
    args = ["count-quality", "--cases", "owl-image-decoder-nosuch-baseline", "--out", str(out), "--root", str(ROOT)]
    assert cli(args) == exitcodes.BAD_INPUT
    assert "unknown case 'owl-image-decoder-nosuch-baseline'" in capsys.readouterr().err
    with pytest.raises(cq.QualityError, match="no calibration line"):  # a micro case is known: sizing comes first
        cq.run_experiment(
            ["owl-image-decoder-micro-baseline"], unchanged=2, labels=["local:1"], out=out, only=["local:1"], root=ROOT
        )
    assert not out.exists()
