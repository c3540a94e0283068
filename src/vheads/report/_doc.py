"""The report as data (sections of tables, figures, checklists, paragraphs) and its two
renderings: Markdown (``report.md``, figures as files) and one self-contained HTML page
(``report.html``: CSS inline, figures as ``data:`` URIs, no external reference).

Cell text may carry ``**bold**`` (a significant or flagged value) and in-page links
``[text](#section-id)``; Markdown keeps both, HTML turns them into ``<strong>`` and ``<a>``.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

_BOLD = re.compile(r"\*\*(.+?)\*\*")
WRAP_AT = 40  # a table cell longer than this many characters wraps (a reading, a list), numbers never do
_ANCHOR_LINK = re.compile(r"\[([^\]]+)\]\((#[A-Za-z0-9_-]+)\)")  # [text](#section-id): an in-page link


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    groups: list[tuple[str, int]] | None = None  # header groups over the columns: (label, span)
    flagged_rows: set[int] = field(default_factory=set)  # rows drawn highlighted (a warning)
    text_cols: int = 1  # leading columns that hold names (left-aligned), the rest numbers
    folded: bool = False  # a long list of cases: closed under its title in the HTML (<details>)
    wrap: bool = False  # the value cells hold a word and its numbers ("yes (0.42, z 3.1)"): they wrap in the HTML


@dataclass
class Figure:
    name: str  # file stem under figures/
    png: bytes
    caption: str
    wide: bool = True
    max_width: int | None = None  # px in the HTML page


@dataclass
class Check:
    """One line of the reporting-protocol checklist; ``warning`` set where the run falls short."""

    item: str
    value: str
    warning: str | None = None  # one line: what, how many, which key to change
    cases: Table | None = None  # a long list of cases, shown as a (folded) table after the checklist


@dataclass
class Section:
    id: str
    title: str
    how_to_read: str
    blocks: list = field(default_factory=list)  # Table | Figure | list[Check] | str (a paragraph)


# ---- Markdown -------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    cols = list(t.columns)
    if t.groups and sum(1 for label, _ in t.groups if label) > 1:  # flatten group labels into the column names
        named, i = [], 0
        for label, span in t.groups:
            for c in cols[i:i + span]:
                named.append(f"{label} · {c}" if label else c)
            i += span
        cols = named + cols[i:]
    lines = [f"**{t.title}**", ""]
    lines.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for i, row in enumerate(t.rows):
        cells = [_md_cell(c) for c in row]
        if i in t.flagged_rows:
            cells[0] = "⚠ " + cells[0]
        lines.append("| " + " | ".join(cells) + " |")
    if t.caption:
        lines += ["", f"_{t.caption}_"]
    return "\n".join(lines)


def render_markdown(title: str, subtitle: str, warnings: list[str], sections: list[Section]) -> str:
    out = [f"# {title}", "", subtitle, ""]
    if warnings:
        out += ["> **Warnings — where this run falls short of the reporting protocol**", ">"]
        out += [f"> - ⚠ {w}" for w in warnings]
        out.append("")
    out += ["## Contents", ""] + [f"- [{s.title}](#{s.id})" for s in sections] + [""]
    for s in sections:
        out += [f'<a id="{s.id}"></a>', "", f"## {s.title}", "", f"*How to read this.* {s.how_to_read}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                out += [table_markdown(b), ""]
            elif isinstance(b, Figure):
                out += [f"![{b.caption}](figures/{b.name}.png)", "", f"_{b.caption}_", ""]
            elif isinstance(b, list):
                out += ["| | Item | This run |", "|---|---|---|"]
                for c in b:
                    mark = "⚠" if c.warning else "✓"
                    val = _md_cell(c.value) + (f" — **{_md_cell(c.warning)}**" if c.warning else "")
                    out.append(f"| {mark} | {_md_cell(c.item)} | {val} |")
                out.append("")
            else:
                out += [str(b), ""]
    return "\n".join(out)


# ---- HTML -----------------------------------------------------------------------------------

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d2329; margin: 0;
       background: #f6f7f9; line-height: 1.45; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 32px 64px; background: #fff; }
h1 { font-size: 26px; margin: 8px 0 4px; } h2 { font-size: 20px; margin-top: 36px; border-bottom: 2px solid #e3e6ea;
     padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #56616d; margin-bottom: 16px; }
.warnbox { background: #fff4e5; border: 1px solid #f0b45b; border-left: 6px solid #e08a00; padding: 10px 16px;
           margin: 16px 0; border-radius: 4px; }
.warnbox h3 { margin: 2px 0 6px; color: #8a4b00; } .warnbox li { margin: 3px 0; }
.okbox { background: #eef8ee; border: 1px solid #9ccc9c; padding: 8px 16px; border-radius: 4px; }
.how { background: #f1f5fb; border-left: 4px solid #6b8fc7; padding: 8px 14px; margin: 8px 0 14px;
       font-size: 14px; color: #2d3a4a; }
nav ul { columns: 3; font-size: 14px; } nav a { color: #2457a6; text-decoration: none; }
.tbl { overflow-x: auto; margin: 10px 0 4px; }
table { border-collapse: collapse; font-size: 12.5px; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; font-size: 14px; padding: 4px 0 6px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e6e8eb; white-space: nowrap; text-align: right; }
th { background: #f3f4f6; font-weight: 600; white-space: normal; vertical-align: bottom; min-width: 3em; }
td.l { white-space: normal; min-width: 8em; } td.v { white-space: normal; min-width: 5.5em; } td.w { white-space: normal; min-width: 16em; text-align: left; } th.l, td.l { text-align: left; } th.grp { text-align: center; border-bottom: 2px solid #c9ced4; }
td:first-child, th:first-child { text-align: left; font-family: ui-monospace, Menlo, Consolas, monospace; }
tr.flag td { background: #fdecea; } tr.gs td { border-top: 2px solid #c9ced4; } td strong { color: #0b5a2a; }
tr.flag td strong { color: #a11b0c; }
.cap { font-size: 12.5px; color: #56616d; max-width: 1100px; margin: 2px 0 14px; }
details.cases { margin: 8px 0; } details.cases summary { cursor: pointer; font-weight: 600; font-size: 14px; }
figure { margin: 14px 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eceef1; box-sizing: border-box; }
figcaption { font-size: 12.5px; color: #56616d; max-width: 1100px; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 8px 20px; }
.grid figure { margin: 6px 0; }
table.check td, table.check th { white-space: normal; text-align: left; vertical-align: top; }
table.check td:first-child { font-family: inherit; width: 22px; text-align: center; }
table.check td.w { color: #a11b0c; } tr.warn td { background: #fff4e5; }
.mark-ok { color: #1f7a3a; font-weight: 700; } .mark-w { color: #c25e00; font-weight: 700; }
"""


