"""Stop ids of the greedy answer (issue 22, item 2): the checkpoint's generation_config and
the tokenizer's eos / special end-of-turn tokens only, never a literal looked up as text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from vheads.discovery._region_mass import _stop_ids, greedy_answer
from vheads.models import ProcessorBundle, adapter_for
from vheads.models.tiny_random import build_word_tokenizer


def _lm(tok, eos=None, generate=None):
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=eos), dtype=torch.float32, generate=generate)
    return SimpleNamespace(adapter=adapter_for("qwen3_vl"), processor=ProcessorBundle(None, tok, 16), model=model,
                           model_id="fake", device=torch.device("cpu"))


@pytest.fixture()
def qwen_like():
    """Like Qwen's vocabulary: "</s>" and "<end_of_turn>" are ordinary text tokens there."""
    return build_word_tokenizer(["</s>", "<end_of_turn>", "red", "blue"])


def test_ordinary_text_token_is_never_a_stop_id(qwen_like):
    tok = qwen_like
    plain = tok.convert_tokens_to_ids("</s>")
    assert plain != tok.unk_token_id and plain not in tok.all_special_ids  # an ordinary word of this vocabulary
    stop = _stop_ids(_lm(tok))
    assert plain not in stop
    assert tok.convert_tokens_to_ids("<end_of_turn>") not in stop
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop  # the eos token
    assert tok.convert_tokens_to_ids("<|endoftext|>") in stop  # a special end-of-turn token


def test_generation_config_eos_int_or_list(qwen_like):
    tok = qwen_like
    red, blue = tok.convert_tokens_to_ids("red"), tok.convert_tokens_to_ids("blue")
    assert red in _stop_ids(_lm(tok, eos=red))
    both = _stop_ids(_lm(tok, eos=[red, blue]))
    assert red in both and blue in both


def test_special_eos_named_like_a_literal_counts():
    """Where "</s>" *is* the tokenizer's eos (Llama, Mistral), it stops the answer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "red", "blue", "[IMG]"])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    assert _stop_ids(_lm(tok)) == [2]


def test_greedy_answer_runs_past_an_ordinary_literal(qwen_like):
    tok = qwen_like
    words = ["red", "</s>", "blue", "<|im_end|>", "red"]
    new = [tok.convert_tokens_to_ids(w) for w in words]

    def generate(input_ids, eos_token_id, **kw):
        assert tok.convert_tokens_to_ids("</s>") not in eos_token_id
        return torch.cat([input_ids, torch.tensor([new])], 1)

    prompt = SimpleNamespace(inputs={"input_ids": torch.tensor([[3, 4]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)})
    answer = greedy_answer(_lm(tok, generate=generate), prompt, max_new_tokens=5)
    assert answer.split() == ["red", "</s>", "blue"]  # cut at the real end token only
