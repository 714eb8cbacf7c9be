import dataclasses
import os
from dataclasses import dataclass, field

import pytest
import yaml

from specrl.config import ConfigError, dump_yaml, from_dict, load_config, require, to_dict


@dataclass
class OptimCfg:
    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    warmup: int = 0

    def validate(self) -> None:
        require(self.lr > 0, "lr", self.lr, "a positive learning rate", "set e.g. optim.lr=1e-5")


@dataclass
class SpecCfg:
    method: str | None = "eagle3"
    k: int = 4


@dataclass
class Stage:
    name: str
    steps: int = 1


@dataclass
class RootCfg:
    max_steps: int = 10
    out_dir: str = "runs/x"
    seed: int | None = 0
    use_sd: bool = True
    tags: list[str] = field(default_factory=list)
    optim: OptimCfg = field(default_factory=OptimCfg)
    # a non-default nested default: partial overrides must keep warmup=5
    sched: OptimCfg = field(default_factory=lambda: OptimCfg(lr=3e-4, warmup=5))
    spec: SpecCfg | None = None
    stages: list[Stage] = field(default_factory=list)

    def validate(self) -> None:
        require(self.max_steps > 0, "max_steps", self.max_steps, "at least 1 step", "pass max_steps=N with N >= 1")


def test_defaults_from_empty_dict():
    cfg = from_dict(RootCfg, {})
    assert cfg == RootCfg()


def test_nested_and_coercion():
    data = {
        "max_steps": "20",  # str -> int
        "use_sd": "false",  # str -> bool
        "optim": {"lr": "1e-4", "betas": [0.8, "0.9"]},  # YAML 1.1 reads 1e-4 as a string
        "spec": {"method": "ngram", "k": 2.0},  # float with integer value -> int
        "stages": [{"name": "a"}, {"name": "b", "steps": 3}],
        "seed": "null",
    }
    cfg = from_dict(RootCfg, data)
    assert cfg.max_steps == 20 and cfg.use_sd is False
    assert cfg.optim.lr == pytest.approx(1e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.optim.betas == (0.8, 0.9)
    assert cfg.spec == SpecCfg(method="ngram", k=2)
    assert cfg.stages == [Stage("a", 1), Stage("b", 3)]
    assert cfg.seed is None


def test_partial_nested_keeps_parent_default_instance():
    cfg = from_dict(RootCfg, {"sched": {"lr": 1.0}})
    assert cfg.sched == OptimCfg(lr=1.0, warmup=5)


def test_unknown_key_suggests_closest_and_lists_valid():
    with pytest.raises(ConfigError) as e:
        from_dict(RootCfg, {"optim": {"lrr": 1.0}})
    msg = str(e.value)
    assert "'optim.lrr'" in msg and "did you mean 'optim.lr'" in msg
    assert "betas, lr, warmup" in msg


def test_unknown_key_inside_optional_nested():
    with pytest.raises(ConfigError, match="spec.methd.*did you mean 'spec.method'"):
        from_dict(RootCfg, {"spec": {"methd": "ngram"}})


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"max_steps": "ten"}, "max_steps='ten'.*integer"),
        ({"max_steps": 1.5}, "max_steps=1.5.*integer"),
        ({"use_sd": "maybe"}, "use_sd='maybe'.*boolean"),
        ({"optim": {"lr": "fast"}}, "optim.lr='fast'.*number"),
        ({"optim": {"betas": [0.9]}}, "optim.betas.*exactly 2"),
        ({"stages": [{"steps": 1}]}, "missing required config key 'stages\\[0\\].name'"),
        ({"optim": 3}, "optim=3.*mapping"),
    ],
)
def test_type_errors_name_key_and_expectation(data, fragment):
    with pytest.raises(ConfigError, match=fragment):
        from_dict(RootCfg, data)


def test_load_config_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 5\noptim:\n  lr: 1e-4\n  warmup: 2\ntags: [a]\n")
    overrides = ["optim.lr=3e-5", "spec.k=8", "tags=[x, y]", "out_dir=yes", "--seed=none"]
    cfg = load_config(RootCfg, str(path), overrides)
    assert cfg.max_steps == 5
    assert cfg.optim == OptimCfg(lr=3e-5, warmup=2)  # file warmup kept, lr overridden
    assert cfg.spec == SpecCfg(k=8)
    assert cfg.tags == ["x", "y"]
    assert cfg.out_dir == "yes"  # str field keeps the raw text, not YAML's True
    assert cfg.seed is None


def test_load_config_without_file():
    cfg = load_config(RootCfg, None, ["max_steps=3", "out_dir=/tmp/run"])
    assert cfg.max_steps == 3 and cfg.out_dir == "/tmp/run"


def test_override_errors():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(RootCfg, None, ["max_steps"])
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        load_config(RootCfg, None, ["max_step=3"])
    with pytest.raises(ConfigError, match="'max_steps'.*not a mapping"):
        load_config(RootCfg, None, ["max_steps=3", "max_steps.x=1"])


def test_missing_or_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(RootCfg, str(tmp_path / "nope.yaml"), [])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(RootCfg, str(bad), [])


def test_validate_runs_recursively_with_path():
    with pytest.raises(ConfigError, match="in 'optim': lr=-1.0 is invalid.*positive.*optim.lr=1e-5"):
        load_config(RootCfg, None, ["optim.lr=-1"])
    with pytest.raises(ConfigError, match="max_steps=0 is invalid"):
        load_config(RootCfg, None, ["max_steps=0"])


def test_to_dict_and_dump_yaml_round_trip(tmp_path):
    cfg = from_dict(RootCfg, {"use_sd": False, "spec": {"k": 2}, "stages": [{"name": "a"}]})
    data = to_dict(cfg)
    assert data["use_sd"] is False and data["optim"]["betas"] == [0.9, 0.999]
    path = tmp_path / "sub" / "config.yaml"
    dump_yaml(cfg, path)
    assert yaml.safe_load(path.read_text()) == data
    assert load_config(RootCfg, str(path), []) == cfg
    assert [p for p in os.listdir(path.parent) if p.startswith(".tmp")] == []


def test_dump_yaml_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    dump_yaml({"a": 1}, path)

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        dump_yaml({"a": 2}, path)
    assert yaml.safe_load(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["config.yaml"]


def test_from_dict_rejects_non_dataclass():
    with pytest.raises(TypeError):
        from_dict(dict, {})
    assert dataclasses.is_dataclass(from_dict(Stage, {"name": "s"}))


@dataclass
class MiscCfg:
    name_or_id: int | str = 0
    sizes: tuple[int, ...] = (1,)


def test_union_tuple():
    data = {"name_or_id": "7", "sizes": "[2, 3]"}
    cfg = from_dict(MiscCfg, data)
    # "7" stays a str because str is an exact match in int | str
    assert cfg == MiscCfg("7", (2, 3))
    assert from_dict(MiscCfg, {"name_or_id": 7}).name_or_id == 7


def test_argv_overrides_one_syntax_for_every_command():
    from specrl.config.files import argv_overrides
    words = ["a.b=1", "--max-tokens", "5", "--resume", "method=eagle3", "--x=2", "--flag"]
    assert argv_overrides(words) == ["a.b=1", "max_tokens=5", "resume=true", "method=eagle3", "x=2", "flag=true"]
    assert argv_overrides(["max_steps=3", "--lr", "1e-3"], {"max_steps": "schedule.max_steps", "lr": "optim.lr"}) == [
        "schedule.max_steps=3", "optim.lr=1e-3"]
