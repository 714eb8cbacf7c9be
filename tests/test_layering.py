"""The layering of DESIGN.md's parts table, read from the source (every import, module- or function-level, and
every "specrl.module[:attribute]" string a registry imports by name: drafters/registry.py's methods, the seam's
backends, the CLI's commands).

Packages import downwards only: no cycle between packages, `rl` imports nothing from the rest of specrl, the
engine does not import the drafters (the drafters' registry hands the engine its lookup when specrl is
imported), drafters use the engine core only (never `engine.llm`, `engine.engine`, `engine.steps`), and
`trainer` (the policy update) imports nothing from `drafters`: online drafter training reaches the trainer
through `PolicyTrainer.forward_hook`.

`python tests/test_layering.py [SPECRL_DIR]` prints the arrows (see `print_arrows`).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specrl"

# the whole tree is held to "no package import cycles" (pipeline <-> trainer went when the train CLI moved to cli/)
KNOWN_CYCLES: set[tuple[str, str]] = set()
KNOWN_MODULE_CYCLES: set = set()  # none: the backends' table (pipeline/backends.py) sits above its backends


def _module_name(path: Path, root: Path = ROOT) -> list[str]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


DOTTED = re.compile(r"specrl(\.\w+)+(:[\w.]+)?")  # what a registry imports by name: "specrl.pkg.module:attr"


def named_module(text: str, root: Path = ROOT) -> str | None:
    """The specrl module a registry's string names ("specrl.a.b:attr" or "specrl.a.b.Class"), None if none."""
    if not DOTTED.fullmatch(text):
        return None
    parts = text.split(":")[0].split(".")
    while parts and not (root.parent.joinpath(*parts).with_suffix(".py").is_file()
                         or root.parent.joinpath(*parts, "__init__.py").is_file()):
        parts.pop()  # "specrl.pipeline.vllm.worker.DrafterReload": a class path
    return ".".join(parts) if len(parts) > 1 else None


