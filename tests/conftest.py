import os

import pytest
import torch

torch.set_num_threads(2)
# the report's sections in this process, so that tests spying on figures see every one
# (tests/report/test_parallel_build.py checks the forked build against it)
os.environ.setdefault("VHEADS_REPORT_WORKERS", "1")

#: the first four families (one image = one grid of image tokens, plain softmax attention)
BASE_FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava"]
FAMILIES = BASE_FAMILIES + ["qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "gemma3", "gemma4", "glm4v"]
#: families whose image block is more than one grid (tiles, thumbnails, row breaks)
ZOO_FAMILIES = ["internvl", "llava_next", "llava_onevision", "idefics3", "smolvlm", "mistral3", "ovis2"]
ALL_FAMILIES = FAMILIES + ZOO_FAMILIES
#: families whose language model is a hybrid stack (softmax layers between linear-attention ones)
HYBRID = ["qwen3_5", "qwen3_5_moe"]
#: families whose attention path another family already runs (only their MLPs are sparse experts):
#: their engine and layout tests run with the slow tests (VHEADS_SLOW=1)
SLOW_FAMILIES = {"qwen3_vl_moe", "qwen3_5_moe"}
#: families of the attention zoo: beyond the row groups named here, their per-row-group grids run with the slow tests
ZOO_FAST_GROUPS = {"qwen3_5": ("all",), "glm4v": ("all",), "gemma3": ("all", "image"), "gemma4": ("all",),
                   **{f: ("image", "last") for f in ZOO_FAMILIES}}  # tiled families: longer prompts


def family_params(families=None, groups=None, fast_groups=None):
    """``FAMILIES`` (or ``families``) as pytest params, the slow ones marked; with ``groups``,
    (family, group) pairs, a zoo family's groups outside ``ZOO_FAST_GROUPS`` (or
    ``fast_groups``) marked slow."""
    out = []
    for f in families or ALL_FAMILIES:
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
    return _Lazy(lambda mt: build_tiny_random(mt, root / mt), ALL_FAMILIES)


@pytest.fixture(scope="session")
def loaded(tiny_random_dirs):
    from vheads.models import load_model

    return _Lazy(lambda mt: load_model(str(tiny_random_dirs[mt])), ALL_FAMILIES)


class _Lazy(dict):
    """A dict over ``keys`` whose values are made by ``make(key)`` on first access, so a
    session builds only the families its tests use."""

    def __init__(self, make, keys):
        super().__init__()
        self._make, self._keys = make, list(keys)

    def __missing__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        self[key] = value = self._make(key)
        return value

    def keys(self):
        return list(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def values(self):
        return [self[k] for k in self._keys]


@pytest.fixture(scope="module")
def tiny():
    """The built-in tiny model (skipped where it is not built); a module may define its own."""
    from vheads.models import load_model

    try:
        return load_model("tiny")
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
