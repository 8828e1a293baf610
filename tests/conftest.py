import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture
def write_yaml(tmp_path):
    """Write a scenario mapping (or raw text) to a file and return its path."""
    import yaml

    def _write(content, name="s.yaml"):
        p = tmp_path / name
        p.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return p

    return _write


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and much faster on a shared, loaded CPU."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
