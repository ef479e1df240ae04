"""scripts/pr-comment: the one perfgate comment on a pull request, from a run's untrusted artifact.

The comment is rendered here by cmark-gfm, GitHub's own Markdown library (cmarkgfm), with raw HTML
let through as GitHub lets it through to its sanitiser; what the rendered HTML may hold is checked
(`problems`). The same check is run on the comment that a broken escaper writes (a table of
realistic mistakes, each must be caught), so a pass means something. The summaries come from the real
producer (perfgate.output.markdown with a hostile model name, scripts/ci-benchmark's artifact) and
from an attacker who writes summary.md directly.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

from tests.ci.helpers import BOT, MARKER, ROOT, SCRIPTS, SMALLEST, install_fake_gh, run, script_env

cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm is not installed: pip install -e '.[dev]'")
from cmarkgfm.cmark import Options  # noqa: E402

SHA = "0123456789abcdef0123456789abcdef01234567"
RUN_URL = "https://github.com/owner/repo/actions/runs/7"
# Tags GitHub keeps and perfgate's comment may produce; anything else in the rendered comment came
# from an untrusted string.
ALLOWED_TAGS = {
    "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "pre", "details", "summary",
    "strong", "em", "del", "sub", "br", "ul", "ol", "li", "hr", "a",
}  # fmt: skip
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9][A-Za-z0-9-]*")  # GitHub's mention, @user or @org/team
REFERENCE = re.compile(r"(?<![\w&])#[0-9]+|(?<![\w])[Gg][Hh]-[0-9]+")  # a cross-reference to an issue
AUTOLINK = re.compile(r"(?i)\bwww\.|[a-z]+://")

# What an attacker's code can write into summary.md (every line a known trick).
HOSTILE_SUMMARY = "\n".join(
    [
        "### perfgate: :white_check_mark: no regression",
        "",
        "```x`",  # not a fence on GitHub (an info string may not hold a backtick)
        "<img src=x onerror=alert(1)> cc @octocat and @acme/security-team",
        "```",  # this one opens a fence, so GitHub shows the next line as code
        "inside a real fence: @octocat <img src=w>",
        "```",
        "<!-- perfgate --> a second marker",
        "[click](https://evil.example/) ![pixel](https://evil.example/p.png) [ref]: https://evil.example",
        "www.evil.example and https://evil.example/x and mallory@evil.example",
        "&#64;octocat &#x40;octocat \\@octocat see #1 and owner/repo#2",
        "<details><summary>Other <b>@octocat</b></summary>",
        "`<img src=y onerror=alert(2)>` and `a|b` in a cell",
        "</details>",
        "| a | b |",
        "|---|---|",
        "| `x|<img src=z onerror=alert(3)>` | y |",
        "GH-3 and gh-4 link issues; so would `GH-5` outside its span: GH-6",
        "a\u202eevil\u202c bidi \u2066and\u2069 isolates \u200f marks",
        "```mermaid",
        "graph TD; A-->B",
        "```",
        "```math",
        "x^2",
        "```",
        "inline math $x^2$ and $$y$$ and $`z`$ and a price of 5$",
        "<details><summary>left open</summary>",
        "~~~",
        "an unclosed fence: @octocat <img src=q>",
    ]
)
# Info strings GitHub renders as something else than code (a diagram, a formula, a map).
RENDERED_FENCES = {"mermaid", "math", "geojson", "topojson", "stl"}
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MATH_MARK = "\u2063MATH\u2063"


def load_pr_comment() -> ModuleType:
    """scripts/pr-comment as a module (a fresh one each time: mutations below patch it)."""
    loader = importlib.machinery.SourceFileLoader("pr_comment", str(SCRIPTS / "pr-comment"))
    spec = importlib.util.spec_from_loader("pr_comment", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def render(markdown: str) -> str:
    """As GitHub renders a comment before sanitising it: GFM with tables, strikethrough and autolinks,
    raw HTML passed through."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []  # text outside <code>/<pre>, where GitHub links mentions
        self.comments: list[str] = []
        self._code = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._code += tag in ("code", "pre")

    def handle_endtag(self, tag):
        self._code -= tag in ("code", "pre")

    def handle_data(self, data):
        if not self._code:
            self.text.append(data)

    def handle_comment(self, data):
        self.comments.append(data)


