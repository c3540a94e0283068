"""Capture's peak memory stays near a plain forward's; eager output_attentions grows with T²."""

import pytest

from benchmarks.capture_memory import build_model, run


@pytest.mark.slow
def test_capture_memory_stays_flat_while_eager_grows_quadratically(tmp_path):
    model = build_model(str(tmp_path / "m"), layers=4, heads=8, kv_heads=4)
    rows = {(r["mode"], r["tokens"]): r for r in run([1024, 2048], model)}
    t1, t2 = sorted({t for _, t in rows})
    assert t1 >= 1000
    for t in (t1, t2):
        plain, cap = rows[("plain", t)]["peak_mb"], rows[("capture", t)]["peak_mb"]
        assert cap <= plain * 1.05 + 16, (t, plain, cap)
    extra1 = rows[("eager", t1)]["peak_mb"] - rows[("plain", t1)]["peak_mb"]
    extra2 = rows[("eager", t2)]["peak_mb"] - rows[("plain", t2)]["peak_mb"]
    # attention maps: L*H*T² floats; doubling T should roughly quadruple the extra memory
    assert extra1 > 4 * 8 * t1 * t1 * 4 / 2**20 * 0.5
    assert extra2 > 3 * extra1, (extra1, extra2)
