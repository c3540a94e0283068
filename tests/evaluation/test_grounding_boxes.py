"""The grounding test's geometry on hand-made maps: every expected number is worked out by hand
(or by a brute-force loop over tokens), never read from the code's own output."""

import math

import numpy as np
import pytest

from vheads.evaluation._boxes import PixelGrid, box_iou, box_rule, component_entropy, pointing_hits
from vheads.evaluation._grounding import GroundingRule, aggregate_maps, ground_maps
from vheads.evaluation import HeadSet


def grid_boxes(rows, cols, size):
    """Token boxes of a rows x cols grid of size-pixel tokens, row-major (written out here, not
    taken from vheads.models)."""
    return [(c * size, r * size, (c + 1) * size, (r + 1) * size) for r in range(rows) for c in range(cols)]


def token_map(rows, cols, values, rest=0.0):
    a = np.full(rows * cols, rest)
    for (r, c), v in values.items():
        a[r * cols + c] = v
    return a


@pytest.fixture
def g4():
    return PixelGrid.from_boxes(grid_boxes(4, 4, 10), (40, 40))


def test_untiled_grid_renders_each_token_as_one_cell_of_mass_per_pixel(g4):
    a = np.arange(16.0)
    d = g4.to_pixels(a[None])[0]
    assert g4.shape == (4, 4)
    np.testing.assert_allclose(d, a.reshape(4, 4) / 100)  # each token's value over its 10x10 box


def test_a_known_blob_gives_its_bounding_box(g4):
    # a blob of three tokens (1,1), (1,2), (2,1) at 1.0, a lone token (3,3) at 0.9, the rest 0.1:
    # at half the peak the blob (300 px²) and the lone token (100 px²) survive; the blob is larger
    a = token_map(4, 4, {(1, 1): 1.0, (1, 2): 1.0, (2, 1): 1.0, (3, 3): 0.9}, rest=0.1)
    box = box_rule(g4.to_pixels(a[None]), g4, threshold=0.5)[0]
    np.testing.assert_allclose(box, [10, 10, 30, 30])
    # at 0.95 of the peak the lone token drops out; at 0.05 everything is one component
    np.testing.assert_allclose(box_rule(g4.to_pixels(a[None]), g4, threshold=0.95)[0], [10, 10, 30, 30])
    np.testing.assert_allclose(box_rule(g4.to_pixels(a[None]), g4, threshold=0.05)[0], [0, 0, 40, 40])


def test_connectivity_decides_whether_diagonal_cells_join(g4):
    # (0,0) and (1,1) touch at a corner; (3,2)-(3,3) share an edge
    a = token_map(4, 4, {(0, 0): 1.0, (1, 1): 1.0, (3, 2): 1.0, (3, 3): 1.0})
    d = g4.to_pixels(a[None])
    # 4-connected: {(0,0)}, {(1,1)}, {(3,2),(3,3)}: the pair is largest
    np.testing.assert_allclose(box_rule(d, g4, 0.5, connectivity=4)[0], [20, 30, 40, 40])
    # 8-connected: two components of 200 px² each; the tie goes to the one first in row-major order
    np.testing.assert_allclose(box_rule(d, g4, 0.5, connectivity=8)[0], [0, 0, 20, 20])


def test_iou_by_hand():
    # (10,10,30,30) vs (10,10,30,20): intersection 20x10 = 200, union 400 + 200 - 200 = 400
    assert box_iou([[10, 10, 30, 30]], (10, 10, 30, 20))[0] == pytest.approx(0.5)
    # disjoint boxes, a box inside another, identical boxes, no box at all
    assert box_iou([[0, 0, 10, 10]], (20, 20, 30, 30))[0] == 0
    assert box_iou([[0, 0, 40, 40]], (10, 10, 20, 20))[0] == pytest.approx(100 / 1600)
    assert box_iou([[5, 6, 7, 9]], (5, 6, 7, 9))[0] == pytest.approx(1.0)
    assert box_iou([[np.nan] * 4], (0, 0, 1, 1))[0] == 0
    # partial overlap: (0,0,10,10) vs (5,5,15,20): inter 5x5 = 25, union 100 + 150 - 25 = 225
    assert box_iou([[0, 0, 10, 10]], (5, 5, 15, 20))[0] == pytest.approx(25 / 225)


