"""Checkpoints (perfgate.cases.workload.load_checkpoint): a file torch.save wrote loads strictly; one
that cannot be used is one line naming the file, the options and the fix, in pytest and in
`perfgate profile`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from perfgate import cli
from perfgate.cases.workload import CheckpointError, load_checkpoint


def _saved(tmp_path: Path, obj: object, name: str = "ckpt.pt") -> Path:
    path = tmp_path / name
    torch.save(obj, path)
    return path


def test_a_state_dict_torch_saved_loads_strictly_also_wrapped(tmp_path: Path) -> None:
    torch.manual_seed(1)
    source = nn.Linear(2, 2)
    for obj in (source.state_dict(), {"state_dict": source.state_dict(), "step": 3}):
        target = nn.Linear(2, 2)
        load_checkpoint(target, _saved(tmp_path, obj))
        assert torch.equal(target.weight, source.weight) and torch.equal(target.bias, source.bias)


def test_a_checkpoint_torch_loads_after_its_own_fix_ups_is_not_refused(tmp_path: Path) -> None:
    # BatchNorm before torch 0.4.1 saved no num_batches_tracked; strict loading fills it in.
    source = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    old = {k: v for k, v in source.state_dict().items() if not k.endswith("num_batches_tracked")}
    target = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    load_checkpoint(target, _saved(tmp_path, old))
    assert torch.equal(target[0].weight, source[0].weight)


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda d: d / "nofile.pt", "no such file"),
        (lambda d: d, "not a file"),
        (lambda d: (d / "notes.txt", (d / "notes.txt").write_text("not a checkpoint"))[0], "torch.load failed: "),
        (lambda d: _saved(d, torch.zeros(2)), "holds a Tensor, not a state dict"),
        (lambda d: _saved(d, {"weight": torch.zeros(2, 2)}), "does not fit Linear: 1 missing key(s) (bias)"),
        (lambda d: _saved(d, nn.Linear(3, 3).state_dict()), "does not fit Linear: size mismatch for weight"),
        (
            lambda d: _saved(d, {**nn.Linear(2, 2).state_dict(), "extra.w": torch.zeros(1)}),
            "does not fit Linear: 1 unexpected key(s) (extra.w)",
        ),
    ],
    ids=["missing", "folder", "not-torch", "tensor", "missing-key", "other-model", "unexpected-key"],
)
def test_a_checkpoint_that_cannot_be_used_is_one_line_naming_file_and_options(tmp_path: Path, make, problem) -> None:
    path = make(tmp_path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(nn.Linear(2, 2), path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"checkpoint {path}: {problem}")
    assert message.endswith("saved with torch.save (--perfgate-checkpoint, perfgate profile --checkpoint)")


def test_perfgate_profile_names_a_missing_checkpoint_in_one_line(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nofile.pt"
    argv = ["profile", "physicsnemo-block", "--device", "cpu", "--skip-detailed", "--iterations", "1"]
    assert cli.main([*argv, "--checkpoint", str(missing), "--out", str(tmp_path)]) == cli.EXIT_BAD_INPUT
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("perfgate profile:") and f"checkpoint {missing}: no such file" in last
    assert "--option / --sweep" not in last  # the fix is the checkpoint's, not the options'
