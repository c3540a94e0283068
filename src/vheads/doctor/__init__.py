"""``vheads doctor``: check vheads on your own checkpoint and device before a long study.

No test of vheads can load your weights; the doctor runs, on your model, the checks the
tests run on tiny random ones: the prompt equals the checkpoint's own chat template
rendering, the image tokens are the slots the model fills, a region's tokens are the tokens
whose pixels change with it, and the engine equals transformers' forward and an independent
eager reference (empty plan, capture, mask, steer, batched head-sets, prefix reuse). Then
it describes the model: bf16 vs fp32 P(option), P(option) under each attention backend
(eager, sdpa, flash-attention where it runs) per tower, the baseline audit on a few items, its
speed and the projected time of the study. A failed invariant makes ``vheads doctor`` exit
1 and ``vheads study`` refuse to start (``--skip-doctor`` overrides, recorded in the run).
"""

from vheads.doctor._checks import KINDS, Context
from vheads.doctor._doctor import FAST_CHECKS, INVARIANTS, doctor, fast_checks, run_checks
from vheads.doctor._report import Check, DoctorReport

__all__ = ["Check", "Context", "DoctorReport", "FAST_CHECKS", "INVARIANTS", "KINDS", "doctor", "fast_checks", "run_checks"]
