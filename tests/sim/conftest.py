import pytest

from specrl.sim.models import from_hf_config
from tests.sim.helpers import SMALL, TINY


@pytest.fixture
def tiny():
    return from_hf_config(TINY, "tiny")


@pytest.fixture
def small():
    return from_hf_config(SMALL, "small")
