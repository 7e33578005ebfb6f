"""One self-contained HTML page: the figures' specs, the Vega libraries inline, nothing fetched.

Every user string (job ids, labels, op names, group descriptions) goes through `escape` into the
HTML, and the specs go into a JSON script block with `<`, `>` and `&` escaped, so no value from a
trace can end the block or become markup. A Content-Security-Policy forbids the page any network
access (connect-src, img-src, font-src: none from outside).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.report.format import Num, Sentence, round_float

VENDOR = Path(__file__).resolve().parent / "vendor"
SCRIPTS = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'"
)


@dataclass
class Figure:
    """A chart (or a note that there is no data for it), the sentence above it and the queries behind it."""

    key: str
    title: str
    headline: list[Sentence]
    spec: dict[str, Any] | None = None
    empty: str | None = None
    queries: list[str | tuple[str, dict[str, Any]]] = field(default_factory=list)  # name, or (name, params)
    after: str = ""  # extra HTML below the chart (already escaped), e.g. a table
    replay_job: str | None = None  # the figure shows this job replayed as flows (`tracekit replay`)


@dataclass
class Section:
    key: str
    title: str
    intro: list[Sentence] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    html: str = ""  # extra HTML at the end of the section (already escaped)


@dataclass
class Document:
    title: str
    subtitle: list[str]
    lead: list[Sentence]
    sections: list[Section]
    dataset_arg: str  # how the figure captions name the dataset in `tracekit query NAME DATASET`
    footer: str
    caption_note: str = ""  # after each caption's commands, e.g. that they read the whole dataset


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def sentence_html(sentence: Sentence) -> str:
    out = []
    for part in sentence:
        if isinstance(part, Num):
            exact = round_float(part.value) if isinstance(part.value, float) else part.value
            value = json.dumps(exact, default=str)
            attributes = f'data-key="{escape(part.key)}" data-value="{escape(value)}"'
            out.append(f'<span class="num" {attributes}>{escape(part.text)}</span>')
        else:
            out.append(escape(part))
    return "".join(out)


def paragraphs(sentences: list[Sentence], cls: str) -> str:
    return "".join(f'<p class="{cls}">{sentence_html(s)}</p>' for s in sentences if s)


def script_json(data: object) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' that could close it or open a comment."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    for char, code in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, code)
    return text


def slug(text: str) -> str:
    """An HTML id for a job: readable, and unique through a hash of the whole name."""
    import hashlib

    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in text)[:40] + f"-{digest}"


def table_html(headers: list[str], rows: list[list[str]], numeric: set[int], cls: str = "data") -> str:
    """A table of already-formatted cell texts (escaped here)."""
    head = "".join(f'<th class="{"n" if i in numeric else ""}">{escape(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"n" if i in numeric else ""}">{escape(c)}</td>' for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure_html(figure: Figure, number: int, doc: Document, specs: dict[str, Any]) -> str:
    parts = [f'<figure id="{escape(figure.key)}">', f"<h3>Figure {number}. {escape(figure.title)}</h3>"]
    parts.append(paragraphs(figure.headline, "headline"))
    if figure.spec is not None:
        specs[figure.key] = figure.spec
        parts.append(f'<div class="chart" data-spec="{escape(figure.key)}"></div>')
    else:
        parts.append(f'<p class="nodata">No data: {escape(figure.empty or "nothing to show.")}</p>')
    parts.append(figure.after)
    commands = [query_command(q, doc.dataset_arg) for q in figure.queries]
    if figure.replay_job is not None:
        commands.append(replay_command(figure.replay_job, doc.dataset_arg))
    if commands:
        shown = " · ".join(f"<code>{escape(c)}</code>" for c in commands)
        parts.append(f"<figcaption>Data: {shown}{escape(doc.caption_note)}</figcaption>")
    parts.append("</figure>")
    return "".join(parts)


def query_command(query: str | tuple[str, dict[str, Any]], dataset_arg: str) -> str:
    """The shell command that prints a figure's numbers: `tracekit query NAME DATASET --param k=v`."""
    import shlex

    name, params = (query, {}) if isinstance(query, str) else query
    words = ["tracekit", "query", name, *([dataset_arg] if dataset_arg else [])]
    for key, value in params.items():
        words += ["--param", f"{key}={value}"]
    return shlex.join(words)


def replay_command(job: str, dataset_arg: str) -> str:
    """The shell command that writes a job's flows and traffic matrices: `tracekit replay DATASET --job J`."""
    import shlex

    return shlex.join(["tracekit", "replay", dataset_arg or "DATASET", "--job", job, "-o", "replay-out"])


