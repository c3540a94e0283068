"""The core of every study: the model, its loading, the evaluation items' source, the
question templates, seeds and the ``[run]`` table (backend and batching). No work units: the
other stages read these keys."""

from __future__ import annotations

from pathlib import Path

from vheads._errors import VheadsError
from vheads.study._stage import CHECK_PATHS, Key, Stage, register_stage

DTYPES = ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16")


def _validate_core(cfg, bad) -> None:
    if cfg.seed < 0:
        bad("seed", f"must be 0 or positive, got {cfg.seed}")
    if cfg.run.workers < 0:
        bad("run.workers", f"must be 0 (auto) or positive, got {cfg.run.workers}")
    if cfg.run.torch_threads < 0:
        bad("run.torch_threads", f"must be 0 (all cores) or positive, got {cfg.run.torch_threads}")
    _validate_eval_source(cfg, bad)
    if cfg.run.backend not in ("local", "ray"):
        bad("run.backend", f"must be local or ray, got {cfg.run.backend!r}")
    if cfg.run.shard_size < 1 or cfg.run.batch_size < 1 or cfg.run.ray_workers < 1 or cfg.run.token_budget < 1:
        bad("run", "shard_size, batch_size, token_budget and ray_workers must be positive")
    if cfg.dtype not in DTYPES:
        bad("dtype", f"unknown dtype {cfg.dtype!r}")


def _validate_eval_source(cfg, bad) -> None:
    """The evaluation source's spec, folder and list files (the photos are checked when the
    study builds its items, before the model is loaded)."""
    from vheads.data.builders import RESIZE_POLICIES, check_cell
    from vheads.data.sources import parse_source_spec, source_folder

    if cfg.eval_resize not in RESIZE_POLICIES:
        bad("eval_resize", f"must be one of {', '.join(RESIZE_POLICIES)}, got {cfg.eval_resize!r}")
    try:
        check_cell(cfg.eval_cell, "the cell")
    except VheadsError as e:
        bad("eval_cell", str(e))
    if cfg.eval_source == "synthetic":
        for key in ("eval_classes", "eval_exclude", "eval_groups"):
            if getattr(cfg, key):
                bad(key, "applies to real photos only; set eval_source too")
        return
    try:
        parse_source_spec(cfg.eval_source)
    except ValueError as e:
        bad("eval_source", f"{e}, or synthetic")
    if CHECK_PATHS.get() and not source_folder(cfg.eval_source).is_dir():
        bad("eval_source", f"folder {str(source_folder(cfg.eval_source))!r} does not exist")
    for key in ("eval_classes", "eval_exclude", "eval_groups"):
        path = getattr(cfg, key)
        if path and CHECK_PATHS.get() and not Path(path).is_file():
            bad(key, f"file {path!r} does not exist")


def templates_table(value, model: str = "tiny") -> dict[str, str]:
    """The ``[templates]`` table, each template checked (the error names ``templates.KEY``),
    less the entries equal to ``model``'s defaults."""
    from vheads.data import TemplateError, default_templates, templates_from_dict

    base = default_templates(model)
    try:
        given = templates_from_dict(value, base=base)
    except TemplateError as e:
        raise VheadsError(f"config key 'templates': {e}") from None
    return {k: v for k, v in given.to_dict().items() if v != getattr(base, k)}


def validate_templates(cfg) -> None:
    """Templates checked (again: a config built in code skips :func:`config_from_dict`), and
    on the built-in tiny model, whose vocabulary is word-level, every word of every question
    the synthetic items can ask, and of the system prompt, must be one it knows."""
    from vheads.data import TemplateError, check_vocabulary

    templates_table(cfg.templates, cfg.model)
    if cfg.chat_template:
        from vheads.models import read_chat_template

        read_chat_template(cfg.chat_template)  # exists, readable, valid Jinja: else one line naming the file
    if cfg.model != "tiny":
        return
    from vheads.data import synthetic as syn

    unknown = [w for w in cfg.system_prompt.split() if w not in syn.WORDS]
    if unknown:  # the tiny tokenizer would turn it into <unk>
        raise VheadsError(f"config key 'system_prompt': word {unknown[0]!r} is not in the built-in tiny model's word-level "
                          f"vocabulary (it knows: {' '.join(sorted(syn.WORDS))})")
    if not cfg.templates:
        return

    try:
        check_vocabulary(cfg.question_templates, set(syn.WORDS), {"k": [str(k) for k in range(7)], "object": list(syn.CLASSES)})
    except TemplateError as e:
        raise VheadsError(f"config key 'templates': {e}") from None


