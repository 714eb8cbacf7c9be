"""The one registry of drafter methods, the one draft-length limit, and one definition of each shared constant."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specrl import LLM, SpecConfig
from specrl.drafters.registry import REGISTRY
from specrl.engine.methods import (DRAFTING_METHODS, MAX_SPEC_TOKENS, METHODS, TRAINABLE_METHODS, get_method)
from specrl.engine.stats import EngineStats
from tests.helpers import tiny_model

ROOT = Path(__file__).resolve().parents[2] / "specrl"


@pytest.mark.parametrize("name", METHODS)
def test_every_method_is_one_class_in_its_own_folder(name):
    method = get_method(name)
    assert method.name == name and REGISTRY[name] == f"specrl.drafters.{name}.method:{type(method).__name__}"
    assert get_method(name) is method  # built once
    # model-based methods have weights: a shipped checkpoint, and the cold start, training and export members
    if method.trainable:
        assert (method.shipped_dir / "config.json").is_file()
        for member in ("scratch", "engine_drafter", "capture_layers", "draft_ids", "online_logits", "cli_train",
                       "save", "module_class"):
            assert hasattr(type(method), member), f"{name} lacks {member}"


def test_every_list_of_methods_is_the_registry():
    from specrl.bench import spec as bench_spec
    from specrl.cli import train_drafter
    from specrl.sim.build import sd_methods
    assert METHODS == ("draft_model", "eagle3", "mtp", "ngram", "suffix", "auto") == tuple(REGISTRY)
    assert TRAINABLE_METHODS == ("draft_model", "eagle3", "mtp")
    assert sd_methods() == ("none", *METHODS) and "auto" not in DRAFTING_METHODS  # the simulator reads the registry
    assert train_drafter.default_out("eagle3") == get_method("eagle3").shipped_dir
    assert "auto" in METHODS and bench_spec.METHODS == METHODS
    with pytest.raises(ValueError, match=r"drafters=\['auto'\] is invalid: expected at least one of "
                                         r"\['draft_model', 'eagle3', 'mtp', 'ngram', 'suffix'\]"):
        SpecConfig(method="auto", drafters=("auto",))


def test_no_code_compares_a_method_name():
    """Variation lives in the method classes: no `spec.method == "eagle3"` (or `in (...)`) outside them."""
    names = set(METHODS)
    bad = []
    for rel, tree in _modules():
        if rel.startswith("specrl/drafters/") and rel.endswith("/method.py"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                     for op in node.ops):
                consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                if any(v in names for v in consts) and "method" in ast.unparse(node):
                    bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, f"method names compared outside drafters/<method>/method.py: {bad}"


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"method='medusa' is invalid: expected one of \['draft_model', 'eagle3', "
                                         r"'mtp', 'ngram', 'suffix', 'auto'\]"):
        SpecConfig(method="medusa")
    with pytest.raises(ValueError, match="valid: "):
        get_method("medusa")


def test_one_draft_length_limit():
    SpecConfig(num_speculative_tokens=MAX_SPEC_TOKENS)
    with pytest.raises(ValueError, match=f"expected in \\[1, {MAX_SPEC_TOKENS}\\]"):
        SpecConfig(num_speculative_tokens=MAX_SPEC_TOKENS + 1)
    assert len(EngineStats().drafted_at) == len(EngineStats().accepted_at) == MAX_SPEC_TOKENS
    llm = LLM(tiny_model(), max_num_seqs=2, max_model_len=10)
    assert llm.engine.runner.cache[0][0].shape[2] == 10 + MAX_SPEC_TOKENS + 1  # room for a full draft past the budget


def _modules():
    for f in sorted(ROOT.rglob("*.py")):
        yield str(f.relative_to(ROOT.parent)), ast.parse(f.read_text())


@pytest.mark.parametrize("value", [0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB])
def test_the_splitmix_constants_are_written_once(value):
    where = sorted({rel for rel, tree in _modules() for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and node.value == value})
    assert where == ["specrl/engine/sampler.py"], f"{value:#x} is written in {where}: import it from specrl.engine.sampler"


def test_the_shipped_drafter_path_is_computed_once():
    def segments(node):  # the string parts of a `a / "b" / "c"` path expression
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return segments(node.left) + segments(node.right)
        return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []
    where = sorted({rel for rel, tree in _modules() for node in ast.walk(tree)
                    if isinstance(node, ast.BinOp) and {"assets", "drafters"} <= set(segments(node))})
    assert where == ["specrl/engine/methods.py"], f"the drafter asset path is computed in {where}"


def test_the_stream_ids_are_defined_once():
    names = {"STREAM_SAMPLE", "STREAM_ACCEPT", "STREAM_DRAFT"}
    where = sorted({rel for rel, tree in _modules() for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name) and t.id in names})
    assert where == ["specrl/engine/sampler.py"], f"RNG stream ids are assigned in {where}"
