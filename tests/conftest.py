import os
import tempfile

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SPECRL_TEST_THREADS", "2")))
# dtype "auto" resolves to fp32 without timing anything, so results do not depend on the machine or its load
# (tests/model/test_precision.py unsets it to test the probe); nothing writes to the user's cache
os.environ.setdefault("SPECRL_AUTO_DTYPE", "float32")
os.environ["SPECRL_CACHE_DIR"] = tempfile.mkdtemp(prefix="specrl-test-cache-")


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
