"""Synthetic history from real runs' shapes: a real result file (its cases, fingerprint, every field
perfgate wrote) copied once per commit with its times scaled by a drift, lognormal noise and chosen
steps, then stored through the real path (perfgate.history_store.validate and add_run), as the
hosted job stores a GPU run. Used by the store and site tests (a few weeks) and by
`python -m tests.history.year` (a year: the sizes and the dashboard's weight in docs/history-store.md;
`--screenshots DIR`: the dashboard of GPU and counted CPU runs, docs/img's PNGs).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from perfgate.history import store as history_store

ROOT = Path(__file__).resolve().parents[2]
H100_RUN = Path("/work/shared/evidence/2026-11-23-h100/c1.json")  # 48 cases; used when present
CPU_BASELINE = ROOT / "baselines" / "cpu-amd-epyc-f26m2-t2-6c90885578" / "0001_baseline.json"  # committed
COUNTS_BASELINE = sorted((ROOT / "baselines" / "counts").glob("*.json"))[0]  # committed: the portable count baseline
_STAT_TIMES = ("min", "max", "mean", "median", "stddev", "iqr", "q1", "q3", "ld15iqr", "hd15iqr", "total")


@dataclass(frozen=True)
class Step:
    case_glob: str  # the test name, or an fnmatch glob on it
    at: int  # the first push (0-based) at the new level
    factor: float  # 1.15: 15% slower


def scaled(bench: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """One benchmark entry with every time multiplied by `factor` (throughput divided)."""
    b = copy.deepcopy(dict(bench))
    info, stats = b["extra_info"], b["stats"]
    for k, v in list(info.items()):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k.endswith("_ms"):
            info[k] = v * factor
        elif isinstance(v, list) and k.endswith("_ms"):
            info[k] = [x * factor for x in v]
    if isinstance(info.get("normalised_median"), (int, float)):
        info["normalised_median"] *= factor
    if isinstance(info.get("throughput"), dict):
        info["throughput"] = {k: v / factor for k, v in info["throughput"].items()}
    for k in _STAT_TIMES:
        if isinstance(stats.get(k), (int, float)):
            stats[k] *= factor
    if isinstance(stats.get("ops"), (int, float)):
        stats["ops"] /= factor
    if isinstance(stats.get("data"), list):
        stats["data"] = [x * factor for x in stats["data"]]
    return b


def counted(bench: dict[str, Any], factor: float) -> dict[str, Any]:
    """An entry's instruction counts moved by a step's `factor` only: counts have no timing noise
    (unchanged code counts the same in every pinned process)."""
    info = bench["extra_info"]
    if isinstance(info.get("instructions_per_step"), (int, float)):
        info["instructions_per_step"] *= factor
        if isinstance(info.get("instructions"), dict) and isinstance(info["instructions"].get("total"), int):
            info["instructions"] = {**info["instructions"], "total": round(info["instructions"]["total"] * factor)}
    return bench


def cpu_counts_template(counts: Path = COUNTS_BASELINE, timed: Path = CPU_BASELINE) -> dict[str, Any]:
    """A CPU run of the counted tier as perfgate writes it with its count pass: the committed CPU
    baseline's entries of the cases the committed count baseline holds, each with that file's
    instruction, op and kernel counts (the fields the count pass writes into the record)."""
    run = json.loads(timed.read_text())
    cases = json.loads(counts.read_text())["cases"]
    kept = []
    for b in run["benchmarks"]:
        case = b["name"][b["name"].index("[") + 1 : -1] if b["name"].endswith("]") else b["name"]
        if case in cases:
            b["extra_info"].update({k: v for k, v in cases[case].items() if k != "instructions_functions"})
            kept.append(b)
    run["benchmarks"] = kept
    return run


def commit_of(i: int) -> str:
    return hashlib.sha1(f"synthetic commit {i}".encode()).hexdigest()


def make_run(
    template: Mapping[str, Any],
    *,
    index: int,
    when: datetime,
    cases: Sequence[str] | None,
    rng: np.random.Generator,
    steps: Sequence[Step] = (),
    noise: float = 0.02,
) -> dict[str, Any]:
    """The template as run `index` at commit commit_of(index), at `when`, of `cases` (test names;
    None: all), each time scaled by lognormal noise and the steps it has reached."""
    from fnmatch import fnmatchcase

    run = copy.deepcopy(dict(template))
    sha = commit_of(index)
    run["commit_info"] = {**run["commit_info"], "id": sha, "time": when.isoformat(), "dirty": False, "branch": "main"}
    run["datetime"] = (when + timedelta(minutes=20)).isoformat()
    run["perfgate"] = {**run["perfgate"], "commit": sha, "recorded_at": run["datetime"]}
    benches = []
    for b in template["benchmarks"]:
        if cases is not None and b["name"] not in cases:
            continue
        stepped = 1.0
        for s in steps:
            if index >= s.at and (b["name"] == s.case_glob or fnmatchcase(b["name"], s.case_glob)):
                stepped *= s.factor
        benches.append(counted(scaled(b, stepped * math.exp(rng.normal(0, noise))), stepped))
    run["benchmarks"] = benches
    return run


def verdicts_for(run: Mapping[str, Any]) -> dict[str, Any]:
    """A verdicts file as the session writes it: every case unchanged (the store keeps what it gets)."""
    return {
        "fingerprint_id": run["perfgate"]["fingerprint_id"],
        "verdicts": [
            {"case": b["fullname"], "metric": "latency", "verdict": "unchanged", "change_pct": 0.0}
            for b in run["benchmarks"]
        ],
    }


def store_runs(
    store: Path,
    template: Mapping[str, Any],
    *,
    days: int,
    pushes_per_day: int,
    pr_cases: Sequence[str],
    steps: Sequence[Step] = (),
    nightly: bool = True,
    seed: int = 0,
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
    git: bool = False,
) -> list[Path]:
    """`days` of main: `pushes_per_day` PR-tier runs a day and (nightly) one full-matrix run at the
    day's last commit, each validated and added as the hosted job does (one git commit per run
    when `git`)."""
    rng = np.random.default_rng(seed)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        results, verdicts = Path(tmp) / "results.json", Path(tmp) / "verdicts.json"
        index = 0
        for day in range(days):
            for push in range(pushes_per_day + (1 if nightly else 0)):
                tier = "all" if push == pushes_per_day else "pr"
                if tier == "pr":
                    index += 1
                when = start + timedelta(days=day, hours=8 + push)
                run = make_run(
                    template, index=index, when=when, cases=pr_cases if tier == "pr" else None, rng=rng, steps=steps
                )
                results.write_text(json.dumps(run))
                verdicts.write_text(json.dumps(verdicts_for(run)))
                data = history_store.validate(results, verdicts, commit=commit_of(index), tier=tier)
                added = history_store.add_run(store, data, source=f"https://github.com/OWNER/REPO/actions/runs/{index}")
                if added.path is not None:
                    written.append(added.path)
                    if git:
                        subprocess.run(["git", "-C", str(store), "add", "-A"], check=True)
                        subprocess.run(
                            ["git", "-C", str(store), "commit", "-qm", f"{tier} run at {commit_of(index)[:12]}"],
                            check=True,
                        )
    return written


def dashboard_history(
    out: Path, *, days: int, pushes_per_day: int, seed: int = 0, start: datetime = datetime(2026, 12, 1, tzinfo=UTC)
) -> tuple[Path, Path]:
    """What the dashboard reads on main, as (store, baselines root): the GPU runner's runs (the
    pull-request tier each push, the full matrix nightly) and the CPU tier's counted runs each
    push, in one store; the baselines they are judged against: each machine's recorded run and the
    committed portable count baseline. Steps: self-forcing bf16 +15% on the GPU halfway, vjepa2
    baseline -10% on the GPU after a third, owl-image-decoder +2% instructions on the CPU at
    three quarters (the counting gate's tolerance is 1%)."""
    gpu, cpu = load_template(), cpu_counts_template()
    store, baselines = out / "store", out / "baselines"
    pushes = days * pushes_per_day
    gpu_steps = [Step("*self-forcing*bf16]", pushes // 2, 1.15), Step("*vjepa2*baseline]", pushes // 3, 0.9)]
    store_runs(store, gpu, days=days, pushes_per_day=pushes_per_day, pr_cases=pr_tier_names(gpu),
               steps=gpu_steps, seed=seed, start=start)  # fmt: skip
    cpu_steps = [Step("*owl-image-decoder*", pushes * 3 // 4, 1.02)]
    store_runs(store, cpu, days=days, pushes_per_day=pushes_per_day, pr_cases=[b["name"] for b in cpu["benchmarks"]],
               steps=cpu_steps, nightly=False, seed=seed + 1, start=start)  # fmt: skip
    for run_file in (H100_RUN if H100_RUN.is_file() else CPU_BASELINE, CPU_BASELINE):
        fp = json.loads(run_file.read_text())["perfgate"]["fingerprint_id"]
        (baselines / fp).mkdir(parents=True, exist_ok=True)
        (baselines / fp / "0001_baseline.json").write_bytes(run_file.read_bytes())
    (baselines / "counts").mkdir(parents=True, exist_ok=True)
    (baselines / "counts" / COUNTS_BASELINE.name).write_bytes(COUNTS_BASELINE.read_bytes())
    return store, baselines


def load_template(path: Path = H100_RUN) -> dict[str, Any]:
    return json.loads((path if path.is_file() else CPU_BASELINE).read_text())


def pr_tier_names(template: Mapping[str, Any], n: int = 19) -> list[str]:
    """The first n cases of the template: the size of the GPU pull-request tier (19 cases)."""
    return [b["name"] for b in template["benchmarks"][:n]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="a synthetic year of main runs: store sizes and the dashboard")
    p.add_argument("out", type=Path)
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--pushes", type=int, default=10)
    p.add_argument("--site-only", action="store_true", help="measure the site of an existing OUT/store")
    p.add_argument("--screenshots", type=Path, help="the dashboard of OUT/store (GPU and counted CPU runs): PNGs here")
    a = p.parse_args(argv)
    if a.screenshots:
        print(json.dumps(screenshots(a.out, a.screenshots, days=a.days, pushes=a.pushes), indent=1))
        return 0
    if a.site_only:
        report = measure_site(a.out / "store", a.out / "site")
        print(json.dumps(report, indent=1))
        (a.out / "site-measure.json").write_text(json.dumps(report, indent=1))
        return 0
    template = load_template()
    store = a.out / "store"
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "perfgate-history", str(store)], check=True)
    subprocess.run(["git", "-C", str(store), "config", "user.email", "h@x"], check=True)
    subprocess.run(["git", "-C", str(store), "config", "user.name", "h"], check=True)
    steps = [Step("*self-forcing*bf16]", a.days * a.pushes // 2, 1.15), Step("*vjepa2*baseline]", a.days * 3, 0.9)]
    t0 = time.monotonic()
    written = store_runs(
        store, template, days=a.days, pushes_per_day=a.pushes, pr_cases=pr_tier_names(template), steps=steps, git=True
    )
    stored_s = time.monotonic() - t0
    sizes = {"pr": [], "all": []}
    for f in written:
        sizes["pr" if f.name.endswith("-pr.json") else "all"].append(f.stat().st_size)
    subprocess.run(["git", "-C", str(store), "gc", "-q"], check=True)
    packed = subprocess.run(
        ["git", "-C", str(store), "count-objects", "-v"], capture_output=True, text=True, check=True
    ).stdout
    pack_kib = int(next(line.split()[1] for line in packed.splitlines() if line.startswith("size-pack")))
    report = {
        "template": str(H100_RUN if H100_RUN.is_file() else CPU_BASELINE),
        "template_cases": len(template["benchmarks"]),
        "runs": {k: len(v) for k, v in sizes.items()},
        "bytes_per_run_median": {k: int(np.median(v)) for k, v in sizes.items() if v},
        "bytes_per_case_median": {
            k: int(np.median(v)) // (len(pr_tier_names(template)) if k == "pr" else len(template["benchmarks"]))
            for k, v in sizes.items()
            if v
        },
        "files_total_bytes": sum(map(sum, sizes.values())),
        "git_pack_bytes": pack_kib * 1024,
        "store_seconds": round(stored_s, 1),
    }
    print(json.dumps(report, indent=1))
    (a.out / "store-sizes.json").write_text(json.dumps(report, indent=1))
    return 0


FIRST_CHART_PROBE = """<script>window.__firstChartMs = performance.now();</script>"""
END_PROBE = """<script>(function () {
  var nav = performance.getEntriesByType("navigation")[0];
  document.body.setAttribute("data-timing", JSON.stringify({
    first_chart_parsed_ms: window.__firstChartMs,
    response_end_ms: nav ? nav.responseEnd : null,
    charts: document.querySelectorAll("svg").length
  }));
})();</script>"""


def time_to_first_chart(exe: str, page: Path, work: Path) -> dict[str, Any]:
    """Load `page` from disk in headless Chromium (no network) with two probes in a copy beside it:
    performance.now() when the parser has passed the first chart's </svg>, and the count of charts."""
    import html as html_lib
    import re

    text = page.read_text()
    text = text.replace("</svg>", "</svg>" + FIRST_CHART_PROBE, 1).replace("</body>", END_PROBE + "</body>")
    probe = page.with_name(f".probe-{page.name}")
    probe.write_text(text)
    cmd = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", f"--user-data-dir={work / 'profile'}", "--dump-dom",
        "--window-size=1400,1000", probe.as_uri(),
    ]  # fmt: skip
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    wall_s = time.monotonic() - t0
    probe.unlink()
    found = re.search(r'data-timing="([^"]*)"', out)
    return {**json.loads(html_lib.unescape(found.group(1))), "chromium_wall_s": round(wall_s, 2)} if found else {}


def measure_site(store: Path, out: Path) -> dict[str, Any]:
    from tests.browser import chromium
    from tests.helpers import empty_pyproject

    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "perfgate", "report", "--site", str(out), "--store", str(store), "--baselines",
         str(out / "none"), "--pyproject", str(empty_pyproject(out.parent)),
         "--commit-url", "https://github.com/OWNER/REPO/commit/{commit}"],
        capture_output=True, text=True,
    )  # fmt: skip
    build_s = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    pages = sorted(out.rglob("*.html"))
    models = sorted((out / "m").glob("*.html"), key=lambda p: p.stat().st_size)
    result = {
        "build_s": round(build_s, 1),
        "pages": len(pages),
        "site_bytes": sum(p.stat().st_size for p in pages),
        "index_bytes": (out / "index.html").stat().st_size,
        "model_page_bytes_max": models[-1].stat().st_size if models else 0,
        "model_page_largest": models[-1].name if models else None,
    }
    exe = chromium()
    if exe:
        runs = [time_to_first_chart(exe, out / "index.html", out) for _ in range(3)]
        result["index_first_chart_parsed_ms"] = sorted(r["first_chart_parsed_ms"] for r in runs)
        result["index_charts"] = runs[0]["charts"]
        if models:
            runs = [time_to_first_chart(exe, models[-1], out) for _ in range(3)]
            result["model_first_chart_parsed_ms"] = sorted(r["first_chart_parsed_ms"] for r in runs)
            result["model_charts"] = runs[0]["charts"]
    return result


def screenshots(out: Path, shots: Path, *, days: int, pushes: int) -> dict[str, Any]:
    """The dashboard of `dashboard_history` in headless Chromium at 1366 px wide: the top of the
    index and of a model page as small PNGs (128 colours) in `shots`, each page's scroll width."""
    from PIL import Image

    from tests.browser import chromium, render_page

    if not (out / "store").is_dir():
        dashboard_history(out, days=days, pushes_per_day=pushes)
    site = out / "site"
    r = subprocess.run(
        [sys.executable, "-m", "perfgate", "report", "--site", str(site), "--store", str(out / "store"), "--baselines",
         str(out / "baselines"), "--pyproject", str(ROOT / "pyproject.toml"), "--title", "perfgate history",
         "--commit-url", "https://github.com/OWNER/REPO/commit/{commit}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    shots.mkdir(parents=True, exist_ok=True)
    result = {}
    for name, png, height in (
        ("index.html", "dashboard-index.png", 1000),
        ("m/owl-image-decoder.html", "dashboard-model.png", 1400),
    ):
        shown = render_page(chromium(), (site / name).read_text(), out / "shots" / png, width=1366, height=height)
        with Image.open(shown.screenshot) as im:
            im.convert("RGB").quantize(128).save(shots / png, optimize=True)
        result[name] = {k: shown.probe[k] for k in ("scroll_width_px", "client_width_px", "page_height_px")}
    return result


if __name__ == "__main__":
    sys.exit(main())