def _h(text: str) -> str:
    """Cell or paragraph text as HTML: escaped, ``**bold**`` and in-page ``[text](#id)`` links kept."""
    out = _BOLD.sub(r"<strong>\1</strong>", html.escape(str(text)))
    return _ANCHOR_LINK.sub(r'<a href="\2">\1</a>', out)


def table_html(t: Table) -> str:
    parts = ['<div class="tbl"><table>', f"<caption>{_h(t.title)}</caption>", "<thead>"]
    if t.groups:
        used = sum(span for _, span in t.groups)
        cells = [f'<th class="grp" colspan="{span}">{_h(label)}</th>' for label, span in t.groups]
        cells += ["<th></th>"] * (len(t.columns) - used)
        parts.append("<tr>" + "".join(cells) + "</tr>")
    def cell(tag: str, j: int, text: str) -> str:
        if j < t.text_cols:
            return f'<{tag} class="l">{_h(text)}</{tag}>'
        if t.wrap and tag == "td":  # a verdict and its numbers: wraps between them
            return f'<{tag} class="v">{_h(text)}</{tag}>'
        if len(str(text)) > WRAP_AT:  # a sentence in a column of numbers: wraps
            return f'<{tag} class="w">{_h(text)}</{tag}>'
        return f"<{tag}>{_h(text)}</{tag}>"

    parts.append("<tr>" + "".join(cell("th", j, c) for j, c in enumerate(t.columns)) + "</tr></thead><tbody>")
    for i, row in enumerate(t.rows):
        classes = (["flag"] if i in t.flagged_rows else []) + (["gs"] if i and t.text_cols > 1 and row[0] else [])
        cls = f' class="{" ".join(classes)}"' if classes else ""
        parts.append(f"<tr{cls}>" + "".join(cell("td", j, c) for j, c in enumerate(row)) + "</tr>")
    parts.append("</tbody></table></div>")
    if t.caption:
        parts.append(f'<div class="cap">{_h(t.caption)}</div>')
    if t.folded:
        return (f'<details class="cases"><summary>{_h(t.title)} ({len(t.rows)} rows)</summary>'
                + "".join(parts) + "</details>")
    return "".join(parts)


