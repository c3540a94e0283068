"""The study configuration: one validated object, loaded from TOML or built in code.

``vheads study --print-config`` prints :data:`DEFAULT_TOML` (:func:`default_toml` of the
``--model`` given: its ``[templates]`` comments show that model's question set), the
documented default to start from. Unknown keys and wrong types are refused with the key's name before any work.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from vheads._errors import MAX_ITEMS, MissingFileError, VheadsError, safe_name
from vheads.engine import ROW_GROUPS
from vheads.evaluation import MAX_R, METRICS, TESTS
from vheads.study._scores import DEFAULT_SCORES

#: off while a config is only planned (``vheads plan``: :func:`load_config_for_plan`): its data
#: folders, files and device need not exist on this machine
CHECK_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("vheads_check_paths", default=True)
MAX_INT = 1 << 63  # every integer key fits a signed 64-bit integer (SQLite's)
DTYPES = ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16")

_DEFAULT_TOML = '''\
# vheads study configuration. Every key is optional; these are the defaults.

model = "tiny"            # "tiny" (built-in), a local folder, or a hub id
revision = ""             # hub revision (commit or tag); "" = main
dtype = "auto"            # auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16
device = "cpu"            # cpu | cuda | cuda:N (on Ray: cuda, each replica gets a GPU of its own)
device_map = ""           # "" = all on `device`; auto | balanced | sequential (needs accelerate)
quantization = ""         # "" = none; 4bit | 8bit (bitsandbytes, CUDA only)
trust_remote_code = false # let the checkpoint run its own Python code
system_prompt = ""        # a system turn before each prompt; "" = what the chat template does without one
chat_template = ""        # a Jinja file replacing the checkpoint's chat template; "" = the checkpoint's own
# models = [{ name = "tiny", model = "tiny" }, { name = "q2", model = "PATH", dtype = "bfloat16" }]
#                         # several models in one study (instead of model): name, model, revision, dtype, device,
#                         # device_map, quantization, trust_remote_code, system_prompt, chat_template
#                         # (each falls back to the key above)

# discovery: settings = corpora x queries x sources (12 in the full design)
corpora = ["comics", "photo"]    # comics, photo (built-in), strips:FOLDER, comics:FOLDER, coco:IMAGES[,ANNOTATIONS.json]
queries = ["ordinal", "referring"]
sources = ["last", "qspan", "out"]
n_discovery = 48          # discovery items per corpus x query
k = 0                     # head-set size; 0 = scaled to the model (100 of 1,152 heads)
selection = "flat"        # flat | per-layer
splits = 200              # half-splits for the noise ceilings
scores = ["gaze", "localization", "vrh", "sparsemm"]   # published score points beside the grid ([] = none): presets,
                          # "NAME:rows=out,keys=hit" or { name = "outhit", rows = "out", keys = "hit" } (axes: docs/scores.md)
score_on = "first"        # the scores' corpus x query: first (first corpus and query: cm-ord-gaze, ...) | all

# evaluation
tests = ["cers", "ncs", "ncs-grid", "text", "grounding"]   # also: cers-sym (stored with cers anyway: same forwards);
                          # grounding: pointing, IoU, Acc@0.5 of each head-set's map on the grid-oracle items (one capture per item)
n_eval = 16               # items per evaluation set
beta = 10000.0            # steering strength under beta_rule = "fixed"
beta_rule = "controls"    # headline beta of Table 3's CERS, fixed before S is looked at: controls[:TOL] (the largest
                          # beta_sweep point at which the sweep's layer-matched controls' CERS has RMS <= TOL, default 0.05;
                          # the sweep runs first; without sweep controls: beta, recorded so) | fixed (= beta)
steer_rows = "all"        # query rows CERS steers at: all (default, as public steering code) | image | question | last
metric = "p4"             # the metric the tables lead with: p4 (P over the four letters) | logprob | logit-diff (all three are stored)
row_groups = ["all", "image", "question", "last"]   # NCS is run at each (default mask: all rows)
row_group_controls = ["layer-matched"]   # controls run at the row groups other than "all"
ablation = ["attention", "zero"]   # what hiding S means: attention (every test) | zero, mean, resample (NCS at the first row group, S + row_group_controls)
beta_sweep = [1.0, 10.0, 100.0, 1000.0, 10000.0]   # CERS of S over beta ([] to skip)
beta_sweep_controls = 5   # layer-matched draws re-run at every beta point (the first min(this, R) main draws)
k_sweep = [1, 2, 4, 8]    # CERS and NCS (all rows) of the top-k heads over k ([] to skip)
k_sweep_controls = 20     # layer-matched draws of each top-k set, run at every k point
k_sweep_tests = ["cers", "ncs"]   # the tests the k sweep's sets run in (NCS: all rows)
seed = 0
eval_source = "synthetic" # synthetic (built-in shapes), imagenet:DIR, imagefolder:DIR or hf:DIR[,SPLIT] (real photos)
eval_classes = ""         # real photos: file of class ids / names to use, one a line ("" = all)
eval_exclude = ""         # real photos: file of class ids / names never to use ("" = none)
eval_groups = ""          # real photos: file of confusable groups (one a line, comma-separated); a group never shares an item
eval_cell = 224           # real photos: pixels per grid cell (a single photo is 2 x cell square)
eval_resize = "crop"      # real photos: crop (short side to cell, centre square) | pad (gray borders)
ood_tasks = []            # pointing suite: TASK:PATH (cvbench, mmstar, mathvista, countbenchqa, spatial457, spatialrgpt, mcq, mcq-retrieval)
n_ood = 80                # items per task (audit sets, CERS grids, NCS pairs)
ood_controls = 1          # layer-matched draws tested with each S on every task (seed Tables 23-27: one)
algebra_controls = 100    # layer-matched draws for the shared / only-one head-sets of ordinal vs referring (0 = skip)
controls_h = 10           # sequential rank p (Besag & Clifford 1991): an exchangeable control (layer-matched, any-layer,
                          # random-n of |S|) stops once h of its draws reach T_S in every cell of its (setting, test), p = h / L;
                          # its [controls] R is then R_max; 0 = run every one of R (a fixed-R rank p)
controls_batch = 32       # exchangeable control draws per round of the sequential comparison (the rows run past a stop)
causal_tests = ["ncs"]    # exact causal map (each head alone, each whole layer) in ncs | ncs-grid | text, on n_eval items
#                         # of a discovery split; its top-k NCS heads are the causal-ncs setting of Table 3 ([] = skip)
causal_subsets = 0        # head attribution by regression: random head subsets (each head in with probability 1/2) on the
#                         # causal map's items and tests, method 'regression' (0 = skip; configs/paper.toml: 256)
causal_method = "exact"   # the map whose top-k NCS heads form causal-ncs: exact | atp | regression (needs causal_subsets)

[items]                   # items per test where fewer than n_eval (the first ones of its set; at most n_eval), e.g.
                          # ncs-grid = 120, beta-sweep = 200; keys: the tests and beta-sweep

[test_controls]           # R of a [controls] entry in one test, e.g. [test_controls.ncs-grid] layer-matched = 100

# [[scope]]               # keys for named settings only (repeat the table for each group of settings):
# settings = ["cm-ref-qsp", "ph-ref-qsp"]   # setting ids of this run (corpus-query-source)
# controls = { layer-matched = 250, any-layer = 250 }   # replaces [controls] for them
#                         # also: test_controls, tests, row_groups, k_sweep, k_sweep_tests, k_sweep_controls

[controls]                # control name = R draws per head-set
layer-matched = 249       # R >= 239 lets a Holm-adjusted p over 12 settings fall under 0.05 (where the pool holds
                          # as many: a pool of at most 2R is compared whole, each head-set once)
any-layer = 249           # every other head-set of |S| heads (C(64, 6) - 1 = 74,974,367 on the tiny model; its
                          # layer-matched pools, prod C(16, c_l) - 1, all hold far more than 2R as well)
attention-matched = 20    # layer- and image-attention-matched draws (Table 9, column B)
# "random-n@200" = 5      # random-n with its own head count (Table 12); also sinks = 1, text-heavy = 1, whole-layers = R

[run]
backend = "local"         # local | ray
ray_address = ""          # or the RAY_ADDRESS environment variable; "" = start a local cluster
ray_workers = 2           # model replicas (actors); with GPUs: one GPU and cores / GPUs each
shard_size = 8            # evaluation items per work unit
batch_size = 512          # rows (head-sets x items) per batched forward
token_budget = 524288     # and at most rows x padded prompt length positions per forward
cross_item = true         # rows of different items share a forward (false: one item per forward)
torch_threads = 0         # CPU threads per model replica; 0 = all cores (on Ray: the replica's); set: the same everywhere

[templates]               # question wording; [..] marks the query span (default: the placeholder's value)
{templates}'''


#: what each template asks, as the [templates] comments say it
_TEMPLATE_USES = {"ordinal": "discovery, ordinal query; {k} = panel 1..6",
                  "referring": "discovery, referring query; {object} = asked object",
                  "cell": "NCS_grid and the audit's oracle / floor; {k} = cell 0..3",
                  "object": "CERS grids and the NCS arms; no placeholder", "text": "text arm"}


def default_toml(model: str = "tiny") -> str:
    """The documented default config, its ``[templates]`` comments showing the question set
    that applies to ``model`` (the built-in tiny model's word-level questions, or the
    natural-language ones of any other model)."""
    from vheads.data import default_templates, templates_name

    base = default_templates(model)
    if templates_name(model) == "tiny":
        lines = ['# question set "tiny": the built-in tiny model\'s word-level questions (any other model: "natural"; '
                 'see --print-config --model M)']
    else:
        lines = [f'# question set "natural": natural-language questions, for model = {json.dumps(model)} '
                 "(the built-in tiny model keeps its word-level ones)"]
    lines += [f"# {k} = {json.dumps(v)}   # {_TEMPLATE_USES[k]}" for k, v in base.to_dict().items()]
    return _DEFAULT_TOML.replace("{templates}", "\n".join(lines) + "\n")


DEFAULT_TOML = default_toml("tiny")


#: keys added after the first release (real images, the pointing suite, loading options,
#: templates), with their defaults (left out of the hash while at the default, so runs made
#: before them keep their hash)
LATER_KEY_DEFAULTS = {"eval_source": "synthetic", "eval_classes": "", "eval_exclude": "", "eval_groups": "", "eval_cell": 224,
                      "eval_resize": "crop", "ood_tasks": [], "n_ood": 80, "ood_controls": 1,
                      "device_map": "", "quantization": "", "trust_remote_code": False, "templates": {},
                      "system_prompt": "", "chat_template": "",
                      "scores": DEFAULT_SCORES, "score_on": "first", "ablation": ["attention", "zero"],
                      "causal_tests": ["ncs"], "causal_subsets": 0, "causal_method": "exact",
                      # a run from before the sequential rank p compared every draw (controls_h = 0)
                      "controls_h": 0, "controls_batch": 32,
                      # the scoped protocol (issue 43): without scopes a run reads as before
                      "scope": [], "items": {}, "k_sweep_tests": ["cers", "ncs"], "test_controls": {}}
#: the keys a ``[[scope]]`` table may set for its settings (:meth:`StudyConfig.for_setting`)
SCOPE_KEYS = ("controls", "test_controls", "tests", "row_groups", "k_sweep", "k_sweep_tests", "k_sweep_controls")
#: the keys of ``[items]``: the tests (items per test) and the beta sweep
ITEM_KEYS = (*TESTS, "beta-sweep")
#: prompt keys left out of the stored config while at their default ("")
PROMPT_KEYS = ("system_prompt", "chat_template")


@dataclass
class RunConfig:
    backend: str = "local"
    ray_address: str = ""
    ray_workers: int = 2
    shard_size: int = 8
    batch_size: int = 512
    token_budget: int = 1 << 19
    cross_item: bool = True
    torch_threads: int = 0


@dataclass
class StudyConfig:
    model: str = "tiny"
    revision: str = ""
    dtype: str = "auto"  # resolved at once (__post_init__): the results are the dtype's
    device: str = "cpu"
    device_map: str = ""
    quantization: str = ""
    trust_remote_code: bool = False
    system_prompt: str = ""
    chat_template: str = ""
    corpora: list[str] = field(default_factory=lambda: ["comics", "photo"])
    queries: list[str] = field(default_factory=lambda: ["ordinal", "referring"])
    sources: list[str] = field(default_factory=lambda: ["last", "qspan", "out"])
    n_discovery: int = 48
    k: int = 0
    selection: str = "flat"
    splits: int = 200
    scores: list = field(default_factory=lambda: list(DEFAULT_SCORES))  # presets or points: study/_scores.py
    score_on: str = "first"
    tests: list[str] = field(default_factory=lambda: ["cers", "ncs", "ncs-grid", "text", "grounding"])
    n_eval: int = 16
    beta: float = 1e4
    beta_rule: str = "controls"  # how the headline β is chosen (vheads.study._headline)
    steer_rows: str = "all"
    metric: str = "p4"  # the metric the report's tables lead with (every test stores all three)
    row_groups: list[str] = field(default_factory=lambda: list(ROW_GROUPS))
    row_group_controls: list[str] = field(default_factory=lambda: ["layer-matched"])
    ablation: list[str] = field(default_factory=lambda: ["attention", "zero"])
    beta_sweep: list[float] = field(default_factory=lambda: [1.0, 10.0, 100.0, 1000.0, 10000.0])
    beta_sweep_controls: int = 5
    k_sweep: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    k_sweep_controls: int = 20
    k_sweep_tests: list[str] = field(default_factory=lambda: ["cers", "ncs"])
    seed: int = 0
    eval_source: str = "synthetic"
    eval_classes: str = ""
    eval_exclude: str = ""
    eval_groups: str = ""
    eval_cell: int = 224
    eval_resize: str = "crop"
    ood_tasks: list[str] = field(default_factory=list)
    n_ood: int = 80
    ood_controls: int = 1
    algebra_controls: int = 100
    controls_h: int = 10  # sequential rank p: stop after h controls reach T_S (0 = fixed R; vheads.study._sequential)
    controls_batch: int = 32  # exchangeable control draws per round
    causal_tests: list[str] = field(default_factory=lambda: ["ncs"])  # the causal map's tests (vheads.causal)
    causal_subsets: int = 0  # the regression design's subsets on the causal map's items (0: no regression map)
    causal_method: str = "exact"  # the map whose top-k NCS heads form the causal setting (exact | atp | regression)
    models: list[dict[str, str]] = field(default_factory=list)  # several models: see model_entries
    controls: dict[str, int] = field(default_factory=lambda: {"layer-matched": 249, "any-layer": 249, "attention-matched": 20})
    items: dict[str, int] = field(default_factory=dict)  # items per test, fewer than n_eval (its first ones)
    test_controls: dict[str, dict[str, int]] = field(default_factory=dict)  # test -> control -> R (else [controls]'s)
    scope: list[dict[str, Any]] = field(default_factory=list)  # [[scope]]: keys for named settings (for_setting)
    run: RunConfig = field(default_factory=RunConfig)
    templates: dict[str, str] = field(default_factory=dict)  # only the templates that differ from the model's defaults

    def __post_init__(self) -> None:
        if self.dtype == "auto":  # the device's default (vheads._device.default_dtype), stored and hashed as resolved
            from vheads._device import default_dtype

            self.dtype = default_dtype(self.device_map or self.device)

    def for_setting(self, setting: str) -> StudyConfig:
        """The config setting ``setting`` runs under: this one with the keys of the ``[[scope]]``
        that names it (at most one does; the algebra's pairs ``A&B`` and unnamed settings: as is)."""
        for sc in self.scope:
            if setting in sc["settings"]:
                return replace(self, scope=[], **{k: v for k, v in sc.items() if k != "settings"})
        return self

    def control_R(self, test: str, name: str) -> int:
        """R of ``[controls]`` entry ``name`` in ``test``: ``[test_controls.<test>]``'s, else ``[controls]``'s."""
        return self.test_controls.get(test, {}).get(name, self.controls[name])

    def drawn_R(self, name: str) -> int:
        """The draws of control ``name`` a setting needs: the most any of its tests compares."""
        return max([self.controls[name], *(self.control_R(t, name) for t in self.tests)])

    def n_items(self, test: str) -> int:
        """Items test ``test`` (or ``beta-sweep``) runs on: ``[items]``, else ``n_eval``."""
        return min(self.items.get(test, self.n_eval), self.n_eval)

    @property
    def question_templates(self):
        """The :class:`vheads.data.Templates` the study asks its questions with: the
        model's default set (:func:`vheads.data.default_templates`) with the config's own."""
        from vheads.data import default_templates, templates_from_dict

        return templates_from_dict(self.templates, base=default_templates(self.model))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["models"]:  # a single-model config reads (and is stored) as before models existed
            d.pop("models")
        for key in PROMPT_KEYS:  # likewise before the prompt keys
            if not d[key]:
                d.pop(key)
        return d

    def science_hash(self) -> str:
        """Hash of everything that changes results (not the backend or batching)."""
        d = science_dict(self.to_dict())
        if self.chat_template:  # what the template says, not where it lies
            d["chat_template"] = hashlib.sha256(Path(self.chat_template).read_bytes()).hexdigest()[:16]
        from vheads.data import templates_name

        models = [m.get("model", self.model) for m in self.models] or [self.model]
        if any(templates_name(m) != "tiny" for m in models):  # the natural-language questions since issue 22
            d["question_set"] = "natural"
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def science_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of a config (in :meth:`StudyConfig.to_dict`'s form, or as a store's ``config``
    meta holds it) that change results: not ``run`` (backend, batching) nor ``metric``, and
    no later key still at its default (runs made before it keep their hash)."""
    d = {k: v for k, v in config.items() if k not in ("run", "metric")}
    for key, default in LATER_KEY_DEFAULTS.items():
        if d.get(key, default) == default:
            d.pop(key, None)
    for key in ("models", *PROMPT_KEYS):  # to_dict leaves these out while empty
        if not d.get(key, True):
            d.pop(key)
    return d


def config_differences(stored: dict[str, Any], cfg: StudyConfig) -> list[str]:
    """``KEY: OLD -> NEW`` for each result-changing key where a run's stored config and
    ``cfg`` differ (a table such as ``[controls]`` entry by entry), sorted by key."""
    missing = "(not set)"

    def flat(d: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and v:
                out.update({f"{k}.{k2}": v2 for k2, v2 in v.items()})
            else:
                out[k] = v
        return out

    a, b = flat(science_dict(stored)), flat(science_dict(json.loads(json.dumps(cfg.to_dict()))))
    return [f"{k}: {json.dumps(a.get(k, missing))} -> {json.dumps(b.get(k, missing))}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def changed_config_error(run_dir: Path, stored_config: str | None, cfg: StudyConfig) -> VheadsError:
    """The error for a run folder that holds a run of another configuration: the keys that
    differ (or, where every key reads the same, what else enters the hash)."""
    diffs = config_differences(json.loads(stored_config), cfg) if stored_config else []
    what = ("; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "") if diffs else
            "every key reads the same, so the chat template file's contents or vheads' question set changed")
    return VheadsError(f"{run_dir} holds a run of a different configuration ({what}); rerun with the run's own "
                       "config, choose a new --out directory, or delete the old one")


def _type_name(t) -> str:
    return getattr(t, "__name__", str(t))


def _check(key: str, value: Any, default: Any) -> Any:
    """Check ``value`` against the type of ``default``; ints are accepted for floats, and an
    int must fit 64 bits (SQLite stores it; a larger one is a typo). A table of ints
    (``[controls]``) is checked entry by entry, the error naming ``key.entry``."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:
            value = float(value) if ok else value
        except OverflowError:  # an integer beyond float range
            ok = False
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -MAX_INT <= value < MAX_INT:
            raise VheadsError(f"config key {key!r}: {value} does not fit a 64-bit integer")
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list):
        ok = isinstance(value, list)
        if ok and default:
            proto = default[0]
            value = [_check(f"{key}[{i}]", v, proto) for i, v in enumerate(value)]
    elif isinstance(default, dict):
        ok = isinstance(value, dict)
        if ok and default:
            proto = next(iter(default.values()))
            value = {k: _check(f"{key}.{k}", v, proto) for k, v in value.items()}
    else:
        ok = True
    if not ok:
        raise VheadsError(f"config key {key!r}: expected {_type_name(type(default))}, got {type(value).__name__} {value!r:.80}")
    return value


