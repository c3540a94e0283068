"""The doctor's checks, each a function ``(Context) -> Check`` run on the user's own model.

Prompt checks compare the adapter's prompt with the tokenizer's own chat-template rendering
and with the slots the model itself fills; the region check changes a region's pixels and
watches which tokens move; the engine checks compare :class:`vheads.engine.Engine` with
transformers' own forward, its eager ``output_attentions`` and the hand-written reference
of :mod:`vheads.doctor._reference`. Tolerances scale with the dtype (:meth:`Context.tol`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from vheads.data import DEFAULT_TEMPLATES, Item, Templates
from vheads.doctor._pixels import invert_box, pixel_moved_positions, vision_filled_positions
from vheads.doctor._reference import Action, eager_attentions, model_mask, plain_logits, reference_mode
from vheads.doctor._report import Check
from vheads.engine import Capture, Engine, install, mask_keys, positions_mask, row_mask, steer_keys
from vheads.models import LoadedModel, Prompt, format_options

#: one item of each kind a study asks (discovery strips, then the evaluation sets)
KINDS = ("strip-ordinal", "strip-referring", "grid-neutral", "grid-oracle", "grid-blank", "class-matched", "class-mismatched", "text")
#: the item the single-item checks run on: a 2 x 2 grid with a query span and four options
PROBE_KIND = "grid-oracle"
#: the region whose pixels the region check changes, and which the steer check steers onto
PROBE_REGION = "cell0"
STEER_BETA = 3.0


@dataclass
class Context:
    """What every check reads: the loaded model, its engine, one item per kind."""

    lm: LoadedModel
    engine: Engine
    templates: Templates = DEFAULT_TEMPLATES
    seed: int = 0
    items: dict[str, Item] = field(default_factory=dict)
    _prompts: dict[str, Prompt] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from vheads._seeds import derived_seed
        from vheads.data.synthetic import kind_items

        if not self.items:
            self.items = {k: kind_items(k, 1, derived_seed(self.seed, "doctor", k), templates=self.templates)[0] for k in KINDS}

    def prompt(self, kind: str = PROBE_KIND) -> Prompt:
        if kind not in self._prompts:
            self._prompts[kind] = self.lm.adapter.build(self.items[kind], self.lm.processor)
        return self._prompts[kind]

    @property
    def half(self) -> bool:
        return self.lm.model.dtype in (torch.bfloat16, torch.float16)

    def tol(self, scale: float = 1.0) -> float:
        """Largest difference accepted between two computations of a value of size ``scale``
        (logits: their largest magnitude; probabilities: 1): float32 reductions in another
        order differ by ~1e-6 relative, bf16 / fp16 ones by ~1e-2."""
        return (3e-2 if self.half else 1e-4) * max(1.0, scale)

    def inputs(self, prompt: Prompt, batch: int = 1) -> dict[str, torch.Tensor]:
        """The prompt's model inputs on the model's device, ``batch`` copies, pixels in its dtype."""
        dev, dt = self.lm.device, self.lm.model.dtype
        out = {}
        for k, v in prompt.inputs.items():
            v = torch.cat([v] * batch) if batch > 1 else v
            out[k] = v.to(dev, dt) if v.is_floating_point() else v.to(dev)
        return out

    def reinstall(self) -> None:
        """Give the language model back the vheads attention after a plain or reference run."""
        install(self.lm.model)


# ---- prompts ---------------------------------------------------------------------------------
def summarise(prompt: Prompt, adapter) -> str:
    """The prompt's text with every run of the image token written ``<token>×n`` (the
    adapter's own :meth:`summary` where this vheads has it)."""
    if hasattr(adapter, "summary"):
        return adapter.summary(prompt)
    tok = adapter.image_token
    return re.sub(f"(?:{re.escape(tok)})+", lambda m: f"{tok}×{len(m.group(0)) // len(tok)}", prompt.text)


