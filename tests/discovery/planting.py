"""Fixtures for discovery tests: strip_items-compatible strips and heads planted by weight edits."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from vheads.data import Item

PANEL = 32
N_PANELS = 6


def marked_strip_items(n: int, query: str = "ordinal", seed: int = 0) -> list[Item]:
    """1x6 strips (32 px panels, like ``synthetic.strip_items``) whose asked panel is white
    and whose other panels are dark: the asked panel is the only bright one."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        k = int(rng.integers(1, N_PANELS + 1))
        canvas = np.zeros((PANEL, PANEL * N_PANELS, 3), dtype=np.uint8)
        canvas[:] = rng.integers(0, 40, size=3, dtype=np.uint8)
        canvas[:, (k - 1) * PANEL:k * PANEL] = 255
        if query == "ordinal":
            question, phrase, answer = f"what is in panel {k} ?", f"panel {k}", "white"
        else:
            question, phrase, answer = "which panel shows the white ?", "the white", str(k)
        start = question.index(phrase)
        items.append(Item(
            id=f"marked-{query}-{seed}-{i}", kind=f"strip-{query}", image=Image.fromarray(canvas), question=question,
            answer=answer, regions={f"panel{p + 1}": (p * PANEL, 0, (p + 1) * PANEL, PANEL) for p in range(N_PANELS)},
            target=f"panel{k}", query_span=(start, start + len(phrase)), meta={"corpus": "marked"},
        ))
    return items


def _text_model(lm):
    m = lm.model.model
    return getattr(m, "language_model", m)


@torch.no_grad()
def plant_region_heads(lm, items: list[Item], heads: list[tuple[int, int]], dim: int | None = None, keys=None) -> None:
    """Edit q/k weights so each chosen head attends, from every text row of the items'
    prompts, to the image tokens of the asked panel (``item.target``) and nowhere else
    (``keys(item, layout)``, when given: to those image positions instead).

    For a chosen head the query is one coordinate ``dim`` (the slowest RoPE pair, so position
    barely matters) set to +1 on every text row; its KV head's key is +big on the asked
    panel's tokens and 0 elsewhere (solved by least squares on the layer's normed inputs),
    plus a constant coordinate so that normalized keys elsewhere point away from ``dim``.
    Every query head sharing an edited KV head must be chosen (GQA). Layers are planted in
    order, re-reading the hidden states after each edit.
    """
    tm = _text_model(lm)
    hd, nq, nkv = lm.head_dim, lm.n_heads, lm.n_kv_heads
    group = nq // nkv
    dim = hd // 2 - 1 if dim is None else dim
    chosen = set(heads)
    for layer in sorted({l for l, _ in heads}):
        kvs = {h // group for l, h in heads if l == layer}
        for g in kvs:
            missing = [(layer, h) for h in range(g * group, (g + 1) * group) if (layer, h) not in chosen]
            assert not missing, f"heads {missing} share an edited KV head; choose them too"
        attn = tm.layers[layer].self_attn
        norm = tm.layers[layer].input_layernorm
        xt, xi, yi = [], [], []
        for it in items:
            p = lm.adapter.build(it, lm.processor)
            hs = lm.model(**p.inputs, output_hidden_states=True).hidden_states
            x = norm(hs[layer])[0].double()  # [T, D]
            lay = p.layout
            text = lay.text_positions()
            tgt = set(lay.regions[it.target].positions.tolist()) if keys is None else set(keys(it, lay))
            xt.append(x[text])
            img = lay.image_positions.tolist()
            xi.append(x[img])
            yi.append(torch.tensor([1.0 if q in tgt else 0.0 for q in img], dtype=torch.float64))
        xt, xi, yi = torch.cat(xt), torch.cat(xi), torch.cat(yi)
        wq = torch.linalg.lstsq(xt, torch.ones(len(xt), 1, dtype=torch.float64)).solution[:, 0]
        xa = torch.cat([xi, xt])
        wk = torch.linalg.lstsq(xa, torch.cat([yi, torch.zeros(len(xt), dtype=torch.float64)])[:, None]).solution[:, 0]
        w1 = torch.linalg.lstsq(xa, torch.ones(len(xa), 1, dtype=torch.float64)).solution[:, 0]
        qw, kw = attn.q_proj.weight, attn.k_proj.weight
        for l, h in heads:
            if l != layer:
                continue
            qw[h * hd:(h + 1) * hd] = 0
            qw[h * hd + dim] = (20.0 * wq).to(qw.dtype)
            if getattr(attn.q_proj, "bias", None) is not None:
                attn.q_proj.bias[h * hd:(h + 1) * hd] = 0
        for g in kvs:
            kw[g * hd:(g + 1) * hd] = 0
            kw[g * hd + dim] = (200.0 * wk).to(kw.dtype)
            kw[g * hd] = (1.0 * w1).to(kw.dtype)  # the constant coordinate (pairs with dim hd/2 under RoPE; q is 0 there)
            if getattr(attn.k_proj, "bias", None) is not None:
                attn.k_proj.bias[g * hd:(g + 1) * hd] = 0
