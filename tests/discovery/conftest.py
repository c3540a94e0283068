import pytest


@pytest.fixture(scope="session")
def small_qwen_dir(tmp_path_factory):
    """A random Qwen3-VL of 3 layers x 4 heads (2 KV heads), hidden 128."""
    from vheads.models.tiny_random import build_tiny_random

    return build_tiny_random("qwen3_vl", tmp_path_factory.mktemp("disc") / "qwen3_small", layers=3, hidden=128)


@pytest.fixture()
def small_qwen(small_qwen_dir):
    """A fresh load per test (tests may edit its weights)."""
    from vheads.models import load_model

    return load_model(str(small_qwen_dir))