def import_edges(root: Path = ROOT) -> list[tuple[str, str]]:
    """(importing module, imported specrl module) for every import statement, relative ones resolved, and for
    every string naming a specrl module (a registry's target, imported by importlib when asked for)."""
    edges = []
    for f in sorted(root.rglob("*.py")):
        mod = _module_name(f, root)
        package = mod if f.name == "__init__.py" else mod[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and named_module(node.value, root):
                edges.append((".".join(mod), named_module(node.value, root)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                elif node.module and node.module.split(".")[0] == "specrl":
                    base = node.module.split(".")
                else:
                    continue
                for alias in node.names:  # `from .pkg import module` imports the module
                    sub = base + [alias.name]
                    is_module = (root.parent.joinpath(*sub).with_suffix(".py").is_file()
                                 or root.parent.joinpath(*sub).is_dir())
                    edges.append((".".join(mod), ".".join(sub if is_module else base)))
            elif isinstance(node, ast.Import):
                edges += [(".".join(mod), a.name) for a in node.names if a.name.split(".")[0] == "specrl"]
    return edges


def package_arrows(edges, root: Path = ROOT) -> dict[str, set[str]]:
    """specrl.<package> -> the other packages it imports (top-level modules such as specrl.io are leaves)."""
    arrows = defaultdict(set)
    for src, dst in edges:
        a, b = src.split("."), dst.split(".")
        if len(a) > 1 and len(b) > 1 and a[1] != b[1] and (root / b[1]).is_dir() and (root / a[1]).is_dir():
            arrows[a[1]].add(b[1])
    return arrows


def module_arrows(edges, package: str = "specrl.pipeline") -> dict[str, set[str]]:
    """Module -> the other modules of `package` (subpackages included) it imports, named relative to it."""
    arrows = defaultdict(set)
    prefix = package + "."
    for src, dst in edges:
        if src.startswith(prefix) and dst.startswith(prefix) and src != dst:
            arrows[src.removeprefix(prefix)].add(dst.removeprefix(prefix))
    return arrows


def package_cycles(arrows) -> set[tuple[str, str]]:
    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for y in arrows.get(todo.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return seen
    return {tuple(sorted((a, b))) for a in arrows for b in arrows[a] if a in reach(b)}


def floors(arrows) -> dict[str, int]:
    """Each package's floor: 0 for one that imports no other, else one above the highest it imports (a circle
    has no floor: its packages are left out)."""
    cyclic = {p for pair in package_cycles(arrows) for p in pair}
    names = (set(arrows) | {b for bs in arrows.values() for b in bs}) - cyclic
    floor: dict[str, int] = {}

    def of(p: str) -> int:
        if p not in floor:
            floor[p] = 1 + max((of(b) for b in arrows.get(p, ()) if b not in cyclic), default=-1)
        return floor[p]
    return {p: of(p) for p in sorted(names)}


def test_the_graph_sees_the_imports_it_should():
    # a self-check, so that the rules below cannot pass on an empty graph
    edges = import_edges()
    assert ("specrl.engine.steps", "specrl.engine.sampler") in edges
    assert ("specrl.drafters.eagle3.drafter", "specrl.engine.sampler") in edges
    assert package_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert floors({"a": {"b", "c"}, "b": {"c"}}) == {"a": 2, "b": 1, "c": 0}


def test_the_registries_edges_count():
    """An import by name is an edge: each drafter method's class, each backend, each command."""
    edges = import_edges()
    from specrl.drafters.registry import REGISTRY
    for target in REGISTRY.values():
        assert ("specrl.drafters.registry", target.split(":")[0]) in edges
    assert ("specrl.pipeline.backends", "specrl.pipeline.vllm.build") in edges
    assert ("specrl.cli.main", "specrl.sim.cli") in edges
    assert ("specrl", "specrl.drafters.registry") in edges  # importing specrl wires the registry into the engine
    assert named_module("specrl.pipeline.vllm.worker.DrafterReload") == "specrl.pipeline.vllm.worker"
    assert named_module("specrl.nothing.here:x") is None


def test_no_import_cycle_between_packages():
    cycles = package_cycles(package_arrows(import_edges()))
    assert cycles <= KNOWN_CYCLES, f"package import cycles: {sorted(cycles - KNOWN_CYCLES)}"


def test_no_import_cycle_between_modules():
    """Between any two modules of specrl, not only packages: e.g. the seam names its backends by module path,
    and the adaptive strategy imports the drafter pool, never the other way round."""
    cycles = package_cycles(module_arrows(import_edges(), "specrl"))
    assert cycles <= KNOWN_MODULE_CYCLES, f"specrl module import cycles: {sorted(cycles - KNOWN_MODULE_CYCLES)}"


def test_the_engine_modules_sit_on_at_most_six_floors():
    """The engine's rooms (specrl/engine/__init__.py lists them) import downwards in at most six floors, so a
    reader follows any import chain inside the engine in a few hops."""
    engine_floors = floors(module_arrows(import_edges(), "specrl.engine"))
    assert max(engine_floors.values()) <= 5, f"engine module floors: {engine_floors}"


def test_rl_imports_nothing_from_the_rest_of_specrl():
    arrows = package_arrows(import_edges())
    assert arrows.get("rl", set()) == set(), f"rl imports {sorted(arrows['rl'])}: rl is pure tensor math"


def test_engine_imports_only_model_and_rl():
    arrows = package_arrows(import_edges())
    assert arrows["engine"] <= {"model", "rl"}, (
        f"engine imports {sorted(arrows['engine'])}: the engine finds drafter methods through get_method")


def test_engine_does_not_import_the_drafters():
    bad = [(s, d) for s, d in import_edges() if s.startswith("specrl.engine") and d.startswith("specrl.drafters")]
    assert not bad, (f"the engine imports drafter code: {bad}; reach the method through specrl.engine.methods."
                     "get_method (drafters/registry.py lists the classes)")


def test_trainer_imports_nothing_from_the_drafters():
    bad = [(s, d) for s, d in import_edges() if s.startswith("specrl.trainer") and d.startswith("specrl.drafters")]
    assert not bad, (f"the policy trainer imports drafter code: {bad}; online drafter training installs "
                     "PolicyTrainer.forward_hook from specrl.drafters (or the pipeline) instead")


def test_the_config_tree_sits_below_the_trainer_and_the_drafters():
    """The run's config tree (specrl/config/) is read by the trainer, the drafters and the pipeline: none of them
    imports the trainer's package for configuration, and the config imports none of them."""
    arrows = package_arrows(import_edges())
    assert not arrows["config"] & {"trainer", "drafters", "pipeline", "cli"}, f"config imports {sorted(arrows['config'])}"
    bad = [(s, d) for s, d in import_edges() if not s.startswith("specrl.trainer") and d == "specrl.trainer.config"]
    assert not bad and not (ROOT / "trainer" / "config.py").exists(), bad


def test_imports_by_name_go_through_the_registry():
    """specrl/registry.py is the one place a string becomes an import, so that every such edge is a string this
    test reads (`named_module`)."""
    users = {str(f.relative_to(ROOT.parent)) for f in ROOT.rglob("*.py")
             if any(isinstance(n, (ast.Import, ast.ImportFrom)) and "importlib" in
                    [(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0] for a in n.names]
                    for n in ast.walk(ast.parse(f.read_text())))}
    assert users == {"specrl/registry.py"}, sorted(users)


def test_only_the_cli_imports_the_benchmarks():
    """`specrl bench NAME` names specrl.bench.NAME in cli/main.py's BENCHES; no other part of specrl imports a
    bench, so a bench can change without touching the product."""
    edges = import_edges()
    assert ("specrl.cli.main", "specrl.bench.spec") in edges  # the self-check: the registry's strings count
    bad = [(s, d) for s, d in edges if d.startswith("specrl.bench") and not s.startswith(("specrl.bench", "specrl.cli"))]
    assert not bad, f"the core imports the benchmarks: {bad}; move what both need below them (e.g. specrl/runtime.py)"


def test_the_benchmarks_keep_heavy_imports_for_their_runs():
    """transformers, vLLM, Ray and matplotlib are optional: importing every bench loads none of them, so `specrl
    bench NAME --help` works without them and a run that needs one says which extra to install."""
    code = ("import sys, importlib; from specrl.cli.main import BENCHES; "
            "[importlib.import_module(m) for m, _ in BENCHES.values()]; "
            "heavy = [m for m in ('transformers', 'vllm', 'ray', 'matplotlib') if m in sys.modules]; "
            "assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert out.returncode == 0, out.stderr[-2000:]


def test_drafters_use_the_engine_core_only():
    """What the engine runs (drafters, heads, auto, hot swap) uses its core only. Training code may drive the
    front end: offline training collects the policy's own generations with an `LLM`."""
    banned = {"specrl.engine.llm", "specrl.engine.engine", "specrl.engine.steps", "specrl.engine"}

    def training(module: str) -> bool:
        return module.startswith("specrl.drafters.training.") or module.endswith(".train")
    bad = [(s, d) for s, d in import_edges() if s.startswith("specrl.drafters.") and not training(s) and d in banned]
    assert not bad, f"drafters import the engine's front end: {bad}"


@pytest.mark.parametrize("module", ["specrl.engine.sampler", "specrl.engine.steps", "specrl.engine.pool",
                                    "specrl.drafters.eagle3.drafter", "specrl.engine.adaptive.factory",
                                    "specrl.engine.adaptive.strategy",
                                    "specrl.drafters.training.online", "specrl.drafters.registry",
                                    "specrl.drafters.eagle3.method", "specrl.pipeline.vllm.spec", "specrl.rl"])
def test_module_imports_first_in_a_fresh_interpreter(module):
    """No circular import whatever is imported first (a verify module beside the drafters can fail this way)."""
    fresh_python(f"import {module}")


def fresh_python(code: str) -> None:
    """Runs `code` in a new interpreter from the checkout's root; its error output fails the test."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_method_registry_reads_without_torch():
    """`specrl simulate` reads the drafter names and each method's drafting cost; that must not import torch."""
    code = ("import sys, specrl.engine.methods as m, specrl.sim.build as b, specrl.sim.cli; "
            "from specrl.sim.models import get_model; "
            "[b.default_draft_frac(n, get_model('qwen3-8b')) for n in m.DRAFTING_METHODS]; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    fresh_python(code)


def test_the_engines_public_method_lookup_reads_without_torch():
    """specrl.engine's public names load their rooms on first use: the method lookup (torch-free) loads no torch."""
    code = ("import sys; from specrl.engine import METHODS, DRAFTING_METHODS, SpecConfig, get_method, is_adaptive; "
            "assert is_adaptive('auto') and 'auto' in METHODS and 'auto' not in DRAFTING_METHODS; "
            "assert get_method('ngram') is not None and SpecConfig(method='ngram').enabled; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    fresh_python(code)


def print_arrows(root: Path = ROOT) -> None:
    """`python tests/test_layering.py [SPECRL_DIR]`: the import arrows between packages and between the
    pipeline's and the engine's modules, and any cycle among them or among all modules of specrl (e.g. of an
    older checkout: git archive COMMIT specrl | tar -x -C DIR)."""
    edges = import_edges(root)
    for title, arrows in (("packages", package_arrows(edges, root)), ("specrl.pipeline modules", module_arrows(edges)),
                          ("specrl.engine modules", module_arrows(edges, "specrl.engine"))):
        print(f"{title}:")
        for src in sorted(arrows):
            print(f"  {src} -> {', '.join(sorted(arrows[src]))}")
        print(f"  cycles: {sorted(package_cycles(arrows)) or 'none'}")
        if title != "specrl.pipeline modules":  # the pipeline's registry circles leave most of it without a floor
            by_floor = defaultdict(list)
            for p, n in floors(arrows).items():
                by_floor[n].append(p)
            print("  floors: " + "; ".join(f"{n}: {', '.join(by_floor[n])}" for n in sorted(by_floor)))
    print(f"cycles among all modules: {sorted(package_cycles(module_arrows(edges, 'specrl'))) or 'none'}")


if __name__ == "__main__":
    print_arrows(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
