"""The shared-prefix suffix pass: attention over an un-copied prefix plus each row's suffix keys
equals a hand-written softmax over the full keys, and falls back where it does not apply."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from tests.engine.reference import hand_gqa_attention
from vheads.engine import _prefix


def _case(counts=(3, 2), splits=(7, 5), suffixes=(4, 2), H=4, Hkv=2, D=8, seed=0):
    """Two items (prefixes of 7 and 5 real positions padded to P = 7, suffixes of 4 and 2
    right-aligned in S = 4) as the runner lays them out: the prefix cache, the suffix
    queries and keys, and the model's mask [B, 1, S, P + S]."""
    g = torch.Generator().manual_seed(seed)
    U, B, P, S = len(counts), sum(counts), max(splits), max(suffixes)
    prefix = DynamicLayer()
    prefix.keys, prefix.values = torch.randn(U, Hkv, P, D, generator=g), torch.randn(U, Hkv, P, D, generator=g)
    prefix.is_initialized = True
    q = torch.randn(B, H, S, D, generator=g)
    ks, vs = torch.randn(B, Hkv, S, D, generator=g), torch.randn(B, Hkv, S, D, generator=g)
    mask = torch.zeros(B, 1, S, P + S, dtype=torch.bool)
    b = 0
    for n, split, s in zip(counts, splits, suffixes):
        for _ in range(n):
            for j in range(S - s, S):  # real rows: the last s; each sees its prefix and its suffix up to itself
                mask[b, 0, j, :split] = True
                mask[b, 0, j, P + S - s : P + j + 1] = True
            b += 1
    return prefix, q, ks, vs, mask


def _full_keys(prefix, ks, vs, counts):
    reps = torch.tensor(counts)
    return (torch.cat([prefix.keys.repeat_interleave(reps, 0), ks], 2), torch.cat([prefix.values.repeat_interleave(reps, 0), vs], 2))


CASES = [((3, 2), (7, 5), (4, 2), False), ((5,), (6,), (3,), False), ((3, 2), (7, 5), (4, 2), True),
         ((2, 1, 3), (9, 4, 6), (3, 4, 1), False), ((2, 1, 3), (9, 4, 6), (3, 4, 1), True)]


@pytest.mark.parametrize("kernel", ["auto", "matmul"])  # matmul: the path a GPU (or bf16) takes, forced on the CPU
@pytest.mark.parametrize("counts,splits,suffixes,chunked", CASES)
def test_shared_prefix_attention_equals_a_hand_softmax_over_the_full_keys(counts, splits, suffixes, chunked, kernel, monkeypatch):
    monkeypatch.setattr(_prefix, "KERNEL", kernel)
    if chunked:  # one row per fused call
        monkeypatch.setattr(_prefix, "CHUNK_ELEMENTS", 1)
    calls = _count_matmul(monkeypatch)
    prefix, q, ks, vs, mask = _case(counts, splits, suffixes)
    layer = _prefix.SharedPrefixLayer(prefix, list(counts), list(splits))
    with _prefix.suffix_pass():
        k_ret, _ = layer.update(ks, vs)
        assert _prefix.owner(k_ret) is layer and _prefix.owner(ks.clone()) is None
        assert layer.get_seq_length() == max(splits) + max(suffixes)
        out = layer.attend(q, mask, 8 ** -0.5)
        k_full, v_full = layer.full()
    assert _prefix.owner(k_ret) is None  # forgotten after the pass
    assert out is not None and out.shape == (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    k_ref, v_ref = _full_keys(prefix, ks, vs, list(counts))
    assert torch.equal(k_full, k_ref) and torch.equal(v_full, v_ref)
    ref = hand_gqa_attention(q, k_ref, v_ref, mask, 8 ** -0.5)
    real = mask.any(-1)[:, 0]  # [B, S]: padded query rows are read by no real row
    assert torch.allclose(out.double()[real], ref[real], atol=1e-5)
    assert torch.isfinite(out).all()  # padded rows stay finite: their keys are read with weight 0
    assert (len(calls) > 0) == (kernel == "matmul")  # the chosen kernel ran


def _count_matmul(monkeypatch) -> list:
    """Record every call of the chunked-matmul kernel."""
    calls, real = [], _prefix._matmul_lse

    def counted(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)

    monkeypatch.setattr(_prefix, "_matmul_lse", counted)
    return calls


def test_the_fused_kernel_is_chosen_by_what_the_device_dispatches(monkeypatch):
    q = torch.zeros(1, 2, 3, 8)
    assert _prefix.lse_kernel(q) is not None  # the CPU dispatches the fused kernel
    assert _prefix.lse_kernel(q.bfloat16()) is None  # not in bf16: the fp32 matmul
    assert _prefix.lse_kernel(q.to("meta")) is not None  # meta dispatches it too (shapes only)
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda name, key: key != "CPU")
    assert _prefix.lse_kernel(q) is None  # a device without the kernel (CUDA): the matmul
    monkeypatch.undo()
    monkeypatch.setattr(_prefix, "KERNEL", "matmul")
    assert _prefix.lse_kernel(q) is None


