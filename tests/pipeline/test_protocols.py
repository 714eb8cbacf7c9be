"""Everything the drivers call on a rollout backend or a learner is declared by the seam: by its protocol, or by
an optional capability that `run.check_capabilities` requires when the run is wired. Checked by running the
drivers against parts that expose nothing else. `python -m tests.pipeline.test_protocols [SPECRL_DIR]` prints
the table of what the drivers' source uses (read by name), for another tree too (e.g. an old commit's
`git archive`), reading its protocols from its seam.py."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specrl.pipeline import backends, seam
from specrl.registry import load

DRIVERS = ("sync.py", "asynchronous.py", "steps.py", "run.py")
PIPELINE = Path(seam.__file__).parent
BACKEND_ENDS = {"backend", "eval_backend", "evaluator"}  # how the drivers name a RolloutBackend


def _side(node: ast.expr) -> str | None:
    """"backend" or "learner" when `node` is one in the drivers' naming (parts.learner is a LearnerSide)."""
    if isinstance(node, ast.Name):
        return node.id if node.id in ("backend", "learner") else None
    if isinstance(node, ast.Attribute):
        if node.attr in BACKEND_ENDS:
            return "backend"
        if node.attr == "learner" and not (isinstance(node.value, ast.Name) and node.value.id == "parts"):
            return "learner"  # parts.learner.learner, side.learner
    return None


def driver_calls(pipeline: Path = PIPELINE) -> dict[str, dict[str, set[str]]]:
    """side -> attribute -> the driver files that use it."""
    used: dict[str, dict[str, set[str]]] = {"backend": {}, "learner": {}}
    for name in DRIVERS:
        for node in ast.walk(ast.parse((pipeline / name).read_text())):
            if isinstance(node, ast.Attribute) and (side := _side(node.value)) is not None:
                used[side].setdefault(node.attr, set()).add(name)
    return used


def declared() -> dict[str, dict[str, str]]:
    """side -> attribute -> the protocol or capability that declares it."""
    out: dict[str, dict[str, str]] = {"backend": {}, "learner": {}}
    for side, protocols in (("backend", (seam.RolloutBackend, *seam.CAPABILITIES["backend"])),
                            ("learner", (seam.Learner, *seam.CAPABILITIES["learner"]))):
        for protocol in protocols:
            out[side].update({n: protocol.__name__ for n in seam.members(protocol)})
    return out


def declared_in_source(pipeline: Path) -> dict[str, dict[str, str]]:
    """`declared` read from a tree's seam.py without importing it: each Protocol class's methods and annotated
    attributes (a learner-side one is named in CAPABILITIES' "learner" row, or is `Learner`)."""
    tree = ast.parse((pipeline / "seam.py").read_text())
    protocols = {n.name: {m.name for m in n.body if isinstance(m, ast.FunctionDef)} |
                 {m.target.id for m in n.body if isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name)}
                 for n in tree.body if isinstance(n, ast.ClassDef)
                 and any(isinstance(b, ast.Name) and b.id == "Protocol" for b in n.bases)}
    learner_side = {"Learner", *(c.__name__ for c in seam.CAPABILITIES["learner"])}
    out: dict[str, dict[str, str]] = {"backend": {}, "learner": {}}
    for name, names in protocols.items():
        out["learner" if name in learner_side else "backend"].update({a: name for a in names if not a.startswith("_")})
    return out


def table(pipeline: Path = PIPELINE) -> str:
    used = driver_calls(pipeline)
    decl = declared() if pipeline == PIPELINE else declared_in_source(pipeline)
    lines = [f"{'side':8} {'attribute':18} {'declared by':16} used in"]
    for side in ("backend", "learner"):
        for attr in sorted(set(used[side]) | set(decl[side])):
            lines.append(f"{side:8} {attr:18} {decl[side].get(attr, 'NOT DECLARED'):16} "
                         f"{', '.join(sorted(used[side].get(attr, ()))) or '-'}")
    return "\n".join(lines)


