"""`perfgate report --markdown` and the command line: the Markdown summary (the same the plugin
appends to the job summary), the verdicts file, and bad input, from a real run's files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from perfgate import gate
from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.gate.verdict_file import VerdictSet, load_verdicts, verdicts_from_json, verdicts_json
from perfgate.history.runs import Run, load_run
from perfgate.output import html, markdown
from perfgate.output.text import fmt_num
from tests.helpers import needs_ruptures
from tests.report_helpers import CASE, write

pytest_plugins = ("tests.report_fixtures",)

# ----------------------------------------------------------------------------- Markdown


def test_markdown_regressions_first_short_with_links(tonight, verdicts):
    md = markdown.job_summary(
        [Run("tonight.json", tonight)],
        verdicts,
        {"HTML report": "https://ci.example/report.html", "run JSON": "tonight.json"},
    )
    lines = md.splitlines()
    assert lines[0] == "### perfgate: :x: 2 regression(s)"
    table = [line for line in lines if line.startswith("| physicsnemo")]
    assert table[0].startswith("| physicsnemo-block [tiny] bf16 | median ms | 5.000 | 6.500 | +30.0% |")
    assert table[1].startswith("| physicsnemo-train [tiny] baseline | budget:median_ms |")
    assert (
        "1 unchanged" in md
        and "1 improvement" in md
        and f"{len(verdicts.skipped)} skipped" in md
        and "`ccccccc (dirty)`" in md
    )
    assert "faster \\| much" not in md.split("<details>")[0]  # the improvement is folded away, below the failures
    assert "| physicsnemo-block [tiny] int8-dynamic | median ms | 12.00 | -14.3% | improvement |" in md
    assert lines[-1] == "Artifacts: [HTML report](https://ci.example/report.html) · [run JSON](tonight.json)"
    assert len(lines) < 40


def test_markdown_without_regression_or_verdicts(real):
    ok = markdown.job_summary([real], [gate.Verdict(case="c", metric="latency", verdict=gate.UNCHANGED)], {})
    assert ok.startswith("### perfgate: :white_check_mark: no regression") and "<details>" not in ok
    block = [b["extra_info"] for b in real["benchmarks"] if b["extra_info"]["model"] == "physicsnemo-block"]
    fastest = min(block, key=lambda i: i["median_ms"])
    speedup = "-" if fastest.get("speedup") is None else f"{fastest['speedup']:.2f}×"
    assert (
        f"| physicsnemo-block [tiny] on cpu | {fastest['variant']} | {fmt_num(fastest['median_ms'])} | {speedup} |"
        in ok
    )
    measured = markdown.job_summary([real], None, None)
    assert measured.startswith("### perfgate: no verdicts") and "Artifacts" not in measured


def test_markdown_gate_off_and_ratchet(real):
    off = VerdictSet([], gate_enabled=False)
    assert markdown.job_summary([real], off).startswith("### perfgate: measured only (gate off)")
    better = [
        gate.Verdict(
            case=CASE.format("physicsnemo-block-tiny-baseline"),
            metric="latency",
            verdict=gate.IMPROVEMENT,
            change_pct=-20.0,
        )
    ]
    assert markdown.job_summary([real], VerdictSet(better)).startswith("### perfgate: :white_check_mark:")
    ratchet = markdown.job_summary(
        [real], VerdictSet(better, fail_on_improvement=True)
    )  # --perfgate-ratchet fails on it
    assert (
        ratchet.startswith("### perfgate: :x: 1 regression(s)")
        and "| physicsnemo-block [tiny] baseline | median ms |" in ratchet
    )


def test_markdown_many_regressions_are_capped(real):
    many = [gate.Verdict(case=f"c{i}", metric="latency", verdict=gate.REGRESSION, change_pct=10.0) for i in range(30)]
    md = markdown.job_summary([real], many, {}, max_rows=5)
    assert len(re.findall(r"^\| c\d+ \|", md, re.MULTILINE)) == 5 and "… and 25 more in the report." in md


def test_the_plugin_and_perfgate_report_write_the_same_summary(real_run):
    """One Markdown builder: what pytest appended to $GITHUB_STEP_SUMMARY is what `perfgate report
    --markdown` makes of the files the same run wrote (links aside)."""
    step = real_run.step_summary.read_text()
    assert (
        step.startswith("### perfgate: :white_check_mark: no regression")
        and "no baseline recorded for this machine" in step
    )
    from_files = markdown.job_summary([load_run(real_run.results)], load_verdicts(real_run.verdicts), {})
    assert step == from_files + "\n"


def test_verdicts_file_round_trip(verdicts):
    back = verdicts_from_json(json.loads(json.dumps(verdicts_json(verdicts))))
    assert back.verdicts == gate.sort_verdicts(verdicts.verdicts) and back.skipped == verdicts.skipped
    assert (back.gate_enabled, back.fail_on_improvement, back.fingerprint_id) == (True, False, verdicts.fingerprint_id)
    older = verdicts_from_json({"verdicts": [], "failed": False})  # written before gate_enabled and notices
    assert older.gate_enabled and older.notices == ()


# ----------------------------------------------------------------------------- CLI


@needs_ruptures  # a report with a history marks its change points
def test_cli_report_writes_html_and_markdown(saved, tonight, verdicts, monkeypatch, capsys):
    monkeypatch.chdir(saved)
    write(saved / "tonight.json", tonight)
    write(saved / "verdicts.json", verdicts_json(verdicts))
    write(saved / "baselines" / tonight["perfgate"]["fingerprint_id"] / "0009_broken.json", "{")
    assert (
        main(
            [
                "report",
                "tonight.json",
                "--verdicts",
                "verdicts.json",
                "-o",
                "out/report.html",
                "--markdown",
                "summary.md",
                "--link",
                "HTML report=https://ci.example/r.html",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "history skipped baselines" in err and "0009_broken.json: truncated JSON" in err
    assert "wrote out/report.html" in err
    assert "Gate verdicts" in (saved / "out" / "report.html").read_text()
    md = (saved / "summary.md").read_text()
    assert md.startswith("### perfgate: :x: 2 regression(s)") and md.rstrip().endswith(
        "[HTML report](https://ci.example/r.html)"
    )
    assert [p.name for p in (saved / "out").iterdir()] == ["report.html"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert (saved / "out" / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask  # shareable, not mkstemp's 0600


def test_cli_markdown_is_written_even_when_the_html_fails(tmp_path, real, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "run.json", real)

    def broken(*args, **kwargs):
        raise RuntimeError("no HTML today")

    monkeypatch.setattr(html, "benchmark_report", broken)
    with pytest.raises(RuntimeError):
        main(["report", "run.json", "--markdown", "summary.md", "--no-history"])
    assert (tmp_path / "summary.md").read_text().startswith("### perfgate: no verdicts")


@pytest.mark.parametrize(
    "files, argv, message",
    [
        (
            {"run.json": "{"},
            ["run.json"],
            "run.json: truncated JSON at line 1 column 2; pass the file pytest wrote with --benchmark-json",
        ),
        ({}, ["missing.json"], "missing.json: cannot read"),
        (
            {"run.json": None, "v.json": '{"x": 1}'},
            ["run.json", "--verdicts", "v.json"],
            "v.json: not a perfgate verdicts file",
        ),
        (
            {"run.json": None, "v.json": '{"verdicts": ['},
            ["run.json", "--verdicts", "v.json"],
            "v.json: truncated JSON at line 1",
        ),
        ({"run.json": None}, ["run.json", "--link", "oops"], "--link 'oops': write NAME=URL"),
    ],
    ids=["truncated-run", "missing-run", "bad-verdicts", "truncated-verdicts", "bad-link"],
)
def test_cli_report_bad_input_is_one_line_exit_4(tmp_path, monkeypatch, capsys, real, files, argv, message):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        write(tmp_path / name, text if text is not None else real)
    assert main(["report", *argv]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perfgate report: ") and message in err[0]
    assert not (tmp_path / "report.html").exists()


def test_a_cpu_ratio_row_names_its_milliseconds_and_its_ratio_change():
    """The gate's own CPU latency verdict (judged on the step/reference ratio, values in ms): the
    Markdown row's figure says the values are median ms and the change is the ratio's."""
    from perfgate.gate.metrics import judge_latency_samples
    from perfgate.gate.settings import GateSettings

    base, ref = [10.0 + 0.01 * i for i in range(20)], [1.0] * 20
    slow = judge_latency_samples(
        "b.py::test_step[m-tiny-baseline]", [x * 1.5 for x in base], base, GateSettings(), reference=(ref, ref)
    )
    assert slow.verdict == gate.REGRESSION and "ratio" in (slow.compared or "")
    text = markdown.job_summary([], VerdictSet([slow]))
    (row,) = [line for line in text.splitlines() if line.startswith("| test_step[m-tiny-baseline]")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["median ms (change: step / reference)", fmt_num(slow.baseline), fmt_num(slow.current)]


def test_the_ab_summary_shows_every_wall_and_device_time_verdict_and_folds_the_rest() -> None:
    """`perfgate ab`'s summary (the pull request's comment in the `pr` mode, where no other gate
    judges wall or device time): from `run_ab` over a kept H200 record as three process pairs, the
    head's device time +3, -1 and +2% and its peak memory 30% lower. Device time's verdict shows
    though it is not failing (inconclusive, saying why: it used to be dropped for not being
    latency); the memory improvement is folded under the other verdicts; unchanged accuracy and
    speedup verdicts stay out."""
    from dataclasses import replace

    from perfgate.ab import run as ab_run
    from perfgate.gate.policy import Policy
    from tests.helpers import kept_gpu_records

    case = "vjepa2-encoder-large-baseline"
    rec = kept_gpu_records("gpu-2026-11-28-h200", "tier-cold")[case]
    device = iter((1.03, 0.99, 1.02))

    def measure(side: ab_run.Side, ids) -> ab_run.SideRun:
        if side.name == "base":
            return ab_run.SideRun(records={case: rec})
        dev = rec.device_ms_per_step * next(device)
        return ab_run.SideRun(records={case: replace(rec, device_ms_per_step=dev, peak_mem_mib=rec.peak_mem_mib * 0.7)})

    side = ab_run.Side(name="base", label="main (abc)", sha="a" * 40, root=Path("."), cache=Path("."))
    result = ab_run.run_ab(side, replace(side, name="head"), [case], Policy(), measure_fn=measure, max_pairs=3)
    got = {v.metric: v.verdict for v in result.verdicts}
    assert got == {"latency": gate.INCONCLUSIVE, "device_time": gate.INCONCLUSIVE, "memory": gate.IMPROVEMENT,
                   "accuracy": gate.UNCHANGED, "speedup": gate.UNCHANGED}  # fmt: skip
    md = markdown.ab_summary(result, result.verdicts)
    assert md.startswith("### perfgate ab: no regression")
    shown, folded = md.split("<details><summary>Other verdicts (1)</summary>")
    assert [row.split(" | ")[1] for row in shown.splitlines() if row.startswith("| test_step")] == [
        "median ms",
        "GPU busy ms per step",
    ]
    assert "3 process pairs" in shown.splitlines()[-2]  # device time says why it could not tell
    assert [row.split(" | ")[1:4] for row in folded.splitlines() if row.startswith("| test_step")] == [
        ["peak memory MiB", "-30.0%", gate.IMPROVEMENT]
    ]
    assert gate.UNCHANGED not in md
    # a case the A/B could not compare shows too, with its reason
    result.verdicts.append(gate.Verdict(case="x::test_step[m-tiny-bf16]", metric="run", verdict=gate.INCONCLUSIVE,
                                        message="base failed it in 2 pair(s) (exit -9)"))  # fmt: skip
    assert (
        "| base failed it in 2 pair(s) (exit -9) |"
        in markdown.ab_summary(result, result.verdicts).split("<details>")[0]
    )
    result.notes.append("the locks changed (requirements/gpu.txt) but both sides ran one environment")
    said = markdown.ab_summary(result, result.verdicts).splitlines()
    assert said[4] == "- **Not measured:** the locks changed (requirements/gpu.txt) but both sides ran one environment"
