"""``vheads audit`` as one library call: :func:`run_baseline_audit` checks the request, builds
the audit sets (every photo or benchmark row read), loads the model and runs
:func:`~vheads.evaluation.baseline_audit` (seed Table 22)."""

from __future__ import annotations


def run_baseline_audit(model: str = "tiny", n: int = 24, seed: int = 0, source: str | None = None, cell: int = 224,
                       revision: str | None = None, device: str = "cpu", dtype: str = "auto", device_map: str | None = None,
                       quantize: str | None = None, trust_remote_code: bool = False) -> dict[str, dict]:
    """The baseline audit of the evaluation sets (oracle, floor, matched, mismatched, leak) on
    ``model``: per set its n, mean P(key), expected range and ok. ``source``: real photos or a
    benchmark instead of the synthetic items. Every argument and item is checked before the
    model loads."""
    from vheads._errors import MAX_ITEMS, MAX_SEED, check_range
    from vheads._options import check_load_flags
    from vheads.data import default_templates
    from vheads.data.ood import open_item_source
    from vheads.evaluation._request import audit_sets

    check_range("--n", n, 1, MAX_ITEMS)
    check_range("--seed", seed, 0, MAX_SEED)
    check_load_flags(device, device_map, quantize)
    real = None if source is None else open_item_source(source, cell)
    sets = audit_sets(n, lambda kind: seed, real, default_templates(model))  # every photo read before the model loads
    from vheads.engine import Engine
    from vheads.evaluation._metrics import baseline_audit
    from vheads.models import load_model

    lm = load_model(model, revision=revision, dtype=dtype, device=device, device_map=device_map, quantization=quantize,
                    trust_remote_code=trust_remote_code)
    return baseline_audit(Engine(lm), sets)
