"""The one Markdown summary: the job summary a pytest run appends to $GITHUB_STEP_SUMMARY and what
`perfgate report --markdown` writes for a pull-request comment. Regressions first, then counts of
the other verdicts (their table folded), the fastest variant per model, links to the artifacts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perfgate import gate
from perfgate.gate.metrics import GATED
from perfgate.gate.policy import Policy
from perfgate.gate.verdict_file import VerdictSet, as_verdict_set
from perfgate.history.runs import Run
from perfgate.output import wording
from perfgate.output.report_data import case_name, fastest_per_model, labels_by_fullname, verdict_counts
from perfgate.output.text import fmt_num

if TYPE_CHECKING:
    from perfgate.ab.counts import CountsAB
    from perfgate.measure.health import Health

# Names (models, variants, cases) and messages come from the code under test, so from the pull
# request: shown as they are, `<img src=x>`, `[link](url)` or `@someone` would render as HTML, a link
# or a mention in the job summary and the pull-request comment. No Markdown library escapes text for
# GitHub's dialect, hence these few rules: HTML's three characters as entities; the inline markup
# characters backslash-escaped (`_` only where it can open or close emphasis, so `median_ms` stays
# readable); the link opener `](` broken (brackets alone link nothing, so `[tiny]` stays); and a
# zero-width space after `@`, so no one is mentioned.
_MD_ESCAPES = [
    (re.compile(r"&"), "&amp;"),
    (re.compile(r"<"), "&lt;"),
    (re.compile(r">"), "&gt;"),
    (re.compile(r"([\\`*~|])"), r"\\\1"),
    (re.compile(r"\]\("), r"]\\("),
    (re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"), r"\\_"),
    (re.compile(r"@(?=\w)"), "@&#8203;"),
    (re.compile(r"\s*\n\s*"), " "),
]


def md_text(text: Any) -> str:
    """`text` as literal Markdown text, safe in a table cell: no HTML, links, mentions or emphasis."""
    out = str(text)
    for pattern, repl in _MD_ESCAPES:
        out = pattern.sub(repl, out)
    return out


_md = md_text  # the short name the tables below use


def _code(text: Any) -> str:
    """`text` as an inline code span: a backtick fence longer than any backtick run inside it."""
    text = str(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _change(v: gate.Verdict) -> str:
    return "-" if v.change_pct is None else wording.pct(v.change_pct)


# The gate's relative tolerances, per metric (accuracy's is a factor, kernel launches have none).
_SETTING = {m.name: m.setting for m in GATED if m.setting.endswith("_tolerance") and m.name != "kernels"}


def _change_cell(v: gate.Verdict, runs: Sequence[Run], policy: Policy | None) -> str:
    """The change as the dashboard writes it: '+2.0% (±0.5%)', the tolerance the gate's for the case."""
    if v.change_pct is None:
        return "-"
    setting = _SETTING.get(v.metric)
    rec = next((b.record for r in runs for b in r.benchmarks if b.fullname == v.case), None)
    if policy is None or setting is None or rec is None:
        return wording.pct(v.change_pct)
    settings = policy.settings(rec.model or "", rec.variant or "", v.metric, str(rec.device or ""))
    return wording.change_cell(v.change_pct, getattr(settings, setting))


def _value(value: float | None, v: gate.Verdict) -> str:
    return wording.figure_value(value, v.metric) if v.metric in ("instructions", "kernels") else fmt_num(value)


def _figure(v: gate.Verdict) -> str:
    return wording.verdict_metric_name(v.metric, v.compared)


def _as_runs(runs: Sequence[Run | Mapping[str, Any]]) -> list[Run]:
    return [
        r if isinstance(r, Run) else Run(str((r.get("perfgate") or {}).get("recorded_at", "run")), dict(r))
        for r in runs
    ]


def _heading(vs: VerdictSet | None, failing: Sequence[gate.Verdict]) -> str:
    if vs is None:
        return "### perfgate: no verdicts (measured only)"
    if not vs.gate_enabled:
        return "### perfgate: measured only (gate off)"
    if failing:
        return f"### perfgate: :x: {len(failing)} regression(s)"
    return "### perfgate: :white_check_mark: no regression"


