"""perfgate.output and perfgate.results: the atomic writer, the text table, the charts' axes, lazy
imports, and the one loader of result files whose messages history and the baseline store share."""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate import files, results
from perfgate.gate import store
from perfgate.history.runs import load_run
from perfgate.output import charts
from perfgate.output.text import fmt_num, text_table
from tests.helpers import bench, run_json

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- files


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_text_and_json_replace_atomically_with_a_shareable_mode(tmp_path):
    target = files.write_json(tmp_path / "sub" / "v.json", {"v": 1, "when": Path("x")})
    assert json.loads(target.read_text()) == {"v": 1, "when": "x"}  # anything else as its str()
    files.write_text(target, "new\n")
    assert target.read_text() == "new\n" and target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert [p.name for p in target.parent.iterdir()] == ["v.json"]


@pytest.mark.parametrize("fail_at", ["os.replace", "os.fsync", "json.dumps"])
def test_a_crash_mid_write_leaves_the_old_file_intact(tmp_path, monkeypatch, fail_at):
    target = files.write_json(tmp_path / "b.json", {"v": 1})

    def boom(*args, **kwargs):
        raise KeyboardInterrupt  # a BaseException, as a killed or interrupted run raises

    module, name = fail_at.split(".")
    monkeypatch.setattr({"os": os, "json": json}[module], name, boom)
    with pytest.raises(KeyboardInterrupt):
        files.write_json(target, {"v": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert list(tmp_path.iterdir()) == [target]  # the temporary file was removed


def test_no_clobber_never_overwrites(tmp_path):
    target = files.write_text(tmp_path / "0001_a.json", "first")
    with pytest.raises(FileExistsError):
        files.write_text(target, "second", clobber=False)
    assert target.read_text() == "first" and list(tmp_path.iterdir()) == [target]
    assert files.write_text(tmp_path / "0002_a.json", "new", clobber=False).read_text() == "new"


def test_a_target_that_cannot_be_written_is_one_line_naming_it_not_the_temporary_file(tmp_path, monkeypatch):
    target = files.write_json(tmp_path / "b.json", {"v": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(files.WriteError) as exc:
        files.write_json(target, {"v": 2})
    monkeypatch.undo()
    assert isinstance(exc.value, OSError) and exc.value.errno == errno.ENOSPC  # callers catching OSError still do
    back = pickle.loads(pickle.dumps(exc.value))  # as a worker process hands it to its parent
    assert (type(back), str(back), back.errno, back.path) == (files.WriteError, str(exc.value), errno.ENOSPC, target)
    assert str(exc.value) == f"{target}: cannot write it (No space left on device); choose a writable file path"
    assert json.loads(target.read_text()) == {"v": 1} and list(tmp_path.iterdir()) == [target]
    with pytest.raises(files.WriteError, match=f"^{re.escape(str(tmp_path))}: cannot write it \\(it is a folder\\)"):
        files.write_text(tmp_path, "x")
    with pytest.raises(files.WriteError, match=f"\\({re.escape(str(target))} is a file, not a folder\\)"):
        files.write_text(target / "sub" / "c.json", "x", clobber=False)  # not FileExistsError: no name is taken


def test_a_link_is_written_through_and_a_pipe_or_device_written_into(tmp_path):
    real = files.write_text(tmp_path / "shared" / "real.json", "old")
    link = tmp_path / "out.json"
    link.symlink_to(real)
    assert files.write_text(link, "new") == link
    assert link.is_symlink() and real.read_text() == "new"  # the link stays; the file it names is replaced
    with pytest.raises(FileExistsError):
        files.write_text(link, "newer", clobber=False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # as `--benchmark-json >(wc -c)` or `--json /dev/stdout` gives: nothing to replace
    reader = subprocess.Popen([sys.executable, "-c", f"print(len(open({str(fifo)!r}).read()))"], stdout=subprocess.PIPE)
    files.write_json(fifo, {"v": 1})
    assert reader.communicate(timeout=60)[0].decode().strip() == str(len('{\n  "v": 1\n}\n'))
    assert files.write_text(os.devnull, "x") == Path(os.devnull) and Path(os.devnull).is_char_device()


def test_bytes_are_written_as_they_are_by_the_same_rules(tmp_path, monkeypatch):
    """write_bytes (a pickle a tool would write in place): bytes no text encoding keeps, replaced
    atomically, the old file whole after a crash, no clobber, a pipe written into."""
    data = bytes(range(256)) * 4  # \r\n, NUL and invalid UTF-8 among them
    target = files.write_bytes(tmp_path / "sub" / "stats.lprof", data)
    assert target.read_bytes() == data and target.stat().st_mode & 0o777 == 0o666 & ~_umask()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        files.write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == data and [p.name for p in target.parent.iterdir()] == ["stats.lprof"]
    with pytest.raises(FileExistsError):
        files.write_bytes(target, b"new", clobber=False)
    with pytest.raises(files.WriteError, match="it is a folder"):
        files.write_bytes(tmp_path, b"x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(
        [sys.executable, "-c", f"print(len(open({str(fifo)!r}, 'rb').read()))"], stdout=subprocess.PIPE
    )
    files.write_bytes(fifo, data)
    assert reader.communicate(timeout=60)[0].decode().strip() == str(len(data))


def test_a_folder_that_takes_no_file_is_said_before_anything_is_written(tmp_path):
    assert files.unwritable_folder(tmp_path / "new" / "deeper") is None  # made when written: fine
    assert list(tmp_path.iterdir()) == []  # the probe left nothing behind
    a_file = files.write_text(tmp_path / "f", "x")
    assert files.unwritable_folder(a_file / "sub") == f"{a_file} is not a folder"
    with pytest.raises(files.WriteError, match=f"\\({re.escape(str(a_file))} is a file, not a folder\\)"):
        files.check_target(a_file / "sub" / "r.html")
    with pytest.raises(files.WriteError, match="cannot write it \\(it is a folder\\)"):
        files.check_target(tmp_path)
    files.check_target(tmp_path / "new" / "r.html")  # a path that can be made: no error, nothing made
    assert not (tmp_path / "new").exists()


def test_what_cannot_be_written_is_kept_elsewhere_with_the_first_line_of_why(tmp_path):
    a_file = files.write_text(tmp_path / "f", "x")
    blocked, kept = a_file / "sub" / "r.json", tmp_path / "kept" / "r.json"
    data = {"a": 1}
    assert files.write_or_keep(lambda: files.write_json(tmp_path / "ok.json", data), lambda: None) == (
        tmp_path / "ok.json",
        None,
        None,
    )
    written, kept_at, why = files.write_or_keep(
        lambda: files.write_json(blocked, data), lambda: files.write_json(kept, data)
    )
    assert (written, kept_at) == (None, kept) and json.loads(kept.read_text()) == data
    assert why == f"{blocked}: cannot write it ({a_file} is a file, not a folder); choose a writable file path"
    assert files.write_or_keep(lambda: files.write_json(blocked, data), lambda: files.write_json(blocked, data)) == (
        None,
        None,
        why,
    )
    with pytest.raises(files.WriteError):  # only the errors named are a write that failed
        files.write_or_keep(lambda: files.write_json(blocked, data), lambda: None, (KeyError,))


def test_every_writer_in_perfgate_is_the_one_atomic_writer():
    """No module writes a result or report file its own way (mkstemp, os.replace, os.link)."""
    offenders = []
    for path in sorted((ROOT / "perfgate").rglob("*.py")):
        if path == ROOT / "perfgate" / "files.py":
            continue
        text = path.read_text()
        if re.search(r"mkstemp|os\.replace|os\.link\(", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


# ----------------------------------------------------------------------------- text


def test_text_table_aligns_numbers_right_and_text_left():
    lines = text_table(("case", "median ms", "change %"), [["a", "1.500", "+3.0"], ["long-name", "12.250", "-"]])
    assert lines == [
        "case       median ms  change %",
        "---------  ---------  --------",
        "a              1.500      +3.0",
        "long-name     12.250         -",
    ]


@pytest.mark.parametrize(
    "v, text",
    [
        (6.5, "6.500"),
        (153.84615, "153.8"),
        (12345.6, "12,346"),
        (0.00012, "1.20e-04"),
        (None, "-"),
        (3, "3"),
        (0.0, "0"),
    ],
)
def test_fmt_num(v, text):
    assert fmt_num(v) == text


# ----------------------------------------------------------------------------- charts


def _tick_labels(svg_text: str) -> list[str]:
    return re.findall(r'<g id="[^"]*text_\d+">\s*<text[^>]*>([^<]*)</text>', svg_text)


def _overlaps(lo: float, hi: float, width: int) -> tuple[list[str], list[tuple[str, str]]]:
    """The x tick labels of a box chart over [lo, hi] ms as matplotlib lays them out (Agg, to measure)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with matplotlib.rc_context(charts._RC):
        fig = charts._figure(width, 200)
        ax = fig.add_subplot()
        ax.plot([lo, hi], [0, 1])
        ax.set_xscale("log")
        charts.log_axis(ax.xaxis, lo, hi)
        FigureCanvasAgg(fig).draw()
        renderer = fig.canvas.get_renderer()
        x0, x1 = ax.get_xlim()
        labels = [
            (t.get_text(), t.get_window_extent(renderer))
            for t, loc in zip(ax.get_xticklabels(), ax.get_xticks())
            if t.get_text() and x0 <= loc <= x1
        ]
    return [t for t, _ in labels], [
        (a, b) for i, (a, ea) in enumerate(labels) for b, eb in labels[i + 1 :] if ea.overlaps(eb)
    ]


@pytest.mark.parametrize(
    "lo, hi",
    [(0.2, 3.0), (7.6, 614.0), (0.05, 2000.0), (0.18, 80.0), (1.0, 1e5)],
    ids=["one-decade", "two-decades", "five-decades", "sub-ms", "wide"],
)
@pytest.mark.parametrize("width", [420, 560])
def test_log_axis_labels_never_overlap_and_are_plain_numbers(lo, hi, width):
    labels, clashes = _overlaps(lo, hi, width)
    assert len(labels) >= 2 and clashes == []
    assert all(re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", t) for t in labels), labels  # 0.2, 500, 1,000: never 2e-01


def test_box_chart_switches_to_a_log_axis_for_spread_latencies():
    wide = charts.box_chart([("a", [1.0, 1.1, 1.2]), ("b", [100.0, 110.0])], title="t", axis_label="latency (ms)")
    narrow = charts.box_chart([("a", [10.0, 11.0, 10.5]), ("b", [12.0, 13.0])], title="t", axis_label="latency (ms)")
    assert "latency (ms) (log scale)" in wide and "log scale" not in narrow
    assert {"1", "10", "100"} <= set(_tick_labels(wide))


def test_charts_carry_title_axis_units_legend_and_ids_of_their_own():
    bars = charts.hbar_chart(
        [("compile", 1.6), ("bf16", 0.8)],
        title="Speedup",
        axis_label="speedup (×)",
        value_suffix="×",
        ref=1.0,
        ref_label="1× = eager",
        legend=(("faster", charts.GOOD), ("slower", charts.BAD)),
    )
    assert bars.startswith('<svg class="chart" role="img" ') and "<title>Speedup</title>" in bars
    assert all(
        word in bars for word in ("speedup (×)", "1.60×", "0.800×", "faster", "slower", "1× = eager", "compile", "bf16")
    )
    lines = charts.line_chart(
        [("gpu_util_pct", [0, 1, 2], [10, 50, 90]), ("cpu_util_pct", [0, 1, 2], [80, 70, 60])],
        title="util",
        x_label="time (s)",
        y_label="%",
        zero=True,
    )
    assert "gpu_util_pct" in lines and "cpu_util_pct" in lines and "time (s)" in lines
    assert charts.hbar_chart([("a", 1.0)], title="x", axis_label="y") == charts.hbar_chart(
        [("a", 1.0)], title="x", axis_label="y"
    )
    ids_a, ids_b = (set(re.findall(r'\bid="([^"]+)"', s)) for s in (bars, lines))
    assert ids_a and ids_b and not ids_a & ids_b
    for svg_text in (bars, lines):  # every reference points into its own chart
        assert set(re.findall(r'(?:url\(#|href="#)([^")]+)', svg_text)) <= set(re.findall(r'\bid="([^"]+)"', svg_text))


def test_history_ticks_keep_the_newest_commit():
    ticks = {float(i): f"c{i:03d}" for i in range(40)}
    svg_text = charts.line_chart(
        [("x", list(ticks), [1.0] * 40)], title="t", x_label="x", y_label="y", x_tick_labels=ticks, width=420
    )
    shown = [t for t in _tick_labels(svg_text) if t.startswith("c")]
    assert shown[-1] == "c039" and 2 <= len(shown) <= 6


def test_matplotlib_and_jinja_load_only_when_a_report_is_drawn():
    code = (
        "import sys, perfgate.plugin.hooks, perfgate.cli, perfgate.commands.history, perfgate.commands.compare, "
        "perfgate.profile.run\n"
        "assert not {'matplotlib', 'jinja2'} & set(sys.modules), sorted({'matplotlib', 'jinja2'} & set(sys.modules))\n"
        "from perfgate.output import charts\n"
        "charts.hbar_chart([('a', 1.0)], title='t', axis_label='x')\n"
        "assert 'matplotlib' in sys.modules and 'matplotlib.pyplot' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_templates_ship_with_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"perfgate.output" = ["templates/*"]' in pyproject
    names = {p.name for p in (ROOT / "perfgate" / "output" / "templates").iterdir()}
    assert {"report.html.j2", "profile.html.j2", "report.css", "profile.css"} <= names


# ----------------------------------------------------------------------------- the one loader


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"benchmarks": [', "truncated JSON at line 1 column 17"),
        ("", "truncated JSON at line 1 column 1"),  # a writer killed before its first byte
        ('{"benchmarks": [{"name": "a", "note": "cut in a str', "truncated JSON"),
        ('{"benchmarks": [}', "corrupt JSON at line 1 column 17"),
        ('{"benchmarks": []} trailing', "corrupt JSON"),
        ("[1, 2]", "not a pytest-benchmark file (no 'benchmarks' list)"),
        (b"\xff\xfe\x00garbage", "cannot read (not UTF-8 text)"),
        (None, "cannot read (No such file or directory)"),
    ],
    ids=["truncated", "empty", "cut-string", "corrupt", "trailing", "not-benchmark", "binary", "missing"],
)
def test_history_and_the_baseline_store_read_files_with_one_loader(tmp_path, content, problem):
    p = tmp_path / "0001_x.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    with pytest.raises(results.ResultFileError) as run_err:
        load_run(p)
    with pytest.raises(store.BaselineError) as base_err:
        store.load(p)
    assert str(run_err.value).startswith(f"{p}: ") and problem in str(run_err.value) and "\n" not in str(run_err.value)
    assert str(base_err.value).startswith(str(run_err.value) + "; ") and "\n" not in str(base_err.value)
    fix = "check the path" if content is None else f"restore it (git checkout -- {p})"
    assert fix in str(base_err.value) and "record one with: pytest benchmarks --perfgate-record" in str(base_err.value)


def test_lean_loading_drops_only_sample_arrays(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(run_json([bench("a", [1.0, 2.0, 3.0], note='"samples_ms": [1, 2] in a string')]), indent=2))
    full, lean = results.read_benchmark_json(p), results.read_benchmark_json(p, samples=False)
    assert lean["benchmarks"][0]["extra_info"]["samples_ms"] == [] and full["benchmarks"][0]["extra_info"][
        "samples_ms"
    ] == [1, 2, 3]
    assert lean["benchmarks"][0]["extra_info"]["note"] == full["benchmarks"][0]["extra_info"]["note"]


def test_the_optimisation_table_says_when_a_p90_has_too_few_samples():
    from perfgate.measure.stats import tail_note
    from perfgate.output.terminal import OPT_HEADERS, optimisation_rows
    from perfgate.record import CaseRecord

    col = OPT_HEADERS.index("p90 ms")
    few, enough = ([1.0 + i / 100 for i in range(n)] for n in (17, 64))
    records = [
        CaseRecord.from_extra_info({**bench("a", s)["extra_info"], "tail_note": tail_note(len(s))})
        for s in (few, enough)
    ]
    rows = optimisation_rows(records)
    assert rows[0][col] == "n<64" and rows[1][col] == f"{records[1].p90_ms:.3f}"


def test_the_end_of_run_table_shows_energy_and_explains_dashes_and_dropped_rounds():

    from perfgate.gate.verdict_file import VerdictSet
    from perfgate.measure.stats import tail_note
    from perfgate.output.terminal import energy_cell, run_lines
    from perfgate.record import CaseRecord

    base = bench("a", [1.0] * 17)["extra_info"]
    throttle = {"dropped": 3, "kept": 17, "reasons": {"hw_slowdown": 3}, "too_few": False}
    throttle |= {"clock_ratio_min": 0.75, "recovery_delay_s": 0.05}  # as perfgate.measure.throttle writes it
    gpu = {**base, "frames_per_j": 41.7, "energy_j_per_step": 0.024, "throttle": throttle}
    cpu = {
        **base,
        "variant": "bf16",
        "energy_skipped": "no RAPL energy counter on this CPU",
        "tail_note": tail_note(17),
    }
    assert energy_cell(CaseRecord.from_extra_info(gpu)) == "41.7 frames/J"
    assert energy_cell(CaseRecord.from_extra_info({**base, "energy_j_per_step": 2.5})) == "2.5 J/step"
    records = {k: CaseRecord.from_extra_info(v) for k, v in (("g", gpu), ("c", cpu))}
    text = "\n".join(run_lines(records, VerdictSet([], {}, "fp", gate_enabled=False)))
    assert "(p90 n<64: too few timed rounds for a p90 (MLPerf LoadGen's floor: 64 samples, p99 662)" in text
    assert "(GPU: 3 throttled round(s) dropped in 1 case(s); see `throttle`)" in text
    assert "(energy '-': no RAPL energy counter on this CPU)" in text
