"""The documented default config, ``vheads study --print-config``: generated from the stages'
keys (:class:`vheads.study._stage.Key`: each key's default and help, written once there).

:data:`LAYOUT` says only where each key is printed, between the page's headings; a key
that no line of it names (a new stage's) is printed after the evaluation keys, so a new
stage's keys show up without an edit here. A line is ``name = value`` and the key's help
as a comment at column :data:`COMMENT_COLUMN` (or :attr:`Key.gap` spaces after a longer
line); a table key (a dict default) prints as ``[name]`` with its default entries below.
"""

from __future__ import annotations

import json

from vheads.study._stage import Key, stage_keys

COMMENT_COLUMN = 26
#: the page's order: a key's name, ``None`` (every key no other entry names), or a literal line
LAYOUT = (
    "# vheads study configuration. Every key is optional; these are the defaults.", "",
    "model", "revision", "dtype", "device", "device_map", "quantization", "trust_remote_code", "system_prompt",
    "chat_template", "models", "",
    "# discovery: settings = corpora x queries x sources (12 in the full design)",
    "corpora", "queries", "sources", "n_discovery", "k", "selection", "splits", "scores", "score_on", "",
    "# evaluation",
    "tests", "n_eval", "beta", "beta_rule", "steer_rows", "metric", "row_groups", "row_group_controls", "ablation", "beta_sweep",
    "beta_sweep_controls", "k_sweep", "k_sweep_controls", "k_sweep_tests", "seed", "eval_source", "eval_classes", "eval_exclude",
    "eval_groups", "eval_cell", "eval_resize", "ood_tasks", "n_ood", "ood_controls", "algebra_controls", "controls_h",
    "controls_batch", "causal_tests", "causal_subsets", "causal_method", None, "",
    "items", "", "test_controls", "", "scope", "", "controls", "", "run", "", "templates",
)
#: what each template asks, as the [templates] comments say it
TEMPLATE_USES = {"ordinal": "discovery, ordinal query; {k} = panel 1..6",
                 "referring": "discovery, referring query; {object} = asked object",
                 "cell": "NCS_grid and the audit's oracle / floor; {k} = cell 0..3",
                 "object": "CERS grids and the NCS arms; no placeholder", "text": "text arm"}


def toml_value(v) -> str:
    """``v`` as TOML writes it on one line."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no one-line TOML for {v!r}")


def commented(left: str, help: str, key: Key | None = None) -> list[str]:
    """``left`` with ``help`` as its comment (continued lines under the comment column)."""
    if not help:
        return [left]
    gap = key.gap if key is not None else 3
    first, *more = help.split("\n")
    pad = COMMENT_COLUMN - len(left) if len(left) < COMMENT_COLUMN else gap
    cont = (key.cont if key is not None else " ") + " " * (COMMENT_COLUMN - 1)
    return [f"{left}{' ' * pad}# {first}", *(f"{cont}# {line}" for line in more)]


def key_lines(key: Key, tables: dict[str, list[Key]]) -> list[str]:
    """The lines of one key: its line (or table), then its example."""
    lines: list[str] = []
    if key.name in tables:  # [run]: the keys of that table
        lines.append(f"[{key.name}]")
        for k in tables[key.name]:
            lines += commented(f"{k.name} = {toml_value(k.default)}", k.help, k)
    elif isinstance(key.default, dict):
        lines += commented(f"[{key.name}]", key.help, key)
        if key.name != "templates":
            for name, v in key.default.items():
                lines += commented(f"{name} = {toml_value(v)}", key.entries.get(name, ""), key)
    elif key.line:
        lines += commented(f"{key.name} = {toml_value(key.default)}", key.help, key)
    if key.example:
        lines += key.example.split("\n")
    return lines


def toml_keys() -> tuple[list[Key], dict[str, list[Key]]]:
    """The top-level keys (the ``run`` table among them as a key of its own) and the keys of
    each table, in the order the stages register them."""
    top = stage_keys("")
    tables: dict[str, list[Key]] = {}
    for k in [k for s in _stages() for k in s.keys if k.table]:
        tables.setdefault(k.table, []).append(k)
    return top + [Key(t, {}, "", line=False) for t in tables], tables


def _stages():
    from vheads.study._stage import registered_stages

    return registered_stages()


def printed_order() -> list[str]:
    """Every top-level key's name in the order the page prints them."""
    top, _ = toml_keys()
    named = [e for e in LAYOUT if e is not None and e in {k.name for k in top}]
    rest = [k.name for k in top if k.name not in named]
    out: list[str] = []
    for e in LAYOUT:
        if e is None:
            out += rest
        elif e in named:
            out.append(e)
    return out


def template_lines(model: str) -> list[str]:
    """The ``[templates]`` comments: the question set that applies to ``model``."""
    from vheads.data import default_templates, templates_name

    base = default_templates(model)
    if templates_name(model) == "tiny":
        lines = ['# question set "tiny": the built-in tiny model\'s word-level questions (any other model: "natural"; '
                 'see --print-config --model M)']
    else:
        lines = [f'# question set "natural": natural-language questions, for model = {json.dumps(model)} '
                 "(the built-in tiny model keeps its word-level ones)"]
    return lines + [f"# {k} = {json.dumps(v)}   # {TEMPLATE_USES[k]}" for k, v in base.to_dict().items()]


def default_toml(model: str = "tiny") -> str:
    """The documented default config, its ``[templates]`` comments showing the question set
    that applies to ``model`` (the built-in tiny model's word-level questions, or the
    natural-language ones of any other model)."""
    top, tables = toml_keys()
    by_name = {k.name: k for k in top}
    lines: list[str] = []
    for e in LAYOUT:
        if e is None:
            for name in printed_order():
                if name not in LAYOUT:
                    lines += key_lines(by_name[name], tables)
        elif e in by_name:
            lines += key_lines(by_name[e], tables)
            if e == "templates":
                lines += template_lines(model)
        elif e == "" or e.startswith("#"):
            lines.append(e)
    return "\n".join(lines) + "\n"
