"""The benchmarks use the engine as a user would: through specrl.engine's public names (its `__all__`) and an
LLM's public members only. Read from the source with `ast`: no import of an engine room (`specrl.engine.sampler`,
`from ..engine.methods import ...`, `from specrl.engine import sampler`), no `llm.engine` (the engine under the
front), no private attribute of specrl's objects (`llm._scheduler`, `getattr(llm, "_rng")`), so that the
engine's rooms can change behind its surface without breaking a bench."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specrl.engine

BENCH = Path(__file__).resolve().parents[2] / "specrl" / "bench"
ENGINE = BENCH.parent / "engine"


def _is_room(name: str) -> bool:
    """Whether `name` (relative to specrl.engine) is one of its modules or subpackages."""
    path = ENGINE.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def _imported(node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom in a specrl/bench module reads from ('' for a non-specrl one)."""
    if node.level:  # specrl/bench/NAME.py: one dot is specrl.bench, two are specrl
        base = ["specrl", "bench"][:3 - node.level]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module if node.module and node.module.split(".")[0] == "specrl" else ""


def _base_name(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`torch` of `torch.ops.mkl._x`), None if not a plain name."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def violations(source: str) -> list[str]:
    """What in one bench module's source reaches past the engine's public surface, one line each."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            bad += [f"{where}: import {a.name}" for a in node.names
                    if a.name.startswith("specrl.engine.")]
        elif isinstance(node, ast.ImportFrom):
            module = _imported(node)
            if module.startswith("specrl.engine."):
                bad.append(f"{where}: from {module} import ...")
            elif module == "specrl.engine":
                bad += [f"{where}: from specrl.engine import {a.name} (not public)" for a in node.names
                        if a.name not in specrl.engine.__all__ or _is_room(a.name)]
        elif isinstance(node, ast.Attribute):
            owner = _base_name(node.value)
            if node.attr == "engine" and not (isinstance(node.value, ast.Name) and node.value.id == "specrl"):
                bad.append(f"{where}: .engine of {ast.unparse(node.value)}")
            elif (isinstance(node.value, ast.Attribute) and node.value.attr == "engine" and owner == "specrl"
                  and _is_room(node.attr)):
                bad.append(f"{where}: specrl.engine.{node.attr}")
            elif _private(node.attr) and owner != "torch":  # torch's own ops (bench kernels) are torch's business
                bad.append(f"{where}: private {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and (_private(node.args[1].value) or node.args[1].value == "engine")):
            bad.append(f"{where}: {node.func.id}(..., {node.args[1].value!r})")
    return bad


def test_the_benchmarks_use_only_the_engines_public_names():
    files = sorted(BENCH.rglob("*.py"))
    assert len(files) > 10  # the self-check: the benches are where this test looks
    bad = {str(f.relative_to(BENCH.parent.parent)): v for f in files if (v := violations(f.read_text()))}
    assert not bad, (f"benchmarks reach past specrl.engine's public names: {bad}; import what they need from "
                     "specrl.engine (add it to _EXPORTS and __all__ there), or give LLM a public method")


@pytest.mark.parametrize("line", [
    "from specrl.engine.sampler import per_prompt",
    "from ..engine.methods import get_method",
    "from ..engine import sampler",
    "from specrl.engine import Engine",
    "import specrl.engine.sampler as s",
    "import specrl\nspecrl.engine.sampler.verify = f",
    "profile.save(llm.engine.strategy, out)",
    "llm._scheduler.running",
    "getattr(llm, '_rng')",
    "setattr(llm, 'engine', None)",
])
def test_each_way_past_the_surface_is_caught(line):
    assert violations(line), line


@pytest.mark.parametrize("line", [
    "from specrl.engine import LLM, per_prompt, replaced_verify",
    "from specrl import SamplingParams",
    "from .common import engine\nllm = engine(args, path, 1)",
    "import specrl.engine\nspecrl.engine.LLM",
    "llm.save_cost_profile(out)",
    "torch.ops.mkldnn._linear_pointwise(x)",
    "class A:\n    def __repr__(self):\n        return self.__class__.__name__",
])
def test_public_use_passes(line):
    assert violations(line) == [], line


def test_every_public_name_of_the_engine_resolves():
    for name in specrl.engine.__all__:
        assert getattr(specrl.engine, name) is not None, name
