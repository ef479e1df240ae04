"""The project's [tool.perfgate] table (perfgate.cases.project) and the `--pyproject` option of the
commands that read it: a file that cannot be read, a `tool` or `tool.perfgate` that is no table, a
bad `variants` and a `--pyproject` naming no file are each one line naming the file and the fix,
exit 4; an absent ./pyproject.toml still means the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.cases.project import PolicyError, load_table
from perfgate.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"  # the repository's own, a real [tool.perfgate]
BASELINE = sorted(ROOT.glob("baselines/cpu-*/0*_baseline.json"))[-1]  # a real recorded run


def _copy(tmp_path: Path, text: str | None = None, raw: bytes | None = None) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(raw if raw is not None else (text if text is not None else PYPROJECT.read_text()).encode())
    return path


def _head(text: str) -> str:
    """The pyproject before its first [tool.*] table: [build-system] and [project]."""
    return text.split("\n[tool.", 1)[0] + "\n"


def test_the_repositorys_own_table_loads_and_an_absent_file_is_the_defaults(tmp_path) -> None:
    assert load_table(PYPROJECT)["registries"] == ["models"]
    assert load_table(tmp_path / "pyproject.toml") == {}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: ("# caf\xe9: saved as Latin-1\n" + t).encode("latin-1"),
            r"^{path}: not UTF-8 text \(byte 0xe9 at offset 5\); save the file as UTF-8, as TOML requires$",
        ),
        (
            lambda t: f"tool = 3\n{_head(t)}".encode(),
            r"^{path}: tool must be a table \(write \[tool.perfgate\] and its keys\), got 3$",
        ),
        (
            lambda t: f"{_head(t)}[tool]\nperfgate = 3\n".encode(),
            r"^{path}: tool.perfgate must be a table \(write \[tool.perfgate\] and its keys\), got 3$",
        ),
        (
            lambda t: t.replace("[tool.perfgate]\n", "[tool.perfgate]\nvariants = 3\n", 1).encode(),
            r'^{path} \[tool.perfgate\] variants: must be a list of strings, e.g. variants = \["baseline"\], got 3$',
        ),
        (
            lambda t: t.replace("[tool.perfgate]\n", "[tool.perfgate]\nvariants = [3]\n", 1).encode(),
            r"^{path} \[tool.perfgate\] variants: must be a list of strings, .* got \[3\]$",
        ),
        (
            lambda t: t.replace("[tool.perfgate]\n", '[tool.perfgate]\nvariants = "bf16"\n', 1).encode(),
            r"^{path} \[tool.perfgate\] variants: must be a list of strings, .* got 'bf16'$",
        ),
    ],
    ids=["latin-1", "tool-not-a-table", "perfgate-not-a-table", "variants-3", "variants-[3]", "variants-string"],
)
def test_a_pyproject_that_cannot_be_read_is_one_line_naming_it(tmp_path, capsys, edit, message) -> None:
    assert "[tool.perfgate]\n" in PYPROJECT.read_text()
    path = _copy(tmp_path, raw=edit(PYPROJECT.read_text()))
    pattern = message.replace("{path}", str(path).replace("\\", "\\\\"))
    with pytest.raises(PolicyError, match=pattern):
        load_table(path)
    assert main(["compare", str(BASELINE), str(BASELINE), "--pyproject", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"perfgate compare: {path}"), err


def test_the_variants_listed_load(tmp_path) -> None:
    text = PYPROJECT.read_text().replace("[tool.perfgate]\n", '[tool.perfgate]\nvariants = ["baseline", "bf16"]\n', 1)
    path = _copy(tmp_path, text)
    assert load_table(path)["variants"] == ["baseline", "bf16"]


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", str(BASELINE), str(BASELINE)],
        ["report", str(BASELINE), "--no-history"],
        ["history", "--fingerprint", BASELINE.parent.name, "--baselines", str(ROOT / "baselines")],
        ["gate-quality", "--from-json", "quality.json"],
    ],
    ids=["compare", "report", "history", "gate-quality"],
)
def test_a_pyproject_option_naming_no_file_is_refused_not_silently_the_defaults(tmp_path, capsys, argv) -> None:
    missing = tmp_path / "nonexistent.toml"
    assert main([*argv, "--pyproject", str(missing)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == (
        f"perfgate {argv[0]}: --pyproject {missing}: no such file; give the project's pyproject.toml, or leave the "
        "option out to read ./pyproject.toml\n"
    )
    assert main([*argv, "--pyproject", str(tmp_path)]) == EXIT_BAD_INPUT
    assert f"--pyproject {tmp_path}: a folder, not a file;" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()


def test_without_the_option_an_absent_pyproject_is_still_the_defaults(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(BASELINE), str(BASELINE)]) == 0
    assert "0 need attention" in capsys.readouterr().out
