"""Model registry and workloads: what one timed step of a model family computes.

A family lives in one file of model code that provides, by name: `CONFIGS` (size presets),
`example_inputs(config, *, batch, seed, device, dtype, **options)`,
`step_info(config, *, batch, **options)` (throughput items per step, primary unit first) and
`OUTPUT_KIND` ("image", "audio" or "tensor"). A `ModelSpec` names that file and how a size's
module is built: `model_class`, a class of the file called with the size's config, or `factory`,
any callable returning the module (a third-party constructor such as timm's `create_model`),
called with the size's config as keyword arguments when it is a dict, else as its one argument.
The spec's name is the pytest id and the baseline key, so it never changes once baselines exist.

perfgate registers no model itself: `load_registries` imports the registry modules and model
files a project names (this repository's families, the top-level `models` package, only where a
project names them), and they call `register_model`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

# The step kinds a spec may name (`ModelSpec.step_kind`; perfgate.cases.steps builds each): what
# one timed step does.
STEP_KINDS = ("inference", "train", "ddp-train", "dp-inference")
TRAINING_STEP_KINDS = frozenset({"train", "ddp-train"})
DATA_PARALLEL_STEP_KINDS = frozenset({"ddp-train", "dp-inference"})  # each rank its own data, throughput summed


def is_training(step_kind: str) -> bool:
    return step_kind in TRAINING_STEP_KINDS


DATA_PATHS = ("static", "host", "device")
NO_MODELS = (
    "no models are registered: name the modules that register them in pyproject.toml "
    '[tool.perfgate] registries = ["models"] (or --perfgate-registry MODULE), or model files in '
    'model_files = ["my_model.py"] (or --perfgate-model-file PATH)'
)


class RegistryError(ValueError):
    """A registry module or model file that cannot be loaded; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    module: str  # importable module holding the family's CONFIGS, example_inputs and step_info
    model_class: str = ""  # a class of `module`, called with the size's config; or:
    factory: Callable[..., nn.Module] | None = None  # called with the config (as kwargs when a dict)
    default_sizes: Mapping[str, str]  # device type -> size preset used when none is given
    step_kind: str = "inference"  # one of STEP_KINDS; "train": forward, loss, backward, SGD
    data: str = "static"  # "host"/"device": a fresh batch generated each step (train only)
    options: Mapping[str, Any] = field(default_factory=dict)  # fixed options for this entry
    sweep: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # option values benchmarked
    description: str = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelSpec:
        if "step" in kwargs:  # the keyword's name before the step kind got its own word
            raise TypeError(f"ModelSpec(step={kwargs['step']!r}): the keyword is step_kind now, e.g. step_kind='train'")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if bool(self.model_class) == (self.factory is not None):
            raise ValueError(f"model {self.name!r}: give either model_class (a class name in {self.module}) or factory")
        if self.factory is not None and not callable(self.factory):
            raise ValueError(f"model {self.name!r}: factory must be callable, got {self.factory!r}")
        if self.step_kind not in STEP_KINDS:
            raise ValueError(
                f"model {self.name!r}: step_kind must be one of {', '.join(STEP_KINDS)}, got {self.step_kind!r}"
            )
        if self.data not in DATA_PATHS:
            raise ValueError(f"model {self.name!r}: data must be one of {DATA_PATHS}, got {self.data!r}")
        if self.data != "static" and not is_training(self.step_kind):
            raise ValueError(f"model {self.name!r}: generated data paths are for the training step kinds")


MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model family to the registry; its name must be new."""
    if spec.name in MODELS and MODELS[spec.name] != spec:
        raise RegistryError(
            f"model {spec.name!r} is already registered (from {MODELS[spec.name].module}); give the new one another "
            "name"
        )
    MODELS[spec.name] = spec
    return spec


def _why(exc: BaseException) -> str:
    """One line: the exception and the line of the user's code that raised it (a SyntaxError
    names its own position)."""
    text = f"{type(exc).__name__}: {exc}"
    skip = (Path(__file__).parents[1], Path(importlib.__file__).parent)  # perfgate's and the import machinery's frames
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen") and not any(Path(f.filename).is_relative_to(s) for s in skip)
    ]
    if frames and not isinstance(exc, SyntaxError):
        text += f" ({frames[-1].filename}:{frames[-1].lineno})"
    return text


def load_model_file(path: str | Path) -> ModuleType:
    """Import a user's model file (which calls register_model) by path."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"model file {path} does not exist: fix the path in [tool.perfgate] model_files or --perfgate-model-file"
        )
    name = f"perfgate_user_{path.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(loaded.__file__ or "").resolve() != path.resolve():
            raise RegistryError(f"model files {loaded.__file__} and {path} have the same name; rename one of them")
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered before exec so the file can name itself in a ModelSpec
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]  # a fixed file is loaded again, not taken from the cache half-run
        if isinstance(exc, RegistryError):
            raise RegistryError(f"model file {path}: {exc}") from None
        if isinstance(exc, Exception):
            raise RegistryError(
                f"model file {path}: {_why(exc)}; fix the file, or remove it from [tool.perfgate] "
                f"model_files / --perfgate-model-file"
            ) from None
        raise
    return module


def load_registries(names: Sequence[str], model_files: Sequence[str | Path], root: str | Path) -> None:
    """Import the registry modules `names` (with `root` importable) and the model files (paths
    relative to `root`), in that order; each registers its models. Errors are one-line RegistryErrors."""
    root = Path(root).resolve()
    if names and str(root) not in sys.path:
        sys.path.insert(0, str(root))  # kept: the families are imported again when a workload is built
    for name in names:
        if str(name) == "perfgate.models" or str(name).startswith("perfgate.models."):
            raise RegistryError(
                f"registry {name!r}: the model families moved out of the perfgate package to the repository's "
                f'top-level models/; write [tool.perfgate] registries = ["models"] (or --perfgate-registry models)'
            )
        try:
            importlib.import_module(str(name))
        except RegistryError as exc:
            raise RegistryError(f"registry {name!r}: {exc}") from None
        except Exception as exc:
            raise RegistryError(
                f"registry {name!r} cannot be imported: {_why(exc)}; fix the module, or its name in "
                f"[tool.perfgate] registries / --perfgate-registry (importable from {root})"
            ) from None
    for f in model_files:
        load_model_file(root / f)


def get_model(name: str) -> ModelSpec:
    if not MODELS:
        raise KeyError(f"unknown model {name!r}: {NO_MODELS}")
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def family(spec: ModelSpec) -> ModuleType:
    return importlib.import_module(spec.module)


def sizes(spec: ModelSpec) -> list[str]:
    return list(family(spec).CONFIGS)


def default_size(spec: ModelSpec, device_type: str) -> str:
    return spec.default_sizes.get(device_type, spec.default_sizes.get("cpu", "tiny"))


def config(spec: ModelSpec, size: str) -> Any:
    configs = family(spec).CONFIGS
    if size not in configs:
        raise KeyError(f"model {spec.name!r} has no size {size!r}; sizes: {', '.join(configs)}")
    return configs[size]


def build_module(spec: ModelSpec, size: str, *, device: torch.device | str = "cpu", seed: int = 0) -> nn.Module:
    """The model at `size` with deterministic random weights, on `device`, fp32."""
    fam = family(spec)
    cfg = fam.CONFIGS[size]
    torch.manual_seed(seed)
    with torch.device(device):
        if spec.factory is None:
            module = getattr(fam, spec.model_class)(cfg)
        else:
            module = spec.factory(**cfg) if isinstance(cfg, Mapping) else spec.factory(cfg)
    if not isinstance(module, nn.Module):
        made_by = spec.model_class or getattr(spec.factory, "__qualname__", repr(spec.factory))
        raise TypeError(f"model {spec.name!r}: {made_by} returned a {type(module).__name__}, not a torch nn.Module")
    return module.train() if is_training(spec.step_kind) else module.eval()


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into the model: one line naming the file, the options that
    give it (the pytest plugin's and `perfgate profile`'s) and the fix."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(
            f"checkpoint {path}: {problem}; give a state dict of this model saved with torch.save "
            "(--perfgate-checkpoint, perfgate profile --checkpoint)"
        )