def check_prompts(ctx: Context) -> Check:
    """Every kind renders; its spans are where an intervention needs them."""
    lm, lines, bad = ctx.lm, [], []
    for kind in KINDS:
        pr = ctx.prompt(kind)
        lay = pr.layout
        lines.append(f"{kind}: {summarise(pr, lm.adapter)!r}")
        if not len(lay.image_positions):
            bad.append(f"{kind}: no image tokens")
        if ctx.items[kind].query_span is not None and not lay.spans.get("query"):
            bad.append(f"{kind}: empty query span")
        if lay.spans["last"] != [lay.n_tokens - 1]:
            bad.append(f"{kind}: the last prompt row is {lay.spans['last']}, not {lay.n_tokens - 1}")
    n = ctx.prompt().layout.n_tokens
    return Check("prompt", not bad, "; ".join(bad) or f"{len(KINDS)} kinds render ({n} tokens for {PROBE_KIND})", details=lines)


def _special_ids(tok) -> set[int]:
    ids = set(getattr(tok, "all_special_ids", []) or [])
    ids |= set(getattr(tok, "added_tokens_decoder", {}) or {})
    return ids


def block_start(prompt: Prompt, special: set[int]) -> int:
    """The first position of the image block: the first image token, walked back over the
    special tokens that open it (vision start, tile markers)."""
    ids = prompt.inputs["input_ids"][0].tolist()
    p = int(prompt.layout.image_positions.min()) if len(prompt.layout.image_positions) else prompt.layout.vision_end
    while p > 0 and ids[p - 1] in special:
        p -= 1
    return p


def check_template(ctx: Context) -> Check:
    """The adapter's prompt ids equal the tokenizer's own ``apply_chat_template`` rendering
    (one user message with the image and the question, generation prompt on, the template's
    defaults) everywhere but inside the image block, which the template writes as a
    placeholder and the processor expands."""
    lm = ctx.lm
    tok = lm.adapter.tokenizer(lm.processor)
    template = getattr(lm.processor, "chat_template", None) or getattr(tok, "chat_template", None)
    if not template:
        return Check("template", None, "the checkpoint ships no chat template: the adapter's hand-written pieces make the prompt")
    item, pr = ctx.items[PROBE_KIND], ctx.prompt()
    messages = []
    system = getattr(lm.processor, "system_prompt", None)
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    text = item.question + (format_options(item.options) if item.options else "")
    messages.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]})
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, chat_template=template)
    bos = getattr(tok, "bos_token", None)
    # tokenized as processors do: the tokenizer's special tokens (BOS) unless the rendering starts with BOS
    want = tok(rendered, add_special_tokens=not (bos and rendered.startswith(bos)))["input_ids"]
    got = pr.inputs["input_ids"][0].tolist()
    p = 0
    while p < min(len(got), len(want)) and got[p] == want[p]:
        p += 1
    s = 0
    while s < min(len(got), len(want)) - p and got[-1 - s] == want[-1 - s]:
        s += 1
    special = _special_ids(tok)
    start, end = block_start(pr, special), pr.layout.vision_end
    mid_got, mid_want = (p, len(got) - s), want[p: len(want) - s]
    placeholder_only = all(t in special or not tok.decode([t]).strip() for t in mid_want)
    ok = start <= mid_got[0] and mid_got[1] <= end and placeholder_only
    nums = {"adapter_tokens": len(got), "template_tokens": len(want), "first_difference": p}
    if ok:
        return Check("template", True, f"adapter ids = template rendering outside the image block ({len(got)} vs {len(want)} tokens)",
                     numbers=nums)
    where = min(p, len(got) - 1)
    return Check("template", False, f"the adapter's prompt differs from the chat template's rendering at token {p} "
                 f"(adapter {tok.decode(got[where: where + 6])!r}, template {tok.decode(want[p: p + 6])!r})", numbers=nums,
                 details=[f"template: {rendered[:300]!r}", f"adapter:  {summarise(pr, lm.adapter)[:300]!r}"])