def _more(n: int, shown: int) -> list[str]:
    return [f"\n… and {n - shown} more in the report."] if n > shown else []


def job_summary(
    runs: Sequence[Run | Mapping[str, Any]],
    verdicts: VerdictSet | Mapping[str, Any] | Sequence[Any] | None,
    links: Mapping[str, str] | None = None,
    *,
    max_rows: int = 15,
    policy: Policy | None = None,
) -> str:
    """`runs`: result files (Run or their JSON); `verdicts`: a VerdictSet, the verdicts file's JSON
    or a list of Verdicts (None: no verdicts file); `links`: artifact name -> URL, in order;
    `policy`: the gate's, for the tolerance beside each change. Figures, changes and tolerances are
    worded as the dashboard words them (perfgate.output.wording)."""
    runs, vs = _as_runs(runs), as_verdict_set(verdicts)
    labels = labels_by_fullname(runs)
    all_v = gate.sort_verdicts(vs.verdicts) if vs else []
    failing = gate.failing(all_v, fail_on_improvement=vs.fail_on_improvement) if vs else []
    out = [_heading(vs, failing), ""]
    if failing:
        out += [
            f"| case | figure | baseline | current | {wording.CHANGE_TOLERANCE} | why |",
            "|---|---|--:|--:|--:|---|",
        ]
        out += [
            f"| {_md(case_name(v.case, labels))} | {_md(_figure(v))} | {_value(v.baseline, v)} | "
            f"{_value(v.current, v)} | {_change_cell(v, runs, policy)} | {_md(v.message or v.verdict)} |"
            for v in failing[:max_rows]
        ]
        out += [*_more(len(failing), max_rows), ""]
    commits = sorted({(r.commit or "-")[:7] + (" (dirty)" if r.dirty else "") for r in runs})
    fps = sorted({r.fingerprint_id or "unknown" for r in runs})
    n_cases = sum(len(r.benchmarks) for r in runs)
    facts = [
        f"{n_cases} case(s) at commit {', '.join(f'`{c}`' for c in commits) or '-'} on "
        f"{', '.join(f'`{f}`' for f in fps)}"
    ]
    facts += [f"{n} {k}" for k, n in verdict_counts(all_v).items() if k not in gate.FAILING]
    if vs and vs.skipped:
        facts.append(f"{len(vs.skipped)} skipped")
    out += [" · ".join(facts), ""]
    out += [f"{n}\n" for n in (vs.notices if vs else ())]
    failing_ids = {id(v) for v in failing}
    others = [v for v in all_v if id(v) not in failing_ids and v.verdict != gate.UNCHANGED]
    if others:
        out += [
            f"<details><summary>Other verdicts ({len(others)})</summary>",
            "",
            f"| case | figure | current | {wording.CHANGE_TOLERANCE} | verdict |",
            "|---|---|--:|--:|---|",
        ]
        out += [
            f"| {_md(case_name(v.case, labels))} | {_md(_figure(v))} | {_value(v.current, v)} | "
            f"{_change_cell(v, runs, policy)} | {_md(v.verdict)} |"
            for v in others[:max_rows]
        ]
        out += [*_more(len(others), max_rows), "", "</details>", ""]
    fastest = fastest_per_model(runs)
    if fastest:
        out += [f"| model | fastest variant | median ms | {wording.SPEEDUP} |", "|---|---|--:|--:|"]
        out += [f"| {_md(m)} | {_md(var)} | {fmt_num(med)} | {wording.speedup(sp)} |" for m, var, med, sp in fastest]
        out.append("")
    if links:
        out.append("Artifacts: " + " · ".join(f"[{_md(name)}]({url})" for name, url in links.items()))
    return "\n".join(out).rstrip() + "\n"


# What same-job A/B is for (in the `pr` mode no other gate judges wall or device time), and whether it
# could compare a case at all: each verdict of these shows.
AB_METRICS = ("run", "latency", "device_time")