def checkpoint_problem(path: str | Path) -> str | None:
    """Why `path` cannot be a checkpoint before it is loaded (missing, a folder, unreadable), or None."""
    p = Path(path)
    if not p.exists():
        return "no such file"
    if not p.is_file():
        return "not a file"
    try:
        with p.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    return None


def load_checkpoint(module: nn.Module, path: str | Path) -> None:
    """Load a real checkpoint strictly: every key must match the model's state dict. A file that
    is missing, unreadable, no state dict or another model's is a one-line CheckpointError."""
    problem = checkpoint_problem(path)
    if problem is not None:
        raise CheckpointError(path, problem)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever unpickling raised, the file is the problem
        raise CheckpointError(path, f"torch.load failed: {_first_line(exc)}") from None
    for key in ("state_dict", "model", "ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, Mapping):
        raise CheckpointError(path, f"holds a {type(state).__name__}, not a state dict")
    name = type(module).__name__
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        # The keys are compared after torch's own fix-ups (an old BatchNorm's missing
        # num_batches_tracked, weight norm's renamed keys), so a checkpoint torch loads is never
        # refused here: the strict load failed, and the lenient one names what did not fit.
        try:
            keys = module.load_state_dict(state, strict=False)
        except RuntimeError:  # a size mismatch: its first line only says "Error(s) in loading state_dict"
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            raise CheckpointError(
                path, f"does not fit {name}: {lines[1] if len(lines) > 1 else _first_line(exc)}"
            ) from None
        parts = [
            f"{len(k)} {what} key(s) ({_few(sorted(k))})"
            for what, k in (("missing", keys.missing_keys), ("unexpected", keys.unexpected_keys))
            if k
        ]
        raise CheckpointError(path, f"does not fit {name}: {', '.join(parts) or _first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


def _few(keys: list[str], n: int = 3) -> str:
    return ", ".join(keys[:n]) + (", ..." if len(keys) > n else "")


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass(kw_only=True)
class Workload:
    """One model at one size on one device, with its inputs, ready to be converted and stepped."""

    spec: ModelSpec
    size: str
    config: Any
    device: torch.device
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    options: dict[str, Any]
    throughput: dict[str, float]  # items per step, primary unit first
    output_kind: str
    params: int
    seed: int = 0

    @property
    def unit(self) -> str:
        return next(iter(self.throughput))

    @property
    def family(self) -> ModuleType:
        """The family's module (its CONFIGS, example_inputs, step_info, batch generators)."""
        return family(self.spec)


def build_workload(
    spec: ModelSpec,
    size: str,
    device: torch.device | str,
    *,
    batch: int = 1,
    seed: int = 0,
    checkpoint: str | Path | None = None,
    **options: Any,
) -> Workload:
    fam = family(spec)
    cfg = config(spec, size)
    device = torch.device(device)
    opts = {**spec.options, **options}
    module = build_module(spec, size, device=device, seed=seed)
    if checkpoint is not None:
        load_checkpoint(module, checkpoint)
    inputs = fam.example_inputs(cfg, batch=batch, seed=seed, device=device, dtype=torch.float32, **opts)
    return Workload(
        spec=spec,
        size=size,
        config=cfg,
        device=device,
        module=module,
        inputs=tuple(inputs),
        options=opts,
        throughput=dict(fam.step_info(cfg, batch=batch, **opts)),
        output_kind=getattr(fam, "OUTPUT_KIND", "tensor"),
        params=count_parameters(module),
        seed=seed,
    )