def test_pointing_is_the_peak_cell_centre_in_the_box(g4):
    a = token_map(4, 4, {(1, 2): 1.0, (3, 0): 0.5})
    d = g4.to_pixels(a[None])  # peak cell (1,2): centre (25, 15)
    assert pointing_hits(d, g4, (20, 10, 30, 20))[0] == 1
    assert pointing_hits(d, g4, (24, 14, 26, 16))[0] == 1
    assert pointing_hits(d, g4, (0, 0, 20, 20))[0] == 0
    assert pointing_hits(d, g4, (25.5, 0, 40, 40))[0] == 0  # the centre lies left of the box
    # ties go to the first cell in row-major order: (0,1) before (2,0)
    tie = g4.to_pixels(token_map(4, 4, {(2, 0): 1.0, (0, 1): 1.0})[None])
    assert pointing_hits(tie, g4, (10, 0, 20, 10))[0] == 1
    # a map with no mass points nowhere and has no box
    zero = g4.to_pixels(np.zeros((1, 16)))
    assert pointing_hits(zero, g4, (0, 0, 40, 40))[0] == 0
    assert np.isnan(box_rule(zero, g4)).all()


def test_tiles_and_thumbnail_render_by_brute_force():
    # a 40x20 image: two 20x20 tiles of 2x2 tokens (10 px), then a thumbnail of 3x1 tokens
    # (40/3 px wide, 20 px high) over the whole image, as a tiled family's layout lists them
    tiles = [(x0 + c * 10, r * 10, x0 + (c + 1) * 10, (r + 1) * 10) for x0 in (0, 20) for r in range(2) for c in range(2)]
    thumb = [(c * 40 / 3, 0, (c + 1) * 40 / 3, 20) for c in range(3)]
    boxes = np.array(tiles + thumb, dtype=float)
    g = PixelGrid.from_boxes(boxes, (40, 20))
    rng = np.random.default_rng(0)
    a = rng.random(len(boxes))
    d = g.to_pixels(a[None])[0]
    raster = g.image(d, width=120)  # 120 x 60 samples at centres (k + 0.5) / 3 px
    for py, px in [(0, 0), (10, 39), (30, 40), (59, 119), (25, 79), (5, 80)]:
        x, y = (px + 0.5) / 3, (py + 0.5) / 3
        want = sum(v / ((x1 - x0) * (y1 - y0)) for v, (x0, y0, x1, y1) in zip(a, boxes) if x0 <= x < x1 and y0 <= y < y1)
        assert raster[py, px] == pytest.approx(want)
    # the mass is kept: Σ density x cell area = Σ a
    assert (d * g.cell_area).sum() == pytest.approx(a.sum())


def test_component_entropy_by_hand(g4):
    # kept above the mean (3.9/16): the blob (300 px²) and the lone token (100 px²)
    a = token_map(4, 4, {(1, 1): 1.0, (1, 2): 1.0, (2, 1): 1.0, (3, 3): 0.9})
    want = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    one_blob = token_map(4, 4, {(0, 0): 1.0, (0, 1): 1.0})
    uniform = np.ones(16)
    h = component_entropy(g4.to_pixels(np.stack([a, one_blob, uniform])), g4)
    np.testing.assert_allclose(h, [want, 0.0, math.log(16)])


def test_aggregation_is_the_mean_over_the_head_sets_heads():
    rng = np.random.default_rng(1)
    maps = rng.random((3, 4, 16))
    S = HeadSet([(0, 1), (2, 3)], 3, 4)
    T = HeadSet([(1, 0)], 3, 4)
    got = aggregate_maps(maps, [S, T])
    np.testing.assert_allclose(got[0], (maps[0, 1] + maps[2, 3]) / 2)
    np.testing.assert_allclose(got[1], maps[1, 0])


def test_ground_maps_gives_point_iou_and_acc50_per_map(g4):
    on = token_map(4, 4, {(1, 1): 1.0, (1, 2): 1.0})  # box (10,10,30,20), peak (15,15)
    off = token_map(4, 4, {(3, 3): 1.0})  # box (30,30,40,40)
    res = ground_maps(np.stack([on, off]), g4, (10, 10, 30, 30), GroundingRule())
    np.testing.assert_allclose(res["point"], [1, 0])
    np.testing.assert_allclose(res["iou"], [200 / 400, 0])
    np.testing.assert_allclose(res["acc50"], [1, 0])


@pytest.mark.parametrize("key,value", [("rows", "first"), ("aggregation", "max"), ("threshold", 0), ("threshold", 1.5),
                                       ("connectivity", 6)])
def test_bad_rule_keys_are_refused_naming_the_key(key, value):
    from vheads._errors import VheadsError

    with pytest.raises(VheadsError, match=key if key != "rows" else "rows"):
        GroundingRule(**{key: value})