_MODELS_EXAMPLE = '''\
# models = [{ name = "tiny", model = "tiny" }, { name = "q2", model = "PATH", dtype = "bfloat16" }]
#                         # several models in one study (instead of model): name, model, revision, dtype, device,
#                         # device_map, quantization, trust_remote_code, system_prompt, chat_template
#                         # (each falls back to the key above)'''

KEYS = (
    Key("model", "tiny", '"tiny" (built-in), a local folder, or a hub id'),
    Key("revision", "", 'hub revision (commit or tag); "" = main'),
    Key("dtype", "auto", "auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16"),
    Key("device", "cpu", "cpu | cuda | cuda:N (on Ray: cuda, each replica gets a GPU of its own)"),
    Key("device_map", "", '"" = all on `device`; auto | balanced | sequential (needs accelerate)', later=True),
    Key("quantization", "", '"" = none; 4bit | 8bit (bitsandbytes, CUDA only)', later=True),
    Key("trust_remote_code", False, "let the checkpoint run its own Python code", later=True),
    Key("system_prompt", "", 'a system turn before each prompt; "" = what the chat template does without one', later=True),
    Key("chat_template", "", 'a Jinja file replacing the checkpoint\'s chat template; "" = the checkpoint\'s own', later=True),
    Key("models", [], example=_MODELS_EXAMPLE, line=False, type=list[dict[str, str]]),
    Key("seed", 0),
    Key("eval_source", "synthetic", "synthetic (built-in shapes), imagenet:DIR, imagefolder:DIR or hf:DIR[,SPLIT] (real photos)",
        later=True),
    Key("eval_classes", "", 'real photos: file of class ids / names to use, one a line ("" = all)', later=True),
    Key("eval_exclude", "", 'real photos: file of class ids / names never to use ("" = none)', later=True),
    Key("eval_groups", "", "real photos: file of confusable groups (one a line, comma-separated); a group never shares an item",
        later=True),
    Key("eval_cell", 224, "real photos: pixels per grid cell (a single photo is 2 x cell square)", later=True),
    Key("eval_resize", "crop", "real photos: crop (short side to cell, centre square) | pad (gray borders)", later=True),
    Key("scope", [], example='''\
# [[scope]]               # keys for named settings only (repeat the table for each group of settings):
# settings = ["cm-ref-qsp", "ph-ref-qsp"]   # setting ids of this run (corpus-query-source)
# controls = { layer-matched = 250, any-layer = 250 }   # replaces [controls] for them
#                         # also: test_controls, tests, row_groups, k_sweep, k_sweep_tests, k_sweep_controls''',
        line=False, later=True, type=list[dict]),
    Key("templates", {}, "question wording; [..] marks the query span (default: the placeholder's value)", later=True,
        type=dict[str, str]),
    # [run]: backend and batching (not hashed: they change no result)
    Key("backend", "local", "local | ray", table="run"),
    Key("ray_address", "", 'or the RAY_ADDRESS environment variable; "" = start a local cluster', table="run"),
    Key("ray_workers", 2, "model replicas (actors); with GPUs: one GPU and cores / GPUs each", table="run"),
    Key("shard_size", 8, "evaluation items per work unit", table="run"),
    Key("batch_size", 512, "rows (head-sets x items) per batched forward", table="run"),
    Key("token_budget", 1 << 19, "and at most rows x padded prompt length positions per forward", table="run"),
    Key("cross_item", True, "rows of different items share a forward (false: one item per forward)", table="run"),
    Key("workers", 0, "local worker processes, each a model replica; 0 = one per core (at most 8) for the built-in "
        "tiny model on a CPU, else 1", table="run"),
    Key("torch_threads", 0, "CPU threads per model replica; 0 = 1 for the built-in tiny model on a CPU (the same store on "
        "every machine), else the cores / workers (on Ray: the replica's); set: the same everywhere", table="run"),
)

STAGE = register_stage(Stage("core", 0, keys=KEYS, validate=_validate_core))
