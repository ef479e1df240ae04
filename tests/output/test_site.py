"""`perfgate report --site`: the dashboard of the kept runs. Built from real runs stored as the hosted
job stores them (tests/data/history-step: a real 20% step at run 5) and from synthetic history made
from a committed baseline's shape (tests/history_year.py); every page loads in headless Chromium
from a folder with no network, every link resolves, and a page's weight is bounded by its number of
cases, not by the length of the history."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from perfgate.cli import main
from perfgate.history import store as history_store
from perfgate.history.runs import Run, build_series
from perfgate.output import site
from tests.browser import chromium, render_page
from tests.helpers import empty_pyproject, needs_ruptures
from tests.history import year as history_year

DATA = Path(__file__).resolve().parents[1] / "data" / "history-step"
FP_ID = next(p.name for p in DATA.iterdir() if p.is_dir())
RUNS = sorted((DATA / FP_ID).glob("*.json"))
COMMIT_URL = "https://github.com/OWNER/REPO/commit/{commit}"


def _commit(path: Path) -> str:
    return json.loads(path.read_text())["commit_info"]["id"]


@pytest.fixture(scope="module")
def real_site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    store = tmp / "store"
    last = RUNS[-1]
    verdicts = tmp / "verdicts.json"
    fullname = json.loads(last.read_text())["benchmarks"][0]["fullname"]
    verdicts.write_text(
        json.dumps(
            {
                "fingerprint_id": FP_ID,
                "verdicts": [
                    {"case": fullname, "metric": "memory", "verdict": "unchanged", "change_pct": 0.1},
                    {"case": fullname, "metric": "latency", "verdict": "regression", "change_pct": 21.0},
                ],
            }
        )
    )
    for run in RUNS:
        data = history_store.validate(
            run, verdicts if run == last else None, commit=_commit(run), tier="pr"
        )  # the hosted job's path
        history_store.add_run(store, data, source="https://github.com/OWNER/REPO/actions/runs/1")
    out = tmp / "site"
    argv = ["report", "--site", str(out), "--store", str(store), "--baselines", str(tmp / "none")]
    assert main([*argv, "--commit-url", COMMIT_URL, "--pyproject", str(empty_pyproject(tmp))]) == 0
    return out


def _pages(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*.html"))}


@needs_ruptures
def test_every_page_is_self_contained_and_every_link_resolves(real_site):
    pages = _pages(real_site)
    assert {k for k in pages if not k.startswith("r/")} == {"index.html", "m/physicsnemo-block.html"}
    assert sum(k.startswith(f"r/{FP_ID}/") for k in pages) == 8  # a page per kept run
    for name, text in pages.items():
        assert not re.search(r"<script|<link|@import|url\(|<img|<iframe", text), name  # nothing to fetch
        assert not re.search(r'\ssrc="', text), name
        for href in re.findall(r'href="([^"]+)"', text):
            if href.startswith("https://github.com/OWNER/REPO/"):
                continue  # the commit and the workflow run: links a reader follows, never loaded
            target = (real_site / name).parent / href.split("#")[0]
            assert target.resolve().is_file(), f"{name}: {href}"


@needs_ruptures
def test_the_real_step_is_marked_with_its_commit_and_bisect_command(real_site):
    model = (real_site / "m" / "physicsnemo-block.html").read_text()
    bad, good = _commit(RUNS[4]), _commit(RUNS[3])
    (cp,) = re.findall(r'<line class="cp (\w+)"[^>]*><title>([^<]*)</title>', model)
    assert cp[0] == "worse" and bad[:12] in cp[1]
    assert model.count("<circle") == 8 and model.count('<a href="../r/') == 8  # every run a linked point
    index = (real_site / "index.html").read_text()
    assert f"perfgate bisect {good[:12]} {bad[:12]} --case physicsnemo-block-tiny-baseline --device cpu" in index
    # What needs attention comes first: the case whose newest run regressed heads the cases, and the
    # newest run's regression is shown above its unchanged figure (folded).
    cases = index[index.index('id="attention"') : index.index('id="cases"')]
    assert re.search(r'<td class="l"><span class="badge ([\w-]+)">', cases).group(1) == "regression"
    latest = index[index.index('id="latest"') :]
    assert latest.index("regression") < latest.index("<details><summary>1 unchanged")
    assert f'href="{COMMIT_URL.format(commit=_commit(RUNS[-1]))}"' in latest
    (run_page,) = (real_site / "r" / FP_ID).glob(f"0001-{_commit(RUNS[0])[:12]}-pr.html")
    assert COMMIT_URL.format(commit=_commit(RUNS[0])) in run_page.read_text()


@needs_ruptures
def test_a_long_history_keeps_a_bounded_number_of_markers_and_the_exact_change_point():
    template = json.loads(history_year.CPU_BASELINE.read_text())
    template["benchmarks"] = template["benchmarks"][:2]  # two real entries: copying 106 per run is slow
    names = [b["name"] for b in template["benchmarks"]]
    rng = np.random.default_rng(1)
    n = 2 * site.MAX_MARKS + 7
    step = history_year.Step(names[0], n - 40, 1.25)  # a step late in the history
    runs = []
    for i in range(n):
        when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=i)
        data = history_year.make_run(template, index=i, when=when, cases=names, rng=rng, steps=[step], noise=0.01)
        runs.append(Run(f"/s/{i:04d}_x-pr.json", data))
    trends = {t.series.name: t for t in site.trends(runs)}
    stepped = trends[names[0]]
    assert [c["index"] for c in stepped.change_points] == [n - 40]
    assert stepped.change_points[0]["commit"] == history_year.commit_of(n - 40)
    pages = {r.path: site.run_page(r) for r in runs}
    chart = site.trend_chart(stepped, pages, "../")
    assert chart.count("<circle") == site.MAX_MARKS and chart.count('class="cp worse"') == 1
    # Twice the history, the same markup size within the digits of its numbers.
    short = site.trend_chart(site.trends(runs[: n // 2 + 20])[0], pages, "../")
    assert short.count("<circle") == site.MAX_MARKS and abs(len(chart) - len(short)) < 0.1 * len(chart)
    assert len(build_series(runs, "median_ms")[0].points) == n


@needs_ruptures
def test_page_weight_is_bounded_by_the_number_of_cases(tmp_path):
    """index.html: a row per case (a sparkline of SPARK_POINTS points, ~25 bytes each) and a row per
    verdict; a model page: a chart per case of at most MAX_MARKS linked markers (~330 bytes each)."""
    template = json.loads(history_year.CPU_BASELINE.read_text())
    store = tmp_path / "store"
    pr = history_year.pr_tier_names(template, 4)
    history_year.store_runs(store, template, days=3, pushes_per_day=4, pr_cases=pr, nightly=True)
    out = tmp_path / "site"
    argv = ["report", "--site", str(out), "--store", str(store), "--baselines", str(tmp_path / "none")]
    assert main([*argv, "--pyproject", str(empty_pyproject(tmp_path))]) == 0
    cases = len(template["benchmarks"])
    index = (out / "index.html").stat().st_size
    assert index <= 20_000 + cases * (site.SPARK_POINTS * 25 + 700) + cases * 300
    for page in (out / "m").glob("*.html"):
        text = page.read_text()
        charts = text.count('<svg class="chart"')
        assert charts >= 1 and len(text.encode()) <= 20_000 + charts * (site.MAX_MARKS * 330 + 3_000)


@pytest.mark.skipif(chromium() is None, reason="no Chromium: ./scripts/install-chromium")
@needs_ruptures
def test_every_page_loads_offline_in_headless_chromium_with_its_charts(real_site, tmp_path):
    pages = _pages(real_site)
    for name, text in pages.items():
        shown = render_page(chromium(), text, tmp_path / name.replace("/", "_"), height=1200)
        if name == "index.html":
            assert shown.probe["charts_drawn"] >= 1 and shown.probe["first_chart_px"] < 1200
            assert "physicsnemo-block [tiny] baseline" in shown.dom
        elif name.startswith("m/"):
            assert shown.probe["charts_drawn"] == 1 and 'class="cp worse"' in shown.dom
        else:
            assert "median ms" in shown.dom and "physicsnemo-block [tiny] baseline" in shown.dom


@needs_ruptures
def test_a_year_long_series_is_searched_in_stretches_and_the_step_placed_at_its_run():
    """4,015 runs (a year of pushes): PELT on stretch medians, each step then placed exactly; an
    accepted step stays a boundary; a flat year has none."""
    from perfgate.history.changepoints import LONG, segment_starts

    rng = np.random.default_rng(7)
    n = 4015
    assert n > LONG
    for at in (333, 2007, n - 50):
        values = np.exp(rng.normal(0, 0.02, n))
        values[at:] *= 1.15
        assert segment_starts(values) == [at]
    flat = np.exp(rng.normal(0, 0.02, n))
    assert segment_starts(flat) == []
    flat[1200:] *= 1.15
    assert segment_starts(flat, fixed=[700]) == [700, 1200]


def test_the_dashboard_links_only_https_urls(tmp_path):
    """A run's `source` on the data branch is data: a `javascript:` or `data:` URL written there
    (by a writer the ruleset should have stopped) renders as no link (a --commit-url template that
    is not https is refused before: the next test)."""
    data = history_store.validate(RUNS[0], None, commit=_commit(RUNS[0]), tier="pr")
    store = tmp_path / "store"
    history_store.add_run(store, data, source="https://github.com/OWNER/REPO/actions/runs/1")
    stored = next(store.rglob("0001_*.json"))
    for hostile in ("javascript:alert(document.domain)", "JavaScript:alert(1)", "data:text/html,<b>x</b>",
                    "https://evil.example/\" onmouseover=\"alert(1)", " https://x"):  # fmt: skip
        run = json.loads(stored.read_text())
        run["perfgate_history"]["source"] = hostile
        stored.write_text(json.dumps(run))
        out = tmp_path / "site"
        argv = ["report", "--site", str(out), "--store", str(store), "--baselines", str(tmp_path / "none")]
        argv += ["--commit-url", COMMIT_URL, "--pyproject", str(empty_pyproject(tmp_path))]
        assert main(argv) == 0
        hrefs = [h for page in _pages(out).values() for h in re.findall(r'href="([^"]*)"', page)]
        assert hrefs and all(h.startswith(("https://", "../", "#")) or not re.match(r"\w+:", h) for h in hrefs), hrefs
        assert not any("alert" in h or h.lower().startswith(("javascript:", "data:")) for h in hrefs), hrefs
    assert site.https_url("https://github.com/OWNER/REPO/actions/runs/1") is not None


_FIELDS = "needs exactly one plain {commit} field and no other"
_NOT_HTTPS = "is not an https:// address once {commit} is filled in (the dashboard links https only)"


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("https://x/{nope}", f"{_FIELDS} (found {{nope}})"),
        ("https://x/{commit}/{commit}", f"{_FIELDS} (found {{commit}}, {{commit}})"),
        ("https://x/commit", f"{_FIELDS} (found none)"),
        ("https://x/{", "Single '{' encountered in format string; write a literal brace as {{ or }}"),
        ("http://x/{commit}", _NOT_HTTPS),
        ("javascript:alert('{commit}')", _NOT_HTTPS),
    ],
    ids=["other-field", "two-fields", "no-field", "lone-brace", "http", "javascript"],
)
def test_a_commit_url_that_would_link_nothing_is_refused_before_any_run_is_read(tmp_path, capsys, template, reason):
    out = tmp_path / "site"
    argv = ["report", "--site", str(out), "--store", str(DATA), "--commit-url", template, "--no-history"]
    assert main([*argv, "--pyproject", str(empty_pyproject(tmp_path))]) == 4
    assert capsys.readouterr().err == (
        f"perfgate report: --commit-url {template!r}: {reason}; e.g. --commit-url "
        "https://github.com/OWNER/REPO/commit/{commit}\n"
    )
    assert not out.exists()
    assert site.commit_url_error(COMMIT_URL) is None


def test_a_source_that_is_not_https_is_refused_before_it_is_stored(tmp_path):
    data = history_store.validate(RUNS[0], None, commit=_commit(RUNS[0]), tier="pr")
    with pytest.raises(history_store.StoreError, match="--source 'javascript:alert\\(1\\)'"):
        history_store.add_run(tmp_path / "store", data, source="javascript:alert(1)")
    assert not (tmp_path / "store").exists()


@pytest.fixture(scope="module")
def year_site(tmp_path_factory) -> Path:
    """The dashboard of a few days of the synthetic history (tests/history/year.py): the GPU
    runner's tier each push and its full matrix nightly, the CPU tier's counted runs each push,
    judged against each machine's recorded run and the committed count baseline."""
    tmp = tmp_path_factory.mktemp("year-site")
    store, baselines = history_year.dashboard_history(tmp, days=4, pushes_per_day=6)
    out = tmp / "site"
    argv = ["report", "--site", str(out), "--store", str(store), "--baselines", str(baselines)]
    assert main([*argv, "--pyproject", str(Path(__file__).resolve().parents[2] / "pyproject.toml")]) == 0
    return out


