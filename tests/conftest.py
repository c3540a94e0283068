import os

import pytest
import torch

torch.set_num_threads(2)

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava"]
#: families whose image block is more than one grid (tiles, thumbnails, row breaks)
ZOO_FAMILIES = ["internvl", "llava_next", "llava_onevision", "idefics3", "smolvlm", "mistral3", "ovis2"]
ALL_FAMILIES = FAMILIES + ZOO_FAMILIES


def pytest_collection_modifyitems(config, items):
    if os.environ.get("VHEADS_SLOW") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with VHEADS_SLOW=1 or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_random_dirs(tmp_path_factory):
    """One locally built random model folder per supported family."""
    from vheads.models.tiny_random import build_tiny_random

    root = tmp_path_factory.mktemp("tiny_random")
    return {mt: build_tiny_random(mt, root / mt) for mt in ALL_FAMILIES}


@pytest.fixture(scope="session")
def loaded(tiny_random_dirs):
    from vheads.models import load_model

    return {mt: load_model(str(p)) for mt, p in tiny_random_dirs.items()}
