"""perfgate.history.runs and `perfgate history`: ordering, filters, metrics, unreadable files, the text view.

The builders below write result files shaped like the plugin's `--benchmark-json` output (taken
from a real physicsnemo-block run, trimmed), so no model runtime is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.history import runs as h
from perfgate.output import terminal, text

FP_ID = "cpu-test-cpu-t2-0123456789"


def bench(
    model: str = "physicsnemo-block",
    variant: str = "baseline",
    median_ms: float = 10.0,
    *,
    n: int = 12,
    size: str = "tiny",
    **extra: Any,
) -> dict[str, Any]:
    """One benchmark entry with perfgate's extra_info; samples spread ±5% around `median_ms`."""
    samples = list(np.linspace(0.95, 1.05, n) * median_ms)
    name = f"{model}-{size}-{variant}"
    info = {
        "model": model,
        "size": size,
        "variant": variant,
        "options": {},
        "device": "cpu",
        "dtype": "float32",
        "params": 49792,
        "step": "inference",
        "timer": "CpuTimer",
        "mem_method": "vmhwm",
        "samples_ms": samples,
        "n": n,
        "mean_ms": float(np.mean(samples)),
        "std_ms": float(np.std(samples)),
        "min_ms": min(samples),
        "max_ms": max(samples),
        "median_ms": float(np.median(samples)),
        "p90_ms": float(np.percentile(samples, 90)),
        "peak_mem_mib": 100.0,
        "unit": "frames",
        "throughput": {"frames": 1e3 / median_ms},
        "fps": 1e3 / median_ms,
        "speedup": 1.0,
        "accuracy": {"finite": 1.0, "rel_l2": 0.0, "max_abs": 0.0, "cosine": 1.0},
    }
    info.update(extra)
    return {
        "group": None,
        "name": f"test_step[{name}]",
        "fullname": f"benchmarks/test_models.py::test_step[{name}]",
        "params": {"case": name},
        "param": name,
        "extra_info": info,
        "stats": {
            "min": min(samples) / 1e3,
            "max": max(samples) / 1e3,
            "mean": float(np.mean(samples)) / 1e3,
            "stddev": float(np.std(samples)) / 1e3,
            "median": float(np.median(samples)) / 1e3,
            "rounds": n,
            "data": [s / 1e3 for s in samples],
        },
    }


def run_json(
    benchmarks: list[dict[str, Any]],
    *,
    commit: str = "a" * 40,
    commit_time: str = "2026-11-01T00:00:00+00:00",
    when: str | None = None,
    fp_id: str | None = FP_ID,
    dirty: bool = False,
) -> dict[str, Any]:
    fp = {"device_type": "cpu", "cpu_model": "Test CPU", "threads": 2, "torch": "2.13.0+cpu"}
    data: dict[str, Any] = {
        "machine_info": {"node": "ci", "perfgate": {"fingerprint": fp, "fingerprint_id": fp_id}},
        "commit_info": {"id": commit, "time": commit_time, "dirty": dirty, "branch": "main"},
        "datetime": when or commit_time,
        "version": "5.3.1",
        "benchmarks": benchmarks,
        "perfgate": {"schema": 1, "fingerprint": fp, "fingerprint_id": fp_id, "commit": commit, "device": "cpu"},
    }
    if fp_id is None:  # a plain pytest-benchmark file: no perfgate blocks
        del data["perfgate"], data["machine_info"]["perfgate"]
    return data


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def day(d: int, hour: int = 0) -> str:
    return f"2026-11-{d:02d}T{hour:02d}:00:00+00:00"


def fp_dir(tmp_path: Path, fp_id: str = FP_ID) -> Path:
    return tmp_path / "baselines" / fp_id


def collect(tmp_path: Path, **kw: Any) -> h.History:
    kw.setdefault("fingerprint_id", FP_ID)
    return h.collect(baselines_root=tmp_path / "baselines", storage_dirs=[tmp_path / ".benchmarks"], **kw)


# ----------------------------------------------------------------------------- ordering