def ab_summary(result: Any, verdicts: Sequence[gate.Verdict], *, max_rows: int = 30) -> str:
    """`perfgate ab`'s Markdown: the failing verdicts first, then every wall- and device-time verdict
    (an inconclusive or unmeasured one is a gate that did not judge, and says why), then the other
    metrics' verdicts that are not "unchanged", folded, then what only one side has."""
    failing = gate.failing(verdicts)
    head = f"### perfgate ab: {len(failing)} regression(s)" if failing else "### perfgate ab: no regression"
    out = [
        head,
        "",
        f"base {_md(result.base)} · head {_md(result.head)} · {result.processes} processes in {result.wall_s:.0f} s",
        "",
    ]
    out += [f"- **Not measured:** {md_text(note)}" for note in result.notes] + ([""] if result.notes else [])
    failing_ids = {id(v) for v in failing}
    rest = [v for v in verdicts if id(v) not in failing_ids]
    shown = [*failing, *(v for v in rest if v.metric in AB_METRICS)]
    others = [v for v in rest if v.metric not in AB_METRICS and v.verdict != gate.UNCHANGED]

    def rows(vs: Sequence[gate.Verdict]) -> list[str]:
        return [
            f"| {_md(case_name(v.case, {}))} | {_md(_figure(v))} | {_change(v)} | {_md(v.verdict)} | {_md(v.message)} |"
            for v in vs[:max_rows]
        ]

    table = ["| case | figure | change | verdict | why |", "|---|---|--:|---|---|"]
    if shown:
        out += [*table, *rows(shown), *_more(len(shown), max_rows), ""]
    if others:
        out += [f"<details><summary>Other verdicts ({len(others)})</summary>", "", *table, *rows(others)]
        out += [*_more(len(others), max_rows), "", "</details>", ""]
    for label, ids in (
        ("New (head only)", result.new),
        ("Removed (base only)", result.removed),
        ("Skipped in both", result.skipped),
    ):
        if ids:
            out.append(f"{label}: " + ", ".join(_code(i) for i in ids))
    return "\n".join(out).rstrip() + "\n"


def counts_summary(result: CountsAB, verdicts: Sequence[gate.Verdict], *, max_rows: int = 30) -> str:
    """`perfgate ab --counts`'s Markdown (perfgate.ab.counts.CountsAB): which base was judged
    against, the failing instruction verdicts first, then the others."""
    failing = gate.failing(verdicts)
    head = (
        f"### perfgate ab --counts: {len(failing)} regression(s)"
        if failing
        else "### perfgate ab --counts: no regression"
    )
    passes = [
        f"{side} count pass {seconds:.0f} s"
        for side, seconds in (("base", result.base_pass_s), ("head", result.head_pass_s))
        if seconds is not None
    ]
    key = [_code(result.key)] if result.key and result.key not in result.line else []
    out = [head, "", " · ".join([md_text(result.line), *key, *passes]), ""]
    out += [f"- {md_text(note)}" for note in result.notes] + ([""] if result.notes else [])
    shown = [*failing, *(v for v in verdicts if v not in failing)]
    if shown:
        out += ["| case | figure | change | verdict | why |", "|---|---|--:|---|---|"]
        out += [
            f"| {_md(case_name(v.case, {}))} | {_md(_figure(v))} | {_change(v)} | {_md(v.verdict)} | {_md(v.message)} |"
            for v in shown[:max_rows]
        ]
        out += [*_more(len(shown), max_rows)]
    else:
        out.append("No instruction verdict: nothing counted was compared.")
    return "\n".join(out).rstrip() + "\n"


def health_summary(health: Health) -> str:
    """The summary of a failed health check, for the job summary and the pull-request comment."""
    from perfgate.measure.health import FAIL

    failed = [c for c in health.checks if c.status == FAIL]
    out = [
        f"### perfgate: cannot run here: the runner's GPU failed {len(failed)} health check(s)",
        "",
        f"Device {md_text(health.device)}" + (f" ({md_text(health.gpu)})" if health.gpu else "") + ". Nothing was "
        "measured: numbers from this GPU would not be comparable. Fix the runner, then re-run the job.",
        "",
        "| check | status | what | fix |",
        "|---|---|---|---|",
    ]
    out += [f"| {md_text(c.name)} | {c.status} | {md_text(c.detail)} | {md_text(c.fix or '')} |" for c in health.checks]
    return "\n".join(out) + "\n"
