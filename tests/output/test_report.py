"""`perfgate report`'s HTML page, also rendered in headless Chromium, from the files a real run of
the suite writes (tests/report_fixtures.py); the Markdown and the command line are in
test_report_markdown.py."""

from __future__ import annotations

import copy
import re
import time

import pytest

from perfgate import gate
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdict_file import VerdictSet
from perfgate.history.runs import Run
from perfgate.measure import telemetry
from perfgate.output import charts, html
from perfgate.output.report_data import telemetry_rows, timeline_series
from perfgate.output.text import fmt_num
from perfgate.record import CaseRecord, Telemetry
from tests.browser import chromium, colour_counts, png_pixels, render_page
from tests.helpers import needs_ruptures
from tests.report_helpers import CASE, info, render, section

pytest_plugins = ("tests.report_fixtures",)

# ----------------------------------------------------------------------------- HTML


@needs_ruptures  # a report with a history marks its change points
def test_html_is_self_contained_and_has_every_section(saved, tonight, verdicts):
    page = render(saved, tonight, verdicts)
    assert "<script" not in page and "<link" not in page and "@import" not in page and "<?xml" not in page
    assert re.findall(r"(?:src|href)=\"(?:https?:)?//", page) == []
    # Only the SVG namespaces: nothing to fetch.
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    for ident in (
        "verdicts",
        "m-physicsnemo-block-tiny-on-cpu",
        "m-physicsnemo-train-tiny-on-cpu",
        "telemetry",
        "fingerprint",
        "sources",
    ):
        assert f'id="{ident}"' in page
    for header in html.OPT_HEADERS:
        assert f">{header}</th>" in page
    base = info(tonight, "physicsnemo-block-tiny-baseline")
    assert f"{fmt_num(base['throughput']['examples'])} examples/s" in page  # the model's own unit
    int8 = info(tonight, "physicsnemo-block-tiny-int8-dynamic")
    assert f"{int8['quantized_linears']}/{int8['linears']} linears quantised" in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # several inline SVGs, each with ids of its own


@needs_ruptures
def test_html_plots_per_model_and_history(saved, tonight, verdicts):
    page = render(saved, tonight, verdicts)
    block = section(page, "m-physicsnemo-block-tiny-on-cpu")
    assert "Speedup over eager baseline" in block and "speedup (×, higher is better)" in block
    assert "Latency per step" in block and "latency (ms, lower is better)" in block
    assert f"Peak memory ({info(tonight, 'physicsnemo-block-tiny-baseline')['mem_method']})" in block
    # History of the figure the gate judges on the CPU, the step/reference ratio (not raw ms):
    # baseline and int8-dynamic have 3 saved runs + tonight; bf16 has none.
    history = block.split("History of the gated latency figure")[1]
    assert "the median step/reference ratio" in history and history.count("step / reference") == 2
    assert "No earlier run saved for: bf16" in history
    ratio = info(tonight, "physicsnemo-block-tiny-baseline")["normalised_median"]
    # Eager's third saved run was contended (5x slower, unreliable): drawn, but tonight is compared
    # with the 1.05x run before it, not with it (-80%) nor the 0.98x run's ms.
    assert f"{fmt_num(ratio)} × reference · {(1 / 1.05 - 1) * 100:+.1f}% vs previous" in history
    int8 = info(tonight, "physicsnemo-block-tiny-int8-dynamic")["normalised_median"]
    assert f"{fmt_num(int8)} × reference · {(1 / 0.98 - 1) * 100:+.1f}% vs previous" in history
    assert "History of the gated" not in render(saved, tonight, verdicts, with_history=False)


def test_history_axis_keeps_a_contended_run_from_flattening_the_line():
    """The y axis spans the reliable runs; an unreliable run within 1.5x of them widens it, a wild
    one (a contended run once read +82989%) sits on the edge instead."""
    reliable = [1.0, 1.05, 0.98]
    lo, hi = charts.history_y_range([*reliable, 5.0], [False, False, False, True])
    assert lo <= 0.98 and 1.05 <= hi < 1.2
    lo, hi = charts.history_y_range([*reliable, 1.3], [False, False, False, True])
    assert hi >= 1.3
    assert charts.history_y_range([1.0, 1.01], [False, False]) == pytest.approx((0.9, 1.1), rel=0.01)  # >= 20% span


@pytest.mark.parametrize("lo, hi, width_px", [(0.70013, 0.70587, 160), (705.13, 705.97, 240)])
def test_crowded_tick_labels_are_thinned(lo, hi, width_px):
    """matplotlib's default tick count crowds long labels ('705.25') on a narrow chart; the charts
    thin them until matplotlib's own text boxes keep apart (the browser test checks the page too)."""
    import matplotlib

    with matplotlib.rc_context(charts._RC):
        fig = charts._figure(width_px, 150)
        ax = fig.add_subplot()
        ax.plot([lo, hi], [0, 1])
        fig.draw_without_rendering()
        assert charts._overlapping(ax.xaxis.get_ticklabels()), "the case no longer crowds: pick another"
        charts._thin_ticks(ax)
        assert not charts._overlapping(ax.xaxis.get_ticklabels()) and len(ax.xaxis.get_ticklabels()) >= 3


