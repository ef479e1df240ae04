"""perfgate.report and `perfgate report`: the HTML page (also rendered in headless Chromium), its
plots' axes, and the Markdown summary."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfgate import gate
from perfgate import report as r
from perfgate.cli import main
from perfgate.history import Run, load_run
from tests.test_history import FP_ID, bench, day, fp_dir, run_json, write

REGRESSION = gate.Verdict(case="benchmarks/test_models.py::test_step[physicsnemo-block-tiny-compile]", metric="latency",
                          verdict=gate.REGRESSION, baseline=5.0, current=6.5, change_pct=30.0, p_value=1e-4,
                          message="median 6.500 ms vs 5.000 ms (+30.0% > 5%, p=0.0001)")


def telemetry(n: int = 30) -> dict[str, Any]:
    return {"samples": [{"t_s": i * 0.05, "gpu_util_pct": 40.0 + i, "cpu_util_pct": 90.0 - i, "rss_mib": 500.0 + i,
                         "gpu_name": "H100", "throttled": False} for i in range(n)],
            "summary": {"gpu_util_pct_mean": 54.5, "samples": n}}


def tonight() -> dict[str, Any]:
    return run_json([
        bench("physicsnemo-block", "baseline", 10.0, speedup=1.0, telemetry=telemetry()),
        bench("physicsnemo-block", "compile", 6.5, speedup=10.0 / 6.5, graph_breaks=2, warm_compile_s=3.2),
        bench("physicsnemo-block", "bf16", 12.0, speedup=10.0 / 12.0, peak_mem_mib=60.0, unreliable="other processes used 1.6 cores"),
        bench("owl-world-model", "baseline", 40.0, size="200m"),
    ], commit="c" * 40, commit_time=day(9), dirty=True)


def verdicts_json(*verdicts: gate.Verdict) -> dict[str, Any]:
    return {"fingerprint_id": FP_ID, "failed": any(v.verdict in gate.FAILING for v in verdicts),
            "verdicts": [v.as_dict() for v in verdicts], "skipped": {"test_step[x-tiny-tensorrt]": "needs CUDA"}}


ALL_VERDICTS = (
    gate.Verdict(case="benchmarks/test_models.py::test_step[physicsnemo-block-tiny-baseline]", metric="latency", verdict=gate.UNCHANGED,
                 baseline=10.0, current=10.0, change_pct=0.0, p_value=0.5),
    gate.Verdict(case="benchmarks/test_models.py::test_step[physicsnemo-block-tiny-bf16]", metric="latency", verdict=gate.IMPROVEMENT,
                 baseline=14.0, current=12.0, change_pct=-14.3, p_value=0.001, message="faster | much"),
    REGRESSION,
    gate.Verdict(case="benchmarks/test_models.py::test_step[owl-world-model-200m-baseline]", metric="budget:fps", verdict=gate.BUDGET,
                 baseline=30.0, current=25.0, message="fps 25, budget at least 30"),
)


@pytest.fixture
def saved(tmp_path) -> Path:
    """Three earlier runs of the same cases under the fingerprint's baseline folder."""
    for i, med in enumerate((9.5, 10.5, 9.8), start=1):
        write(fp_dir(tmp_path) / f"{i:04d}_nightly.json",
              run_json([bench("physicsnemo-block", "baseline", med), bench("physicsnemo-block", "compile", med / 2)],
                       commit=f"{i}" * 40, commit_time=day(i)))
    return tmp_path


# ----------------------------------------------------------------------------- axes and plots


@pytest.mark.parametrize(
    "lo, hi, expected",
    [(0, 1.23, [0, 0.25, 0.5, 0.75, 1.0, 1.25]), (0.07, 0.68, [0, 0.2, 0.4, 0.6, 0.8]), (140, 236, [140, 160, 180, 200, 220, 240])],
    ids=["speedup", "small", "latency"],
)
def test_nice_ticks_cover_the_data_with_round_steps(lo, hi, expected):
    assert r.nice_ticks(lo, hi) == pytest.approx(expected)


@pytest.mark.parametrize("lo, hi", [(5, 5), (0, 0), (-3, 7), (1e-4, 3e-4), (12_000, 250_000)], ids=["flat", "zero", "negative", "tiny", "big"])
def test_nice_ticks_any_range(lo, hi):
    ticks = r.nice_ticks(lo, hi)
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert ticks[0] <= lo and ticks[-1] >= hi and len(steps) == 1 and 3 <= len(ticks) <= 11
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1, 2, 2.5, 5)


def test_log_ticks_and_labels():
    assert r.log_ticks(7.6, 614) == pytest.approx([5, 10, 20, 50, 100, 200, 500, 1000])
    assert r.tick_labels([0, 2, 4, 6]) == ["0", "2", "4", "6"]
    assert r.tick_labels([0, 0.25, 0.5]) == ["0.00", "0.25", "0.50"]
    assert r.tick_labels([500, 1000]) == ["500", "1,000"]


