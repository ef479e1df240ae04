"""scripts/gpu-check: says so without CUDA; its whole flow rehearsed on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perfgate.counts.suite import NO_COUNTS_ENV
from perfgate.plugin.hooks import INTERRUPTED_LINE
from tests.helpers import HANG_GUARD_S

pytest_plugins = ("pytester",)
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFGATE_", "GITHUB_"))}
    # tests/conftest.py's choice whether sub-runs count instructions (not here: 30-60 s of valgrind).
    keep = {NO_COUNTS_ENV: os.environ[NO_COUNTS_ENV]} if NO_COUNTS_ENV in os.environ else {}
    return {**env, **keep, "PERFGATE_SKIP_INSTALL": "1", "PERFGATE_PYTHON": sys.executable, **extra}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    r = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check"), "--out", str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 5
    assert "gpu-check: no CUDA device here" in r.stderr and "--device cpu" in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing ran


@pytest.mark.slow
def test_the_flow_rehearsed_on_the_cpu_records_reruns_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(
        [
            str(ROOT / "scripts" / "gpu-check"),
            "--device",
            "cpu",
            "--skip-tests",
            "--variants",
            "baseline,bf16,cudagraphs",
            "--budget-s",
            "0.3",
            "--out",
            str(out),
            "--",
            "--perfgate-min-rounds",
            "5",
        ],
        env=_env(PERFGATE_INDUCTOR_CACHE=str(tmp_path / "inductor")),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((out / "summary.json").read_text())
    assert data["passed"] and [s["name"] for s in data["stages"]] == ["health", "doctor", "record", "rerun"]
    record = {s["name"]: s for s in data["stages"]}["record"]
    assert record["outcomes"] == {"passed": 2, "failed": 0, "skipped": 1, "errors": 0}
    assert sorted(c["case"] for c in data["record_cases"]) == [
        "test_step[physicsnemo-block-tiny-baseline]",
        "test_step[physicsnemo-block-tiny-bf16]",
    ]
    assert data["rerun_verdicts"].get("regression", 0) == 0 and sum(data["rerun_verdicts"].values()) > 0
    assert "CUDA graphs need a CUDA device" in data["skipped"]["physicsnemo-block-tiny-cudagraphs"]
    assert list((out / "baselines").glob("*/0001_gpu-check.json"))
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# gpu-check on cpu: PASSED") and "| record | 0 |" in summary
    assert "gpu-check: [rerun] exit 0" in r.stdout  # progress per stage


H100_RUN = ROOT / "docs" / "data" / "gpu-2026-11-27-h100"  # gpu-check's own files from an H100 (2026-11-27)


def test_the_summary_of_a_real_h100_run_names_what_moved_on_unchanged_code(tmp_path: Path) -> None:
    """The H100's unchanged rerun read bf16 and both FP8 cases 9-11% faster than the record (6
    improvement verdicts, latency and speedup): the acceptance still passes (nothing got slower), and
    the summary names each of them as moved, since a regression of that size passes against the record."""
    from perfgate.commands import _gpu_check as gpu_check

    for name in ("record.json", "rerun-verdicts.json"):
        shutil.copy(H100_RUN / name, tmp_path / name)
    stages = [gpu_check.StageResult(name=n, command=[n], rc=0, wall_s=1.0, log=f"{n}.log") for n in ("record", "rerun")]
    text, data = gpu_check.summary(stages, tmp_path, "cuda")
    assert (
        data["passed"] and data["rerun_verdicts"] == {"improvement": 6, "unchanged": 54} and data["rerun_failing"] == []
    )
    moved = [line for line in text.splitlines() if line.startswith("- MOVED ")]
    assert moved == [f"- MOVED {m}" for m in data["rerun_moved"]] and len(moved) == 6
    for case in ("physicsnemo-block-full-bf16]", "fp8-rowwise+compile]", "fp8-tensorwise+compile]"):
        assert sum(case in m and " latency: " in m for m in moved) == 1, case
        assert sum(case in m and " speedup: " in m for m in moved) == 1, case
    assert "Moved on unchanged code (6): the record read these slower" in text

    # An error verdict in the rerun is failing, listed as such, not moved.
    verdicts = json.loads((tmp_path / "rerun-verdicts.json").read_text())
    verdicts["verdicts"][0]["verdict"] = "error"
    (tmp_path / "rerun-verdicts.json").write_text(json.dumps(verdicts))
    text, data = gpu_check.summary(stages, tmp_path, "cuda")
    assert len(data["rerun_failing"]) == 1 and f"- FAILING {data['rerun_failing'][0]}" in text


def test_options_of_the_quality_run_alone_are_a_one_line_usage_error(capsys) -> None:
    from perfgate.commands import _gpu_check

    assert _gpu_check.main(["--repeats", "2", "--cases", "physicsnemo-block:tiny:baseline"]) == 4
    err = capsys.readouterr().err.strip()
    assert err == "gpu-check: --repeats, --cases apply to --quality only; add --quality or leave them out"


@pytest.mark.slow
def test_a_tier_timed_cold_then_warm_in_two_calls_rehearsed_on_the_cpu(tmp_path: Path) -> None:
    """The split a lease's time limit needs: `--tier-phases cold`, then `warm` into the same folder,
    the second on the cache the first left (not emptied)."""
    out = tmp_path / "out"
    cache = out / "inductor-cache"

    def call(phase: str) -> dict:
        r = subprocess.run(
            [str(ROOT / "scripts" / "gpu-check"), "--device", "cpu", "--tier-time", "cpu-pr", "--tier-phases", phase,
             "--out", str(out), "--", "-k", "physicsnemo-block-tiny", "--perfgate-budget-s", "0.3",
             "--perfgate-min-rounds", "5"],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return json.loads((out / "summary.json").read_text())

    data = call("cold")
    assert [s["name"] for s in data["stages"]] == ["health", "tier-cold"]
    (case,) = data["tier"]["cases"]
    # per case from pytest's own JUnit XML, named as the benchmark JSON names it
    names = [b["name"] for b in json.loads((out / "tier-cold.json").read_text())["benchmarks"]]
    assert names == [f"test_step[{case}]"]
    assert data["tier"]["cases"][case]["cold_s"] > 0 and data["tier"]["cold_s"] > 0
    marker = cache / "left-by-the-cold-call"
    marker.write_text("")
    data = call("warm")
    assert [s["name"] for s in data["stages"]] == ["health", "tier-warm"]
    assert data["tier"]["name"] == "cpu-pr" and data["tier"]["cut"] == []
    assert data["tier"]["cases"][case]["warm_s"] > 0 and "cold_s" not in data["tier"]
    assert marker.is_file()  # the warm call ran on the cold call's cache
    summary = (out / "summary.md").read_text()
    assert f"| {case} |" in summary and "| case | warm s |" in summary


def test_a_warm_call_without_the_cold_calls_cache_is_a_one_line_usage_error(tmp_path: Path, capsys) -> None:
    from perfgate.commands import _gpu_check

    rc = _gpu_check.main(["--device", "cpu", "--tier-time", "cpu-pr", "--tier-phases", "warm", "--out", str(tmp_path)])
    assert rc == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu-check: --tier-phases warm: no ") and "run --tier-phases cold into the same --out" in err
    assert _gpu_check.main(["--tier-phases", "cold"]) == 4
    assert "--tier-phases applies to --tier-time only" in capsys.readouterr().err


# A stage that counts the SIGINTs it gets: the first `lost` of them are swallowed without a word (as
# one was, once, in a pytest's start-up); the next is answered as pytest does (the line at once),
# then `writing_s` seconds of "writing its files" in which a further SIGINT would be a second Ctrl-C.
# With `early`, it first prints a line that names KeyboardInterrupt before any cut (a test's name).
STAGE = f"""
import signal, sys, time
INTERRUPTED_LINE = {INTERRUPTED_LINE!r}  # perfgate's own line, as the plugin prints it
lost, writing_s, early, got = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "early", []