class SeamOnly:
    """`inner` as the drivers may see it: only the names its protocol declares, and those of the capabilities
    it provides. A driver that reads or sets anything else (an engine, a model, a private field) fails with an
    AttributeError, on whatever path the run takes."""

    def __init__(self, inner, protocol: type, side: str):
        caps = [c for c in seam.CAPABILITIES[side] if not seam.lacks(inner, c)]
        allowed = set().union(*(seam.members(p) for p in (protocol, *caps)))
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_allowed", allowed)

    def __getattr__(self, name):
        if name not in self._allowed:
            raise AttributeError(f"the drivers used {name!r}, which the seam does not declare")
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        if name not in self._allowed:
            raise AttributeError(f"the drivers set {name!r}, which the seam does not declare")
        setattr(self._inner, name, value)


def _seam_only_backend():
    local = backends.get_backend("local")
    backends.register_backend("seam_only",
                          lambda *a, **kw: SeamOnly(load(local.rollout)(*a, **kw), seam.RolloutBackend, "backend"),
                          lambda *a, **kw: SeamOnly(load(local.learner)(*a, **kw), seam.Learner, "learner"))


@pytest.mark.parametrize("mode, extra", [("sync", {}), ("async", {}),
                                         ("sync", {"rollout.spec.method": "eagle3", "rollout.spec.draft_model":
                                                   "scratch", "rollout.drafter.online": True})])
def test_the_drivers_use_only_what_the_seam_declares(tmp_path, mode, extra):
    """A whole run (steps, evaluation, checkpoints, weight syncs; the online drafter's capability too) through
    a backend and a learner that expose nothing but the seam's declarations."""
    from specrl.cli.main import main
    from specrl.pipeline.run_dir import read_jsonl
    from tests.pipeline.fixtures import make_setup, overrides
    _seam_only_backend()
    model, data = make_setup(tmp_path / "tiny")
    out = tmp_path / "run"
    args = overrides(model, data, out, **{"pipeline.backend": "seam_only", "pipeline.mode": mode,
                                          "schedule.max_steps": 2, "schedule.eval_every": 1, **extra})
    try:
        assert main(["train", *args]) == 0
    finally:
        backends.BACKENDS.pop("seam_only")
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def _provides(cls: type) -> set[str]:
    """What a class provides: its attributes (methods, properties) and what its __init__ assigns to self."""
    names = {n for klass in cls.__mro__ for n in vars(klass)}
    src = ast.parse(Path(__import__(cls.__module__, fromlist=["_"]).__file__).read_text())
    for node in ast.walk(src):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            names |= {t.attr for n in ast.walk(node) if isinstance(n, ast.Assign) for t0 in n.targets
                      for t in (t0.elts if isinstance(t0, ast.Tuple) else [t0])
                      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return names


@pytest.mark.parametrize("module, name, protocols", [
    ("specrl.pipeline.local", "LocalBackend", ("RolloutBackend", "IdleWork")),
    ("specrl.pipeline.cluster.rollout", "RayRolloutBackend", ("RolloutBackend",)),
    ("specrl.pipeline.learner", "LocalLearner", ("Learner", "OnlineDrafter", "SharedPolicy")),
    ("specrl.pipeline.cluster.learner", "RayLearner", ("Learner",)),
])
def test_each_backend_and_learner_provides_its_protocols(module, name, protocols):
    cls = getattr(__import__(module, fromlist=[name]), name)  # Ray itself is imported only when one is built
    for protocol in protocols:
        missing = seam.members(getattr(seam, protocol)) - _provides(cls)
        assert not missing, f"{name} lacks {sorted(missing)} of {protocol}"


def test_every_pipeline_mode_has_a_driver_and_every_backend_row_loads():
    from specrl.config.choices import PIPELINE_MODES
    from specrl.pipeline.run import DRIVERS
    assert tuple(DRIVERS) == PIPELINE_MODES
    for path in DRIVERS.values():
        assert callable(load(path))
    for name in ("local", "ray"):  # importing the Ray backend's modules does not import Ray
        row = backends.get_backend(name)
        assert callable(load(row.rollout)) and callable(load(row.learner))


if __name__ == "__main__":
    import sys
    print(table(Path(sys.argv[1]) / "pipeline" if len(sys.argv) > 1 else PIPELINE))
