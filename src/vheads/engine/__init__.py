"""The attention engine: probe plans (capture, mask, steer) run inside one forward pass."""

from vheads.engine._attention import NAME, active_plan, install, register, vheads_attention
from vheads.engine._oom import one_row_out_of_memory, split_on_oom
from vheads.engine._plan import ROW_GROUPS, Capture, Intervention, ProbePlan, first_biased_key, mask_keys, steer_keys
from vheads.engine._runner import Batching, Engine, ForwardResult, RowBatch, can_split, pack
from vheads.engine._rows import row_mask, positions_mask

__all__ = [
    "NAME", "ROW_GROUPS", "Batching", "Capture", "Engine", "RowBatch", "can_split", "pack", "ForwardResult", "Intervention", "ProbePlan",
    "active_plan", "first_biased_key", "install", "mask_keys", "one_row_out_of_memory", "positions_mask", "register", "row_mask",
    "split_on_oom", "steer_keys", "vheads_attention",
]