def on_sigint(signum, frame):
    got.append(time.monotonic())
    open("sigints", "w").write(str(len(got)))
    if len(got) == lost + 1:
        print(INTERRUPTED_LINE, flush=True)
        time.sleep(writing_s)
        sys.exit(3)

signal.signal(signal.SIGINT, on_sigint)
print("started", flush=True)
if early:
    print("tests/test_x.py::test_stops_on[KeyboardInterrupt] PASSED", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("lost, sigints, early", [(0, 1, ""), (1, 2, ""), (1, 2, "early")])
def test_a_cut_stage_gets_ctrl_c_again_only_until_it_answers(tmp_path, monkeypatch, lost, sigints, early) -> None:
    """A lost SIGINT is sent again; one answered is never followed by another while the stage
    writes its files (longer than the resend interval here); a line naming KeyboardInterrupt before
    the cut is no answer."""
    from perfgate.commands import _gpu_check

    monkeypatch.setattr(_gpu_check, "ROOT", tmp_path)  # the stage's working folder
    monkeypatch.setattr(_gpu_check, "INTERRUPT_RESEND_S", 0.5)
    (tmp_path / "stage.py").write_text(STAGE)
    result = _gpu_check.run_stage(
        "stage", [sys.executable, str(tmp_path / "stage.py"), str(lost), "1.5", early], tmp_path, limit_s=0.5
    )
    assert result.cut and result.rc == 3, (tmp_path / "stage.log").read_text()
    assert (tmp_path / "sigints").read_text() == str(sigints)


def test_pytest_says_it_took_ctrl_c_before_it_writes_its_files(pytester) -> None:
    """The line run_stage waits for, from perfgate's plugin in a real pytest, ahead of pytest's own
    notice (which follows the session's files)."""
    pytester.makefile(".toml", pyproject='[tool.perfgate]\nregistries = ["models"]\n')
    pytester.makepyfile("def test_a():\n    pass\n\ndef test_b():\n    raise KeyboardInterrupt\n")
    r = pytester.runpytest_subprocess("-p", "perfgate.plugin.hooks", "-p", "no:cacheprovider")
    out = r.stdout.str()
    assert INTERRUPTED_LINE in out and "!!! KeyboardInterrupt !!!" in out, out
    assert out.index(INTERRUPTED_LINE) < out.index("!!! KeyboardInterrupt !!!")


def test_a_stage_past_its_limit_is_interrupted_and_the_summary_says_so(tmp_path: Path) -> None:
    """0.5 s cannot even import torch in the pytest it starts: the stage is cut (SIGINT sent again
    while it shows no sign of one, tested above)."""
    from perfgate.commands import _gpu_check

    rc = _gpu_check.main(["--device", "cpu", "--tier-time", "cpu-pr", "--stage-limit-s", "0.5", "--out", str(tmp_path)])
    assert rc == 1
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["tier"]["cut"] == ["tier-cold", "tier-warm"] and not data["passed"]
    assert data["tier"]["cases"] == {}  # nothing measured is claimed
    summary = (tmp_path / "summary.md").read_text()
    assert "(cut) |" in summary and "Cut at --stage-limit-s 0.5: tier-cold, tier-warm" in summary


def test_two_runs_in_one_call_or_a_limit_of_nothing_are_one_line_usage_errors(capsys) -> None:
    from perfgate.commands import _gpu_check

    assert _gpu_check.main(["--quality", "--tier-time", "pr"]) == 4
    assert capsys.readouterr().err.strip() == "gpu-check: --quality and --tier-time are two runs; pick one per call"
    assert _gpu_check.main(["--tier-time", "pr", "--stage-limit-s", "0"]) == 4
    assert "--stage-limit-s 0: give seconds above 0" in capsys.readouterr().err


def test_tier_seconds_of_a_cut_run_come_from_pytests_own_xml_without_the_interrupted_entry() -> None:
    """The JUnit XML of the H200's `pr` tier cut at its stage limit (2026-11-27): pytest wrote the
    13 cases that finished and one nameless entry for the one it was inside."""
    from perfgate.commands import _gpu_check

    xml = ROOT / "docs" / "data" / "gpu-2026-11-27-h200-b" / "tier-cold.xml"
    seconds = _gpu_check.junit_seconds(xml)
    assert len(seconds) == 13 and "" not in seconds
    assert seconds["self-forcing-dit-1.3b-blockindex0-bf16+fp8-tensorwise+compile"] == 152.763
    assert round(sum(seconds.values()), 1) == 440.1  # of the 467.8 s pytest reports: collection and the cut case