def check_image_tokens(ctx: Context) -> Check:
    """The adapter's image tokens are slots the model fills with vision features, and every
    position the vision side fills lies in the image block."""
    lm, pr = ctx.lm, ctx.prompt()
    lay = pr.layout
    filled = set(vision_filled_positions(lm.model, ctx.inputs(pr)))
    tok = lm.adapter.tokenizer(lm.processor)
    slots = set((pr.inputs["input_ids"][0] == tok.convert_tokens_to_ids(lm.adapter.image_token)).nonzero().flatten().tolist())
    pixel = set(lay.image_positions.tolist())
    start = block_start(pr, _special_ids(tok))
    outside = sorted(p for p in filled if not start <= p < lay.vision_end)
    ok = pixel <= filled and slots <= filled and not outside
    summary = f"adapter {len(pixel)} image tokens ({len(slots)} {lm.adapter.image_token!r} slots); the model fills {len(filled)}"
    if not ok:
        summary += (f"; not filled: {sorted((pixel | slots) - filled)[:8]}" if not (pixel | slots) <= filled else "") + \
                   (f"; filled outside the image block: {outside[:8]}" if outside else "")
    return Check("image tokens", ok, summary, numbers={"adapter": len(pixel), "slots": len(slots), "model": len(filled)})


def check_region_tokens(ctx: Context) -> Check:
    """A region's tokens are the tokens whose vision features change when its pixels change."""
    lm, item = ctx.lm, ctx.items[PROBE_KIND]
    box = tuple(int(v) for v in item.regions[PROBE_REGION])
    changed = Item(item.id + "-inverted", item.kind, invert_box(item.image, box), item.question, item.answer,
                   dict(item.regions), item.target, item.options, item.query_span, dict(item.meta))
    p0, p1 = ctx.prompt(), lm.adapter.build(changed, lm.processor)
    lay = p0.layout
    if not torch.equal(p0.inputs["input_ids"], p1.inputs["input_ids"]):
        return Check("region tokens", False, "changing the region's pixels changed the prompt's token ids")
    moved = set(pixel_moved_positions(lm.model, ctx.inputs(p0), ctx.inputs(p1)))
    if not moved:  # nothing to compare the region with (seen on random models whose projector is zero)
        return Check("region tokens", None, "skipped: no vision feature changed when the region's pixels changed; "
                     "this model's image features do not depend on the pixels")
    pos = lay.image_positions.tolist()
    chosen = set(lay.regions[PROBE_REGION].positions.tolist())
    problems = []
    if not moved <= set(pos):
        problems.append(f"non-image positions moved: {sorted(moved - set(pos))[:8]}")
    if not chosen or not chosen <= moved:
        problems.append(f"region tokens whose pixels did not change: {sorted(chosen - moved)[:8]}" if chosen else "the region has no tokens")
    x0, y0, x1, y1 = box
    tb = lay.token_boxes
    far = []
    for i, p in enumerate(pos):  # every moved token lies at the region (within half a token: resampling blur)
        if p in moved:
            bx0, by0, bx1, by1 = tb[i].tolist()
            hw, hh = (bx1 - bx0) / 2, (by1 - by0) / 2
            if not (bx1 > x0 - hw and bx0 < x1 + hw and by1 > y0 - hh and by0 < y1 + hh):
                far.append(p)
    if far:
        problems.append(f"tokens away from the region moved: {far[:8]}")
    view = {p: int(t) for p, t in zip(pos, lay.image_tile)}
    centre = (tb[:, :2] + tb[:, 2:]) / 2
    inside = (centre[:, 0] > x0) & (centre[:, 0] < x1) & (centre[:, 1] > y0) & (centre[:, 1] < y1)
    core = {p for i, p in enumerate(pos) if p in moved and inside[i]}
    if {view[p] for p in chosen} != {view[p] for p in core}:
        problems.append("the region's tokens lie in other views (tiles) than the moved ones")
    summary = f"{PROBE_REGION} {box}: {len(chosen)} region tokens, {len(moved)} tokens moved"
    return Check("region tokens", not problems, summary + ("; " + "; ".join(problems) if problems else ""),
                 numbers={"region": len(chosen), "moved": len(moved)})


