import os

import pytest
import torch

torch.set_num_threads(2)

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "gemma3", "glm4v"]
#: families whose language model is a hybrid stack (softmax layers between linear-attention ones)
HYBRID = ["qwen3_5", "qwen3_5_moe"]
#: families whose attention path another family already runs (only their MLPs are sparse experts):
#: their engine and layout tests run with the slow tests (VHEADS_SLOW=1)
SLOW_FAMILIES = {"qwen3_vl_moe", "qwen3_5_moe"}
#: families of the attention zoo: beyond the row groups named here, their per-row-group grids run with the slow tests
ZOO_FAST_GROUPS = {"qwen3_5": ("all",), "glm4v": ("all",), "gemma3": ("all", "image")}


def family_params(families=None, groups=None, fast_groups=None):
    """``FAMILIES`` (or ``families``) as pytest params, the slow ones marked; with ``groups``,
    (family, group) pairs, a zoo family's groups outside ``ZOO_FAST_GROUPS`` (or
    ``fast_groups``) marked slow."""
    out = []
    for f in families or FAMILIES:
        for g in groups or [None]:
            fast = fast_groups if fast_groups is not None else ZOO_FAST_GROUPS.get(f, ())
            slow = f in SLOW_FAMILIES or (g is not None and f in ZOO_FAST_GROUPS and g not in fast)
            args = (f,) if g is None else (f, g)
            out.append(pytest.param(*args, marks=pytest.mark.slow) if slow else pytest.param(*args))
    return out


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
    return {mt: build_tiny_random(mt, root / mt) for mt in FAMILIES}


@pytest.fixture(scope="session")
def loaded(tiny_random_dirs):
    from vheads.models import load_model

    return {mt: load_model(str(p)) for mt, p in tiny_random_dirs.items()}
