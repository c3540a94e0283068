"""Evaluation items on real photographs: the synthetic kinds, seeded, with their provenance,
and regions that map to exactly the right image tokens on the Qwen-VL and LLaVA layouts."""

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from tests.conftest import BASE_FAMILIES as FAMILIES
from tests.data.photos import PHOTOS, make_hf_parquet, make_ilsvrc
from vheads.data import OPTION_LETTERS
from vheads.data.builders import KINDS, RealItems
from vheads.data.synthetic import kind_items

NAME_OF = {w: name for w, (_, name) in PHOTOS.items()}


@pytest.fixture(scope="module")
def ilsvrc(tmp_path_factory):
    return make_ilsvrc(tmp_path_factory.mktemp("ilsvrc"))


def _key_class(item):
    return item.options[OPTION_LETTERS.index(item.answer)]


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_gives_byte_identical_items_and_another_seed_does_not(ilsvrc, kind):
    a = RealItems(f"imagenet:{ilsvrc}", cell=32).items(kind, 6, seed=3)
    b = RealItems(f"imagenet:{ilsvrc}", cell=32).items(kind, 6, seed=3)
    c = RealItems(f"imagenet:{ilsvrc}", cell=32).items(kind, 6, seed=4)
    assert [it.image.tobytes() for it in a] == [it.image.tobytes() for it in b]
    assert [(it.question, it.options, it.answer, it.target) for it in a] == [(it.question, it.options, it.answer, it.target) for it in b]
    if kind != "grid-blank":  # blank grids differ only in their options and key
        assert [it.image.tobytes() for it in a] != [it.image.tobytes() for it in c]


def test_items_have_the_synthetic_kinds_fields(ilsvrc):
    real = RealItems(f"imagenet:{ilsvrc}", cell=32)
    for kind in KINDS:
        r, s = real.items(kind, 2, 0)[0], kind_items(kind, 1, 0)[0]
        assert (r.kind, r.question.split(" ")[0], sorted(r.regions), r.target is None, len(r.options)) == \
               (s.kind, s.question.split(" ")[0], sorted(s.regions), s.target is None, len(s.options))
        assert set(s.meta) - {"corpus", "shown"} <= set(r.meta)