# ---- engine ----------------------------------------------------------------------------------
def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double().cpu() - b.double().cpu()).abs().max())


def _compare(name: str, got: torch.Tensor, want: torch.Tensor, ctx: Context, what: str, effect: float | None = None) -> Check:
    scale = float(want.double().abs().max())
    d, tol = _max_diff(got, want), ctx.tol(scale)
    summary = f"max |Δ{what}| = {d:.2e} (tolerance {tol:.1e})"
    if effect is not None:
        summary += f"; the intervention moves them by {effect:.2e}"
    return Check(name, d <= tol, summary, numbers={"max_diff": d, "tolerance": tol, **({"effect": effect} if effect is not None else {})})


#: half precision: an intervention's effect may differ from the reference's by this share of its size ...
EFFECT_REL_TOL = 0.2
#: ... plus this many times the noise of the two computations without intervention
EFFECT_NOISE_TIMES = 2.0


def _compare_effects(name: str, got: torch.Tensor, want: torch.Tensor, got_base: torch.Tensor, want_base: torch.Tensor,
                     ctx: Context, what: str) -> Check:
    """Half precision (bf16 / fp16): compare what the intervention *does* — per batch row, the
    effect ``Δ = logits(plan) − logits(no plan)`` of the engine against the reference's —
    rather than the logits, whose rounding (≈ 0.03 × max |logit|) exceeds the effect of hiding
    one or two heads. Row b passes when ``max |Δ_engine − Δ_ref| ≤ 0.2 · max |Δ_ref| + 2 ε``,
    ε the larger of the two computations' difference without intervention and one bf16 step
    at the logits' scale; an engine that drops the intervention (``Δ_engine = 0``) fails
    every row whose effect exceeds 2.5 ε. A row whose effect is within the noise is counted
    apart (it cannot tell); the check needs at least one row that can."""
    scale = float(want.double().abs().max())
    noise = max(_max_diff(got_base, want_base), scale * 2.0 ** -7)
    d_got = got.double().cpu() - got_base.double().cpu()  # [B, V]
    d_want = want.double().cpu() - want_base.double().cpu()  # [B, V]
    effect = d_want.abs().amax(-1)  # [B]
    err = (d_got - d_want).abs().amax(-1)  # [B]
    tol = EFFECT_REL_TOL * effect + EFFECT_NOISE_TIMES * noise
    informative = effect > tol
    bad = [b for b in range(len(err)) if err[b] > tol[b]]
    ok = not bad and bool(informative.any())
    summary = (f"effect of the intervention vs the reference: max |ΔΔ{what}| = {float(err.max()):.2e} on effects up to "
               f"{float(effect.max()):.2e} (tolerance 20% + {EFFECT_NOISE_TIMES:.0f} x noise {noise:.1e})")
    if bad:
        summary += f"; head-sets {bad} differ"
    if not informative.any():
        summary += "; no head-set moves the logits beyond the noise: the check cannot tell"
    return Check(name, ok, summary, numbers={"max_diff": float(err.max()), "effect": float(effect.max()), "noise": noise,
                                             "per_row": err.tolist(), "effect_per_row": effect.tolist()})


def check_empty_plan(ctx: Context) -> Check:
    """An empty plan (and a plan that touches no head) gives the plain model's logits."""
    pr, eng = ctx.prompt(), ctx.engine
    plain = plain_logits(ctx.lm.model, ctx.inputs(pr))[0, -1]
    ctx.reinstall()
    got = eng.forward(pr).logits[0, -1]
    T = pr.layout.n_tokens
    untouched = mask_keys(torch.zeros(1, *eng.shape, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool), torch.ones(1, T, dtype=torch.bool))
    got2 = eng.forward(pr, eng.plan(1, [untouched]), prefix_reuse=False).logits[0, -1]
    return _compare("empty plan", torch.stack([got, got2]), torch.stack([plain, plain]), ctx, "logit")


