"""`perfgate gate-quality`: false-alarm and detection rates of the gate, measured on this machine."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

HELP = "measure the gate's false-alarm rate on unchanged code and its detection rate of injected slowdowns"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from perfgate.quality.experiment import DEFAULT_SLOWDOWNS_PCT

    p.add_argument(
        "--ab",
        action="store_true",
        help="measure on real suite cases (--cases): same-job A/B (interleaved for a slowdown injected in the model "
        "alone, processes for one in F.linear, shared) against the stored-baseline gate; --comparisons for "
        "unchanged code, --detect-comparisons for each model-local slowdown, --shared-comparisons for each shared one",
    )
    p.add_argument(
        "--cases",
        default="owl-world-model-tiny-baseline,owl-audio-decoder-tiny-baseline,wan-vae-decoder-tiny-baseline",
        help="--ab: case ids measured together in every process (default: three tiny cases of 1 ms or more)",
    )
    p.add_argument(
        "--shared-comparisons",
        type=int,
        default=None,
        metavar="N",
        help="--ab: comparisons per shared slowdown (processes mode, the slowest; default --detect-comparisons)",
    )
    p.add_argument(
        "--sized-by",
        type=Path,
        default=None,
        metavar="JSONL",
        help="--ab: instead of the timing-sized slowdowns, those a `perfgate count-quality` run sized by "
        "instructions (its --out file): the time gates on the instruction gate's slowdowns, op ones in processes "
        "mode (--shared-comparisons), leaf ones interleaved (--detect-comparisons)",
    )
    p.add_argument(
        "--detect-comparisons", type=int, default=10, metavar="N", help="--ab: comparisons per slowdown (default 10)"
    )

    p.add_argument(
        "--comparisons", type=int, default=50, metavar="N", help="judged comparisons per slowdown (default 50)"
    )
    p.add_argument(
        "--slowdowns",
        default=",".join(f"{s:g}" for s in DEFAULT_SLOWDOWNS_PCT),
        metavar="PCT,...",
        help="injected slowdowns in %% of work; 0 is unchanged code (default %(default)s)",
    )
    p.add_argument(
        "--depth",
        type=int,
        default=100,
        help="layers of the unchanged chain; slowdowns must give whole layers (default 100)",
    )
    p.add_argument("--width", type=int, default=128, help="features of each Linear layer (default 128)")
    p.add_argument("--batch", type=int, default=32, help="rows of the input (default 32)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads (default: torch's default, as the suite runs)",
    )
    p.add_argument(
        "--isolation",
        choices=("process", "inprocess"),
        default="process",
        help="measure each run in a fresh process (default, as separate CI runs are) or all in this one",
    )
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="do not time the reference workload (then every rule judges raw ms; by default runs carry it, as the "
        "suite's CPU runs do, and `--also normalise=false` judges the same runs raw)",
    )
    p.add_argument(
        "--precision",
        type=float,
        default=None,
        metavar="REL",
        help="stop rule precision (relative CI half-width of the median) of every run (default: the suite's, 0.02)",
    )
    p.add_argument(
        "--wait-quiet-s",
        type=float,
        default=600.0,
        metavar="S",
        help="after a contended run, wait up to S seconds for the neighbours to quieten before the next (0: never "
        "wait; default 600)",
    )
    p.add_argument(
        "--pyproject",
        type=Path,
        default=None,
        metavar="FILE",
        help="policy to test: its [tool.perfgate] latency settings (a file that must exist; default "
        "./pyproject.toml, the defaults when it is absent)",
    )
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="KEY=V,...",
        help="also judge the same runs with the policy changed, e.g. latency_tolerance=0.03,remeasure=3; "
        "normalise=false judges raw ms, remeasure_pooled=false makes every re-measurement regress on its own, "
        "baseline_runs=K pools K baseline runs (repeatable)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="PATH",
        help="measure nothing: judge the runs stored in an earlier --json report again (with --also rules)",
    )
    p.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="write the rates, settings and raw runs here"
    )
    p.add_argument("--no-samples", action="store_true", help="leave the raw samples out of --json")


def _slowdowns(text: str) -> list[float]:
    from perfgate.commands import CommandError

    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CommandError(f"--slowdowns {text!r}: give comma-separated percentages, e.g. 0,5,10,20") from None
    if not out or any(v < 0 for v in out) or len(set(out)) != len(out):
        raise CommandError(f"--slowdowns {text!r}: give distinct percentages >= 0, e.g. 0,5,10,20")
    return [int(v) if v == int(v) else v for v in out]


def _rule(spec: str, base: Any) -> Any:
    """A GateRule named `spec`: the policy `base` changed by 'key=value,...' (GateSettings keys,
    baseline_runs)."""
    from perfgate.commands import CommandError
    from perfgate.quality.experiment import GateRule

    known: dict[str, type] = {f.name: type(getattr(base, f.name)) for f in fields(base)}
    known |= {"baseline_runs": int}
    changes: dict[str, Any] = {}
    for part in filter(None, (x.strip() for x in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in known:
            raise CommandError(f"--also {spec!r}: expected KEY=VALUE pairs with KEY one of {', '.join(known)}")
        try:
            changes[key] = value.lower() in ("1", "true", "yes") if known[key] is bool else known[key](value)
        except ValueError:
            raise CommandError(f"--also {spec!r}: {key} needs a {known[key].__name__}, got {value!r}") from None
    if not changes:
        raise CommandError(f"--also {spec!r}: name at least one KEY=VALUE")
    extra = {k: changes.pop(k) for k in ("baseline_runs",) if k in changes}
    try:
        return GateRule(name=spec, settings=replace(base, **changes), **extra)
    except ValueError as exc:
        raise CommandError(f"--also {spec!r}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import project_file

    args.pyproject = project_file(args.pyproject)
    if args.ab:
        return _run_ab(args)
    from perfgate.commands import CommandError
    from perfgate.files import write_json
    from perfgate.gate import policy as policy_mod
    from perfgate.quality import experiment as q
    from perfgate.quality import rates as qr

    slowdowns = _slowdowns(args.slowdowns)
    if args.comparisons < 1:
        raise CommandError(f"--comparisons {args.comparisons}: give at least 1 (50 for a stated rate)")
    try:
        workload = q.ChainWorkload(depth=args.depth, width=args.width, batch=args.batch, threads=args.threads)
        for s in slowdowns:
            q.layers_for(args.depth, s)
    except ValueError as exc:
        raise CommandError(f"--depth/--slowdowns: {exc}") from None
    try:
        settings = policy_mod.load(args.pyproject).settings("gate-quality", "baseline", "latency")
    except policy_mod.PolicyError as exc:
        raise CommandError(str(exc)) from None
    from perfgate.measure.stats import StopRule

    try:
        stop = StopRule() if args.precision is None else StopRule(precision=args.precision)
    except ValueError as exc:
        raise CommandError(f"--precision {args.precision:g}: {exc}") from None
    rules = [q.GateRule(name="default", settings=settings)]
    rules += [_rule(spec, settings) for spec in args.also]
    if args.from_json:
        return _rejudge(args, rules)

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_before = qr.machine_load()
    progress(
        f"gate-quality: {args.comparisons} comparisons x slowdowns {', '.join(f'{s:g}%' for s in slowdowns)}; "
        f"load average {load_before['loadavg_1m']:.2f} on {load_before['cpu_count']} cores"
    )
    measure_fn = q.make_measurer(workload, args.isolation, stop, reference=not args.no_reference)
    if args.wait_quiet_s > 0:
        measure_fn = q.quiet_measurer(
            measure_fn, settings.contention_max, timeout_s=args.wait_quiet_s, progress=progress
        )
    config = {
        "workload": asdict(workload) | {"kind": "Linear+GELU chain"},
        "slowdowns_pct": slowdowns,
        "comparisons": args.comparisons,
        "isolation": args.isolation,
        "reference": None if args.no_reference else _reference_shape(),
        "wait_quiet_s": args.wait_quiet_s,
        "stop_rule": asdict(stop),
        "load_before": load_before,
        "threads": _threads(args.threads),
    }

    def save(comparisons: list[q.Comparison], *, partial: bool) -> dict[str, Any]:
        data = qr.report(
            comparisons,
            rules,
            depth=args.depth,
            config=config | {"load_after": qr.machine_load(), "partial": partial},
            samples=not args.no_samples,
        )
        if args.json:
            write_json(args.json, data)
        return data

    comparisons = q.run_experiment(
        measure_fn,
        depth=args.depth,
        slowdowns_pct=slowdowns,
        comparisons=args.comparisons,
        rules=rules,
        progress=progress,
        checkpoint=lambda done: save(done, partial=True),
    )
    data = save(comparisons, partial=False)

    _print(data, rules, precision=stop.precision, depth=args.depth)
    if args.json:
        print(f"wrote {args.json}")
    return 0


def _reference_shape() -> dict[str, Any]:
    from perfgate.measure.core import REFERENCE_SHAPE

    return {"kind": "Linear+GELU chain", **REFERENCE_SHAPE}


def _threads(requested: int | None) -> int:
    if requested is not None:
        return requested
    import torch

    return torch.get_num_threads()


def _rejudge(args: argparse.Namespace, rules: list[Any]) -> int:
    import json

    from perfgate.commands import CommandError
    from perfgate.files import write_json
    from perfgate.quality import experiment as q
    from perfgate.quality import rates as qr

    try:
        old = json.loads(args.from_json.read_text())
        comparisons = q.rejudge(q.load_comparisons(old), rules)
    except (OSError, json.JSONDecodeError, ValueError) as exc:
        raise CommandError(f"--from-json {args.from_json}: {exc}") from None
    cfg = old.get("config", {})
    depth = cfg.get("workload", {}).get("depth", args.depth)
    data = qr.report(
        comparisons,
        rules,
        depth=depth,
        config=cfg | {"rejudged_from": str(args.from_json)},
        samples=not args.no_samples,
    )
    _print(data, rules, precision=cfg.get("stop_rule", {}).get("precision", 0.02), depth=depth)
    if args.json:
        write_json(args.json, data)
        print(f"wrote {args.json}")
    return 0


def _print(data: dict[str, Any], rules: list[Any], *, precision: float, depth: int) -> None:
    from perfgate.output.gate_quality import rate_table
    from perfgate.quality import experiment as q
    from perfgate.quality import rates as qr

    cfg = data["config"]
    noise = data["noise"]
    for key, what, unit in (
        ("raw_ms", "raw", "ms"),
        ("normalised", "normalised", "x the reference"),
        ("reference_ms", "reference workload", "ms"),
    ):
        if key in noise:
            n = noise[key]
            lo, hi = n["between_run_p5_p95_rel"]
            print(
                f"unchanged chain, {what}: median {n['median']:.3f} {unit} over {noise['runs']} runs, "
                f"between-run CV {n['between_run_cv']:.1%} (5-95% {lo:+.1%}..{hi:+.1%})"
            )
    if "samples_per_run" in noise:
        print(
            f"within-run CI half-width {noise['within_run_ci_halfwidth_rel']:.1%}, {noise['samples_per_run']:g} "
            "samples per run"
        )
    if "load_before" in cfg:
        print(
            f"load average {cfg['load_before']['loadavg_1m']:.2f} before, {cfg['load_after']['loadavg_1m']:.2f} after; "
            f"{cfg.get('threads')} torch thread(s); isolation {cfg.get('isolation')}; stop precision {precision:g}"
        )
    for rule in rules:
        res = data["rules"][rule.name]
        s = rule.settings
        print(
            f"\npolicy {rule.name}: latency_tolerance {s.latency_tolerance:g}, alpha {s.alpha:g}, remeasure "
            f"{s.remeasure}, "
            f"contention_max {s.contention_max:g}, normalise {str(s.normalise).lower()}, remeasure_pooled "
            f"{str(s.remeasure_pooled).lower()}, baseline_runs {rule.baseline_runs}"
        )
        rs = [qr.Rate(**r) for r in res["rates"]]
        print("\n".join(rate_table(rs, depth)))
        if skipped := sum(r.not_judged for r in rs):
            print(f"({skipped} comparison(s) not judged: this rule needs runs the recorded experiment did not take)")
        best = res["smallest_detected_pct"]
        print(
            f"smallest slowdown detected >= {q.DETECTION_TARGET:.0%} with <= 1/50 false alarms: "
            + (f"{best:g}%" if best is not None else "none of those measured")
        )


def _run_ab(args: argparse.Namespace) -> int:
    from perfgate.ab import quality as quality_ab
    from perfgate.commands import CommandError
    from perfgate.output.text import text_table

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    shared = args.detect_comparisons if args.shared_comparisons is None else args.shared_comparisons
    given = {"--comparisons": args.comparisons, "--detect-comparisons": args.detect_comparisons}
    for option, n in (given | {"--shared-comparisons": shared}).items():
        if n < 0:
            raise CommandError(f"{option} {n}: give a count of 0 or more")
    if not cases:
        raise CommandError("--cases is empty: give case ids, e.g. owl-world-model-tiny-baseline")

    def progress(msg: str) -> None:
        print(f"gate-quality: {msg}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="perfgate-sized-") as folder:
        conditions = quality_ab.CONDITIONS
        if args.sized_by is not None:
            try:
                conditions = quality_ab.sized_conditions(args.sized_by, Path(folder))
            except (OSError, ValueError, KeyError) as exc:
                raise CommandError(f"--sized-by {args.sized_by}: {exc}") from None
        per_mode = {"interleaved": args.detect_comparisons, "processes": shared}
        counts = {c: per_mode[c.mode] if c.slowdown_pct else args.comparisons for c in conditions}
        done = quality_ab.run(Path.cwd(), cases, comparisons=counts, device="cpu", out=args.json, progress=progress)
    rows = [
        [
            f"{r.kind} +{r.slowdown_pct:g}%",
            f"{r.rule} ({r.mode})" if r.mode else r.rule,
            f"{r.alarms}/{r.n}",
            str(r.unreliable),
            f"{r.wall_s_per_comparison:.0f}",
        ]
        for r in quality_ab.rates(done)
    ]
    print("\n".join(text_table(("injected", "rule", "regressions", "unreliable", "wall s / comparison"), rows)))
    return 0