def test_entries_follow_commit_time_not_file_names(tmp_path):
    d = fp_dir(tmp_path)
    # File names sort opposite to the commits: history must follow the commits.
    write(d / "0003_old.json", run_json([bench(median_ms=10.0)], commit="1" * 40, commit_time=day(1)))
    write(d / "0001_new.json", run_json([bench(median_ms=15.0)], commit="3" * 40, commit_time=day(3)))
    write(d / "0002_mid.json", run_json([bench(median_ms=12.0)], commit="2" * 40, commit_time=day(2)))
    (s,) = collect(tmp_path).series
    assert [p.commit[0] for p in s.points] == ["1", "2", "3"]
    assert s.values() == pytest.approx([10.0, 12.0, 15.0])
    assert s.points[0].change_pct is None
    assert [p.change_pct for p in s.points[1:]] == pytest.approx([20.0, 25.0])


def test_unreliable_points_are_kept_but_never_compared(tmp_path):
    """A contended run stays on the line (marked), but neither it nor the run after it is measured
    against it: the change skips to the previous reliable run."""
    d = fp_dir(tmp_path)
    contended = "other processes used 1.2 cores during the measurement (> 0.25)"
    write(d / "1.json", run_json([bench(median_ms=10.0)], commit="1" * 40, commit_time=day(1)))
    write(d / "2.json", run_json([bench(median_ms=900.0, unreliable=contended)], commit="2" * 40, commit_time=day(2)))
    write(d / "3.json", run_json([bench(median_ms=11.0)], commit="3" * 40, commit_time=day(3)))
    (s,) = collect(tmp_path).series
    assert [p.unreliable for p in s.points] == [False, True, False]
    assert s.points[1].change_pct is None  # not "+8900%"
    assert s.points[2].change_pct == pytest.approx(10.0)  # against 10 ms, not against 900 ms


def test_runs_of_one_commit_are_ordered_by_run_time(tmp_path):
    d = fp_dir(tmp_path)
    write(d / "b.json", run_json([bench(median_ms=11.0)], commit_time=day(1), when=day(5, 9)))
    write(d / "a.json", run_json([bench(median_ms=13.0)], commit_time=day(1), when=day(5, 18)))
    write(d / "c.json", run_json([bench(median_ms=9.0)], commit="b" * 40, commit_time=day(2), when=day(4)))
    (s,) = collect(tmp_path).series
    assert s.values() == pytest.approx([11.0, 13.0, 9.0])  # commit day 1 (two runs by time), then commit day 2


def test_same_run_seen_twice_counts_once(tmp_path):
    data = run_json([bench(median_ms=10.0)])
    write(fp_dir(tmp_path) / "0001_x.json", data)
    extra = write(tmp_path / "copy.json", data)
    hist = collect(tmp_path, paths=[extra])
    assert hist.files == 2
    assert len(hist.series[0].points) == 1


def test_naive_and_zulu_times_are_utc():
    assert (
        h.parse_time("2026-11-01T10:00:00")
        == h.parse_time("2026-11-01T10:00:00Z")
        == h.parse_time("2026-11-01T11:00:00+01:00")
    )
    assert h.parse_time("yesterday") is None and h.parse_time(None) is None


# ----------------------------------------------------------------------------- filters


@pytest.fixture
def three_models(tmp_path: Path) -> Path:
    d = fp_dir(tmp_path)
    for i in range(1, 5):
        benches = [
            bench(m, v, 10.0 * i)
            for m in ("owl-world-model", "physicsnemo-block")
            for v in ("baseline", "compile", "bf16")
        ]
        benches.append(bench("wan-vae-decoder", "baseline", 50.0 * i))
        write(d / f"{i:04d}_r.json", run_json(benches, commit=str(i) * 40, commit_time=day(i)))
    return tmp_path


@pytest.mark.parametrize(
    "filters, labels, n_points",
    [
        (
            h.Filters(models=("owl-*",)),
            {"owl-world-model [tiny] baseline", "owl-world-model [tiny] compile", "owl-world-model [tiny] bf16"},
            4,
        ),
        (h.Filters(variants=("compile",)), {"owl-world-model [tiny] compile", "physicsnemo-block [tiny] compile"}, 4),
        (
            h.Filters(models=("physicsnemo-block",), variants=("bf16", "baseline")),
            {"physicsnemo-block [tiny] baseline", "physicsnemo-block [tiny] bf16"},
            4,
        ),
        (h.Filters(cases=("*wan-vae*",)), {"wan-vae-decoder [tiny] baseline"}, 4),
        (
            h.Filters(
                models=("wan-vae-decoder",), since=h.parse_day("2026-11-02"), until=h.parse_day("2026-11-03", end=True)
            ),
            {"wan-vae-decoder [tiny] baseline"},
            2,
        ),
        (h.Filters(models=("nothing",)), set(), 0),
    ],
    ids=["model-glob", "variant", "model-and-variants", "case-glob", "dates-inclusive", "no-match"],
)
def test_filters(three_models, filters, labels, n_points):
    hist = collect(three_models, filters=filters)
    assert {s.label for s in hist.series} == labels
    assert all(len(s.points) == n_points for s in hist.series)


