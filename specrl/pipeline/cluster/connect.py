"""Joining or starting a Ray cluster, and placing the actors on it (`ray.placement`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ...config.run import RayConfig


def require_ray():
    """The `ray` module, or a MissingDependency (an ImportError) that says how to install it."""
    from ...errors import MissingDependency
    try:
        import ray
    except ImportError as e:
        raise MissingDependency("pipeline.backend=ray needs Ray, which is not installed: pip install 'specrl[ray]' "
                                "(or pip install 'ray>=2.9'); or run in one process with pipeline.backend=local") from e
    return ray


def connect(cfg: RayConfig):
    """Ray, initialised: joins `cfg.address` ("auto" or HOST:PORT) or starts a light local instance."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    repo = Path(__file__).resolve().parents[3]  # holds this `specrl` package: the actors run this code
    path = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p)
    env = {"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}}
    if cfg.address is not None:
        ray.init(address=cfg.address, runtime_env=env, log_to_driver=False)
        return ray
    need = cfg.rollout_actors * cfg.rollout_cpus + cfg.trainers * cfg.trainer_cpus
    ray.init(num_cpus=cfg.num_cpus or max(int(need + 0.999), 1), include_dashboard=False, log_to_driver=False,
             runtime_env=env, configure_logging=False)
    return ray


_GROUPS: list = []  # this run's placement groups (`_make_groups`): made once, shared by both sides


def release() -> None:
    """Removes this run's placement groups, which ends every actor placed in them (trainers included)."""
    if not _GROUPS:
        return
    from ray.util.placement_group import remove_placement_group
    for pg in _GROUPS:
        remove_placement_group(pg)
    _GROUPS.clear()


def _make_groups(cfg: RayConfig) -> list:
    """The placement groups of `cfg.placement`: one STRICT_PACK group shared by all actors (colocated: one
    node), or [rollout group, trainer group], PACK each (split: Ray may place them on different nodes)."""
    ray = require_ray()
    from ray.util.placement_group import placement_group

    rollout = [_bundle(cfg.rollout_cpus, cfg.rollout_gpus)] * cfg.rollout_actors
    trainer = [_bundle(cfg.trainer_cpus, cfg.trainer_gpus)] * cfg.trainers
    groups = ([placement_group(rollout + trainer, strategy="STRICT_PACK")] if cfg.placement == "colocated" else
              [placement_group(rollout, strategy="PACK"), placement_group(trainer, strategy="PACK")])
    ray.get([g.ready() for g in groups])
    return groups


def placed(cfg: RayConfig, role: str, body: type, **options) -> Callable:
    """(slot, *args) -> a new `body` actor (args to its __init__) on bundle `slot` of `role`'s bundles, with
    Ray's actor `options`; joins or starts the cluster and makes the placement groups first."""
    ray = connect(cfg)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    if not _GROUPS:
        _GROUPS.extend(_make_groups(cfg))
    pg = _GROUPS[-1 if role == "trainer" else 0]
    offset = cfg.rollout_actors if role == "trainer" and cfg.placement == "colocated" else 0  # its first bundle
    cls = ray.remote(**options)(body)

    def make(slot: int, *args):
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=offset + slot)
        return cls.options(scheduling_strategy=strategy).remote(*args)
    return make


def _bundle(cpus: float, gpus: float) -> dict:
    return {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