_ROW = re.compile(
    r'<tr><td class="l"><span class="badge [\w-]+">([^<]+)</span></td><td class="l case"><a [^>]*>([^<]+)</a>'
    r'(?:<br><span class="sub">on ([^<]+)</span>)?</td><td class="l">([^<]+)</td><td>[^<]*</td><td[^>]*>([^<]*)</td>'
    r'(?:<td class="l sub">([^<]*)</td>)?'
)


def _index_rows(index: str) -> tuple[list[tuple[str, ...]], dict[str, list[tuple[str, ...]]]]:
    """The index's cases as (status, case, machine, figure, change vs baseline (tolerance), beside):
    the needs-attention table's, and per machine the others'."""
    att = index[index.index('id="attention"') : index.index('id="cases"')]
    rows = [m.groups() for m in _ROW.finditer(att)]
    machines = {}
    for fp, table in re.findall(r"<summary><b>([^<]+)</b>.*?(<table class=\"cases\">.*?</table>)", index, re.S):
        machines[fp] = [(r[0], r[1], fp, *r[3:]) for r in (m.groups() for m in _ROW.finditer(table))]
    return rows, machines


@needs_ruptures
def test_the_index_heads_each_case_by_its_gating_figure_and_puts_attention_first(year_site):
    from perfgate.history.dashboard import ATTENTION

    attention, machines = _index_rows((year_site / "index.html").read_text().replace("&amp;", "&"))
    ranks = [ATTENTION.index(r[0]) for r in attention]
    assert ranks == sorted(ranks) and ranks[-1] < ATTENTION.index("no baseline"), attention
    # The GPU's self-forcing bf16 variants stepped +15% (tolerance 5%): they lead, by their median ms.
    assert attention[0][0] == "beyond tolerance" and "self-forcing-dit" in attention[0][1]
    assert attention[0][2].startswith("cuda-") and attention[0][3] == "median ms"
    # The counted CPU case whose instructions stepped up 2% (tolerance 0.5% in pyproject.toml): headed
    # by its instructions, milliseconds beside; the other counted cases are unchanged, further down.
    (cpu,) = [r for r in attention if r[2].startswith("cpu-")]
    assert cpu[:2] == ("beyond tolerance", "owl-image-decoder [tiny] baseline")
    assert cpu[3:5] == ("instructions per step", "+2.0% (±0.5%)") and cpu[5].endswith("median ms")
    (cpu_fp,) = [fp for fp in machines if fp.startswith("cpu-")]
    counted = [r for r in machines[cpu_fp] if r[3] == "instructions per step"]
    assert len(counted) == 10 and {r[0] for r in counted} == {"within tolerance"}
    assert {r[3] for fp, rows in machines.items() if fp != cpu_fp for r in rows} == {"median ms"}
    for rows in machines.values():
        assert all(ATTENTION.index(r[0]) >= ATTENTION.index("no baseline") for r in rows)