def _templates(value: Any, model: str = "tiny") -> dict[str, str]:
    """The ``[templates]`` table, each template checked (the error names ``templates.KEY``),
    less the entries equal to ``model``'s defaults."""
    from vheads.data import TemplateError, default_templates, templates_from_dict

    base = default_templates(model)
    try:
        given = templates_from_dict(value, base=base)
    except TemplateError as e:
        raise VheadsError(f"config key 'templates': {e}") from None
    return {k: v for k, v in given.to_dict().items() if v != getattr(base, k)}


def config_from_dict(data: dict[str, Any]) -> StudyConfig:
    """Validate a parsed TOML table into a :class:`StudyConfig` (errors name the key)."""
    base, run = StudyConfig(), RunConfig()
    known = {f.name for f in fields(StudyConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise VheadsError(f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}")
        if key == "run":
            if not isinstance(value, dict):
                raise VheadsError(f"config key 'run' must be a table, got {value!r:.80}")
            run_known = {f.name for f in fields(RunConfig)}
            rk = {}
            for k2, v2 in value.items():
                if k2 not in run_known:
                    raise VheadsError(f"unknown config key 'run.{k2}'; known keys: {', '.join(sorted(run_known))}")
                rk[k2] = _check(f"run.{k2}", v2, getattr(run, k2))
            kwargs["run"] = RunConfig(**rk)
        elif key in ("templates", "scores"):
            kwargs[key] = value  # templates: against the model's defaults, below; scores: in validate
        elif key == "scope":
            kwargs[key] = _scopes(value, base)
        elif key == "test_controls":
            kwargs[key] = _test_controls(value, key)
        elif key == "items":
            if not isinstance(value, dict):
                raise VheadsError(f"config key 'items' must be a table of test = items, got {value!r:.80}")
            kwargs[key] = {k: _check(f"items.{k}", v, 1) for k, v in value.items()}
        else:
            kwargs[key] = _check(key, value, getattr(base, key))
    if "templates" in kwargs:
        kwargs["templates"] = _templates(kwargs["templates"], kwargs.get("model", base.model))
    cfg = StudyConfig(**kwargs)
    validate(cfg)
    return cfg


def _scopes(value: Any, base: StudyConfig) -> list[dict[str, Any]]:
    """The ``[[scope]]`` tables, each key checked against its top-level type (errors name
    ``scope[i].KEY``); which settings they name is checked by :func:`validate`."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise VheadsError(f"config key 'scope' must be an array of tables ([[scope]]), got {value!r:.80}")
    out = []
    for i, sc in enumerate(value):
        where = f"scope[{i}]"
        settings = sc.get("settings")
        if not isinstance(settings, list) or not settings or not all(isinstance(x, str) for x in settings):
            raise VheadsError(f"config key '{where}.settings': a scope needs a non-empty list of setting ids, got {settings!r:.80}")
        got = {"settings": list(settings)}
        for k, v in sc.items():
            if k == "settings":
                continue
            if k not in SCOPE_KEYS:
                raise VheadsError(f"unknown config key '{where}.{k}'; a scope may set: settings, {', '.join(SCOPE_KEYS)}")
            got[k] = _test_controls(v, f"{where}.{k}") if k == "test_controls" else _check(f"{where}.{k}", v, getattr(base, k))
        if len(got) == 1:
            raise VheadsError(f"config key '{where}': sets no key for its settings; add some of {', '.join(SCOPE_KEYS)}")
        out.append(got)
    return out


def _test_controls(value: Any, key: str) -> dict[str, dict[str, int]]:
    """``[test_controls]``: a table per test of ``control = R`` (errors name ``KEY.TEST.CONTROL``)."""
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise VheadsError(f"config key {key!r} must hold a table per test of control = R "
                          f"(e.g. [test_controls.ncs-grid] layer-matched = 100), got {value!r:.80}")
    return {t: {c: _check(f"{key}.{t}.{c}", r, 1) for c, r in v.items()} for t, v in value.items()}


def setting_ids(cfg: StudyConfig) -> list[str]:
    """The ids of every setting the run discovers (the grid's corpus-query-source, then the
    score points) and the causal setting, as the study names them; a strips folder's
    abbreviation is read from its ``strips.json`` (``c<i>`` while a plan cannot read it)."""
    from vheads.causal import CAUSAL_SETTING
    from vheads.discovery import QUERY_ABBREV, SOURCE_ABBREV, corpus_abbrev
    from vheads.study._scores import score_setting_ids

    out = []
    for i, c in enumerate(cfg.corpora):
        try:
            a = corpus_abbrev(c) or ("cm" if c.startswith("comics:") else f"c{i}")
        except VheadsError:  # a strips folder a plan cannot read
            a = f"c{i}"
        out += [f"{a}-{QUERY_ABBREV[q]}-{SOURCE_ABBREV[s]}" for q in cfg.queries for s in cfg.sources
                if q in QUERY_ABBREV and s in SOURCE_ABBREV]
    out += score_setting_ids(cfg)
    if "ncs" in cfg.causal_tests:
        out.append(CAUSAL_SETTING)
    return out


def _validate_scopes(cfg: StudyConfig, bad) -> None:
    """Each ``[[scope]]`` names settings of this run, each setting at most once, and its keys
    pass every check the top-level ones do (the error names ``scope[i].KEY``); ``[items]``
    names tests this run runs, each with 1 to n_eval items."""
    for k, v in cfg.items.items():
        if k not in ITEM_KEYS:
            bad(f"items.{k}", f"unknown test {k!r}; choose from {', '.join(ITEM_KEYS)}")
        if v < 2:
            bad(f"items.{k}", f"must be at least 2 items (a test on more than n_eval runs n_eval), got {v}")
    for t, per in cfg.test_controls.items():
        if t not in TESTS:
            bad(f"test_controls.{t}", f"unknown test {t!r}; choose from {', '.join(TESTS)}")
        for name, R in per.items():
            if name not in cfg.controls:
                bad(f"test_controls.{t}.{name}", f"{name!r} is not one of the configured controls "
                    f"({', '.join(cfg.controls)}); a test's count changes the R of a [controls] entry")
            if not 1 <= R <= MAX_R:
                bad(f"test_controls.{t}.{name}", f"R must be 1 to {MAX_R:,}, got {R}")
            if cfg.controls[name] == 1 and R != 1 and name in ("sinks", "text-heavy"):
                bad(f"test_controls.{t}.{name}", f"{name} is deterministic, so R must be 1, got {R}")
    for t in cfg.k_sweep_tests:
        if t not in ("cers", "ncs"):
            bad("k_sweep_tests", f"the k sweep runs in cers and ncs only, got {t!r}")
    if not cfg.scope:
        return
    import difflib

    ids, seen = setting_ids(cfg), {}
    for i, sc in enumerate(cfg.scope):
        for sid in sc["settings"]:
            if sid not in ids:
                hint = difflib.get_close_matches(sid, ids, n=1)
                bad(f"scope[{i}].settings", f"{sid!r} is no setting of this run"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; its settings: {', '.join(ids)}")
            if sid in seen:
                bad(f"scope[{i}].settings", f"{sid!r} is already in scope[{seen[sid]}]; a setting takes one scope")
            seen[sid] = i
        try:
            validate(cfg.for_setting(sc["settings"][0]))
        except VheadsError as e:
            msg = str(e)
            raise VheadsError(msg.replace("config key '", f"config key 'scope[{i}].", 1) if msg.startswith("config key '")
                              else f"config key 'scope[{i}]': {msg}") from None


def _check_h_reachable(cfg: StudyConfig, data: dict[str, Any]) -> None:
    """An h that a config file sets must not exceed an exchangeable control's R (R_max): the
    default's h leaves a small R fixed (it can never see h draws reach S)."""
    if "controls_h" not in data:
        return
    from vheads.study._sequential import sequential_controls

    for where, c in [("", cfg), *((f"scope[{i}].", cfg.for_setting(sc["settings"][0])) for i, sc in enumerate(cfg.scope))]:
        for name in sequential_controls(c):
            for t in c.tests:
                if c.control_R(t, name) < c.controls_h:
                    key = f"test_controls.{t}.{name}" if name in c.test_controls.get(t, {}) else f"controls.{name}"
                    raise VheadsError(f"config key 'controls_h': h = {c.controls_h} is more than {where}{key}'s R_max = "
                                      f"{c.control_R(t, name)}; raise R to at least h, lower h, or set controls_h = 0 (fixed R)")


def validate(cfg: StudyConfig) -> None:
    """Semantic checks that need no model: names, ranges, folders."""
    from vheads.discovery import QUERIES, SOURCES
    def bad(key, msg):
        raise VheadsError(f"config key {key!r}: {msg}")

    _validate_templates(cfg)
    for q in cfg.queries:
        if q not in QUERIES:
            bad("queries", f"unknown query type {q!r}; choose from {', '.join(QUERIES)}")
    for s in cfg.sources:
        if s not in SOURCES:
            bad("sources", f"unknown attention source {s!r}; choose from {', '.join(SOURCES)}")
    for t in cfg.tests:
        if t not in TESTS:
            bad("tests", f"unknown test {t!r}; choose from {', '.join(TESTS)}")
    if not cfg.controls:
        bad("controls", "is empty: a head-set means something only against controls; e.g. layer-matched = 249")
    _validate_controls(cfg, bad)  # before the keys that name controls, so a misspelt name is named itself
    for c in cfg.row_group_controls:
        if c not in cfg.controls:
            bad("row_group_controls", f"{c!r} is not one of the configured controls ({', '.join(cfg.controls)}); "
                "add it under [controls] or list others here")
    if cfg.metric not in METRICS:
        bad("metric", f"unknown metric {cfg.metric!r}; choose from {', '.join(METRICS)}")
    if cfg.steer_rows not in ROW_GROUPS:
        bad("steer_rows", f"unknown row group {cfg.steer_rows!r}; choose from {', '.join(ROW_GROUPS)}")
    for g in cfg.row_groups:
        if g not in ROW_GROUPS:
            bad("row_groups", f"unknown row group {g!r}; choose from {', '.join(ROW_GROUPS)}")
    for c in cfg.corpora:
        kind, _, rest = c.partition(":")
        if c in ("comics", "photo"):
            continue
        if kind in ("strips", "coco", "comics") and rest:
            folder = Path(rest.split(",")[0])
            if CHECK_PATHS.get() and not folder.is_dir():
                bad("corpora", f"corpus folder {str(folder)!r} does not exist")
            if kind == "strips" and CHECK_PATHS.get():
                from vheads.discovery import strip_folder_names

                try:
                    strip_folder_names(folder)  # strips.json read and checked: names, files, boxes
                except VheadsError as e:
                    bad("corpora", str(e))
            continue
        bad("corpora", f"unknown corpus {c!r}; use comics, photo, strips:FOLDER, comics:FOLDER or coco:IMAGES[,ANNOTATIONS.json]")
    if not cfg.corpora or not cfg.queries or not cfg.sources:
        bad("corpora", "a study needs at least one corpus, query type and source")
    for key in ("n_discovery", "n_eval", "splits"):
        if getattr(cfg, key) < 2:
            bad(key, f"must be at least 2, got {getattr(cfg, key)}")
    if cfg.k < 0:
        bad("k", f"must be 0 (scaled to the model) or positive, got {cfg.k}")
    if cfg.selection not in ("flat", "per-layer"):
        bad("selection", f"must be flat or per-layer, got {cfg.selection!r}")
    if not (math.isfinite(cfg.beta) and cfg.beta > 0):
        bad("beta", f"must be a finite number above 0 (steering adds +beta / -beta to logits), got {cfg.beta}")
    for key in ("beta_sweep_controls", "k_sweep_controls"):
        if getattr(cfg, key) < 0:
            bad(key, f"must be 0 (no controls) or positive, got {getattr(cfg, key)}")
    if cfg.beta_sweep and cfg.beta_sweep_controls and "layer-matched" not in cfg.controls:
        bad("beta_sweep_controls", "the beta sweep re-runs the first layer-matched draws at every beta, but "
            "[controls] has no layer-matched; add it or set beta_sweep_controls = 0")
    from vheads.study._headline import parse_beta_rule

    try:
        parse_beta_rule(cfg.beta_rule)
    except ValueError as e:
        bad("beta_rule", str(e))
    _validate_eval_source(cfg, bad)
    _validate_ood(cfg, bad)
    from vheads.study._scores import validate_scores

    validate_scores(cfg, bad)
    if cfg.run.backend not in ("local", "ray"):
        bad("run.backend", f"must be local or ray, got {cfg.run.backend!r}")
    if cfg.run.shard_size < 1 or cfg.run.batch_size < 1 or cfg.run.ray_workers < 1 or cfg.run.token_budget < 1:
        bad("run", "shard_size, batch_size, token_budget and ray_workers must be positive")
    if cfg.dtype not in DTYPES:
        bad("dtype", f"unknown dtype {cfg.dtype!r}")
    _validate_more(cfg, bad)
    _validate_scopes(cfg, bad)
    _validate_models(cfg, bad)
    if CHECK_PATHS.get():  # not for a plan (vheads plan): no device or data is used
        _validate_loading(cfg, bad)


def _validate_controls(cfg: StudyConfig, bad) -> None:
    """Every ``[controls]`` entry: a known control (the error names ``controls.NAME``) with a
    number of draws R it can take."""
    from vheads.evaluation import get_control, split_control_name

    for name, R in cfg.controls.items():
        try:
            ctl = get_control(split_control_name(name)[0])
        except ValueError as e:
            bad(f"controls.{name}", str(e))
        if R < 1:
            bad(f"controls.{name}", f"R must be at least 1, got {R}")
        if R > MAX_R:
            bad(f"controls.{name}", f"R = {R} draws is more than {MAX_R:,}")
        if not ctl.random and R != 1:
            bad(f"controls.{name}", f"{name} is deterministic, so R must be 1, got {R}")


#: the study's default ``ablation``: the seed's mask, and ``zero`` beside it wherever the study runs NCS
DEFAULT_ABLATION = ["attention", "zero"]


def validate_ablation(cfg: StudyConfig, bad) -> None:
    """An unknown name, or a head-output ablation without NCS to run it in, names the key
    (the ablations themselves: :mod:`vheads.study._ablation`)."""
    from vheads.evaluation import ABLATIONS  # torch-free

    for a in cfg.ablation:
        if a not in ABLATIONS:
            bad("ablation", f"unknown ablation {a!r}; choose from {', '.join(ABLATIONS)}")
    # the default's zero ablation runs where the study runs NCS; one the config names needs NCS
    if cfg.ablation != DEFAULT_ABLATION and any(a != "attention" for a in cfg.ablation) and ("ncs" not in cfg.tests or not cfg.row_groups):
        bad("ablation", "the head-output ablations run NCS; add 'ncs' to tests (with a row group) or set ablation = [\"attention\"]")


def _validate_more(cfg: StudyConfig, bad) -> None:
    """Checks that keep a run from stopping half-made: every one runs before the run folder exists."""

    for key in ("corpora", "queries", "sources", "tests", "row_groups", "row_group_controls", "ablation"):
        values = getattr(cfg, key)
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            bad(key, f"{twice[0]!r} is listed twice")
    if not cfg.tests:
        bad("tests", f"is empty: the study would compute nothing; list some of {', '.join(TESTS)}")
    if "ncs" in cfg.tests and not cfg.row_groups:
        bad("row_groups", f"is empty but tests include 'ncs'; list some of {', '.join(ROW_GROUPS)}")
    validate_ablation(cfg, bad)  # after tests and row_groups: the head-output ablations run NCS
    if cfg.seed < 0:
        bad("seed", f"must be 0 or positive, got {cfg.seed}")
    for key in ("n_discovery", "n_eval", "splits"):
        if getattr(cfg, key) > MAX_ITEMS:
            bad(key, f"{getattr(cfg, key)} is more than {MAX_ITEMS:,}")
    from vheads.causal import check_causal_tests

    check_causal_tests(cfg.causal_tests)
    from vheads.causal import METHODS

    if cfg.causal_subsets != 0 and not 2 <= cfg.causal_subsets <= 1_000_000:
        bad("causal_subsets", f"must be 0 (no regression map) or the design's subsets (at least the heads + 1), got {cfg.causal_subsets}")
    if cfg.causal_method not in METHODS:
        bad("causal_method", f"unknown method {cfg.causal_method!r}; choose from {', '.join(METHODS)}")
    elif cfg.causal_method == "regression" and not cfg.causal_subsets:
        bad("causal_method", "'regression' needs a design: set causal_subsets (e.g. 256)")
    if cfg.controls_h < 0:
        bad("controls_h", f"must be 0 (every one of R controls) or h >= 1 (stop once h controls reach S), got {cfg.controls_h}")
    if not 1 <= cfg.controls_batch <= MAX_R:
        bad("controls_batch", f"must be 1 to {MAX_R:,} control draws per round, got {cfg.controls_batch}")
    if not 0 <= cfg.algebra_controls <= MAX_R:
        bad("algebra_controls", f"must be 0 (skip) to {MAX_R:,} layer-matched draws, got {cfg.algebra_controls}")
    for kk in cfg.k_sweep:
        if kk < 1:
            bad("k_sweep", f"head-set sizes must be at least 1, got {kk}")
    if len(set(cfg.k_sweep)) < len(cfg.k_sweep):
        bad("k_sweep", f"lists a size twice: {cfg.k_sweep}")
    for b in cfg.beta_sweep:
        if not (math.isfinite(b) and b > 0):
            bad("beta_sweep", f"must hold finite numbers above 0, got {b}")
    if len(set(cfg.beta_sweep)) < len(cfg.beta_sweep):
        bad("beta_sweep", f"lists a beta twice: {cfg.beta_sweep}")
    if cfg.run.torch_threads < 0:
        bad("run.torch_threads", f"must be 0 (all cores) or positive, got {cfg.run.torch_threads}")
    if any(c.startswith("strips:") for c in cfg.corpora):
        from vheads.discovery import corpus_abbrev

        seen: dict[str, str] = {}
        for c in cfg.corpora:
            a = corpus_abbrev(c)
            if a is not None and seen.setdefault(a, c) != c:
                bad("corpora", f"{seen[a]} and {c} share the setting-id abbreviation {a!r}; set 'abbrev' in a strips.json")


def check_ray_device(device: str) -> None:
    """A Ray replica sees only the GPU Ray gave it, as ``cuda:0`` (``CUDA_VISIBLE_DEVICES``):
    ``cuda:N`` would name a GPU it cannot see, or every replica's own GPU by accident."""
    if device.startswith("cuda:"):
        raise VheadsError(f"device {device!r} names one GPU, but on Ray each replica gets a GPU of its own (Ray picks it); "
                          'set device = "cuda"')


def _validate_loading(cfg: StudyConfig, bad) -> None:
    """Device and loading options: the one check that imports torch (it asks torch what this
    machine has), so it runs after every other check and a typo elsewhere is refused at once."""
    if cfg.run.backend == "local":  # Ray workers may have devices the driver lacks
        from vheads.models import check_device, check_load_options

        try:
            check_device(cfg.device)
        except VheadsError as e:
            bad("device", str(e))
        try:
            check_load_options(cfg.device, cfg.device_map or None, cfg.quantization or None)
        except VheadsError as e:
            bad("quantization" if cfg.quantization else "device_map", str(e))
    else:
        import torch

        try:
            torch.device(cfg.device)
        except (RuntimeError, ValueError, TypeError):
            bad("device", f"{cfg.device!r} is not a torch device; use cpu, cuda or mps (on Ray: no cuda:N)")
        try:
            check_ray_device(cfg.device)
        except VheadsError as e:
            bad("device", str(e))


# ---- several models in one study -------------------------------------------------------------

#: the keys of one entry of ``models = [...]``; revision, dtype and device default to the
#: study's top-level keys, every other key (items, controls, seeds, ...) is the study's
MODEL_KEYS = ("name", "model", "revision", "dtype", "device", "device_map", "quantization", "trust_remote_code",
              "system_prompt", "chat_template")
#: the keys of a models entry that fall back to the top-level key of the same name
MODEL_LOADING_KEYS = MODEL_KEYS[2:]


@dataclass(frozen=True)
class ModelEntry:
    """One model of a multi-model study; ``name`` (a safe name) scopes its rows in the store
    and names its report folder ``models/<name>/``."""

    name: str
    model: str
    revision: str
    dtype: str
    device: str
    device_map: str = ""
    quantization: str = ""
    trust_remote_code: bool = False
    system_prompt: str = ""
    chat_template: str = ""


def model_entries(cfg: StudyConfig) -> list[ModelEntry]:
    """The study's ``models`` entries, checked (one error naming the entry) and completed
    with the top-level revision / dtype / device / loading options; ``[]`` for a single-model study."""
    out: list[ModelEntry] = []
    for i, e in enumerate(cfg.models):
        key = f"models[{i}]"
        if not isinstance(e, dict):
            raise VheadsError(f"config key {key!r}: expected a table {{ name = ..., model = ... }}, got {e!r:.80}")
        for k, v in e.items():
            if k not in MODEL_KEYS:
                raise VheadsError(f"unknown config key '{key}.{k}'; an entry of 'models' takes {', '.join(MODEL_KEYS)}")
            want = bool if k == "trust_remote_code" else str
            if not isinstance(v, want):
                raise VheadsError(f"config key '{key}.{k}': expected {want.__name__}, got {type(v).__name__} {v!r:.80}")
        for k in ("name", "model"):
            if not e.get(k):
                raise VheadsError(f"config key {key!r}: needs {k!r} (e.g. {{ name = \"tiny\", model = \"tiny\" }})")
        name = safe_name(e["name"], f"config key '{key}.name'")
        if any(m.name == name for m in out):
            raise VheadsError(f"config key 'models': the name {name!r} is used twice; give every model its own name")
        loading = {k: e.get(k, getattr(cfg, k)) for k in MODEL_LOADING_KEYS}
        if loading["dtype"] == "auto":
            from vheads._device import default_dtype

            loading["dtype"] = default_dtype(loading["device_map"] or loading["device"])
        entry = ModelEntry(name, e["model"], **loading)
        twin = next((m for m in out if _same_model(m, entry)), None)
        if twin is not None:  # the same model twice: every cross-model table would compare it with itself
            raise VheadsError(f"config key 'models': {key} ({name!r}) loads model {entry.model!r} exactly as {twin.name!r} "
                              "does (same revision, dtype and loading options); list each model once")
        out.append(entry)
    return out


def _same_model(a: ModelEntry, b: ModelEntry) -> bool:
    """Two entries that load the same weights the same way (the device aside: it changes
    only float rounding)."""
    return all(getattr(a, k) == getattr(b, k) for k in ("model", *MODEL_LOADING_KEYS) if k != "device")


def model_config(cfg: StudyConfig, entry: ModelEntry) -> StudyConfig:
    """The single-model study of one entry: what a run of that model alone would use."""
    return replace(cfg, model=entry.model, models=[], **{k: getattr(entry, k) for k in MODEL_LOADING_KEYS})


def _validate_models(cfg: StudyConfig, bad) -> None:
    """``models``: entries, names, dtypes, devices and loading options (loading itself is
    checked by the runner)."""
    if not cfg.models:
        return
    if cfg.model != StudyConfig.model:
        bad("model", f"is {cfg.model!r} but 'models' is set too; name every model in 'models' and drop 'model'")
    entries = model_entries(cfg)
    for i, e in enumerate(entries):
        if e.dtype not in DTYPES:
            bad(f"models[{i}].dtype", f"unknown dtype {e.dtype!r}")
    for i, e in enumerate(entries):
        if any(getattr(e, k) != getattr(cfg, k) for k in MODEL_LOADING_KEYS):
            try:
                _validate_loading(model_config(cfg, e), bad)
            except VheadsError as err:
                raise VheadsError(f"{err} (in models[{i}], {e.name!r})") from None


def validate_for_model(cfg: StudyConfig, n_layers: int, n_heads: int, attention_layers: tuple[int, ...] | None = None) -> None:
    """Checks that need the model's shape (read from its config, no weights): ``k`` and
    ``k_sweep`` within the model's heads, and the head count N of every ``random-n@N``
    control within the heads it draws from (all heads, or those of ``attention_layers``)."""
    from vheads.discovery import resolve_k
    from vheads.evaluation import split_control_name

    for key, ks in (("k", [cfg.k or None]), ("k_sweep", cfg.k_sweep)):
        for kk in ks:
            try:
                resolve_k(n_layers, n_heads, kk, cfg.selection)
            except VheadsError as e:
                raise VheadsError(f"config key {key!r}: {e}") from None
    total = n_heads * (n_layers if attention_layers is None else len(attention_layers))
    for name in cfg.controls:
        n = split_control_name(name)[1]
        if n is not None and n > total:
            raise VheadsError(f"config key 'controls.{name}': draws {n} heads, but the model has {total} "
                              f"({n_layers} layers x {n_heads} heads{'' if attention_layers is None else ', softmax layers only'})")


def _validate_eval_source(cfg: StudyConfig, bad) -> None:
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


def _validate_templates(cfg: StudyConfig) -> None:
    """Templates checked (again: a config built in code skips :func:`config_from_dict`), and
    on the built-in tiny model, whose vocabulary is word-level, every word of every question
    the synthetic items can ask, and of the system prompt, must be one it knows."""
    from vheads.data import TemplateError, check_vocabulary

    _templates(cfg.templates, cfg.model)
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


def _validate_ood(cfg: StudyConfig, bad) -> None:
    """Pointing-suite tasks: known task names, existing paths, one entry per task."""
    from vheads.data.ood import TASKS, is_task_spec

    seen = set()
    for spec in cfg.ood_tasks:
        if not isinstance(spec, str) or not is_task_spec(spec):
            bad("ood_tasks", f"{spec!r} is not TASK:PATH with TASK one of {', '.join(TASKS)}")
        task, _, arg = spec.partition(":")
        if task in seen:
            bad("ood_tasks", f"task {task!r} is listed twice")
        seen.add(task)
        if CHECK_PATHS.get() and not Path(arg.split(",")[0]).exists():
            bad("ood_tasks", f"{task}: path {arg.split(',')[0]!r} does not exist")
    if cfg.n_ood < 2:
        bad("n_ood", f"must be at least 2, got {cfg.n_ood}")
    if cfg.ood_controls < 0 or (cfg.ood_controls and cfg.ood_controls > cfg.controls.get("layer-matched", 0)):
        bad("ood_controls", f"must be between 0 and the layer-matched R ({cfg.controls.get('layer-matched', 0)}), got {cfg.ood_controls}")


def load_config(path: str | Path | None = None, **overrides) -> StudyConfig:
    """The default config, or the TOML file at ``path``, with ``overrides`` applied (a refused
    key is named with the file)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"config file {str(p)!r} does not exist" + (" (it is a folder)" if p.is_dir() else ""))
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise VheadsError(f"config file {str(p)!r} is not valid TOML: {e}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("model") is not None:  # a model given on the command line replaces the config's models
        data.pop("models", None)
    try:
        cfg = config_from_dict(data)
        _check_h_reachable(cfg, data)
        return cfg
    except VheadsError as e:  # every refusal of a key names the file it is in
        if path is None:
            raise
        raise type(e)(f"config file {str(path)!r}: {e}") from None


def load_config_for_plan(path: str | Path | None = None, **overrides) -> StudyConfig:
    """:func:`load_config` with every check but those of data paths and the device: a plan
    (``vheads plan``) is made on a machine that need not hold the data or the GPU."""
    token = CHECK_PATHS.set(False)
    try:
        return load_config(path, **overrides)
    finally:
        CHECK_PATHS.reset(token)