@needs_ruptures
def test_html_summary_first_then_verdicts_needing_a_look(saved, tonight, verdicts):
    contended = CaseRecord.from_extra_info({"device": "cpu", "contention_cores": 0.9})
    more = [
        gate.Verdict(
            case=CASE.format("physicsnemo-train-tiny-bf16"),
            metric="latency",
            verdict=gate.UNRELIABLE,
            current=3.0,
            message=gate.unreliable_reason(contended, GateSettings()),
        ),
        gate.Verdict(
            case=CASE.format("physicsnemo-block-tiny-baseline"),
            metric="budget:fps",
            verdict=gate.UNCHANGED,
            baseline=30.0,
            current=41.5,
        ),
    ]
    vs = VerdictSet([*verdicts.verdicts, *more], verdicts.skipped, verdicts.fingerprint_id)
    page = render(saved, tonight, vs)
    assert page.index('id="summary"') < page.index('id="verdicts"') < page.index('class="model"')
    summary = section(page, "summary")
    assert "2 failing verdict(s): the gate fails" in summary
    assert f"5 case(s) judged, {len(verdicts.skipped)} skipped" in summary
    # The failing verdicts with their reasons, regression first, then the missed budget.
    failing = summary.split("Regressions, errors and missed budgets")[1].split("</table>")[0]
    assert re.findall(r'class="badge \w+">([a-z ]+)<', failing) == ["regression", "budget"]
    assert "median 6.500 ms vs 5.000 ms (+30.0% &gt; 5%, p=0.0001)" in failing and "budget at most 0.5" in failing
    # Real-time budgets, missed first; the per-case latency changes drawn.
    assert "Real-time budgets: 1 met, 1 missed" in summary
    budgets = summary.split("Real-time budgets")[1].split("</table>")[0]
    assert budgets.index("missed</span>") < budgets.index("met</span>") and "41.50 fps" in budgets
    assert "Latency change of every judged case" in summary and summary.count("<svg") == 1
    # The verdict table: what needs a look open; unreliable and unchanged folded under their counts.
    table = section(page, "verdicts")
    shown = table.split("<details")[0]
    assert re.findall(r'class="badge \w+">([a-z ]+)<', shown) == ["regression", "budget", "improvement"]
    folds = re.findall(r'<details class="fold"( open)?><summary>.*?>([a-z ]+)</span> (\d+) verdict', table)
    assert folds == [("", "unreliable", "1"), ("", "unchanged", "2")]
    assert "other processes used 0.90 cores" in table.split("unreliable</span> 1 verdict")[1]
    assert f"{len(verdicts.skipped)} skipped case(s)" in table
    assert "No verdicts file given" in render(saved, tonight, None)


def test_html_escapes_names(tmp_path, real):
    data = copy.deepcopy(real)
    data["benchmarks"][0]["extra_info"]["variant"] = "<script>alert(1)</script>"
    page = html.benchmark_report([Run("x.json", data)], None, None)
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 3  # the table and the charts' labels


@needs_ruptures
def test_telemetry_section_shows_what_the_sampler_wrote(saved, tonight, verdicts):
    page = render(saved, tonight, verdicts)
    tel = section(page, "telemetry")
    metrics = info(tonight, "physicsnemo-block-tiny-baseline")["telemetry"]["metrics"]
    assert {"cpu_util_pct", "rss_mib"} <= set(metrics)  # the real sampler's summary schema
    assert "cpu_util_pct (%)" in tel and "rss_mib (MiB)" in tel and "other_cpu_cores (cores)" in tel
    cpu = metrics["cpu_util_pct"]
    assert f"{fmt_num(cpu['mean'], 3)} ({fmt_num(cpu['min'], 3)}–{fmt_num(cpu['max'], 3)})" in tel
    assert "telemetry in %" in tel and "telemetry in MiB" in tel and tel.count("<svg") >= 4
    sampled = info(tonight, "physicsnemo-block-tiny-baseline")["telemetry"]
    interval = f"{sampled['interval_s'] * 1e3:g} ms"
    assert f"<td>{sampled['n_samples']}</td><td>{interval}</td>" in tel and f">{sampled['source']}<" in tel
    # Each model's group folded, open when one of its cases was unreliable.
    assert re.findall(r"<details class=\"fold\"( open)?><summary><b>([^<]+)</b>", tel) == [
        ("", "physicsnemo-block [tiny] on cpu"),
        ("", "physicsnemo-train [tiny] on cpu"),
    ]
    info(tonight, "physicsnemo-train-tiny-bf16")["unreliable"] = "other processes used 0.9 cores"
    tel = section(render(saved, tonight, verdicts), "telemetry")
    assert '<details class="fold" open><summary><b>physicsnemo-train [tiny] on cpu</b>: 2 case(s)' in tel
    for b in tonight["benchmarks"]:
        del b["extra_info"]["telemetry"]
    assert "No telemetry in these runs" in render(saved, tonight, verdicts)


