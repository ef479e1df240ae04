"""Where a process sits in a torchrun job, its process group, and the lockstep rules ranks share.

Ranks must agree on the number of collective steps, so under torchrun every case is measured
with fixed round counts and no re-measurement; the backend follows the device (NCCL for CUDA,
gloo for the CPU).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from perfgate.measure.core import WarmupRule
from perfgate.measure.device import bind
from perfgate.measure.stats import StopRule

DEFAULT_LOCKSTEP_ROUNDS = 30  # timed rounds per case under torchrun (capped by the stop rule's bounds)


@dataclass(frozen=True, kw_only=True)
class Topology:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise ValueError(
            f"environment variable {name}={value!r} is not an integer; torchrun sets it, do not override it"
        ) from None


def topology(env: Mapping[str, str] | None = None) -> Topology:
    """This process's place in the job: from an initialised process group, else torchrun's
    environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), else a single process."""
    import torch.distributed as dist

    env = os.environ if env is None else env
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", 1)
    if env is os.environ and dist.is_available() and dist.is_initialized():
        return Topology(
            rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, local_world_size=local_world
        )
    world = _env_int(env, "WORLD_SIZE", 1)
    rank = _env_int(env, "RANK", 0)
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return Topology(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world)


def under_launcher(env: Mapping[str, str] | None = None) -> bool:
    """True when torchrun (or another env:// launcher) set up a rendezvous for this process."""
    env = os.environ if env is None else env
    return all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def backend_for(device: torch.device | str) -> str:
    """NCCL for CUDA devices, gloo for the CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str, local_rank: int) -> str:
    """The device of one rank: a bare "cuda" becomes this node's GPU `cuda:<LOCAL_RANK>`; an
    explicit index or the CPU is kept."""
    d = torch.device(device)
    return f"cuda:{local_rank}" if d.type == "cuda" and d.index is None else str(d)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_per_rank(cores: int, local_world_size: int) -> int:
    """Intra-op threads per rank so the ranks of one node do not oversubscribe its cores."""
    return max(1, cores // max(1, local_world_size))


def init_process_group(device: torch.device | str) -> bool:
    """Join torchrun's rendezvous (env://) with the backend the device needs; False if a process
    group already exists. For CUDA the rank's GPU becomes the current device first."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    device = bind(device)
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device  # binds NCCL to this GPU: barriers and object collectives use it
    dist.init_process_group(backend=backend_for(device), init_method="env://", **kwargs)
    return True


def ensure_process_group(device: torch.device | str) -> None:
    """A process group for DDP: torchrun's when launched by it, else a one-rank group on an
    in-process HashStore (no port, no rendezvous), so DDP steps also run in a plain pytest run."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if under_launcher():
        init_process_group(device)
        return
    device = bind(device)
    kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend_for(device), store=dist.HashStore(), rank=0, world_size=1, **kwargs)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the running job; (0, 1) outside one."""
    t = topology()
    return t.rank, t.world_size


# ----------------------------------------------------------------------------- lockstep


def lockstep_rules(stop: StopRule, warmup: WarmupRule, rounds: int | None = None) -> tuple[StopRule, WarmupRule]:
    """Fixed warm-up and timed round counts, the same on every rank.

    The adaptive rules stop when *this* rank's median is precise; ranks would then disagree on how
    many steps to run, and a DDP step (an all-reduce) on one rank would wait forever for its peers.
    """
    n = rounds if rounds is not None else max(stop.min_rounds, min(stop.max_rounds, DEFAULT_LOCKSTEP_ROUNDS))
    if n < 1:
        raise ValueError(f"rounds must be at least 1, got {n}")
    w = max(warmup.min_rounds, 2 * warmup.window)
    return (
        replace(stop, min_rounds=n, max_rounds=n),
        replace(warmup, min_rounds=w, max_rounds=w, budget_s=float("inf")),
    )


def lockstep_policy(policy: Any, sibling_cores: float) -> Any:
    """The gate policy for a rank: no re-measurement (one rank re-measuring alone would desync
    the collectives) and room for the sibling ranks' CPU time, which is expected load, not a
    noisy neighbour (a foreign process on top of them still marks the case unreliable)."""
    defaults = replace(policy.defaults, remeasure=0, contention_max=policy.defaults.contention_max + sibling_cores)
    overrides = []
    for o in policy.overrides:
        s = dict(o.settings)
        s["remeasure"] = 0
        if "contention_max" in s:
            s["contention_max"] = s["contention_max"] + sibling_cores
        overrides.append(replace(o, settings=s))
    return replace(policy, defaults=defaults, overrides=tuple(overrides))