def test_box_chart_switches_to_log_axis_for_spread_latencies():
    wide = r.box_chart([("a", [1.0, 1.1, 1.2]), ("b", [100.0, 110.0])], title="t", axis_label="latency (ms)")
    narrow = r.box_chart([("a", [10.0, 11.0]), ("b", [12.0, 13.0])], title="t", axis_label="latency (ms)")
    assert "latency (ms) (log scale)" in wide and "log scale" not in narrow
    assert narrow.count("<circle") == 4  # every sample is a dot


def test_charts_carry_title_axis_units_and_legend():
    bars = r.hbar_chart([("compile", 1.6), ("bf16", 0.8)], title="Speedup", axis_label="speedup (×)", value_suffix="×",
                        ref=1.0, ref_label="1× = eager", legend=(("faster", r.GOOD), ("slower", r.BAD)))
    assert "<title>Speedup</title>" in bars and "speedup (×)" in bars and "1.60×" in bars
    assert all(word in bars for word in ("faster", "slower", "1× = eager"))
    lines = r.line_chart([("gpu_util_pct", [0, 1, 2], [10, 50, 90]), ("cpu_util_pct", [0, 1, 2], [80, 70, 60])],
                         title="util", x_label="time (s)", y_label="%", zero=True)
    assert lines.count("<polyline") == 2 and "gpu_util_pct" in lines and "time (s)" in lines


def test_telemetry_series_grouped_by_unit_and_non_numbers_ignored():
    groups = r.telemetry_series(telemetry(5))
    assert {u: [n for n, _, _ in s] for u, s in groups.items()} == {"%": ["gpu_util_pct", "cpu_util_pct"], "MiB": ["rss_mib"]}
    assert groups["%"][0][1] == pytest.approx([0, 0.05, 0.1, 0.15, 0.2])
    no_time = r.telemetry_series({"samples": [{"gpu_util_pct": 1.0}, {"gpu_util_pct": 2.0}]})
    assert no_time["%"][0][1] == [0.0, 1.0]
    assert r.telemetry_series({}) == {} and r.telemetry_series({"samples": "garbage"}) == {}


# ----------------------------------------------------------------------------- HTML


def render(tmp_path: Path, verdicts=ALL_VERDICTS, with_history: bool = True) -> str:
    path = write(tmp_path / "tonight.json", tonight())
    runs = [load_run(path)]
    hist, skipped = r.history_for(runs, baselines_root=tmp_path / "baselines", storage_dirs=[]) if with_history else (None, [])
    vs = r.verdicts_from_json(verdicts_json(*verdicts)) if verdicts is not None else None
    return r.render_html(runs, vs, hist, unreadable=skipped)


def test_html_is_self_contained_and_has_every_section(saved):
    page = render(saved)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert re.findall(r"(?:src|href)=\"(?:https?:)?//", page) == []
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}  # the SVG namespace only
    for section in ('id="verdicts"', 'id="m-physicsnemo-block-tiny-on-cpu"', 'id="m-owl-world-model-200m-on-cpu"',
                    'id="telemetry"', 'id="fingerprint"', 'id="sources"'):
        assert section in page
    for header in r.OPT_HEADERS:
        assert f">{header}</th>" in page
    assert "100.0 FPS" in page and "153.8 FPS" in page  # 1000/10 and 1000/6.5 ms, as the seeds write it
    assert "2 graph break(s)" in page and "unreliable" in page


def test_html_plots_per_model(saved):
    page = render(saved)
    block = page.split('id="m-physicsnemo-block-tiny-on-cpu"')[1].split("</section>")[0]
    assert "Speedup over eager baseline" in block and "speedup (×, higher is better)" in block
    assert "Latency per step" in block and "latency (ms, lower is better)" in block
    assert "Peak memory (vmhwm)" in block and "peak memory (MiB, lower is better)" in block
    # history: baseline and compile have 3 saved runs + tonight, tonight's point ringed; bf16 has none
    assert block.count("this report&#x27;s run") == 2 and "No earlier run saved for: bf16" in block
    assert "baseline: 10.00 ms (+2.0% vs previous)" in block
    page_no_hist = render(saved, with_history=False)
    assert "History of the median" not in page_no_hist


def test_html_verdicts_regressions_first(saved):
    page = render(saved)
    table = page.split('id="verdicts"')[1].split("</table>")[0]
    order = [m for m in re.findall(r'class="badge \w+">([a-z ]+)<', table)]
    assert order[:2] == ["regression", "budget"] and order[-1] == "unchanged"
    assert "2 failing verdict(s)" in page and "1 skipped case(s)" in page
    assert "No verdicts file given" in render(saved, verdicts=None)