def render(doc: Document) -> str:
    specs: dict[str, Any] = {}
    body: list[str] = []
    toc: list[str] = []
    number = 0
    for section in doc.sections:
        toc.append(f'<li><a href="#{escape(section.key)}">{escape(section.title)}</a></li>')
        body.append(f'<section id="{escape(section.key)}"><h2>{escape(section.title)}</h2>')
        body.append(paragraphs(section.intro, "intro"))
        for figure in section.figures:
            number += 1
            body.append(_figure_html(figure, number, doc, specs))
        body.append(section.html)
        body.append("</section>")
    scripts = "".join(f"<script>{(VENDOR / name).read_text(encoding='utf-8')}</script>" for name in SCRIPTS)
    return "".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(doc.title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<header><h1>{escape(doc.title)}</h1>",
            "".join(f'<p class="sub">{escape(line)}</p>' for line in doc.subtitle),
            paragraphs(doc.lead, "lead"),
            f"<nav><ol>{''.join(toc)}</ol></nav>" if len(toc) > 1 else "",
            "</header><main>",
            "".join(body),
            f"</main><footer>{escape(doc.footer)}</footer>",
            f'<script type="application/json" id="tracekit-specs">{script_json(specs)}</script>',
            scripts,
            f"<script>{BOOT}</script>",
            "</body></html>",
        ]
    )


# Draws every chart; marks each with data-rendered and the page with data-charts-done (tests wait for it).
BOOT = """
(function () {
  var specs = JSON.parse(document.getElementById('tracekit-specs').textContent);
  var nodes = Array.prototype.slice.call(document.querySelectorAll('.chart[data-spec]'));
  var options = {renderer: 'svg', actions: {export: true, source: false, compiled: false, editor: false}};
  Promise.all(nodes.map(function (node) {
    return vegaEmbed(node, specs[node.getAttribute('data-spec')], options).then(function () {
      node.setAttribute('data-rendered', 'true');
    }).catch(function (error) {
      node.setAttribute('data-rendered', 'error');
      node.textContent = 'This chart could not be drawn: ' + error;
      console.error('tracekit: chart ' + node.getAttribute('data-spec') + ': ' + error);
    });
  })).then(function () { document.body.setAttribute('data-charts-done', String(nodes.length)); });
})();
"""

STYLE = """
:root { --ink: #1d1d1f; --muted: #5f6368; --rule: #e3e3e3; --accent: #4e79a7; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.55 "Charter", "Bitstream Charter", "Georgia", serif; }
header, main, footer { max-width: 1060px; margin: 0 auto; padding: 0 28px; }
header { padding-top: 28px; padding-bottom: 8px; border-bottom: 1px solid var(--rule); }
h1 { font: 600 26px/1.25 "Helvetica Neue", Helvetica, Arial, sans-serif; margin: 0 0 6px; }
h2 { font: 600 20px/1.3 "Helvetica Neue", Helvetica, Arial, sans-serif; margin: 36px 0 8px;
  padding-top: 12px; border-top: 2px solid var(--ink); }
h3 { font: 600 15px/1.3 "Helvetica Neue", Helvetica, Arial, sans-serif; margin: 0 0 6px; }
p.sub { color: var(--muted); margin: 0; font-size: 13px; font-family: "Helvetica Neue", Helvetica, Arial, sans-serif; }
p.lead { font-size: 17px; margin: 14px 0 6px; }
p.intro { margin: 6px 0 14px; }
nav ol { columns: 3; font: 13px/1.6 "Helvetica Neue", Helvetica, Arial, sans-serif; padding-left: 18px;
  margin: 10px 0; }
nav a { color: var(--accent); text-decoration: none; }
figure { margin: 22px 0 30px; padding: 0; }
p.headline { margin: 2px 0 10px; max-width: 860px; }
.num { font-weight: 700; }
.chart { min-height: 40px; }
.chart .vega-embed { width: auto; }
figcaption { margin-top: 6px; color: var(--muted); font: 12px/1.5 "Helvetica Neue", Helvetica, Arial, sans-serif; }
code { font: 12px/1.4 "DejaVu Sans Mono", Menlo, Consolas, monospace; background: #f4f4f4; padding: 1px 4px;
  border-radius: 3px; }
p.nodata { color: var(--muted); font-style: italic; border-left: 3px solid var(--rule); padding-left: 10px; }
table.data { border-collapse: collapse; width: 100%; margin: 10px 0;
  font: 12px/1.45 "Helvetica Neue", Helvetica, Arial, sans-serif; }
table.data th { text-align: left; border-bottom: 1.5px solid var(--ink); padding: 4px 6px; font-weight: 600;
  white-space: nowrap; }
table.data td { border-bottom: 1px solid #eee; padding: 3px 6px; vertical-align: top; white-space: nowrap; }
table.data td:last-child { white-space: normal; }
table.data tr:nth-child(even) td { background: #fafafa; }
table.data .n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
div.method { font-size: 14px; }
div.method dt { font-weight: 700; margin-top: 10px; font-family: "Helvetica Neue", Helvetica, Arial, sans-serif; }
div.method dd { margin: 2px 0 0 0; }
div.method pre { font: 12px/1.45 "DejaVu Sans Mono", Menlo, Consolas, monospace; background: #f7f7f7;
  padding: 8px 10px; white-space: pre-wrap; border-left: 3px solid var(--rule); }
details summary { cursor: pointer; color: var(--accent);
  font: 13px/1.6 "Helvetica Neue", Helvetica, Arial, sans-serif; }
footer { color: var(--muted); font: 12px/1.5 "Helvetica Neue", Helvetica, Arial, sans-serif;
  border-top: 1px solid var(--rule); margin-top: 40px; padding-top: 10px; padding-bottom: 40px; }
"""
