"""Freed activation memory is reused in place on CPU (no page faults for every forward)."""

import json
import os
import subprocess
import sys

import pytest

from vheads.engine import _memory

_PROBE = r"""
import ctypes, importlib.util, json, resource, sys
# no transparent huge pages: a 2 MB page would serve 512 small pages' faults at once, and
# whether the kernel has one free at the moment would decide the count (a flaky test)
ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
import torch
spec = importlib.util.spec_from_file_location("_memory", sys.argv[2])  # the module alone, without transformers
memory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memory)
on = memory.keep_freed_memory() if sys.argv[1] == "on" else False
if len(sys.argv) > 3:  # only whether it is in force
    print(json.dumps({"on": on}))
    sys.exit()
torch.manual_seed(0)
x, w = torch.randn(64 * 289, 128), torch.randn(128, 512) / 12  # 64 rows of a 289-token prompt, hidden 128: MLP blocks of 38 MB, above what glibc ever serves from its heap

def forward(y):  # four MLP blocks: tens of MB of activations made and freed
    for _ in range(4):
        y = torch.nn.functional.layer_norm(y + torch.nn.functional.silu(y @ w) @ w.T, (128,))
    return y

forward(x)  # warm-up (twice: the heap reaches its steady size, whatever the first pass's fragmentation)
forward(x)
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    forward(x)
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"on": on, "faults": r1 - r0}))
"""


def _faults(mode, env=None, *extra):
    out = subprocess.run([sys.executable, "-c", _PROBE, mode, _memory.__file__, *extra], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_freed_blocks_are_reused_without_page_faults():
    off, on = _faults("off"), _faults("on")
    assert on["on"] and not off["on"]
    activations = 3 * 4 * 64 * 289 * 512 * 4 // 4096  # pages of the MLP activations alone, three forwards
    assert off["faults"] > activations / 2  # the default: every forward's blocks are mapped and faulted in afresh
    # kept: the warm-up's pages serve every later forward (measured: 1-5% of off; a few MB of
    # heap growth from fragmentation vary from run to run)
    assert on["faults"] < off["faults"] / 10


def test_it_can_be_switched_off():
    env = dict(os.environ, VHEADS_KEEP_FREED="0")
    assert _faults("on", env, "check")["on"] is False