def test_date_filter_keeps_the_change_within_the_window(three_models):
    (s,) = collect(three_models, filters=h.Filters(models=("wan-*",), since=h.parse_day("2026-11-03"))).series
    assert s.values() == pytest.approx([150.0, 200.0])
    assert s.points[0].change_pct is None  # the first entry shown has no earlier entry in the window


def test_parse_day_rejects_nonsense():
    assert h.parse_day("2026-11-02T06:00:00+00:00").hour == 6
    assert h.parse_day("2026-11-02", end=True).hour == 23
    with pytest.raises(ValueError):
        h.parse_day("last week")


# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(
    "metric, expected",
    [
        ("median_ms", 20.0),
        ("peak_mem_mib", 256.0),
        ("speedup", 2.5),
        ("fps", 50.0),
        ("rel_l2", 1e-3),
        ("throughput", 50.0),
        ("telemetry.metrics.gpu_util_pct.mean", 87.5),
        ("telemetry.metrics.rss_mib.max", 512.0),
    ],
)
def test_metrics_read_from_extra_info(tmp_path, metric, expected):
    # telemetry in the sampler's own summary schema (perfgate.measure.telemetry.TelemetrySampler.summary())
    b = bench(
        median_ms=20.0,
        peak_mem_mib=256.0,
        speedup=2.5,
        accuracy={"rel_l2": 1e-3},
        telemetry={
            "interval_s": 0.1,
            "n_samples": 3,
            "source": "nvml+psutil",
            "metrics": {
                "gpu_util_pct": {"min": 80.0, "mean": 87.5, "max": 95.0},
                "rss_mib": {"min": 500.0, "mean": 506.0, "max": 512.0},
            },
        },
    )
    write(fp_dir(tmp_path) / "0001.json", run_json([b]))
    (s,) = collect(tmp_path, metric=metric).series
    assert s.values() == pytest.approx([expected], rel=1e-6)
    assert h.metric_info(metric).unit == {
        "median_ms": "ms",
        "peak_mem_mib": "MiB",
        "speedup": "x",
        "fps": "frames/s",
        "rel_l2": "",
        "throughput": "items/s",
        "telemetry.metrics.rss_mib.max": "MiB",
    }.get(metric, "%")


