"""The profile report as one HTML page: inline CSS and SVG, no scripts, no network.

Moved verbatim from perfgate/profile_run.py; it reads the report dict that `perfgate.profile.run`
writes to report.json.
"""

from __future__ import annotations

import html
import math
from typing import Any

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#1d2330;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:2px solid #d6dbe4;padding-bottom:.2em}h3{margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d6dbe4;padding:3px 8px;text-align:right;vertical-align:top}th{background:#f1f3f7}
td:first-child,th:first-child{text-align:left}code{background:#f1f3f7;padding:1px 4px;border-radius:3px;word-break:break-all}
.bar{display:inline-block;height:10px;background:#4b7bec;vertical-align:middle}.muted{color:#687083}
.warn{background:#fff4e5;border-left:4px solid #f5a623;padding:.5em .8em;margin:.6em 0}
.info{background:#eef4ff;border-left:4px solid #4b7bec;padding:.5em .8em;margin:.6em 0}
.bad{background:#fdecea;border-left:4px solid #d93025;padding:.5em .8em;margin:.6em 0}
svg{background:#fafbfc;border:1px solid #e3e6ec;margin-right:1em}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _f(v: Any, spec: str = ".3f", unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return format(v, spec) + unit
    return _e(v) + unit


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1%}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _bar(share: float | None, width_px: int = 160) -> str:
    if share is None:
        return ""
    return f'<span class="bar" style="width:{max(min(share, 1.0), 0.0) * width_px:.0f}px"></span> {share:.1%}'


def _sparkline(ts: list[float], ys: list[float], title: str, width: int = 320, height: int = 70) -> str:
    if len(ys) < 2:
        return ""
    t0, t1 = ts[0], ts[-1] or 1.0
    lo, hi = min(ys), max(ys)
    span_t, span_y = (t1 - t0) or 1.0, (hi - lo) or 1.0
    pts = " ".join(f"{(t - t0) / span_t * (width - 10) + 5:.1f},{height - 18 - (y - lo) / span_y * (height - 30):.1f}" for t, y in zip(ts, ys))
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(title)}">'
            f'<polyline fill="none" stroke="#4b7bec" stroke-width="1.5" points="{pts}"/>'
            f'<text x="5" y="{height - 4}" font-size="11" fill="#687083">{_e(title)}: {lo:.1f} - {hi:.1f}</text></svg>')


def _benchmark_html(p: dict[str, Any]) -> str:
    b = p["benchmark"]
    thr = ", ".join(f"{v:.2f} {u}/s" for u, v in b["throughput"].items())
    rows = [["mean", _f(b["mean_ms"], ".3f", " ms")], ["median", _f(b["median_ms"], ".3f", " ms")], ["std", _f(b["std_ms"], ".3f", " ms")],
            ["min", _f(b["min_ms"], ".3f", " ms")], ["max", _f(b["max_ms"], ".3f", " ms")], ["p90", _f(b["p90_ms"], ".3f", " ms")],
            ["FPS" if "fps" in b else "steps/s", _f(b.get("fps", b["steps_per_s"]), ".2f")], ["throughput (median)", _e(thr)],
            ["first call", _f(b["first_call_s"], ".3f", " s")], ["rounds (warm-up)", f"{b['n']} ({b['warmup_rounds']})"],
            ["other processes' cores", _f(b.get("contention_cores"), ".2f")]]
    return "<h3>Benchmark</h3>" + _table(["statistic", "value"], rows)


def _flops_html(p: dict[str, Any]) -> str:
    f = p.get("flops")
    if not f:
        return f"<h3>FLOPs</h3><p class='muted'>not counted: {_e(p.get('flops_error'))}</p>"
    basis = "; ".join(f"{c}: {b['gflop']:.3g} GFLOP at {b['tflops']:.3g} TFLOP/s ({b['dtype']}{' tf32' if b.get('tf32') else ''}, {b['shape']})"
                      for c, b in (f.get("peak_basis") or {}).items())
    rows = [["GFLOP per step", _f(f["gflop_per_step"], ".4g")], ["of which attention modules", _f(f["attention_gflop"], ".4g")],
            ["achieved", _f(f["achieved_tflops"], ".4g", " TFLOP/s")],
            ["measured peak of this mix of ops", f"{_f(f.get('peak_tflops'), '.4g', ' TFLOP/s')} ({_e(f.get('peak_dtype') or '-')})"],
            ["per kernel family", _e(basis or "-")],
            ["share of peak", _pct(f.get("peak_share")) if f.get("peak_share") is not None else _e(f.get("peak_note") or "-")]]
    mods = "".join(f"<li>{_e(k)}: {v:.4g} GFLOP</li>" for k, v in f.get("by_module_gflop", {}).items())
    return "<h3>FLOPs and roofline</h3>" + _table(["", "value"], rows) + (f"<ul class='muted'>{mods}</ul>" if mods else "") + f"<p class='muted'>{_e(f['method'])}</p>"


def _telemetry_html(p: dict[str, Any]) -> str:
    t = p.get("telemetry") or {}
    out = [f"<h3>Telemetry</h3><p class='muted'>source {_e(t.get('source'))}, every {t.get('interval_s')} s, {t.get('n_samples')} samples</p>"]
    if t.get("gpu_unavailable"):
        out.append(f"<div class='info'>GPU telemetry unavailable: {_e(t['gpu_unavailable'])}</div>")
    rows = [[_e(k), _f(v["min"], ".2f"), _f(v["mean"], ".2f"), _f(v["max"], ".2f")] for k, v in (t.get("metrics") or {}).items()]
    out.append(_table(["metric", "min", "mean", "max"], rows))
    if t.get("clock_events"):
        out.append(_table(["clock-event reason", "share of samples"], [[_e(k), _pct(v)] for k, v in t["clock_events"].items()]))
    tl = p.get("telemetry_timeline") or []
    for key in ("gpu_util_pct", "gpu_power_w", "gpu_temp_c", "sm_clock_mhz", "cpu_util_pct", "rss_mib"):
        pts = [(s["t_s"], s[key]) for s in tl if key in s]
        if len(pts) >= 2:
            out.append(_sparkline([a for a, _ in pts], [b for _, b in pts], key))
    return "".join(out)


def _memory_html(p: dict[str, Any]) -> str:
    m = p["memory"]
    rows = [["peak", _f(m["peak_mem_mib"], ".1f", " MiB")], ["reserved (CUDA)", _f(m.get("reserved_mem_mib"), ".1f", " MiB")],
            ["weights", _f(m["weights_mib"], ".1f", " MiB")], ["inputs", _f(m["inputs_mib"], ".2f", " MiB")],
            ["activations", _f(m.get("activations_mib"), ".1f", " MiB")], ["device / system total", _f(m.get("device_total_mib"), ".0f", " MiB")],
            ["headroom at peak", _pct(m.get("headroom"))]]
    return "<h3>Memory</h3>" + _table(["", "value"], rows) + f"<p class='muted'>{_e(m['method'])}: {_e(m.get('peak_semantics', ''))}</p>"


def _layers_html(p: dict[str, Any]) -> str:
    lay = p.get("layers")
    if not lay:
        return ""
    out = ["<h3>Layer-by-layer breakdown</h3>", f"<p class='muted'>{_e(lay['scope'])}; {lay['rounds']} rounds, {_e(lay['timer'])}. "
           f"Median plain forward {lay['plain_median_ms']:.3f} ms, instrumented {lay['total_median_ms']:.3f} ms (hooks {_f(lay['hook_overhead_pct'], '+.1f')}%). "
           f"The parts sum to {_f(lay['sum_vs_plain'], '.2f')}x the plain forward (medians; margin ±{lay['margin']:.0%}: "
           f"{'within' if lay['consistent'] else 'OUTSIDE'}).</p>"]
    if lay.get("note"):
        out.append(f"<div class='info'>{_e(lay['note'])}</div>")
    rows = [[_e(c["name"]), _e(c["class"]) + (f" ({c['blocks']} blocks)" if c.get("blocks") else ""), _f(c["mean_ms"], ".3f"), _f(c["std_ms"], ".3f"), _bar(c["share"])]
            for c in lay["components"]]
    rows.append(["(root's own ops)", "residual adds, reshapes", _f(lay["unattributed_ms"], ".3f"), "", _bar(lay["unattributed_ms"] / lay["total_mean_ms"] if lay["total_mean_ms"] else None)])
    out.append(_table(["component", "class", "mean ms", "std ms", "share"], rows))
    for g in lay["blocks"]:
        out.append(f"<p><b>{_e(g['list'])}</b>: {g['n']} × {_e(g['class'])}, per block avg {g['mean_ms']:.3f} ms, std across blocks {g['std_ms']:.3f} ms (of per-block medians), "
                   f"total {g['total_ms']:.3f} ms ({_pct(g['share'])})</p>")
        out.append(_table(["slowest blocks", "median ms", "mean ms", "std ms (over rounds)"],
                          [[f"block {b['index']}", _f(b["median_ms"], ".3f"), _f(b["mean_ms"], ".3f"), _f(b["std_ms"], ".3f")] for b in g["slowest"]]))
    a, pe = lay["attention"], lay["patch_embedding"]
    out.append(f"<p>Attention ({len(a['modules'])} modules): {a['total_ms']:.3f} ms, {_pct(a['share'])} of the forward. "
               f"Patch embedding: {_pct(pe['share']) if pe['modules'] else 'none found'}.</p>")
    return "".join(out)


def _precision_html(p: dict[str, Any]) -> str:
    pr = p.get("precision")
    if not pr:
        return ""
    rows = []
    for name, r in pr["rows"].items():
        if "skipped" in r:
            rows.append([_e(name), _e(r["variant"]), f"<span class='muted'>skipped: {_e(r['skipped'])}</span>", "", "", "", ""])
            continue
        acc = r.get("accuracy") or {}
        rows.append([_e(name), _e(r["variant"]), _f(r["median_ms"], ".3f"), _f(r["mean_ms"], ".3f"), _f(r.get("speedup"), ".2f", "x"),
                     _e(r.get("interpretation", "")), _f(acc.get("rel_l2"), ".2e")])
    bands = "; ".join(f"{k}: {v}" for k, v in pr["bands"].items())
    return "<h3>Precision comparison (autocast)</h3>" + _table(["precision", "variant", "median ms", "mean ms", "speed-up", "reading", "rel. L2 vs fp32"], rows) + f"<p class='muted'>{_e(bands)} (V-JEPA 2 guide)</p>"


def _trace_html(p: dict[str, Any]) -> str:
    t = p.get("trace")
    if not t:
        return ""
    rows = [[_e(o["name"]), str(o["calls"]), _f(o["self_cpu_ms"], ".3f"), _f(o["cpu_total_ms"], ".3f"), _f(o["self_device_ms"], ".3f"), _pct(o["share"])] for o in t["top_ops"]]
    out = [f"<h3>Top operators by {_e(t['sorted_by'])}</h3>",
           f"<p>Trace of {t['steps']} steps: <a href='{_e(t['trace'])}'>{_e(t['trace'])}</a> (open in {_e(t['open_with'])}); table: <a href='{_e(t['ops_table'])}'>{_e(t['ops_table'])}</a></p>",
           _table(["operator", "calls", "self CPU ms", "CPU total ms", "self device ms", "share"], rows)]
    nv = p.get("nvtx")
    if nv:
        out.append(f"<p>NVTX: {_e(nv.get('skipped') or nv.get('nsys_command'))}</p>")
    return "".join(out)


def _suggestions_html(p: dict[str, Any]) -> str:
    items = []
    for s in p.get("suggestions", []):
        fixes = "".join(f"<li>{_e(f)}</li>" for f in s["fixes"])
        items.append(f"<div class='{'warn' if s['severity'] == 'warning' else 'info'}'><b>{_e(s['rule'])}</b>: {_e(s['finding'])}<br>"
                     f"<span class='muted'>why: {_e(s['why'])} — {_e(s['source'])}</span><ul>{fixes}</ul></div>")
    return "<h3>Suggestions</h3>" + ("".join(items) or "<p class='muted'>no rule fired</p>")


def render_html(report: dict[str, Any]) -> str:
    """The whole report as one HTML file: inline CSS and SVG, no scripts, no network."""
    pts = report["points"]
    head = [f"<h1>perfgate profile: {_e(report['model'])}</h1>",
            f"<p>{_e(report['hardware'])} ({_e(report['device'])}), fingerprint <code>{_e(report['fingerprint_id'])}</code>, {_e(report['created'])}</p>",
            f"<p>Reproduce: <code>{_e(report['command'])}</code></p>" if report.get("command") else ""]
    if report.get("sweep"):
        rows = [[_e(p["label"]), _f(p["benchmark"]["median_ms"], ".3f"), _f(p["benchmark"]["mean_ms"], ".3f"),
                 _f(p["benchmark"].get("fps", p["benchmark"]["steps_per_s"]), ".2f"),
                 _f((p.get("flops") or {}).get("achieved_tflops"), ".4g"), _pct((p.get("flops") or {}).get("peak_share")),
                 _f(p["memory"]["peak_mem_mib"], ".1f")] for p in pts]
        head.append(f"<h2>Sweep over {_e(report['sweep']['option'])}</h2>" + _table(["point", "median ms", "mean ms", "FPS / steps/s", "TFLOP/s", "of peak", "peak MiB"], rows))
    tt = report.get("torch_trace")
    if tt:
        head.append(f"<div class='info'>TORCH_TRACE logs in <code>{_e(tt['dir'])}</code>: " + "; ".join(f"<code>{_e(c)}</code>" for c in tt["tlparse"]) + "</div>")
    body = []
    for p in pts:
        title = f"{report['model']} {p['size']} {p['variant']}" + (f" — {p['label']}" if p["label"] else "")
        body.append(f"<h2>{_e(title)}</h2><p class='muted'>{p['params']:,} parameters, step: {_e(p['step'])}, options {_e(p['options'])}, batch {p['batch']}</p>")
        if p.get("unreliable"):
            body.append(f"<div class='bad'>Unreliable measurement: {_e(p['unreliable'])}</div>")
        body += [_benchmark_html(p), _flops_html(p), _telemetry_html(p), _memory_html(p), _layers_html(p), _precision_html(p), _trace_html(p), _suggestions_html(p)]
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>perfgate profile: " + _e(report["model"]) + "</title><style>" + _CSS +
            "</style></head><body>" + "".join(head) + "".join(body) + "</body></html>\n")