@needs_ruptures
def test_a_model_page_draws_its_variants_together_around_the_baseline_and_tolerance(year_site):
    page = (year_site / "m" / "self-forcing-dit.html").read_text()
    charts = re.findall(r'<svg class="chart".*?</svg>', page, re.S)
    # One chart per group (machine, size, options, figure), every variant of the group on it.
    headings = re.findall(r"<h3>([^<]+) <span class=\"sub\">on ([^ ]+) · ([^,]+),", page)
    assert len(charts) + page.count("no history to draw yet") == len(headings) and len(charts) >= 3
    gpu = next(c for c, h in zip(charts, headings) if h[0] == "self-forcing-dit [1.3b]" and h[1].startswith("cuda"))
    assert gpu.count("<polyline") == 5  # baseline, autocast-bf16, bf16, cudagraphs, int8-dynamic
    for chart in charts:
        assert '<line class="zero"' in chart and ">baseline</text>" in chart and "%</text>" in chart
        assert re.search(r'<rect class="band"[^>]*><title>tolerance ±\d', chart)
    assert '<line class="noise"' in gpu  # the baselines' measured noise
    # The optimisation history: each variant's speedup over eager in the newest full run.
    opt = page[page.index('id="optimisation"') : page.index('id="charts"')]
    assert "speedup over eager" in opt and opt.count("<caption>") >= 2
    assert re.search(r"<td class=\"l\">bf16</td><td>[\d.]+</td><td class=\"l\"><span class=\"bar\"", opt)


