import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SPECRL_TEST_THREADS", "2")))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