def _mark_math(markdown: str) -> str:
    """Each `$` that no backslash escapes, marked: GitHub renders math from those (cmark-gfm does
    not, so the mark shows where GitHub would)."""
    return re.sub(r"(?<!\\)((?:\\\\)*)\$", lambda m: m.group(1) + MATH_MARK, markdown)


def problems(markdown: str, marker: str = MARKER) -> list[str]:
    """What in the rendered comment did not come from perfgate: a tag it does not write, a link
    other than the run's, a second marker, a mention, a cross-reference, an autolink, a fence GitHub
    renders as a diagram or formula, math, a bidirectional-text control, an open <details>."""
    reader = _Reader()
    html = render(_mark_math(markdown))
    reader.feed(html)
    found = [
        f"fence rendered as {lang}" for lang in re.findall(r'<pre lang="([^"]+)"', html) if lang in RENDERED_FENCES
    ]
    found += [f"bidi control U+{ord(c):04X}" for c in BIDI.findall(html)]
    if html.count("<details>") != html.count("</details>"):
        found.append(f"{html.count('<details>')} <details> opened, {html.count('</details>')} closed")
    found += [f"<{t}> rendered" for t, _ in reader.tags if t not in ALLOWED_TAGS]
    found += [f"link to {a.get('href')}" for t, a in reader.tags if t == "a" and a.get("href") != RUN_URL]
    found += [f"attribute {k} on <{t}>" for t, a in reader.tags for k in a if k.startswith("on") or k == "src"]
    if reader.comments != [marker.removeprefix("<!--").removesuffix("-->")]:
        found.append(f"HTML comments {reader.comments}")
    text = "".join(reader.text)
    found += [f"mention {m}" for m in MENTION.findall(text)]
    found += [f"reference {m}" for m in REFERENCE.findall(text)]
    found += [f"autolink at {m!r}" for m in AUTOLINK.findall(text)]
    found += ["math ($ unescaped)"] * text.count(MATH_MARK)
    return found


def comment(module: ModuleType, *summaries: str) -> str:
    return module.build_body(list(summaries), RUN_URL)


def test_an_attackers_summary_renders_as_text() -> None:
    body = comment(load_pr_comment(), HOSTILE_SUMMARY)
    assert body.startswith(MARKER + "\n")
    assert problems(body) == []
    html = render(body)
    # Nothing was dropped: the hostile text is there to read, as text.
    for shown in ("&lt;img src=x onerror=alert(1)&gt;", "a second marker", "alert(3)", "an unclosed fence"):
        assert shown in html, shown
    assert html.count("<details>") == 2 and "<summary>Other &lt;b&gt;" in html
    assert html.rstrip().endswith(f'<sub><a href="{RUN_URL}">workflow run</a>: job summaries, and the JSON, '
                                  "HTML report and traces as artifacts</sub></p>")  # fmt: skip


def test_the_real_summary_keeps_its_form_and_its_names_stay_text() -> None:
    """perfgate.output.markdown's job summary (the producer) with a model named by an attacker: the
    comment keeps its tables, details and code spans, and the name renders as text."""
    from perfgate import gate
    from perfgate.output import markdown

    name = "evil<img src=x onerror=alert(1)>[pwn](javascript:alert(1))@octocat|**b**`t`"
    verdicts = [
        gate.Verdict(case=f"test_step[{name}-tiny-baseline]", metric="latency", verdict="regression",
                     baseline=1.0, current=2.0, change_pct=100.0, message=f"{name} got slower"),
        gate.Verdict(case=f"test_step[{name}-tiny-bf16]", metric="latency", verdict="inconclusive",
                     baseline=1.0, current=1.1, change_pct=10.0),
    ]  # fmt: skip
    summary = markdown.job_summary([], verdicts)
    assert "<img" not in summary  # the producer escapes; the comment must not undo it
    body = comment(load_pr_comment(), summary)
    assert problems(body) == []
    html = render(body)
    assert "<table>" in html and "<details>" in html and "<summary>Other verdicts (1)</summary>" in html
    assert "evil&lt;img src=x onerror=alert(1)&gt;[pwn](javascript:alert(1))@\u200boctocat" in html


