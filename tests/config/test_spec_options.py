"""Each drafter method's own options, hung off `rollout.spec` by method name, and the flat keys they replaced,
still read for one release with a one-line note that names the new key."""
from __future__ import annotations

import pytest
import yaml

from specrl.config import ConfigError, dump_yaml, load_config, to_dict
from specrl.config.run import TrainConfig
from specrl.drafters.auto.method import AutoOptions
from specrl.drafters.ngram.method import NgramOptions
from specrl.drafters.suffix.method import SuffixOptions
from specrl.engine.methods import SpecConfig


def spec_of(*overrides: str) -> SpecConfig:
    return load_config(TrainConfig, None, list(overrides)).rollout.spec


def test_each_method_with_options_has_its_section_with_its_defaults():
    spec = SpecConfig(method="auto")
    assert spec.options == {"ngram": NgramOptions(), "suffix": SuffixOptions(), "auto": AutoOptions()}
    assert sorted(SpecConfig.sections()) == ["auto", "ngram", "suffix"]  # the others have none


def test_a_new_key_sets_its_method_only():
    spec = spec_of("rollout.spec.ngram.max=5", "rollout.spec.auto.drafters=[suffix,ngram]")
    assert spec.options["ngram"] == NgramOptions(min=2, max=5)
    assert spec.options["suffix"] == SuffixOptions()  # untouched: each method has its own
    assert spec.options["auto"].drafters == ("suffix", "ngram")


# old flat key, a value, and (method, option) pairs it sets now: ngram_min/ngram_max set both n-gram methods,
# as they did when the two shared them
OLD_KEYS = [
    ("ngram_min", "1", 1, [("ngram", "min"), ("suffix", "min")]),
    ("ngram_max", "5", 5, [("ngram", "max"), ("suffix", "max")]),
    ("suffix_scale", "0.5", 0.5, [("suffix", "scale")]),
    ("drafters", "[suffix,ngram]", ("suffix", "ngram"), [("auto", "drafters")]),
    ("adaptive_mode", "deterministic", "deterministic", [("auto", "mode")]),
    ("cost_profile", "/tmp/profile.json", "/tmp/profile.json", [("auto", "cost_profile")]),
]


@pytest.mark.parametrize("old, raw, value, new", OLD_KEYS, ids=[row[0] for row in OLD_KEYS])
def test_an_old_flat_key_still_works_with_a_note_naming_the_new_one(old, raw, value, new, capsys):
    spec = spec_of(f"rollout.spec.{old}={raw}")
    assert [getattr(spec.options[m], key) for m, key in new] == [value] * len(new)
    err = capsys.readouterr().err.strip().splitlines()
    names = " and ".join(f"rollout.spec.{m}.{key}" for m, key in new)
    assert err == [f"specrl: note: rollout.spec.{old} is now {names}; the old spelling goes in the next release"]


def test_an_old_key_in_a_file_reads_too_and_the_new_key_wins(tmp_path, capsys):
    """A resumed run's config.yaml written before the options: its flat keys are read as the new ones."""
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"rollout": {"spec": {"method": "ngram", "ngram_max": 6,
                                                         "ngram": {"max": 7}}}}))
    spec = load_config(TrainConfig, path).rollout.spec
    assert spec.options["ngram"].max == 7 and spec.options["suffix"].max == 6
    assert "rollout.spec.ngram_max is now" in capsys.readouterr().err


def test_the_options_are_written_under_their_method_and_read_back(tmp_path):
    cfg = load_config(TrainConfig, None, ["rollout.spec.suffix.scale=2.0", "rollout.spec.auto.mode=deterministic"])
    written = to_dict(cfg)["rollout"]["spec"]
    assert written["suffix"] == {"min": 2, "max": 8, "scale": 2.0} and "options" not in written
    dump_yaml(cfg, tmp_path / "config.yaml")
    assert load_config(TrainConfig, tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize("override, message", [
    ("rollout.spec.ngram.min=0", "ngram.min=0 is invalid: expected in [1, ngram.max=8]"),
    ("rollout.spec.auto.mode=fast", "auto.mode='fast' is invalid: expected one of ['measured', 'deterministic']"),
    ("rollout.spec.auto.drafters=[auto]", "auto.drafters=['auto'] is invalid: expected at least one of"),
    ("rollout.spec.ngram.maxx=6", "unknown config key 'rollout.spec.ngram.maxx' (did you mean 'rollout.spec.ngram.max'?)"),
    ("rollout.spec.eagle3.x=1", "unknown config key 'rollout.spec.eagle3'"),  # a method without options
])
def test_a_bad_option_names_itself(override, message):
    with pytest.raises(ConfigError) as e:
        spec_of(override)
    assert message in str(e.value)


def test_python_keeps_the_old_keywords_for_one_release():
    spec = SpecConfig(method="suffix", ngram_min=1, suffix_scale=2.0)
    assert spec.options["suffix"] == SuffixOptions(min=1, max=8, scale=2.0) and spec.options["ngram"].min == 1