def figure_html(f: Figure) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    style = f' style="width: {f.max_width}px; max-width: 100%"' if f.max_width else ""
    return (f'<figure><img alt="{html.escape(f.name)}"{style} src="data:image/png;base64,{data}">'
            f"<figcaption>{_h(f.caption)}</figcaption></figure>")


def checklist_html(checks: list[Check]) -> str:
    rows = []
    for c in checks:
        if c.warning:
            rows.append(f'<tr class="warn"><td class="mark-w">⚠</td><td>{_h(c.item)}</td><td>{_h(c.value)}</td>'
                        f'<td class="w">{_h(c.warning)}</td></tr>')
        else:
            rows.append(f'<tr><td class="mark-ok">✓</td><td>{_h(c.item)}</td><td>{_h(c.value)}</td><td></td></tr>')
    return ('<div class="tbl"><table class="check"><thead><tr><th></th><th>Item</th><th>This run</th>'
            "<th>Falls short</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def render_html(title: str, subtitle: str, warnings: list[str], sections: list[Section]) -> str:
    body = [f"<h1>{_h(title)}</h1>", f'<div class="sub">{_h(subtitle)}</div>']
    if warnings:
        body.append('<div class="warnbox"><h3>⚠ Where this run falls short of the reporting protocol</h3><ul>'
                    + "".join(f"<li>{_h(w)}</li>" for w in warnings) + "</ul></div>")
    else:
        body.append('<div class="okbox">✓ The run meets every item of the reporting protocol checked below.</div>')
    body.append("<nav><ul>" + "".join(f'<li><a href="#{s.id}">{_h(s.title)}</a></li>' for s in sections) + "</ul></nav>")
    for s in sections:
        body.append(f'<section id="{s.id}"><h2>{_h(s.title)}</h2><div class="how"><b>How to read this.</b> '
                    f"{_h(s.how_to_read)}</div>")
        i = 0
        blocks = s.blocks
        while i < len(blocks):
            b = blocks[i]
            if isinstance(b, Figure) and not b.wide:  # consecutive narrow figures share a grid
                j = i
                while j < len(blocks) and isinstance(blocks[j], Figure) and not blocks[j].wide:
                    j += 1
                body.append('<div class="grid">' + "".join(figure_html(f) for f in blocks[i:j]) + "</div>")
                i = j
                continue
            if isinstance(b, Table):
                body.append(table_html(b))
            elif isinstance(b, Figure):
                body.append(figure_html(b))
            elif isinstance(b, list):
                body.append(checklist_html(b))
            else:
                body.append(f"<p>{_h(b)}</p>")
            i += 1
        body.append("</section>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body><main>"
            + "\n".join(body) + "</main></body></html>")