def _fence_as_old_script(module: ModuleType) -> None:
    """The old bash filter's mistake: ```x` taken for a fence, and the fence written back as read."""
    module.FENCE_BACKTICK = re.compile(r" {0,3}(`{3,})(.*)")
    module._code_block = lambda info, lines: ["```" + info, *lines, "```"]


def _no_mention_break(module: ModuleType) -> None:
    module.ZWSP = ""


def _brackets_kept(module: ModuleType) -> None:  # a filter that escapes HTML only
    plain = module._escape_plain
    module._escape_plain = lambda text: plain(text).replace("\\[", "[").replace("\\]", "]")


def _any_entity_kept(module: ModuleType) -> None:  # &#64; decodes to @
    module.KEPT_ENTITIES = (*module.KEPT_ENTITIES, "&#64;", "&#x40;")


def _pipe_in_code_span(module: ModuleType) -> None:  # a table cell splits a code span open
    inline = module._escape_inline
    module._escape_inline = lambda line: inline(line).replace("\\|", "|")


def _details_without_blank(module: ModuleType) -> None:  # the next line would be raw HTML
    comment_markdown = module.comment_markdown

    def joined(summary: str):
        blocks = comment_markdown(summary)
        return [[line for line in b if line] or b for b in blocks]

    module.comment_markdown = joined


def _html_kept_in_summary_tag(module: ModuleType) -> None:
    module._html_text = lambda text: text


def _raw_backslash_escapes(module: ModuleType) -> None:  # `\@` and `\<` taken for perfgate's own escapes
    module.KEPT_ESCAPES = set(module.KEPT_ESCAPES) | set("@<")


def _gh_refs_kept(module: ModuleType) -> None:
    plain = module._escape_plain
    module._escape_plain = lambda text: plain(text).replace("GH" + module.ZWSP, "GH").replace("gh" + module.ZWSP, "gh")


def _bidi_kept(module: ModuleType) -> None:
    module.BIDI = re.compile("(?!)")


def _any_info_string(module: ModuleType) -> None:  # the old SAFE_INFO: any short word, mermaid too
    module.SAFE_INFO = type("Any", (), {"__contains__": lambda self, x: bool(re.fullmatch(r"[a-z0-9_+.-]{1,20}", x))})()


def _dollars_kept(module: ModuleType) -> None:
    plain = module._escape_plain
    module._escape_plain = lambda text: plain(text).replace("\\$", "$")


def _details_left_open(module: ModuleType) -> None:
    comment_markdown = module.comment_markdown

    def unclosed(summary: str):
        blocks = comment_markdown(summary)
        while blocks and blocks[-1] == ["", "</details>", ""]:
            blocks.pop()
        return blocks

    module.comment_markdown = unclosed


ESCAPER_MISTAKES = {
    "gh-references-kept": _gh_refs_kept,
    "bidi-controls-kept": _bidi_kept,
    "mermaid-and-math-fences-kept": _any_info_string,
    "dollar-math-kept": _dollars_kept,
    "details-left-open": _details_left_open,
    "fence-with-backtick-info": _fence_as_old_script,
    "mentions-kept": _no_mention_break,
    "links-and-images-kept": _brackets_kept,
    "numeric-entities-kept": _any_entity_kept,
    "pipe-splits-code-span": _pipe_in_code_span,
    "details-swallows-next-line": _details_without_blank,
    "html-in-summary-tag": _html_kept_in_summary_tag,
    "escaped-at-and-angle-kept": _raw_backslash_escapes,
}


@pytest.mark.parametrize("mistake", ESCAPER_MISTAKES)
def test_the_render_check_catches_a_broken_escaper(mistake: str) -> None:
    module = load_pr_comment()
    ESCAPER_MISTAKES[mistake](module)
    assert problems(comment(module, HOSTILE_SUMMARY)), f"{mistake}: the rendered comment looked clean"