def test_grid_cells_hold_the_recorded_photos_of_the_named_classes(ilsvrc):
    cell = 48
    for kind in ("grid-neutral", "grid-oracle"):
        for it in RealItems(f"imagenet:{ilsvrc}", cell=cell).items(kind, 8, 1):
            assert it.image.size == (2 * cell, 2 * cell)
            assert len(set(it.options)) == 4 and sorted(it.options) == sorted(it.meta["cells"])
            for k, path in enumerate(it.meta["images"]):
                wnid = path.split("/")[-2]  # the photo's folder is its class
                assert it.meta["cells"][k] == NAME_OF[wnid]
                x0, y0 = (k % 2) * cell, (k // 2) * cell
                want = ImageOps.fit(Image.open(path).convert("RGB"), (cell, cell), Image.BICUBIC)
                assert np.array_equal(np.asarray(it.image.crop((x0, y0, x0 + cell, y0 + cell))), np.asarray(want))
            # the key is the class of the target cell
            assert _key_class(it) == it.meta["cells"][int(it.target[-1])]
            if kind == "grid-oracle":
                a, b = it.query_span
                assert it.question[a:b] == f"cell {it.target[-1]}"


def test_class_arms_keys(ilsvrc):
    real = RealItems(f"imagenet:{ilsvrc}", cell=32)
    for it in real.items("class-matched", 12, 2):
        shown = NAME_OF[it.meta["images"][0].split("/")[-2]]
        assert _key_class(it) == shown and len(set(it.options)) == 4
    keys = []
    for it in real.items("class-mismatched", 40, 2):
        shown = NAME_OF[it.meta["images"][0].split("/")[-2]]
        assert shown not in it.options and len(set(it.options)) == 4
        keys.append(it.answer)
    assert set(keys) == set(OPTION_LETTERS)  # the key letter is drawn, not fixed


def test_text_arm_names_the_key_and_never_shows_an_option(ilsvrc):
    for it in RealItems(f"imagenet:{ilsvrc}", cell=32).items("text", 20, 5):
        assert f"the {_key_class(it)} ." in it.question
        if it.meta["images"]:
            assert NAME_OF[it.meta["images"][0].split("/")[-2]] not in it.options
        else:
            assert np.all(np.asarray(it.image) == 128)


def test_blank_grid_is_uniform_gray_and_its_keys_are_drawn(ilsvrc):
    items = RealItems(f"imagenet:{ilsvrc}", cell=32).items("grid-blank", 30, 0)
    assert all(np.all(np.asarray(it.image) == 128) for it in items)
    assert {it.answer for it in items} == set(OPTION_LETTERS)


def test_provenance_records_every_choice(ilsvrc, tmp_path):
    drop = tmp_path / "drop.txt"
    drop.write_text("rocket\n")
    it = RealItems(f"imagenet:{ilsvrc}", exclude=str(drop), cell=40, resize="pad").items("class-matched", 1, 9)[0]
    p = it.meta["provenance"]
    assert (p["source"], p["seed"], p["cell"], p["resize"], p["exclusion_list"]) == (f"imagenet:{ilsvrc}", 9, 40, "pad", str(drop))
    assert p["classes"] == sorted(set(PHOTOS) - {"n00000004"}) and len(p["fingerprint"]) == 16


def test_classes_with_the_same_name_never_share_an_item(tmp_path):
    train = make_ilsvrc(tmp_path)
    (tmp_path / "LOC_synset_mapping.txt").write_text(
        "n00000001 crane, bird\nn00000002 crane, machine\nn00000003 mug\nn00000004 rocket\nn00000005 man\nn00000006 motorcycle\n")
    for kind in ("grid-neutral", "class-matched", "class-mismatched", "text"):
        for it in RealItems(f"imagenet:{train}", cell=32).items(kind, 30, 0):
            assert len(set(it.options)) == 4


def test_parquet_source_builds_the_same_kinds(tmp_path):
    root = make_hf_parquet(tmp_path / "repo")
    items = RealItems(f"hf:{root}", cell=32).items("grid-neutral", 4, 0)
    assert all(" row " in where for it in items for where in it.meta["images"])
    assert all(sorted(it.options) == sorted(it.meta["cells"]) for it in items)


def test_a_bad_photo_stops_the_build_naming_the_file(tmp_path):
    train = make_ilsvrc(tmp_path)
    for f in (train / "n00000003").iterdir():
        f.write_bytes(b"")
    with pytest.raises(ValueError, match=r"n00000003_\d\.JPEG is empty"):
        RealItems(f"imagenet:{train}", cell=32).items("grid-neutral", 20, 0)


def test_mismatched_arm_needs_five_classes(tmp_path):
    train = make_ilsvrc(tmp_path)
    drop = tmp_path / "drop.txt"
    drop.write_text("rocket\nmotorcycle\n")
    real = RealItems(f"imagenet:{train}", exclude=str(drop), cell=32)
    assert len(real.items("class-matched", 2, 0)) == 2
    with pytest.raises(ValueError, match="class-mismatched items need 5 classes"):
        real.items("class-mismatched", 2, 0)


# ---- regions -> image tokens -------------------------------------------------------------
#: a cell size each tiny layout takes without resampling: Qwen-VL merges 2x2 patches of 16
#: px (32 px tokens, a 128 px grid is kept as is); the tiny LLaVA's CLIP input is 56 px
CELL = {"qwen2_vl": 64, "qwen2_5_vl": 64, "qwen3_vl": 64, "llava": 28}


def _token_pixels(lm, prompt) -> torch.Tensor:
    """The processed pixels under each image token, one row per token (in token order)."""
    pv = prompt.inputs["pixel_values"]
    rows, cols = prompt.layout.grid
    if pv.dim() == 4:  # LLaVA [1, 3, H, W]: a token is a patch x patch square
        p = lm.processor.patch_size
        return pv[0].reshape(3, rows, p, cols, p).permute(1, 3, 0, 2, 4).reshape(rows * cols, -1)
    m = lm.processor.image_processor.merge_size  # Qwen: m*m consecutive patch rows per token
    return pv.reshape(rows * cols, m * m * pv.shape[1])


@pytest.fixture(scope="module")
def cvbench(tmp_path_factory):
    from tests.data.benchmarks import make_cvbench

    return make_cvbench(tmp_path_factory.mktemp("cvbench"))[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_perturbing_a_region_changes_exactly_its_tokens(loaded, ilsvrc, cvbench, family):
    from vheads.data.ood import BenchmarkItems

    lm = loaded[family]
    real = RealItems(f"imagenet:{ilsvrc}", cell=CELL[family])
    items = real.items("grid-neutral", 2, 0) + real.items("class-matched", 1, 0) + \
        BenchmarkItems(cvbench, CELL[family]).items("grid-neutral", 1, 0)  # an overlay grid of the pointing suite
    for it in items:
        base = lm.adapter.build(it, lm.processor)
        before = _token_pixels(lm, base)
        pos = base.layout.image_positions.tolist()
        for name, box in it.regions.items():
            img = it.image.copy()
            img.paste(ImageOps.invert(img.crop(box)), box[:2])
            it2 = type(it)(it.id, it.kind, img, it.question, it.answer, it.regions, it.target, it.options, it.query_span, it.meta)
            after = _token_pixels(lm, lm.adapter.build(it2, lm.processor))
            changed = {pos[i] for i in range(len(pos)) if not torch.equal(before[i], after[i])}
            assert changed and changed == set(base.layout.regions[name].positions.tolist()), (family, it.id, name)
            assert base.layout.regions[name].partial == []


def test_confusable_groups_never_share_an_item(ilsvrc, tmp_path):
    groups = tmp_path / "groups.txt"
    groups.write_text("# people\nastronaut, n00000005\n")  # by name and by wnid: astronaut and cameraman
    real = RealItems(f"imagenet:{ilsvrc}", groups=str(groups), cell=32)
    people = {"astronaut", "cameraman"}
    for kind in ("grid-neutral", "grid-oracle", "class-matched", "class-mismatched", "text"):
        for it in real.items(kind, 30, 0):
            shown = {NAME_OF[p.split("/")[-2]] for p in it.meta["images"]}
            assert len(people & (set(it.options) | shown)) <= 1, (kind, it.options, shown)
    assert real.items("grid-neutral", 1, 0)[0].meta["provenance"]["groups"] == str(groups)
    # six classes in two groups of three leave two usable per item: too few for four options
    two = tmp_path / "two-groups.txt"
    two.write_text("astronaut, tabby cat, coffee mug\nrocket, cameraman, motorcycle\n")
    with pytest.raises(ValueError, match="grid-neutral items need 4 classes with distinct names \\(and confusable groups\\), the source has 2"):
        RealItems(f"imagenet:{ilsvrc}", groups=str(two), cell=32).items("grid-neutral", 1, 0)
