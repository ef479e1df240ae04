"""`perfgate health` in words: one line per check of the GPU, its fix beneath a failed one
(perfgate.measure.health runs the checks)."""

from __future__ import annotations

from perfgate.measure.health import Health


def text_lines(health: Health) -> list[str]:
    if not health.checks:
        return [f"health: {health.device}: does not apply (the checks are for a CUDA GPU); passed"]
    head = f"health: {health.device}" + (f" (NVML {health.nvml_index}: {health.gpu})" if health.gpu else "")
    lines = [head]
    for c in health.checks:
        lines.append(f"  {c.status:<7} {c.name}: {c.detail}" + (f"\n          fix: {c.fix}" if c.fix else ""))
    return lines
