"""Loading options a GPU user needs (device_map, 4-/8-bit, trust_remote_code), on saved tiny folders.

Each option either loads the same model (same logits as a plain load) or is refused with one
line before anything is loaded; the CLI turns that line into exit 2.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from PIL import Image

from tests.hardening.clitools import NO_MODEL, refused, vheads
from vheads._errors import VheadsError
from vheads.data import Item
from vheads.models import ADAPTERS, check_load_options, load_model


def _logits(lm) -> torch.Tensor:
    item = Item("o", "test", Image.new("RGB", (56, 56), (200, 30, 30)), "what is in panel 1 ?", "A")
    prompt = lm.adapter.build(item, lm.processor)
    with torch.no_grad():
        return lm.model(**{k: v.to(lm.device) for k, v in prompt.inputs.items()}).logits  # [1, T, V]


@pytest.mark.parametrize("device_map", ["auto", "cpu"])
def test_device_map_loads_the_same_model(tiny_random_dirs, device_map):
    pytest.importorskip("accelerate")
    path = str(tiny_random_dirs["llava"])
    placed = load_model(path, device_map=device_map)
    assert all(p.device.type == "cpu" for p in placed.model.parameters())  # this machine has no GPU
    torch.testing.assert_close(_logits(placed), _logits(load_model(path)), rtol=0, atol=0)


def test_trust_remote_code_reaches_from_pretrained_only_when_asked(tiny_random_dirs, monkeypatch):
    import transformers

    seen: list[tuple[str, dict]] = []  # the calls vheads makes (not those transformers makes inside them)
    depth = [0]
    for cls in ("AutoConfig", "AutoModelForImageTextToText", "AutoProcessor", "AutoImageProcessor", "AutoTokenizer"):
        auto = getattr(transformers, cls)
        original = auto.from_pretrained.__func__

        def spy(klass, *args, _name=cls, _original=original, **kwargs):
            if depth[0] == 0:
                seen.append((_name, dict(kwargs)))
            depth[0] += 1
            try:
                return _original(klass, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(auto, "from_pretrained", classmethod(spy))
    path = str(tiny_random_dirs["llava"])
    load_model(path)
    assert {name for name, _ in seen} >= {"AutoConfig", "AutoModelForImageTextToText"}
    assert all("trust_remote_code" not in kw for _, kw in seen), seen
    seen.clear()
    load_model(path, trust_remote_code=True)
    assert seen and all(kw.get("trust_remote_code") is True for _, kw in seen), seen


def test_quantization_on_cpu_is_refused_in_one_line():
    with pytest.raises(VheadsError, match=r"4bit quantization \(bitsandbytes\) runs on a CUDA GPU only.*'cpu'") as e:
        check_load_options("cpu", None, "4bit")
    assert "\n" not in str(e.value)
    with pytest.raises(VheadsError, match="8bit quantization .* CUDA GPU only"):
        check_load_options("cpu", "cpu", "8bit")
    with pytest.raises(VheadsError, match="quantization '3bit' is not one of 4bit, 8bit"):
        check_load_options("cpu", None, "3bit")


def test_quantization_without_bitsandbytes_is_refused(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine without bitsandbytes
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(VheadsError, match="4bit quantization needs the bitsandbytes package, which is not installed"):
        check_load_options("cuda", None, "4bit")


def test_device_map_needs_accelerate_and_a_real_placement(monkeypatch):
    import importlib.util

    with pytest.raises(VheadsError, match="device_map 'everywhere' is neither one of auto, balanced"):
        check_load_options("cpu", "everywhere")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(VheadsError, match="device_map 'auto' needs the accelerate package"):
        check_load_options("cpu", "auto")


def test_cli_refuses_quantization_on_cpu_before_loading(tmp_path):
    r = vheads("discover", "--model", NO_MODEL, "--quantize", "4bit", "--out", tmp_path / "h", "--n", "1")
    refused(r, "4bit quantization", "CUDA GPU only")
    assert not (tmp_path / "h").exists()


def test_study_config_loading_keys_are_validated():
    from vheads.study import load_config

    with pytest.raises(VheadsError, match="config key 'quantization': 8bit quantization .* CUDA GPU only"):
        load_config(quantization="8bit")
    with pytest.raises(VheadsError, match="config key 'device_map': device_map 'gpu9'"):
        load_config(device_map="gpu9")
    base = load_config()
    assert base.science_hash() == load_config(trust_remote_code=False).science_hash()  # defaults keep old hashes
    assert base.science_hash() != load_config(trust_remote_code=True).science_hash()


def _retyped(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_cli_names_the_supported_families_for_an_unsupported_checkpoint(tiny_random_dirs, tmp_path):
    dst = _retyped(tiny_random_dirs["llava"], tmp_path / "m", model_type="fuyu")
    line = refused(vheads("audit", "--model", dst, "--n", "2"), "'fuyu' is not a supported VLM family; supported:")
    assert all(mt in line for mt in ADAPTERS)


def test_cli_names_the_supported_families_for_a_text_only_model(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "llama")
    line = refused(vheads("audit", "--model", tmp_path / "llama", "--n", "2"), "'llama'", "not a vision-language model",
                   "supported VLM families:")
    assert all(mt in line for mt in ADAPTERS)
