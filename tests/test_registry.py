"""specrl/registry.py: the one place a "module:attribute" string becomes an import."""
from __future__ import annotations

import pytest

from specrl.registry import installed, load, package_dirs


def test_load_follows_the_attribute_path():
    from specrl.pipeline.learner import LocalLearner
    assert load("specrl.pipeline.learner:LocalLearner.build") == LocalLearner.build
    assert load(len) is len  # a callable (a test's own factory) passes through


def test_a_path_without_an_attribute_says_how_to_write_one():
    with pytest.raises(ValueError, match=r"'specrl.pipeline.local' is not a 'module:attribute' path"):
        load("specrl.pipeline.local")


def test_installed_and_package_dirs_do_not_import():
    import sys
    assert installed("yaml") and not installed("specrl_no_such_package")
    assert package_dirs("specrl_no_such_package") == [] and package_dirs("specrl.rl")[0].name == "rl"
    assert "specrl_no_such_package" not in sys.modules