def test_html_escapes_names(tmp_path):
    data = run_json([bench("m", "<script>alert(1)</script>", 1.0)])
    page = r.render_html([Run("x.json", data)], None, None)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_telemetry_missing_is_a_note_not_an_error(tmp_path):
    page = r.render_html([Run("x.json", run_json([bench()]))], None, None)
    assert "No telemetry in these runs" in page


def test_plain_pytest_benchmark_file_is_reported_from_stats(tmp_path):
    b = bench(median_ms=20.0)
    del b["extra_info"]
    page = r.render_html([Run("plain.json", run_json([b], fp_id=None))], None, None)
    assert "other benchmarks" in page and ">20.00<" in page and "No perfgate fingerprint" in page


# ----------------------------------------------------------------------------- Markdown


def test_markdown_regressions_first_short_with_links(tmp_path):
    runs = [Run("tonight.json", tonight())]
    md = r.markdown_summary(runs, verdicts_json(*ALL_VERDICTS), {"HTML report": "https://ci.example/report.html", "run JSON": "tonight.json"})
    lines = md.splitlines()
    assert lines[0] == "### perfgate: :x: 2 regression(s)"
    table = [line for line in lines if line.startswith("| physicsnemo") or line.startswith("| owl")]
    assert table[0].startswith("| physicsnemo-block [tiny] compile | latency | 5.000 | 6.500 | +30.0% |")
    assert table[1].startswith("| owl-world-model [200m] baseline | budget:fps |")
    assert "1 unchanged" in md and "1 improvement" in md and "1 skipped" in md and "`ccccccc (dirty)`" in md
    assert "faster \\| much" not in md.split("<details>")[0]  # the improvement is folded away, below the failures
    assert "| physicsnemo-block [tiny] bf16 | latency | 12.00 | -14.3% | improvement |" in md
    assert lines[-1] == "Artifacts: [HTML report](https://ci.example/report.html) · [run JSON](tonight.json)"
    assert len(lines) < 40


def test_markdown_without_regression_or_verdicts():
    runs = [tonight()]  # the JSON itself is accepted too
    ok = r.markdown_summary(runs, [ALL_VERDICTS[0]], {})
    assert ok.startswith("### perfgate: :white_check_mark: no regression") and "<details>" not in ok
    assert "| physicsnemo-block [tiny] on cpu | compile | 6.500 | 1.54× |" in ok  # the fastest variant per model
    measured = r.markdown_summary(runs, None, None)
    assert measured.startswith("### perfgate: no verdicts") and "Artifacts" not in measured


def test_markdown_many_regressions_are_capped():
    many = [gate.Verdict(case=f"c{i}", metric="latency", verdict=gate.REGRESSION, change_pct=10.0) for i in range(30)]
    md = r.markdown_summary([tonight()], many, {}, max_rows=5)
    assert len(re.findall(r"^\| c\d+ \|", md, re.MULTILINE)) == 5 and "… and 25 more in the report." in md


# ----------------------------------------------------------------------------- CLI