def test_telemetry_rows_and_timeline_from_a_live_sampler():
    with telemetry.TelemetrySampler("cpu", interval_s=0.01) as sampler:
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:  # busy: a few samples of this process's CPU use
            sum(i * i for i in range(1000))
    summary, timeline = sampler.summary(), sampler.timeline()
    rows = {r.metric: r for r in telemetry_rows(summary)}
    assert (
        set(rows) == set(summary.metrics or {}) and rows["rss_mib"].unit == "MiB" and rows["cpu_util_pct"].unit == "%"
    )
    assert all(r.min <= r.mean <= r.max for r in rows.values())
    groups = timeline_series(timeline)
    assert "value" not in groups and {n for n, _, _ in groups["%"]} >= {"cpu_util_pct"}
    (name, xs, ys), *_ = groups["MiB"]
    assert name == "rss_mib" and len(xs) == len(timeline) >= 2 and xs == sorted(xs)
    # The schema the report read before it was fixed never came out of the sampler.
    assert telemetry_rows(Telemetry.from_json({"samples": timeline, "summary": {"cpu_util_pct_mean": 50.0}})) == []


def test_plain_pytest_benchmark_file_is_reported_from_stats(real):
    data = copy.deepcopy(real)
    del data["perfgate"], data["machine_info"]["perfgate"]
    for b in data["benchmarks"]:
        del b["extra_info"]
    page = html.benchmark_report([Run("plain.json", data)], None, None)
    median_ms = data["benchmarks"][0]["stats"]["median"] * 1e3
    assert "other benchmarks" in page and f">{fmt_num(median_ms)}<" in page and "No perfgate fingerprint" in page


# ----------------------------------------------------------------------------- in a real browser


@needs_ruptures
def test_report_renders_in_headless_chromium(saved, tonight, verdicts, tmp_path):
    exe = chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-chromium (Debian's chromium package)")
    page = render(saved, tonight, verdicts)
    (tmp_path / "report.html").write_text(page)  # kept with the screenshot, to look at
    shown = render_page(exe, page, tmp_path / "chromium", 1400, 3000)
    dom = shown.dom
    # Content, as the browser parsed it.
    assert "<title>perfgate report</title>" in dom
    assert "physicsnemo-block [tiny] on cpu" in dom and "physicsnemo-train [tiny] on cpu" in dom
    assert dom.count("<svg") >= 8 and "2 failing verdict(s)" in dom
    # The layout the browser computed: the summary's chart on the first screen, the first model's
    # charts soon after the (filtered) verdict table, and no axis label drawn over another.
    probe = shown.probe
    assert probe["first_chart_px"] < 800, probe
    assert probe["first_chart_outside_summary_px"] < 2000, probe
    assert probe["charts_drawn"] >= 8 and probe["overlapping_tick_labels"] == [], probe
    # The screenshot: not blank, and the charts' colours are on it (the SVG was drawn, not only text).
    img = png_pixels(shown.screenshot)
    assert img.shape[:2] == (3000, 1400)
    colours = colour_counts(img)
    background = max(colours.values())
    assert background < 0.97 * img.shape[0] * img.shape[1], "the screenshot is (almost) one colour: blank page"
    assert len(colours) > 50, f"only {len(colours)} colours in the screenshot"
    # Bars are solid chart colours (lines, dots and boxes are blended): eager's 1x speedup bar and
    # the first memory bar are blue; int8-dynamic, several times slower than eager, is an orange bar
    # (short: a 0.1x bar is ~60 px long, and the machine's load moves the ratio).
    assert colours.get(charts.GOOD.upper(), 0) > 10_000, "too few bar-blue pixels: the SVG bar charts were not drawn"
    assert colours.get(charts.BAD.upper(), 0) > 150, "too few slower-than-eager (orange) bar pixels"


def test_the_probe_sees_overlapping_labels(tmp_path):
    """The browser check above can fail: a chart with labels forced onto each other is caught."""
    exe = chromium()
    if exe is None:
        pytest.skip("chromium is not installed: run scripts/install-chromium (Debian's chromium package)")
    from matplotlib import ticker

    def paint(ax):
        ax.plot([0, 1], [700.25, 705.75])
        ax.yaxis.set_major_locator(ticker.FixedLocator([700 + i / 4 for i in range(24)]))

    svg = charts._draw(300, 150, "crowded", paint)
    probe = render_page(exe, f"<html><body>{svg}</body></html>", tmp_path, 600, 400).probe
    assert "700.00 / 700.25" in probe["overlapping_tick_labels"]
