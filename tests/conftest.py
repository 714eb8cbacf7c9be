import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SPECRL_TEST_THREADS", "2")))


@pytest.fixture
def keep_threads():
    """torch's thread count as it was before the test (a test that sets it must not change the next one's)."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
