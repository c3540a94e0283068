"""The grounding test in a study: one capture per item for every setting's S and controls.

Evaluation units run test-major, then shard, then setting (:func:`vheads.study.stages.evaluation.eval_units`),
so every grounding unit of one shard reads the same items: the replica captures their maps
once (``[L, H, |I|]`` per item, :func:`vheads.evaluation.capture_maps`) and each setting's
head-sets are subsets of that capture. The items are the ``grid-oracle`` set ("what is in
cell k ?", the ground truth the referred cell's box).

Stored per item, for every head-set, in ``outcomes`` (the measure does not depend on the
letter metric, so the same value fills the three metric columns): test ``grounding``
(pointing: 1 if the peak of the head-set's map lies in the box), ``grounding-iou`` (IoU of
the box rule's box) and ``grounding-acc50`` (IoU ≥ 0.5). S's map on the first
:data:`FIGURE_ITEMS` items of the first shard goes to ``grounding/<setting>--<item>.json``
with the item's image (``.png``) for the report's figure.
"""

from __future__ import annotations

import io

from vheads.evaluation import GroundingRule, capture_maps, grounding

#: S's maps kept per setting for the report's figure
FIGURE_ITEMS = 3
#: the stored test id of each grounding measure
MEASURE_TESTS = {"point": "grounding", "iou": "grounding-iou", "acc50": "grounding-acc50"}


def grounding_rows(computer, unit: dict, sets: dict, ids: list[str], hsets: list, which: list[int], out: dict,
                   rule: GroundingRule = GroundingRule()) -> dict:
    """Rows of one grounding unit: ``hsets`` (head-sets ``ids[j]`` for ``j`` in ``which``) on
    ``sets["grid-oracle"]``; the capture is kept on ``computer`` for the next unit of the shard."""
    items = sets["grid-oracle"]
    key = (rule.rows, rule.aggregation, tuple(it.id for it in items))
    cache = computer.__dict__.setdefault("_grounding_capture", {})
    if key not in cache:
        cache.clear()  # one shard at a time: units run shard-major within the test
        cache[key] = capture_maps(computer.engine, items, rule)
    first = unit["shard"][0] == 0 and ids[which[0]] == "S"
    res = grounding(computer.engine, items, hsets, rule, captured=cache[key], keep_maps=FIGURE_ITEMS if first else 0)
    uid, setting = unit["unit_id"], unit["setting"]
    for measure, test_id in MEASURE_TESTS.items():
        vals = res.detail[measure]
        for jj, j in enumerate(which):
            for i, iid in enumerate(res.item_ids):
                v = float(vals[jj, i])
                out["outcomes"].append((uid, setting, test_id, ids[j], iid, v, v, v))
    maps, images = {}, {}
    by_id = {it.id: it for it in items}
    for m in res.detail.get("maps", []):
        name = f"{setting}--{m['item']}"
        g = m["grid"]
        maps[name] = {"setting": setting, "item": m["item"], "question": by_id[m["item"]].question,
                      "xs": g.xs.tolist(), "ys": g.ys.tolist(), "density": m["density"].tolist(),
                      "truth": list(m["truth"]), "box": [float(v) for v in m["box"]], "rule": rule.__dict__}
        buf = io.BytesIO()
        by_id[m["item"]].image.save(buf, format="PNG")
        images[name] = buf.getvalue()
    return {"rows": out, "grounding_maps": maps, "grounding_images": images}