def test_plain_pytest_benchmark_files_fall_back_to_stats(tmp_path):
    b = bench(median_ms=20.0)
    del b["extra_info"]
    write(tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit" / "0001_plain.json", run_json([b], fp_id=None))
    hist = collect(tmp_path, fingerprint_id=None)  # a file without fingerprint is shown with --all-fingerprints
    (s,) = hist.series
    assert s.fingerprint_id == "unknown" and s.label == "test_step[physicsnemo-block-tiny-baseline]"
    assert s.values() == pytest.approx([20.0])
    # 12 samples support no p90 (MLPerf LoadGen: 64): not shown, though the file's data would give one
    assert collect(tmp_path, fingerprint_id=None, metric="p90_ms").series == []
    b64 = bench(median_ms=20.0, n=64)
    del b64["extra_info"]
    write(
        tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit" / "0002_plain.json",
        run_json([b64], fp_id=None, when="2026-11-02T00:00:00+00:00"),
    )
    (p90,) = collect(tmp_path, fingerprint_id=None, metric="p90_ms").series
    assert p90.values() == pytest.approx([np.percentile(np.linspace(0.95, 1.05, 64) * 20.0, 90)])
    assert collect(tmp_path, fingerprint_id=None, metric="peak_mem_mib").series == []


def test_lean_loading_keeps_every_scalar_and_cuts_no_string(tmp_path):
    b = bench(median_ms=7.0, note='a string with "data": [1, 2] inside')
    path = write(tmp_path / "r.json", json.dumps(run_json([b]), indent=2))
    full, lean = h.load_run(path), h.load_run(path, samples=False)
    assert lean.benchmarks[0].record.samples_ms == [] and lean.benchmarks[0].stats.data_s == []
    for key in ("median_ms", "p90_ms", "mean_ms", "note", "accuracy"):
        assert lean.benchmarks[0].lookup(key) == full.benchmarks[0].lookup(key)


# ----------------------------------------------------------------------------- unreadable files and fingerprints


def test_unreadable_files_are_one_line_each_and_skipped(tmp_path):
    d = fp_dir(tmp_path)
    write(d / "0001_good.json", run_json([bench(median_ms=10.0)], commit_time=day(1)))
    write(d / "0002_truncated.json", json.dumps(run_json([bench()]))[:200])
    write(d / "0003_corrupt.json", '{"benchmarks": [}')
    write(d / "0004_list.json", "[1, 2, 3]")
    (d / "0005_binary.json").write_bytes(b"\xff\xfe\x00garbage")
    write(d / "0006_noname.json", {"benchmarks": [{"stats": {}}]})
    write(d / "0007_good.json", run_json([bench(median_ms=11.0)], commit="b" * 40, commit_time=day(2)))
    write(d / ".0008_x.json.123.tmp", "{")  # an interrupted atomic write: never read
    hist = collect(tmp_path)
    assert len(hist.unreadable) == 5
    for line, problem in zip(
        sorted(hist.unreadable),
        ["truncated JSON", "corrupt JSON", "not a pytest-benchmark file", "cannot read", "benchmark #0 has no name"],
    ):
        assert "\n" not in line and problem in line
    assert hist.series[0].values() == pytest.approx([10.0, 11.0])


def test_fingerprints_never_share_a_series(tmp_path):
    write(fp_dir(tmp_path) / "0001.json", run_json([bench(median_ms=10.0)]))
    write(fp_dir(tmp_path, "gpu-h100") / "0001.json", run_json([bench(median_ms=1.0)], fp_id="gpu-h100"))
    # pytest-benchmark storage is shared by machines: its files are filtered by their content.
    write(
        tmp_path / ".benchmarks" / "Linux" / "0001.json",
        run_json([bench(median_ms=1.1)], fp_id="gpu-h100", commit_time=day(2)),
    )
    mine = collect(tmp_path)
    assert [s.values() for s in mine.series] == [pytest.approx([10.0])] and mine.other_fingerprints == 1
    both = collect(tmp_path, fingerprint_id=None)
    assert {s.fingerprint_id: len(s.points) for s in both.series} == {FP_ID: 1, "gpu-h100": 2}


def test_autosaves_nested_under_the_machine_id_are_found(tmp_path):
    write(fp_dir(tmp_path) / "Linux-CPython-3.11-64bit" / "0001_autosave.json", run_json([bench(median_ms=5.0)]))
    assert collect(tmp_path).series[0].values() == pytest.approx([5.0])


def test_a_file_without_fingerprint_in_a_fingerprint_folder_belongs_to_it(tmp_path):
    write(fp_dir(tmp_path) / "0001.json", run_json([bench(median_ms=5.0)], fp_id=None))
    (s,) = collect(tmp_path).series
    assert s.fingerprint_id == FP_ID


def test_hundreds_of_files_are_each_parsed_once_without_their_samples(tmp_path, monkeypatch):
    """What keeps history quick, counted rather than timed (a CPU-time bound fails on a busy
    machine): each file is parsed once, with its raw sample arrays emptied before parsing."""
    import perfgate.results

    parsed: list[str] = []
    real_loads = perfgate.results.json.loads

    def loads(text: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(perfgate.results.json, "loads", loads)
    d = fp_dir(tmp_path)
    benches = [bench("physicsnemo-block", v, 10.0, n=200) for v in ("baseline", "compile", "bf16", "int8-dynamic")]
    for i in range(300):
        write(
            d / f"{i + 1:04d}_r.json",
            run_json(
                benches, commit=f"{i:040x}", commit_time=day(1), when=f"2026-11-02T00:{i // 60:02d}:{i % 60:02d}+00:00"
            ),
        )
    hist = collect(tmp_path)
    assert hist.files == 300 and all(len(s.points) == 300 for s in hist.series)
    assert len(parsed) == 300  # one parse per file
    assert all('"samples_ms": []' in t for t in parsed)  # emptied before parsing


# ----------------------------------------------------------------------------- text


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], "▁▂▃▄▅▆▇█"),
        ([10, 10, 10], "▄▄▄"),
        ([1, None, 8], "▁ █"),
        ([], ""),
        ([5.0, float("nan"), 1.0], "█ ▁"),
    ],
    ids=["ramp", "flat", "gap", "empty", "nan"],
)
def test_sparkline(values, expected):
    assert text.sparkline(values) == expected


