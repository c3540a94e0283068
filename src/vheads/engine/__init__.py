"""The attention engine: probe plans (capture, mask, steer) run inside one forward pass.

The names load lazily (:func:`vheads._lazy.lazy_exports` reads them from the block below):
``from vheads.engine import ROW_GROUPS`` (a config check) imports no torch.
"""

from typing import TYPE_CHECKING

from vheads._lazy import lazy_exports

if TYPE_CHECKING:  # the public names; each loads on first use
    from vheads.engine._ablate import HeadAblation, OutputRecord, RoleMeans, pooled_means, row_roles
    from vheads.engine._attention import NAME, active_plan, install, register, vheads_attention
    from vheads.engine._constants import ROW_GROUPS
    from vheads.engine._plan import Capture, Intervention, ProbePlan, first_biased_key, mask_keys, steer_keys
    from vheads.engine._batching import Batching, pack
    from vheads.engine._runner import Engine, ForwardResult, RowBatch, can_split
    from vheads.engine._rows import row_mask, positions_mask
    from vheads.engine._attention import CHUNK_ELEMENTS
    from vheads.engine._captures import model_mask  # the model's own additive mask at chosen rows
    from vheads.engine._layers import decoder_layers
    from vheads.engine._lm_head import fp32_logits
    from vheads.engine._oom import RowLimit, is_out_of_memory, one_row_out_of_memory, split_on_oom

__getattr__, __dir__, __all__ = lazy_exports(__name__)