def test_cli_report_writes_html_and_markdown(saved, monkeypatch, capsys):
    monkeypatch.chdir(saved)
    write(saved / "tonight.json", tonight())
    write(saved / "verdicts.json", verdicts_json(*ALL_VERDICTS))
    write(fp_dir(saved) / "0009_broken.json", "{")
    assert main(["report", "tonight.json", "--verdicts", "verdicts.json", "-o", "out/report.html", "--markdown", "summary.md",
                 "--link", "HTML report=https://ci.example/r.html"]) == 0
    err = capsys.readouterr().err
    assert "history skipped baselines" in err and "0009_broken.json: truncated JSON" in err
    assert "wrote out/report.html" in err
    assert "Gate verdicts" in (saved / "out" / "report.html").read_text()
    md = (saved / "summary.md").read_text()
    assert md.startswith("### perfgate: :x: 2 regression(s)") and md.rstrip().endswith("[HTML report](https://ci.example/r.html)")
    assert [p.name for p in (saved / "out").iterdir()] == ["report.html"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert (saved / "out" / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask  # shareable, not mkstemp's 0600


@pytest.mark.parametrize(
    "files, argv, message",
    [
        ({"run.json": "{"}, ["run.json"], "run.json: truncated JSON at line 1 column 2; pass the file pytest wrote with --benchmark-json"),
        ({}, ["missing.json"], "missing.json: cannot read"),
        ({"run.json": None, "v.json": '{"x": 1}'}, ["run.json", "--verdicts", "v.json"], "v.json: not a perfgate verdicts file"),
        ({"run.json": None}, ["run.json", "--link", "oops"], "--link 'oops': write NAME=URL"),
    ],
    ids=["truncated-run", "missing-run", "bad-verdicts", "bad-link"],
)
def test_cli_report_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys, files, argv, message):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        write(tmp_path / name, text if text is not None else tonight())
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perfgate report: ") and message in err[0]
    assert not (tmp_path / "report.html").exists()


# ----------------------------------------------------------------------------- in a real browser


def chromium() -> str | None:
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")


def png_pixels(path: Path) -> np.ndarray:
    """An 8-bit RGB(A) PNG as a (height, width, channels) array: zlib plus the five PNG row filters."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data[pos + 8:pos + 21])
            assert depth == 8 and color in (2, 6) and not interlace, f"unexpected PNG format {depth=} {color=} {interlace=}"
        elif kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * bpp)
    img, prev = np.zeros((h, w * bpp), np.uint8), np.zeros(w * bpp, np.uint8)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:]
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum along the row, per channel (uint8 wraps like the filter)
            cur = np.cumsum(line.reshape(w, bpp), axis=0, dtype=np.uint8).reshape(-1)
        elif f == 2:  # Up
            cur = line + prev
        else:  # Average and Paeth depend on the pixel just decoded: byte by byte
            c_row, p_row = bytearray(line.tobytes()), prev.tobytes()
            for x in range(len(c_row)):
                a, b, c = (c_row[x - bpp], p_row[x], p_row[x - bpp]) if x >= bpp else (0, p_row[x], 0)
                if f == 3:
                    c_row[x] = (c_row[x] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    c_row[x] = (c_row[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.frombuffer(bytes(c_row), np.uint8)
        img[y] = cur
        prev = img[y]
    return img.reshape(h, w, bpp)


def colour_counts(img: np.ndarray) -> dict[str, int]:
    """Pixels per colour ('#rrggbb'), alpha ignored."""
    rgb = img[..., :3].reshape(-1, 3).astype(np.uint32)
    keys, counts = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2], return_counts=True)
    return {f"#{int(k):06X}": int(n) for k, n in zip(keys, counts)}


def test_png_reader_round_trip(tmp_path):
    """The reader against PNGs written here with every filter type."""
    w, h, bpp = 5, 5, 3
    img = [bytes((x * 40 + y * 3 + k * 7) & 255 for x in range(w) for k in range(bpp)) for y in range(h)]
    rows = []
    prev = bytes(w * bpp)
    for y, (f, line) in enumerate(zip((0, 1, 2, 4, 3), img)):
        if f == 0:
            out = line
        elif f == 1:
            out = bytes((line[i] - (line[i - bpp] if i >= bpp else 0)) & 255 for i in range(len(line)))
        elif f == 2:
            out = bytes((line[i] - prev[i]) & 255 for i in range(len(line)))
        elif f == 3:
            out = bytes((line[i] - ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255 for i in range(len(line)))
        else:
            def paeth(a, b, c):
                p = a + b - c
                return a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
            out = bytes((line[i] - paeth(line[i - bpp] if i >= bpp else 0, prev[i], prev[i - bpp] if i >= bpp else 0)) & 255
                        for i in range(len(line)))
        rows.append(bytes([f]) + out)
        prev = line

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
    (tmp_path / "t.png").write_bytes(png)
    decoded = png_pixels(tmp_path / "t.png")
    assert decoded.shape == (h, w, bpp) and [row.tobytes() for row in decoded.reshape(h, -1)] == img


def test_report_renders_in_headless_chromium(saved, tmp_path):
    exe = chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-chromium (Debian's chromium package)")
    html_path = tmp_path / "report.html"
    html_path.write_text(render(saved))
    shot = tmp_path / "shot.png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
           "--dump-dom", "--window-size=1400,2000", html_path.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # Content, as the browser parsed it.
    assert "<title>perfgate report</title>" in dom
    assert "physicsnemo-block [tiny] on cpu" in dom and "owl-world-model [200m] on cpu" in dom
    assert dom.count("<svg") >= 8 and "2 failing verdict(s)" in dom
    # The screenshot: not blank, and the charts' colours are on it (the SVG was drawn, not only text).
    img = png_pixels(shot)
    assert img.shape[:2] == (2000, 1400)
    colours = colour_counts(img)
    background = max(colours.values())
    assert background < 0.97 * img.shape[0] * img.shape[1], "the screenshot is (almost) one colour: blank page"
    assert len(colours) > 50, f"only {len(colours)} colours in the screenshot"
    # Bars are solid chart colours (lines, dots and boxes are blended): about 25,000 blue pixels
    # with the bars drawn, about 2,000 without; 3,000 orange (bf16 slower than eager) against 200.
    assert colours.get(r.GOOD.upper(), 0) > 10_000, "too few bar-blue pixels: the SVG bar charts were not drawn"
    assert colours.get(r.BAD.upper(), 0) > 1_500, "too few slower-than-eager (orange) bar pixels"
