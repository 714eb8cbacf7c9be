"""`specrl train-drafter` and `specrl simulate` read the method registry: a method registered once shows up in both."""
from dataclasses import dataclass, fields

import pytest

from specrl.cli import train_drafter
from specrl.drafters.registry import register, unregister
from specrl.engine.methods import TRAINABLE_METHODS, get_method
from specrl.sim import cost
from specrl.sim.build import config_from_args, sd_methods
from specrl.sim.cli import build_parser
from specrl.sim.models import get_model


@dataclass
class ToySettings:
    toy_width: int = 3  # toy: its width


class Toy:
    """A method with weights that declares its train-drafter settings and its simulator cost."""
    name = "toy"
    trainable, adaptive, defers, options = True, False, False, None
    train_settings = ToySettings

    def sim_draft_frac(self, head_frac: float) -> float:
        return 2.0 * head_frac


@pytest.fixture
def toy():
    register("toy", Toy())
    yield
    unregister("toy")


def test_train_drafter_settings_are_the_shared_ones_and_each_methods_own():
    cls = train_drafter.config_class()
    own = {f.name for m in TRAINABLE_METHODS if get_method(m).train_settings for f in fields(get_method(m).train_settings)}
    assert {f.name for f in fields(cls)} == {f.name for f in fields(train_drafter.SharedSettings)} | own
    assert {"ttt_steps", "eagle3_layers", "draft_layers"} <= own
    for m in TRAINABLE_METHODS:  # each class says it, none inherits a silent default
        assert "train_settings" in vars(type(get_method(m))), m


def test_a_registered_method_reaches_train_drafter_and_the_simulator(toy):
    ns = train_drafter.parse_args(["--method", "toy", "--out", "o", "--toy-width", "5"])
    assert (ns.method, ns.toy_width) == ("toy", 5)
    assert "--toy-width" in train_drafter.settings_help()
    assert "toy" in sd_methods()
    a = build_parser().parse_args(["step", "--method", "toy"])
    assert config_from_args(a).sd.draft_frac == pytest.approx(2.0 * cost.eagle_draft_frac(get_model("qwen3-8b")))


def test_a_method_with_weights_must_say_its_train_drafter_settings():
    class Silent:  # a method with weights whose class leaves its settings unsaid
        name, trainable, adaptive, defers, options = "toy", True, False, False, None
    register("toy", Silent())
    try:
        with pytest.raises(TypeError, match="method 'toy' has weights but its class Silent does not say"):
            train_drafter.config_class()
    finally:
        unregister("toy")
