"""Without Ray installed, `pipeline.backend=ray` says how to install it, before touching the run directory,
and the in-process pipeline never imports it."""
from __future__ import annotations

import sys

from specrl.cli.main import main as cli_main
from tests.pipeline.fixtures import make_setup, overrides


def test_ray_backend_without_ray_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    setup = make_setup(tmp_path)
    assert cli_main(["train", *overrides(*setup, tmp_path / "run", **{"pipeline.backend": "ray"})]) != 0
    err = capsys.readouterr().err
    assert "pip install 'specrl[ray]'" in err and "pipeline.backend=local" in err
    assert not (tmp_path / "run").exists()
    assert cli_main(["train", *overrides(*setup, tmp_path / "local", max_steps=1)]) == 0  # no Ray needed


def test_a_wrong_placement_lists_the_valid_ones(tmp_path, capsys):
    setup = make_setup(tmp_path)
    assert cli_main(["train", *overrides(*setup, tmp_path / "run", **{"ray.placement": "spread"})]) == 2
    err = capsys.readouterr().err
    assert "placement='spread'" in err and "['colocated', 'split']" in err
