"""Which layers of a model have attention heads (torch-free: a head-set's check uses it)."""

from __future__ import annotations

from collections.abc import Iterable


def check_attention_layers(layers: Iterable[int], attention_layers: Iterable[int], n_layers: int) -> None:
    """Raise ``ValueError`` if a layer of ``layers`` has no heads: it is not one of the
    model's softmax-attention layers ``attention_layers`` (hybrid models only)."""
    have = set(int(x) for x in attention_layers)
    bad = sorted({int(x) for x in layers} - have)
    if bad:
        raise ValueError(
            f"layer(s) {bad} of this model are linear-attention (Gated DeltaNet) layers with no attention "
            f"heads; heads exist only in its {len(have)} softmax-attention layers {sorted(have)} "
            f"(of {n_layers}); use a head index in one of those"
        )