# --- the script, end to end with a fake gh --------------------------------------------------------


def summary_dir(tmp_path: Path, text: str, pr: int | None = None, head: str = SHA) -> Path:
    job = tmp_path / "results" / "perfgate-pr"
    job.mkdir(parents=True, exist_ok=True)
    (job / "summary.md").write_text(text)
    if pr is not None:
        (job / "pull-request.json").write_text(json.dumps({"pr": pr, "head_sha": head}))
    return job.parent


def test_only_the_bots_own_marked_comment_is_updated(tmp_path: Path) -> None:
    others = [
        {"id": 1, "user": {"login": "mallory"}, "body": f"{MARKER}\nmallory's copy of the marker, posted first"},
        {"id": 2, "user": {"login": "reviewer"}, "body": f"> {MARKER}\n> quoted by a reviewer"},
    ]
    state_file = install_fake_gh(tmp_path, others)
    env = script_env(tmp_path, GH_REPO="owner/repo")
    results = summary_dir(tmp_path, "### perfgate: :x: 1 regression(s)\n")
    cmd = [str(SCRIPTS / "pr-comment"), "--pr", "7", "--author", BOT, str(results)]

    r = run(cmd, env)  # no comment of the bot's yet: a new one, mallory's untouched
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["comments"][:2] == others and len(state["comments"]) == 3
    assert state["calls"][-1][1:4] == ["--method", "POST", "repos/owner/repo/issues/7/comments"]
    ours = state["comments"][2]
    assert ours["user"]["login"] == BOT and "1 regression(s)" in ours["body"]

    (results / "perfgate-pr" / "summary.md").write_text("### perfgate: :white_check_mark: no regression\n")
    r = run(cmd, env)  # the next push: the bot's comment changes, nothing else
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["comments"][:2] == others and len(state["comments"]) == 3
    assert state["calls"][-1][1:4] == ["--method", "PATCH", f"repos/owner/repo/issues/comments/{ours['id']}"]
    assert "no regression" in state["comments"][2]["body"]

    # A job that wrote nothing: the comment says so rather than keeping stale numbers.
    r = run([*cmd[:-1], str(tmp_path / "no-such-folder")], env)
    assert r.returncode == 0, r.stderr
    assert "### perfgate: no results" in json.loads(state_file.read_text())["comments"][2]["body"]


def cpu_head(sha: str = SHA, repo: str = "contributor/repo", branch: str = "feature") -> list[str]:
    return ["--gate", "cpu", "--head-sha", sha, "--head-repo", repo, "--head-branch", branch]


def test_bad_input_is_one_line_and_posts_nothing(tmp_path: Path) -> None:
    state_file = install_fake_gh(tmp_path)
    env = script_env(tmp_path)
    results = summary_dir(tmp_path, "### perfgate\n", pr=5)
    for args, says in [
        ([str(results)], "--pr must be a pull-request number"),
        (["--pr", "5"], "no summary file or folder given"),
        (
            ["--run-title", "benchmark-gpu: push on main at " + SHA, str(results)],
            "is not the title of a pull-request run",
        ),
        (["--pr", "6", "--run-title", f"benchmark-gpu: pull request #5 at {SHA}", str(results)], "disagree"),
        (["--pr", "5", "--run-url", "javascript:alert(1)", str(results)], "is not a plain https URL"),
        # A benchmark-cpu run's title is the pull request's words (its own copy of the workflow).
        (["--gate", "cpu", "--run-title", f"benchmark-gpu: pull request #5 at {SHA}", str(results)], "--head-sha"),
        (["--pr", "5", *cpu_head(), str(results)], "without --pr or --run-title"),
        ([*cpu_head(sha="HEAD"), str(results)], "are not a commit (40 hex digits)"),
        ([*cpu_head(repo="contributor/repo/x"), str(results)], "are not a commit (40 hex digits)"),
        ([*cpu_head(branch=""), str(results)], "is not a branch name"),
        ([*cpu_head(branch="a\nb"), str(results)], "is not a branch name"),
    ]:
        r = run([str(SCRIPTS / "pr-comment"), *args], env)
        assert r.returncode == 4 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert json.loads(state_file.read_text())["calls"] == []