def test_shared_prefix_attention_in_bf16_is_the_fp32_softmax_rounded_once():
    counts, splits, suffixes = (2, 1, 3), (9, 4, 6), (3, 4, 1)
    prefix, q, ks, vs, mask = _case(counts, splits, suffixes)
    prefix.keys, prefix.values = prefix.keys.bfloat16(), prefix.values.bfloat16()
    q, ks, vs = q.bfloat16(), ks.bfloat16(), vs.bfloat16()
    layer = _prefix.SharedPrefixLayer(prefix, list(counts), list(splits))
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        out = layer.attend(q, mask, 8 ** -0.5)
    assert out.dtype == torch.bfloat16
    k_ref, v_ref = _full_keys(prefix, ks, vs, list(counts))
    ref = hand_gqa_attention(q, k_ref, v_ref, mask, 8 ** -0.5)  # float64 from the same bf16 inputs
    real = mask.any(-1)[:, 0]
    err = (out.double()[real] - ref[real]).abs()
    assert (err <= ref[real].abs() * 2 ** -8 + 1e-6).all()  # within one bf16 rounding of the exact value


def test_a_mask_that_is_not_the_items_own_prefix_falls_back():
    counts, splits = [3, 2], [7, 5]
    prefix, q, ks, vs, mask = _case(counts, splits)
    window = mask.clone()
    window[..., :2] = False  # a sliding window: the first prefix keys leave the real rows' view
    layer = _prefix.SharedPrefixLayer(prefix, counts, splits)
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        assert layer.attend(q, window, 8 ** -0.5) is None
        assert layer.attend(q, window.float(), 8 ** -0.5) is None  # an additive mask: not this path either
        assert layer.attend(q, mask, 8 ** -0.5) is not None


def test_a_cache_layer_serves_one_suffix_pass():
    prefix, q, ks, vs, mask = _case()
    layer = _prefix.SharedPrefixLayer(prefix, [3, 2], [7, 5])
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        with pytest.raises(RuntimeError, match="one suffix pass"):
            layer.update(ks, vs)


def test_pair_keys_are_the_full_keys_of_those_pairs():
    counts, splits = [3, 2], [7, 5]
    prefix, q, ks, vs, mask = _case(counts, splits)
    layer = _prefix.SharedPrefixLayer(prefix, counts, splits)
    with _prefix.suffix_pass():
        layer.update(ks, vs)
        rows, kv = torch.tensor([0, 2, 3, 4, 4]), torch.tensor([1, 0, 1, 0, 1])
        k, v = layer.pair_keys(rows, kv)
    k_ref, v_ref = _full_keys(prefix, ks, vs, counts)
    assert torch.equal(k, k_ref[rows, kv]) and torch.equal(v, v_ref[rows, kv])


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])  # image blocks of the items' own sizes
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gather", [False, True])
def test_items_of_different_prefix_lengths_on_the_gpu_path_equal_recompute(loaded, family, dtype, gather, monkeypatch):
    """Three items of different lengths, two rows each (head-sets masked from the image at the
    question rows), in one forward with their prefixes shared, the chunked-matmul path forced:
    the logits of every row equal that row's own forward with no prefix (recompute). With
    ``gather`` the shared pass's masked pairs take the gathered path (their keys read from the
    prefix and the suffix), the recompute never does."""
    from tests.engine.test_gathered import spy_gathered
    from tests.evaluation.test_cross_item import _items
    from vheads.engine import Engine, RowBatch, _schedule, mask_keys, row_mask

    lm = loaded[family]
    eng = Engine(lm)
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()]
    firsts = [int(row_mask(p.layout, "question").nonzero()[0]) for p in prompts]
    assert len({p.layout.n_tokens for p in prompts}) == 3 and len(set(firsts)) > 1  # different lengths and prefixes
    L, H = eng.shape
    g = torch.Generator().manual_seed(1)
    heads = torch.rand(6, L, H, generator=g) < 0.3  # [B, L, H]
    batch = RowBatch.build(prompts, [2, 2, 2], firsts)
    assert batch.prefix > 0
    rows = torch.stack([batch.place(b // 2, row_mask(prompts[b // 2].layout, "question")) for b in range(6)])
    keys = torch.stack([batch.place(b // 2, torch.zeros(prompts[b // 2].layout.n_tokens, dtype=torch.bool).index_fill_(
        0, prompts[b // 2].layout.image_positions, True)) for b in range(6)])
    plan = eng.plan(6, [mask_keys(heads, rows, keys)])
    monkeypatch.setattr(_prefix, "KERNEL", "matmul")
    calls = _count_matmul(monkeypatch)
    model_dtype = lm.model.dtype
    lm.model.to(dtype)
    shares = ("GATHER_SHARE", "GATHER_SHARE_FOLDED")
    gathered = spy_gathered(monkeypatch)
    try:
        for share in shares:
            monkeypatch.setattr(_schedule, share, 1.0 if gather else 0.0)
        got = eng.run(batch, plan, logits_at=[batch.length - 1]).logits[:, 0].double()
        assert calls  # the suffix pass ran on the matmul path
        assert bool(gathered) == gather
        for share in shares:
            monkeypatch.setattr(_schedule, share, 0.0)
        for b in range(6):
            u, pr = b // 2, prompts[b // 2]
            one = RowBatch([pr], [1], [0])
            sub = eng.plan(1, [mask_keys(heads[b : b + 1], row_mask(pr.layout, "question")[None],
                                         keys[b : b + 1, batch.index(u)])])
            want = eng.run(one, sub, logits_at=[pr.layout.n_tokens - 1]).logits[:, 0].double()
            tol = 1e-4 if dtype == torch.float32 else 0.05 * want.abs().max().item()
            assert (got[b] - want[0]).abs().max() <= tol, (b, (got[b] - want[0]).abs().max())
    finally:
        lm.model.to(model_dtype)