def test_change_word_follows_the_metric_direction():
    assert terminal.change_word(5.0, h.HISTORY_METRICS["median_ms"].better) == "+5.0% worse"
    assert terminal.change_word(5.0, h.HISTORY_METRICS["speedup"].better) == "+5.0% better"
    assert terminal.change_word(None, h.HISTORY_METRICS["speedup"].better) == "-"


# ----------------------------------------------------------------------------- CLI


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    d = fp_dir(tmp_path)
    for i, med in enumerate([10.0, 10.2, 12.0], start=1):
        write(
            d / f"{i:04d}_r.json",
            run_json(
                [bench(median_ms=med), bench(variant="compile", median_ms=med / 2)],
                commit=f"{i}" * 40,
                commit_time=day(i),
                dirty=i == 3,
            ),
        )
    write(d / "0004_broken.json", "{")
    monkeypatch.chdir(tmp_path)
    # The default fingerprint is this machine's; pin it so the test does not depend on the host.
    monkeypatch.setattr("perfgate.commands.history.current_fingerprint_id", lambda device: FP_ID)
    return tmp_path


def test_cli_text_shows_sparkline_changes_and_skipped_files(project, capsys):
    assert main(["history", "--variant", "baseline"]) == 0
    out, err = capsys.readouterr()
    assert (
        err.strip()
        == f"perfgate history: skipped {Path('baselines') / FP_ID / '0004_broken.json'}: truncated JSON at line 1 "
        "column 2"
    )
    assert "physicsnemo-block [tiny] baseline  ▁▂█  (3 entries)" in out
    assert "+17.6% worse" in out and "33333333*" in out
    assert "compile" not in out


def test_cli_json(project, capsys):
    assert main(["history", "--json", "--metric", "speedup"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fingerprint_id"] == FP_ID and data["metric"]["unit"] == "x"
    assert [len(s["points"]) for s in data["series"]] == [3, 3]
    assert len(data["unreadable"]) == 1


def test_cli_brief_and_last(project, capsys):
    assert main(["history", "--brief", "--last", "2", "--model", "physicsnemo-*"]) == 0
    out = capsys.readouterr().out
    assert "physicsnemo-block [tiny] compile" in out and "▁█" in out and "+17.6% worse" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "nope"], "no entry has metric 'median_ms' matching --model nope"),
        (["--metric", "flops"], "no entry has metric 'flops'"),
        (["--since", "tuesday"], "--since/--until"),
        (["missing.json"], "missing.json: no such file or folder"),
        (["--fingerprint", "gpu-other"], "no readable saved runs in baselines/gpu-other"),
    ],
    ids=["model", "metric", "date", "path", "fingerprint"],
)
def test_cli_bad_input_is_one_line_exit_4(project, capsys, argv, message):
    assert main(["history", *argv]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("perfgate history: ")


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("tpu", "'tpu' is not a device: use cpu, cuda or cuda:N"),
        ("meta", "'meta': perfgate measures cpu, cuda or cuda:N"),
        ("cuda:99", "cuda:99: no such CUDA device here (torch.cuda.is_available() is "),
    ],
    ids=["unknown", "not-measured", "absent-cuda"],
)
def test_a_device_this_machine_cannot_fingerprint_is_one_line_for_history_and_report(
    tmp_path, monkeypatch, capsys, device, reason
):
    """--device picks this machine's fingerprint; one it cannot take is doctor's one line, not
    torch's RuntimeError or AssertionError (a CPU-only torch asked for cuda)."""
    baselines = str(Path(__file__).resolve().parents[2] / "baselines")  # the real recorded runs
    monkeypatch.chdir(tmp_path)
    for argv in (["history", "--baselines", baselines], ["report", "--baselines", baselines, "--no-history"]):
        assert main([*argv, "--device", device]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith(f"perfgate {argv[0]}: --device {reason}"), err
        assert err.endswith(", or pass --fingerprint ID or --all-fingerprints\n"), err
    assert not (tmp_path / "report.html").exists()
