"""Ray replicas on GPUs (issue 34 point 12): each replica gets one GPU and its node's cores
÷ GPUs (``num_cpus = 1`` left every replica one thread), torch runs on that many threads on
every device, and ``device = "cuda:N"`` on Ray is refused in one line. No Ray cluster starts
here: the resources are a pure function of the nodes' (cores, GPUs), and the backend's
wiring is checked against a stand-in ``ray`` module."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from tests.hardening.clitools import refused, vheads
from vheads._errors import VheadsError
from vheads.study import config_from_dict
from vheads.study._backends import RayBackend, actor_options


def _fits(nodes, cpus: int, gpus: int) -> int:
    """How many replicas of ``cpus`` cores and ``gpus`` GPUs the nodes hold, node by node."""
    return sum(min(int(c) // cpus, int(g) // gpus if gpus else 10**9) for c, g in nodes)


GPU_CLUSTERS = [
    [(16, 8)],  # one node, 8 GPUs: 2 cores each
    [(64, 8)],
    [(8, 0), (32, 4)],  # a head node without GPUs holds no replica
    [(64, 8), (16, 8)],  # the smaller share rules: every GPU holds a replica
    [(4, 8)],  # fewer cores than GPUs: at least one core
]


@pytest.mark.parametrize("nodes", GPU_CLUSTERS)
def test_a_gpu_replica_gets_one_gpu_and_the_largest_core_share_that_fills_every_gpu(nodes):
    opt = actor_options(nodes, workers=2)
    gpus = sum(int(g) for _, g in nodes)
    assert opt["num_gpus"] == 1
    if any(c >= g for c, g in nodes if g):
        assert _fits(nodes, opt["num_cpus"], 1) == gpus  # every GPU gets a replica ...
        assert _fits(nodes, opt["num_cpus"] + 1, 1) < gpus  # ... and one core more would leave one idle
    else:
        assert opt["num_cpus"] == 1


def test_the_core_share_is_cores_divided_by_gpus_on_one_node():
    assert actor_options([(16, 8)], 8) == {"num_cpus": 2, "num_gpus": 1}
    assert actor_options([(96, 8)], 8) == {"num_cpus": 12, "num_gpus": 1}


@pytest.mark.parametrize("nodes,workers", [([(16, 0)], 2), ([(16, 0)], 16), ([(8, 0), (8, 0)], 3), ([(2, 0)], 3), ([(12, 0), (4, 0)], 2)])
def test_a_cpu_replica_gets_the_most_cores_that_still_fit_every_replica(nodes, workers):
    opt = actor_options(nodes, workers)
    assert opt["num_gpus"] == 0
    if _fits(nodes, 1, 0) >= workers:
        assert _fits(nodes, opt["num_cpus"], 0) >= workers
        assert _fits(nodes, opt["num_cpus"] + 1, 0) < workers
    else:  # more replicas than cores: one core each, the rest wait for room
        assert opt["num_cpus"] == 1


# ---- the backend's wiring, against a stand-in ray ---------------------------------------------------


@pytest.fixture
def fake_ray(monkeypatch):
    """A ``ray`` module whose cluster is one node of 32 cores and 4 GPUs; records the options
    of ``ray.remote`` and the config every actor is made with."""
    seen = {"options": None, "cfgs": []}

    class Ref:
        def remote(self, *a):
            return object()

    class Handle:
        def __init__(self, cfg):
            seen["cfgs"].append(cfg)
            self.__ray_ready__ = Ref()

    class ActorClass:
        def remote(self, cfg):
            return Handle(cfg)

    def remote(**options):
        seen["options"] = options
        return lambda cls: ActorClass()

    mod = types.SimpleNamespace(is_initialized=lambda: True, remote=remote,
                                nodes=lambda: [{"Alive": True, "Resources": {"CPU": 32.0, "GPU": 4.0}},
                                               {"Alive": False, "Resources": {"CPU": 2.0, "GPU": 8.0}}])
    monkeypatch.setitem(sys.modules, "ray", mod)
    return seen


def test_each_ray_replica_gets_a_gpu_its_cores_and_that_many_torch_threads(fake_ray):
    backend = RayBackend({"run": {"ray_workers": 4, "torch_threads": 0}, "device": "cuda"}, computer=object)
    assert fake_ray["options"] == {"num_cpus": 8, "num_gpus": 1, "max_restarts": 0}  # the dead node counts for nothing
    assert [c["run"]["torch_threads"] for c in fake_ray["cfgs"]] == [8] * 4
    assert backend.gpus == 1


def test_a_studys_own_thread_count_is_kept_on_ray(fake_ray):
    RayBackend({"run": {"ray_workers": 2, "torch_threads": 1}, "device": "cuda"}, computer=object)
    assert [c["run"]["torch_threads"] for c in fake_ray["cfgs"]] == [1, 1]


def test_a_replica_sets_torch_threads_on_a_gpu_device_too(monkeypatch):
    """The thread count is set before the model loads, whatever the device (and the caller's
    count given back after: tests/study/test_processes.py)."""
    from vheads.study._units import UnitComputer

    class Loaded(Exception):
        pass

    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)

    def load(*a, **k):
        raise Loaded

    monkeypatch.setattr("vheads.models.load_model", load)
    cfg = config_from_dict({"device": "cuda", "run": {"backend": "ray", "torch_threads": 3}}).to_dict()
    with pytest.raises(Loaded):
        UnitComputer(cfg).engine
    assert threads[0] == 3 and len(threads) == 2


# ---- cuda:N on Ray ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda:0", "cuda:1"])
def test_cuda_n_on_ray_is_refused_in_one_line(device):
    with pytest.raises(VheadsError) as e:
        config_from_dict({"device": device, "run": {"backend": "ray"}})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("config key 'device'") and repr(device) in msg and 'device = "cuda"' in msg
    config_from_dict({"device": "cuda", "run": {"backend": "ray"}})  # the way to say it


def test_cuda_n_in_a_model_entry_on_ray_names_the_entry():
    with pytest.raises(VheadsError, match=r"'cuda:2'.*\(in models\[1\], 'b'\)"):
        config_from_dict({"models": [{"name": "a", "model": "tiny"}, {"name": "b", "model": "tiny", "dtype": "bfloat16", "device": "cuda:2"}],
                          "run": {"backend": "ray"}})


def test_the_study_command_refuses_cuda_n_on_ray_with_exit_2(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('device = "cuda:1"\n[run]\nbackend = "ray"\n')
    refused(vheads("study", str(toml), "--out", str(tmp_path / "run")), "device", "cuda:1", 'device = "cuda"')


def test_the_ray_backend_itself_refuses_cuda_n(fake_ray):
    with pytest.raises(VheadsError, match="cuda:1"):
        RayBackend({"run": {"ray_workers": 1}, "device": "cuda:1"}, computer=object)
    assert fake_ray["options"] is None  # refused before any replica