def check_capture(ctx: Context) -> Check:
    """Captured region mass equals transformers' eager ``output_attentions`` on the captured rows."""
    lm, eng, item = ctx.lm, ctx.engine, ctx.items[PROBE_KIND]
    pr = lm.adapter.build(item, lm.processor, answer_text=item.answer)
    lay = pr.layout
    T = lay.n_tokens
    attn = eager_attentions(lm.model, ctx.inputs(pr))
    ctx.reinstall()
    groups = [lay.regions[PROBE_REGION].positions.tolist(), lay.image_positions.tolist(), [0]]
    gmask = torch.stack([positions_mask(T, g) for g in groups])[None]  # [1, G, T]
    sources = {n: lay.spans[s] for n, s in (("last", "last"), ("qspan", "query"), ("out", "answer")) if lay.spans.get(s)}
    res = eng.forward(pr, eng.plan(1, captures=[Capture(positions_mask(T, rows)[None], gmask, n) for n, rows in sources.items()])).captures
    if len(attn) != len(lm.attention_layers):
        return Check("capture", False, f"eager attention returned {len(attn)} maps for {len(lm.attention_layers)} softmax layers")
    got, want = [], []
    for name, rows in sources.items():
        for l, A in zip(lm.attention_layers, attn):
            for gi, g in enumerate(groups):
                want.append(A[:, rows][:, :, g].sum(-1).mean(-1))  # [H]
                got.append(res[name][0, l, :, gi].double())
    c = _compare("capture", torch.stack(got), torch.stack(want), ctx, "mass")
    c.summary += f" over {len(sources)} sources x {len(lm.attention_layers)} layers x {len(groups)} key groups"
    return c


