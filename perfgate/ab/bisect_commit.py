"""One commit of `perfgate bisect`, judged when `git bisect run` checks it out: an A/B of this
commit (the head) against GOOD (the base) on one case. Exit 0: good (unchanged or faster), 1: bad
(a regression), 125: cannot tell (inconclusive or unreliable twice: git skips the commit). A
commit is measured again before it is blamed, so one noisy process cannot move the bisection.
"""

from __future__ import annotations

from pathlib import Path

GOOD, BAD, SKIP = 0, 1, 125


def judge(
    *,
    good: str,
    case: str,
    log: Path,
    mode: str = "interleaved",
    harness: Path | None = None,
    device: str | None = None,
) -> int:
    """The commit checked out in the working directory against GOOD on `case`: GOOD, BAD or SKIP,
    each attempt's verdict appended to `log`. Its command line is perfgate.commands.bisect's."""
    from perfgate import gate
    from perfgate.ab import run as ab_run
    from perfgate.gate.policy import Policy, load

    repo = Path.cwd()
    sha = ab_run.git(repo, "rev-parse", "HEAD")
    base = ab_run.checkout(repo, good, "base")
    head = ab_run.working_tree(repo)
    try:
        policy = load(repo / "pyproject.toml")
    except ValueError:
        policy = Policy()
    selection = [*(["--perfgate-device", device] if device else [])]
    verdict = None
    for attempt in (1, 2):
        if mode == "interleaved":
            result = ab_run.run_interleaved(base, head, [case], policy, harness=harness, device=device)
        else:
            result = ab_run.run_ab(base, head, [case], policy, measure_fn=ab_run.counting_once(selection))
        # Instruction counts decide where both commits have them (a CPU case, [tool.perfgate.counts]).
        counted = [v for v in result.verdicts if v.metric == "instructions" and v.verdict != gate.INCONCLUSIVE]
        latency = next(iter(counted), None) or next((v for v in result.verdicts if v.metric == "latency"), None)
        verdict = latency.verdict if latency else gate.INCONCLUSIVE
        with log.open("a", encoding="utf8") as fh:
            fh.write(f"{sha[:10]} attempt {attempt}: {verdict}: {latency.message if latency else 'not measured'}\n")
        if verdict in (gate.REGRESSION, gate.UNCHANGED, gate.IMPROVEMENT) and (
            verdict != gate.REGRESSION or attempt == 2
        ):
            break
    return BAD if verdict == gate.REGRESSION else GOOD if verdict in (gate.UNCHANGED, gate.IMPROVEMENT) else SKIP
