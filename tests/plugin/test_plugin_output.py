"""What a real pytest run prints and leaves behind: the verdicts leading with what needs attention,
the unchanged counted (listed on request), the one line on a --benchmark-compare file from another
machine, and a --benchmark-skip run that leaves the verdicts file alone."""

from __future__ import annotations

import json

import pytest

from tests.plugin.test_plugin import (  # noqa: F401  (the fixtures)
    ARGS,
    _baseline_file,
    _recorded_baselines,
    recorded,
    suite,
)

pytest_plugins = ("pytester",)


def _perfgate_block(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if " perfgate " in line and line.startswith("="))
    return lines[start:]


def _speed_up_baseline_samples(path) -> None:
    data = json.loads(path.read_text())
    info = data["benchmarks"][0]["extra_info"]
    info["samples_ms"] = [s / 10 for s in info["samples_ms"]]  # the baseline claims 10x as fast
    path.write_text(json.dumps(data))


@pytest.mark.usefixtures("recorded")  # baselines/ holds one `ARGS --perfgate-record` run's baseline
def test_a_regression_leads_with_its_reason_and_the_unchanged_are_counted(suite):  # noqa: F811
    _speed_up_baseline_samples(_baseline_file(suite))
    r = suite.runpytest_subprocess(*ARGS)
    r.assert_outcomes(failed=1)
    lines = _perfgate_block(r.outlines)
    head = next(line for line in lines if line.startswith("gate verdicts:"))
    assert head.startswith("gate verdicts: 1 need attention (1 regression); ")
    i = lines.index("needs attention (regressions first):")
    assert lines[i + 1].split() == ["verdict", "case", "metric", "baseline", "current", "change", "change", "of"]
    row, reason = lines[i + 3], lines[i + 4]
    # Raw milliseconds both sides (ARGS: --perfgate-no-reference), and the change is of them.
    assert row.split()[:3] == ["regression", "sleepy-tiny-baseline", "latency"] and row.endswith("median ms")
    assert row.count(" ms ") == 2 and "+" in row.split()[-3]
    assert reason.lstrip().startswith("median ") and "% > 300%, p=" in reason
    assert reason.index("median") == row.index("sleepy-tiny-baseline")  # under the case column
    (count,) = [line for line in lines if line.startswith("unchanged: ")]
    assert "1 memory" in count and count.endswith(
        "(each within its tolerance; --perfgate-show-unchanged (or -vv) lists them with the reasons)"
    )
    assert not any(line.startswith("unchanged  ") for line in lines)  # counted, not listed
    # The verdicts come before the per-model tables, and the run's last perfgate line recounts them.
    table = next(j for j, line in enumerate(lines) if line.startswith("variant ") and "median ms" in line)
    assert i < table
    recap = [line for line in lines if line.startswith("perfgate: 1 regression need attention")]
    assert recap and lines.index(recap[0]) > table
    assert not any(line.startswith("Legend:") for line in lines)  # pytest-benchmark's table came before


@pytest.mark.usefixtures("recorded")  # baselines/ holds one `ARGS --perfgate-record` run's baseline
def test_the_unchanged_are_listed_with_their_reasons_on_request(suite):  # noqa: F811
    for option in ("--perfgate-show-unchanged", "-vv"):
        lines = _perfgate_block(suite.runpytest_subprocess(*ARGS, option).outlines)
        assert "unchanged and not compared:" in lines, option
        (mem,) = [
            j for j, line in enumerate(lines) if line.split()[:3] == ["unchanged", "sleepy-tiny-baseline", "memory"]
        ]
        assert lines[mem].endswith("peak MiB") and lines[mem].count(" MiB") >= 2
        assert "MiB: within 5% + 1 MiB slack" in lines[mem + 1]  # the suite's memory_slack_mib = 1
        assert not any(line.startswith("unchanged: ") for line in lines)


def _edit_machine_info(path, **fingerprint) -> None:
    data = json.loads(path.read_text())
    mi = data["machine_info"]
    mi["node"], mi["python_version"] = "another-host", "3.11.0"  # what pytest-benchmark compares wholesale
    mi["cpu"]["brand_raw"] = "Another CPU"
    mi["perfgate"]["fingerprint"].update(fingerprint)
    path.write_text(json.dumps(data))


@pytest.mark.usefixtures("recorded")  # baselines/ holds one `ARGS --perfgate-record` run's baseline
def test_a_compare_file_from_another_machine_is_one_perfgate_line(suite):  # noqa: F811
    path = _baseline_file(suite)
    # Another host with the same fingerprint: pytest-benchmark would dump both machine_infos; nothing here.
    _edit_machine_info(path)
    r = suite.runpytest_subprocess(*ARGS, "--benchmark-compare")
    both = r.outlines + r.errlines
    assert not any("machine_info is different" in line or "PytestBenchmarkWarning" in line for line in both)
    (line,) = [line for line in both if "pytest-benchmark's table compared with" in line]
    assert line == f"perfgate: pytest-benchmark's table compared with {path}"
    # Another fingerprint: one line from perfgate names what differs.
    _edit_machine_info(path, cpu_model="Another CPU")
    r = suite.runpytest_subprocess(*ARGS, "--benchmark-compare")
    both = r.outlines + r.errlines
    assert not any("machine_info is different" in line or "PytestBenchmarkWarning" in line for line in both)
    (line,) = [line for line in both if "another machine" in line]
    assert line.startswith(f"perfgate: pytest-benchmark's table compared with {path}, measured on another machine (")
    assert "cpu_model 'Another CPU' there" in line and len(line) < 400


def test_benchmark_skip_leaves_the_verdicts_file_alone(suite):  # noqa: F811
    # tensorrt is skipped on a CPU with its reason: a run that measured nothing still has a skip to report.
    args = [a if a != "baseline" else "baseline,tensorrt" for a in ARGS]
    suite.runpytest_subprocess(*args).assert_outcomes(passed=1, skipped=1)
    verdicts = suite.path / ".perfgate" / "verdicts.json"
    before = verdicts.read_bytes()
    assert json.loads(before)["verdicts"]  # the measured run's verdicts
    r = suite.runpytest_subprocess(*args, "--benchmark-skip")
    r.assert_outcomes(skipped=2)
    assert verdicts.read_bytes() == before
    r.stdout.fnmatch_lines([f"perfgate: no case was measured; {verdicts} left as it was"])