def _few_head_sets(lm: LoadedModel) -> list[list[tuple[int, int]]]:
    """Three head-sets: two heads in two layers, every head of the middle layer, one head."""
    A, H = lm.attention_layers, lm.n_heads
    a0, a1, mid = A[0], A[min(1, len(A) - 1)], A[len(A) // 2]
    return [[(a0, 0), (a1, min(2, H - 1))], [(mid, h) for h in range(H)], [(a1, min(1, H - 1))]]


def _reference_check(ctx: Context, kind: str) -> Check:
    lm, eng, pr = ctx.lm, ctx.engine, ctx.prompt()
    lay = pr.layout
    T = lay.n_tokens
    L, H = eng.shape
    head_sets = _few_head_sets(lm)
    rows = row_mask(lay, "all")
    img = lay.image_positions.tolist()
    target = lay.regions[PROBE_REGION].positions.tolist()
    if kind == "mask":
        acts = [[Action("mask", hs, list(range(T)), keys=img)] for hs in head_sets]
    else:
        acts = [[Action("steer", hs, list(range(T)), image=img, target=frozenset(target), beta=STEER_BETA)] for hs in head_sets]
    with reference_mode(lm.model, acts, model_mask(lm.model, img, T)), torch.no_grad():
        want = lm.model(**ctx.inputs(pr, len(head_sets))).logits[:, -1]
    if ctx.half:  # the reference without intervention: the baseline of its effects
        with reference_mode(lm.model, [[] for _ in head_sets[:1]], model_mask(lm.model, img, T)), torch.no_grad():
            want_base = lm.model(**ctx.inputs(pr)).logits[:, -1]
    plain = plain_logits(lm.model, ctx.inputs(pr))[0, -1]
    ctx.reinstall()
    heads = torch.zeros(len(head_sets), L, H, dtype=torch.bool)
    for b, hs in enumerate(head_sets):
        for l, h in hs:
            heads[b, l, h] = True
    B = len(head_sets)
    keys = positions_mask(T, lay.image_positions).expand(B, T)
    if kind == "mask":
        iv = mask_keys(heads, rows.expand(B, T), keys)
    else:
        iv = steer_keys(heads, rows.expand(B, T), positions_mask(T, target).expand(B, T), keys, STEER_BETA)
    got = eng.forward(pr, eng.plan(B, [iv]), logits_at=[T - 1]).logits[:, -1]
    if ctx.half:
        got_base = eng.forward(pr, logits_at=[T - 1]).logits[:, -1]
        c = _compare_effects(kind, got, want, got_base.expand_as(got), want_base.expand_as(want), ctx, "logit")
    else:
        c = _compare(kind, got, want, ctx, "logit", _max_diff(want, plain.expand_as(want)))
    c.summary += f" ({B} head-sets in one forward vs the eager reference)"
    return c


def check_mask(ctx: Context) -> Check:
    """Masking image keys from a few heads at all rows equals the eager reference."""
    return _reference_check(ctx, "mask")


def check_steer(ctx: Context) -> Check:
    """Steering a few heads onto the region equals the eager reference."""
    return _reference_check(ctx, "steer")


def _random_masks(ctx: Context, B: int, group: str):
    lay, eng = ctx.prompt().layout, ctx.engine
    T = lay.n_tokens
    L, H = eng.shape
    g = torch.Generator().manual_seed(ctx.seed)
    heads = torch.rand(B, L, H, generator=g) < 0.3
    heads[:, [l for l in range(L) if l not in ctx.lm.attention_layers]] = False  # linear-attention layers have no heads
    return heads, row_mask(lay, group).expand(B, T), positions_mask(T, lay.image_positions).expand(B, T)


BATCH_ROWS = 4


def check_batched(ctx: Context) -> Check:
    """B head-sets in one forward equal B separate runs (masks at the question rows)."""
    pr, eng = ctx.prompt(), ctx.engine
    T = pr.layout.n_tokens
    heads, rows, keys = _random_masks(ctx, BATCH_ROWS, "question")
    batched = eng.forward(pr, eng.plan(BATCH_ROWS, [mask_keys(heads, rows, keys)]), logits_at=[T - 1]).logits[:, -1]
    one = torch.cat([eng.forward(pr, eng.plan(1, [mask_keys(heads[b:b + 1], rows[:1], keys[:1])]), prefix_reuse=False, logits_at=[T - 1]).logits[:, -1]
                     for b in range(BATCH_ROWS)])
    per_row = [_max_diff(batched[b], one[b]) for b in range(BATCH_ROWS)]
    c = _compare("batched head-sets", batched, one, ctx, "logit")
    c.numbers["per_row"] = per_row
    bad = [b for b, d in enumerate(per_row) if d > c.numbers["tolerance"]]
    c.summary += f" ({BATCH_ROWS} head-sets in one forward vs one at a time" + (f"; rows {bad} differ)" if bad else ")")
    return c


def check_prefix_reuse(ctx: Context) -> Check:
    """A shared prefix (system prompt and image computed once) equals recomputing it per row."""
    pr, eng = ctx.prompt(), ctx.engine
    T = pr.layout.n_tokens
    heads, rows, keys = _random_masks(ctx, BATCH_ROWS, "question")
    plan = eng.plan(BATCH_ROWS, [mask_keys(heads, rows, keys)])
    reuse = eng.forward(pr, plan, prefix_reuse=True, logits_at=[T - 1]).logits[:, -1]
    recompute = eng.forward(pr, plan, prefix_reuse=False, logits_at=[T - 1]).logits[:, -1]
    c = _compare("prefix reuse", reuse, recompute, ctx, "logit")
    c.summary += f" (prefix of {plan.first_row()} tokens shared)"
    return c