def pr_run_title(number: int, sha: str) -> str:
    """benchmark-gpu's run-name for a pull request, as GitHub's format() fills it in."""
    import yaml

    run_name = yaml.safe_load((ROOT / ".github" / "workflows" / "benchmark-gpu.yml").read_text())["run-name"]
    (template,) = re.findall(r"format\('(benchmark-gpu: pull request[^']*)'", run_name)
    return template.replace("{0}", str(number)).replace("{1}", sha)


def _step_outputs(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file as the runner reads it (NAME<<DELIM ... DELIM, or NAME=VALUE)."""
    outputs, lines = {}, path.read_text().splitlines()
    i = 0
    while i < len(lines):
        name, sep, delim = lines[i].partition("<<")
        if sep:
            end = lines.index(delim, i + 1)
            outputs[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
        else:
            key, _, value = lines[i].partition("=")
            outputs[key] = value
            i += 1
    return outputs


def pull(
    number: int,
    head: str,
    base: str = "main",
    repo: str = "owner/repo",
    state: str = "open",
    head_ref: str = "feature",
    head_repo: str = "contributor/repo",
) -> dict:
    """GitHub's GET repos/OWNER/REPO/pulls/N (one entry of GET .../pulls), the fields pr-comment reads."""
    return {
        "number": number,
        "state": state,
        "head": {"sha": head, "ref": head_ref, "repo": {"full_name": head_repo}},
        "base": {"ref": base, "repo": {"full_name": repo}},
    }


def test_the_comment_goes_to_the_pull_request_the_run_measured(tmp_path: Path) -> None:
    """benchmark-gpu.yml's path when the runner's GPU is unfit: scripts/ci-benchmark (benchmark-pr)
    writes the health summary as its step output `summary` (tests/fake_cuda: torch sees a GPU, NVML
    finds no driver); scripts/pr-summary (report-pr) writes the artifact from that output and the
    event's pull request and commit; scripts/pr-comment posts it once GitHub's API confirms them."""
    out, github_output = tmp_path / "ci", tmp_path / "github-output"
    env = script_env(tmp_path, PYTHONPATH=str(ROOT / "tests" / "fake_cuda"), GITHUB_OUTPUT=str(github_output))
    r = run([str(SCRIPTS / "ci-benchmark"), "--out", str(out), *[a if a != "cpu" else "cuda:0" for a in SMALLEST]], env)
    assert r.returncode == 5, r.stderr[-3000:]
    summary = _step_outputs(github_output)["summary"]
    assert summary.startswith("### perfgate: cannot run here")

    results = tmp_path / "perfgate-results"
    env = script_env(tmp_path, SUMMARY=summary, PERFGATE_PR="42", PERFGATE_PR_HEAD=SHA)
    r = run([str(SCRIPTS / "pr-summary"), str(results / "perfgate-pr")], env)
    assert r.returncode == 0, r.stderr
    assert json.loads((results / "perfgate-pr" / "pull-request.json").read_text()) == {"pr": 42, "head_sha": SHA}

    state_file = install_fake_gh(tmp_path, pulls={"42": pull(42, SHA)})
    env = script_env(tmp_path, GH_REPO="owner/repo")
    cmd = [str(SCRIPTS / "pr-comment"), "--repo", "owner/repo", "--author", BOT, "--run-url", RUN_URL, "--run-title"]
    r = run([*cmd, pr_run_title(42, SHA), str(results)], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["calls"][0] == ["api", "repos/owner/repo/pulls/42"]
    assert state["calls"][-1][1:4] == ["--method", "POST", "repos/owner/repo/issues/42/comments"]
    (body,) = [c["body"] for c in state["comments"]]
    assert "### perfgate: cannot run here: the runner's GPU failed 1 health check(s)" in body
    assert problems(body) == []
    posted = len(state["calls"])

    # The artifact names another pull request or commit than the run, or none: no comment at all.
    for other in (pr_run_title(43, SHA), pr_run_title(42, "f" * 40)):
        r = run([*cmd, other, str(results)], env)
        assert r.returncode == 4 and "as the run does; no comment" in r.stderr, r.stderr
    (results / "perfgate-pr" / "pull-request.json").write_text(json.dumps({"pr": "42", "head_sha": SHA}))
    r = run([*cmd, pr_run_title(42, SHA), str(results)], env)
    assert r.returncode == 4 and "as the run does; no comment" in r.stderr, r.stderr
    (results / "perfgate-pr" / "pull-request.json").write_text(json.dumps({"pr": 42, "head_sha": SHA}))

    # GitHub's API disagrees with the title: a pull request into another branch or repository (a
    # run of another base branch's workflow, its title the attacker's), or one that moved on.
    for pulled, code, says in [
        (pull(42, SHA, base="release"), 4, "not main of owner/repo; no comment"),
        (pull(42, SHA, repo="mallory/repo"), 4, "not main of owner/repo; no comment"),
        (pull(42, "e" * 40), 0, "not open at " + SHA),
        (pull(42, SHA, state="closed"), 0, "is closed"),
    ]:
        install_fake_gh(tmp_path, pulls={"42": pulled})
        r = run([*cmd, pr_run_title(42, SHA), str(results)], env)
        assert r.returncode == code and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert [c for c in json.loads(state_file.read_text())["calls"] if c[1:2] == ["--method"]] == []
    install_fake_gh(tmp_path)  # no such pull request
    r = run([*cmd, pr_run_title(42, SHA), str(results)], env)
    assert r.returncode == 4 and "cannot read pull request #42" in r.stderr
    assert posted == 3


def test_a_summary_file_is_read_up_to_the_cap(tmp_path: Path) -> None:
    """A 3 MiB summary.md (an artifact the pull request's code filled) is read up to MAX_READ_BYTES."""
    module = load_pr_comment()
    big = tmp_path / "summary.md"
    big.write_bytes(b"### perfgate\n" + b"x" * (3 << 20))
    text = module.read_capped(big, module.MAX_READ_BYTES)
    assert len(text.encode()) == module.MAX_READ_BYTES == 1 << 20
    assert len(module.build_body([text], RUN_URL)) <= 65536


def test_a_long_summary_is_cut_between_blocks_and_the_footer_stays(tmp_path: Path) -> None:
    module = load_pr_comment()
    code = "```\n" + "\n".join(f"line {i} @octocat <img src=x>" for i in range(4000)) + "\n```\n"
    body = comment(module, "### perfgate\n\n" + "| a | b |\n" * 3000, code)
    assert len(body) <= 65536 and "… cut to fit a comment" in body
    assert problems(body) == []  # no fence left open to swallow the footer


def test_a_cut_inside_details_closes_it_so_the_footer_stays_visible() -> None:
    """The comment cut (65,000 characters) inside an open <details>: the cut closes it, so the
    footer is not folded away; without the close the check above finds the unbalanced tag."""
    module = load_pr_comment()
    summary = "<details><summary>Other verdicts (5000)</summary>\n" + "| a | b |\n" * 8000 + "</details>\n"
    body = comment(module, summary)
    assert "… cut to fit a comment" in body and problems(body) == []
    html = render(body)
    assert html.rindex("</details>") < html.rindex("<sub>")  # the footer after the fold, shown
    unclosed = body.replace("\n</details>\n", "\n")
    assert "1 <details> opened, 0 closed" in problems(unclosed)


# --- the CPU gate's comment (benchmark-cpu's pull-request runs) ------------------------------------

CPU_MARKER = "<!-- perfgate:cpu -->"


def counts_summary(tmp_path: Path, scale: float) -> str:
    """`perfgate ab --counts`'s Markdown (scripts/ci-counts' summary.md) from the real producer: the
    head counted at `scale` times the counts kept for its merge base, each pytest process the fake of
    tests/ab/test_counts.py that writes a real counted run's results."""
    from perfgate.ab import counts as ab_counts
    from perfgate.output import markdown
    from tests.ab.test_counts import BASE_SHA, HEAD_SHA, KEY, FakePytest, kept_store, no_checkout, side

    got = ab_counts.run_counts(
        side("head", HEAD_SHA, tmp_path), BASE_SHA, no_checkout, kept_store(tmp_path), [], tmp_path / "work",
        runner=FakePytest(scale={"head": scale}), predict=lambda k: KEY, say=lambda line: None,
    )  # fmt: skip
    return markdown.counts_summary(got, got.verdicts)


def test_the_cpu_gate_comments_on_the_pull_request_whose_head_it_counted(tmp_path: Path) -> None:
    """benchmark-cpu's pull-request run, commented as pr-comment.yml's comment-cpu job does: the pull
    request found from the run's head commit, repository and branch (GitHub's words, not the run's
    title, which the pull request wrote), in a comment of its own beside the GPU gate's."""
    summary = tmp_path / "perfgate-pr-cpu" / "summary.md"
    summary.parent.mkdir()
    summary.write_text(counts_summary(tmp_path, 1.03))
    gpu_comment = {"id": 1, "user": {"login": BOT}, "body": f"{MARKER}\n### perfgate: no regression\n"}
    pulls = {
        "41": pull(41, "a" * 40, head_ref="other"),  # the same fork, another branch
        "42": pull(42, SHA),  # the run's: contributor/repo's branch feature at SHA
        "43": pull(43, SHA, head_repo="mallory/repo"),  # the same commit pushed from another fork
        "44": pull(44, SHA, base="release"),  # the same branch, into another base
    }
    # GitHub lists them all (filters it ignored): the script picks the run's pull request.
    state_file = install_fake_gh(tmp_path, [gpu_comment], pulls=pulls, filtered=False)
    env = script_env(tmp_path, GH_REPO="owner/repo")
    cmd = [str(SCRIPTS / "pr-comment"), "--author", BOT, "--run-url", RUN_URL, *cpu_head()]

    r = run([*cmd, str(summary)], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["calls"][0][:6] == ["api", "--paginate", "--slurp", "--method", "GET", "repos/owner/repo/pulls"]
    assert state["calls"][-1][1:4] == ["--method", "POST", "repos/owner/repo/issues/42/comments"]
    assert state["comments"][0] == gpu_comment  # the GPU gate's comment is not the CPU gate's
    body = state["comments"][1]["body"]
    assert body.startswith(CPU_MARKER + "\n") and "### perfgate ab --counts: 1 regression(s)" in body
    assert "physicsnemo-block" in body and "instructions" in body
    assert problems(body, CPU_MARKER) == []

    summary.write_text(counts_summary(tmp_path / "again", 1.0))  # the next push: its own comment edited
    state_file.write_text(json.dumps({**state, "filtered": True}))  # and GitHub's query finds it
    r = run([*cmd, str(summary)], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["calls"][-1][1:4] == ["--method", "PATCH", "repos/owner/repo/issues/comments/9001"]
    assert state["comments"][0] == gpu_comment and len(state["comments"]) == 2
    assert "### perfgate ab --counts: no regression" in state["comments"][1]["body"]
    r = run([*cmd, str(tmp_path / "no-artifact" / "summary.md")], env)  # the job wrote nothing
    assert (
        r.returncode == 0
        and "### perfgate, CPU gate: no results" in json.loads(state_file.read_text())["comments"][1]["body"]
    )

    # The run's head is no open pull request's head (moved on, closed, or only another fork's
    # branch at that commit): no comment. GitHub ignoring the `head` filter changes nothing.
    for pulled, filtered in itertools.product(
        (
            {"42": pull(42, "e" * 40)},
            {"42": pull(42, SHA, state="closed")},
            {"43": pull(43, SHA, head_repo="mallory/repo"), "44": pull(44, SHA, base="release")},
            {"41": pull(41, SHA, head_ref="other"), "45": pull(45, SHA, repo="mallory/repo")},
        ),
        (True, False),
    ):
        install_fake_gh(tmp_path, pulls=pulled, filtered=filtered)
        r = run([*cmd, str(summary)], env)
        assert r.returncode == 0 and "no open pull request into main has contributor/repo:feature" in r.stderr
        calls = json.loads(state_file.read_text())["calls"]
        assert [c for c in calls if "POST" in c or "PATCH" in c] == []
