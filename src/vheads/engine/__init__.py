"""The attention engine: probe plans (capture, mask, steer) run inside one forward pass."""

from vheads.engine._ablate import HeadAblation, OutputRecord, RoleMeans, pooled_means, row_roles
from vheads.engine._attention import NAME, active_plan, install, register, vheads_attention
from vheads.engine._plan import ROW_GROUPS, Capture, Intervention, ProbePlan, first_biased_key, mask_keys, steer_keys
from vheads.engine._runner import Batching, Engine, ForwardResult, RowBatch, can_split, pack
from vheads.engine._rows import row_mask, positions_mask

__all__ = [
    "HeadAblation", "OutputRecord", "RoleMeans", "pooled_means", "row_roles", "NAME", "ROW_GROUPS", "Batching", "Capture", "Engine", "RowBatch", "can_split", "pack", "ForwardResult", "Intervention", "ProbePlan",
    "active_plan", "first_biased_key", "install", "mask_keys", "positions_mask", "register", "row_mask", "steer_keys",
    "vheads_attention",
]
