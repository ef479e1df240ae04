"""Names from the code under test stay text in the Markdown perfgate writes for the job summary and
the pull-request comment. A pull request can register a model under any name; here one named with
HTML, a link, a mention, emphasis and a table pipe runs through the real suite (its plugin writes the
job summary) and `perfgate report --markdown`, and the Markdown is rendered as a CommonMark viewer
with tables (GitHub's dialect) would."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from perfgate.output import markdown

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "evil<img src=x onerror=alert(1)>[pwn](javascript:alert(1))@octocat|**bold**_x_~~gone~~`tick`"

MODEL_FILE = f'''
"""A tiny model whose name is hostile Markdown."""
from dataclasses import dataclass
import torch
from torch import nn
from perfgate import ModelSpec, register_model

@dataclass(frozen=True, kw_only=True)
class TinyConfig:
    width: int = 4

CONFIGS = {{"tiny": TinyConfig()}}

class Tiny(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w = nn.Parameter(torch.ones(config.width))

    def forward(self, x):
        return x * self.w

def example_inputs(config, *, batch=1, seed=0, device="cpu", dtype=torch.float32, **options):
    return (torch.ones(batch, config.width, device=device, dtype=dtype),)

def step_info(config, *, batch=1, **options):
    return {{"frames": float(batch)}}

register_model(ModelSpec(name={HOSTILE!r}, module=__name__, model_class="Tiny", default_sizes={{"cpu": "tiny"}}))
'''

# No built-in registry, so the hostile model is the only one; a budget no machine meets, so its case
# is in the table of failing verdicts; contention tolerated on the shared test machine.
PYPROJECT = """
[tool.perfgate]
registries = []
model_files = ["hostile_model.py"]
[tool.perfgate.gate]
contention_max = 1000.0
[[tool.perfgate.budget]]
model = "*"
max_median_ms = 1e-9
"""


class _Rendered(HTMLParser):
    """The tags and the text of rendered HTML (entities decoded, as a browser shows them)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def render(md: str) -> _Rendered:
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    parsed = _Rendered()
    parsed.feed(page)
    return parsed


def assert_inert(md: str, links: set[str] = frozenset()) -> None:
    """No tag from the name (only the ones a table and perfgate's folding make), no link but perfgate's
    own `links`, no mention, and the name readable as it is in a table cell (a zero-width space after
    the @ aside)."""
    page = render(md)
    allowed = {"h3", "p", "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "code", "br", "a"}
    assert {tag for tag, _ in page.tags} <= allowed, sorted({tag for tag, _ in page.tags} - allowed)
    assert {attrs.get("href") for tag, attrs in page.tags if tag == "a"} == set(links)
    assert not [attrs for tag, attrs in page.tags if tag == "td" and set(attrs) - {"style"}]
    assert "@octocat" not in md
    shown = [c.replace("\u200b", "") for c in page.cells]
    assert any(HOSTILE in c for c in shown), shown


@pytest.mark.slow
def test_a_hostile_model_name_stays_text_in_the_job_summary_and_the_report(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "test_models.py").write_text((ROOT / "benchmarks" / "test_models.py").read_text())
    (tmp_path / "hostile_model.py").write_text(MODEL_FILE)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFGATE_", "PYTEST_XDIST")) and k != "CI"
    }
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "step-summary.md")
    env["PYTHONPATH"] = str(ROOT)  # this checkout's perfgate, whichever one the environment installed
    cmd = [sys.executable, "-m", "pytest", "-p", "perfgate.plugin.hooks", "-p", "no:cacheprovider", "benchmarks", "-q"]
    cmd += ["--perfgate-device", "cpu", "--perfgate-variants", "baseline", "--perfgate-smoke"]
    cmd += ["--benchmark-json", "run.json", "--perfgate-verdicts", "verdicts.json"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # the budget failed the gate

    verdicts = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert [v["verdict"] for v in verdicts if v["metric"] == "budget:median_ms"] == ["budget"]
    assert any(HOSTILE in v["case"] for v in verdicts)  # the name reached the producers as it is

    step = (tmp_path / "step-summary.md").read_text()
    assert step.startswith("### perfgate: :x: 1 regression(s)")
    assert_inert(step)

    report = subprocess.run(
        [sys.executable, "-m", "perfgate", "report", "run.json", "--verdicts", "verdicts.json", "--markdown", "pr.md"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert_inert((tmp_path / "pr.md").read_text(), links={"report.html", "run.json"})  # the artifacts


def test_md_text_escapes_each_kind_of_markup_and_keeps_plain_names_readable() -> None:
    assert markdown.md_text("physicsnemo-block [tiny] int8_dynamic") == "physicsnemo-block [tiny] int8_dynamic"
    assert markdown.md_text("budget:median_ms") == "budget:median_ms"
    escaped = markdown.md_text(HOSTILE)
    assert "<" not in escaped and "](" not in escaped and "@octocat" not in escaped
    assert re.search(r"(?<!\\)\|", escaped) is None  # every pipe escaped: the cell stays one cell
    assert html.unescape(render(f"| a |\n|---|\n| {escaped} |\n").cells[-1]).replace("\u200b", "") == HOSTILE
    assert markdown.md_text("two\n  lines") == "two lines"


def test_a_case_id_in_a_code_span_keeps_its_backticks() -> None:
    """`perfgate ab` lists new, removed and skipped case ids as code spans: a backtick in an id must
    not close the span early (then the rest of the id would be Markdown)."""
    span = markdown._code("test_step[a`b<img src=x>]")
    codes = re.findall(r"<code>(.*?)</code>", MarkdownIt("commonmark").render(span))
    assert [html.unescape(c) for c in codes] == ["test_step[a`b<img src=x>]"]