@pytest.mark.skipif(chromium() is None, reason="no Chromium: ./scripts/install-chromium")
@needs_ruptures
def test_every_page_fits_a_1366_px_window(year_site, tmp_path):
    """No page scrolls sideways in a 1366-px-wide window (the commonest laptop width): the index,
    every model page and a run page, measured in headless Chromium."""
    names = ["index.html", *sorted(str(p.relative_to(year_site)) for p in (year_site / "m").glob("*.html"))]
    names.append(str(sorted((year_site / "r").rglob("*-all.html"))[-1].relative_to(year_site)))
    widths = {}
    for name in names:
        shown = render_page(chromium(), (year_site / name).read_text(), tmp_path / name.replace("/", "_"), 1366, 900)
        widths[name] = (shown.probe["scroll_width_px"], shown.probe["client_width_px"])
        assert shown.probe["charts_drawn"] >= 1 or name.startswith("r/")
    assert all(scroll <= client for scroll, client in widths.values()), widths


@needs_ruptures
def test_the_pull_request_summary_words_a_change_as_the_dashboard_does(year_site):
    """The gate's own verdict on the newest counted run (perfgate.gate.instructions against the
    committed count baseline), in the Markdown a pull request gets: the same figure name, values,
    change and tolerance as the dashboard's row for the case."""
    from perfgate.gate.instructions import judge_instructions
    from perfgate.gate.policy import load
    from perfgate.history.runs import load_run
    from perfgate.output import markdown
    from perfgate.record import CaseRecord

    policy = load(Path(__file__).resolve().parents[2] / "pyproject.toml")
    store = year_site.parent / "store"
    newest = load_run(sorted(p for p in store.rglob("*.json") if p.parent.name.startswith("cpu-"))[-1])
    bench = next(b for b in newest.benchmarks if b.case_id == "owl-image-decoder-tiny-baseline")
    counts = json.loads(history_year.COUNTS_BASELINE.read_text())["cases"][bench.case_id]
    base = CaseRecord.from_extra_info({k: counts[k] for k in ("instructions_per_step", "instructions")})
    rec = bench.record
    settings = policy.settings(rec.model, rec.variant, "instructions", rec.device)
    verdict = judge_instructions(bench.fullname, rec, base, settings)
    md = markdown.job_summary([newest], [verdict], policy=policy)
    index = (year_site / "index.html").read_text()
    row = re.search(
        r'<a href="[^"]*">owl-image-decoder \[tiny\] baseline</a><br><span class="sub">on [^<]+</span></td>'
        r'<td class="l">([^<]+)</td><td>([^<]+)</td>'
        r'<td title="baseline ([^ ]+ M) [^"]*">([^<]+)</td>',
        index,
    )
    figure, value, baseline, change = row.groups()
    assert (figure, change) == ("instructions per step", "+2.0% (±0.5%)")
    assert f"| owl-image-decoder [tiny] baseline | {figure} | {baseline} | {value} | {change} |" in md
    assert "| case | figure | baseline | current | change vs baseline (tolerance) | why |" in md
