"""The HTML every page of the static site (site.py) is made of: the stylesheet, the page frame
with its Content-Security-Policy (no script, no remote load: a second guard behind escaping every
value with `e()`), the number formats (scores 0-100, intervals, signed differences, p-values) and a
safe file name per task."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Callable, Iterable

from .stats import format_p
from .svg import e, fmt

STATUS_CLASS = {"ok": "ok", "refusal": "fail", "empty": "fail", "accepted": "accepted", "out_of_context_scope": "ooc",
                "pending": "open", "judging": "open", "waiting": "open", "blocked": "open"}

CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--band:#f6f8fa;--accent:#0969da}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC",sans-serif;color:var(--fg);background:#fff}
a{color:var(--accent)}
header.top{background:#0d1117;color:#fff;padding:14px 20px}
header.top h1{margin:0 0 2px;font-size:21px}
header.top .meta{color:#c9d1d9;font-size:13px}
header.top a{color:#9ecbff}
.rehearsal{background:#b60205;color:#fff;padding:8px 20px;font-weight:600}
.custom{background:#6f42c1;color:#fff;padding:8px 20px;font-weight:600}
a.nonprotocol{text-decoration:none}
.nonprotocol{display:inline-block;background:#6f42c1;color:#fff;border-radius:3px;padding:0 5px;font-size:12px;margin-left:4px;white-space:nowrap}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid var(--line);padding:7px 20px;display:flex;flex-wrap:wrap;gap:4px 16px;z-index:2}
nav a{text-decoration:none;font-size:14px;white-space:nowrap}
main{max-width:1240px;margin:0 auto;padding:10px 20px 40px}
section{margin:26px 0}
h2{font-size:19px;border-bottom:1px solid var(--line);padding-bottom:4px;margin-bottom:10px}
h3{font-size:16px;margin:18px 0 6px}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;max-width:100%}
table{border-collapse:collapse;font-size:14px}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
th{background:var(--band);font-weight:600;white-space:nowrap}
tbody th{background:none;font-weight:400}
caption{caption-side:top;text-align:left;color:var(--muted);font-size:13px;padding:2px 0 5px}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ci{color:var(--muted);font-size:12px;white-space:nowrap;display:block}
.model{color:var(--muted);font-size:12px;display:block}
.group{display:inline-block;min-width:1.7em;text-align:center;border-radius:4px;background:#ddf4ff;color:#0550ae;font-weight:600}
.note{color:var(--muted);font-size:13px;max-width:920px}
.key{margin-right:14px;font-size:12px;color:var(--muted);white-space:nowrap}
.swatch{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
svg{max-width:none}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;fill:#1b1f24}
svg .axis{stroke:#8c959f;stroke-width:1}
svg .tick{stroke:#afb8c1}
svg rect.ci{fill:#54aeff;opacity:.6}
svg .est{fill:#0550ae}
svg rect.ci2{fill:#d2a8ff;opacity:.7}
svg .second{fill:#fff;stroke:#8250df;stroke-width:1.6}
svg .axislabel{text-anchor:middle;font-size:10px;fill:#57606a}
svg .rownote{font-size:11px;fill:#57606a}
svg.axis{display:block;margin-top:2px;overflow:visible}
.name a{white-space:nowrap}
svg .rowlabel{text-anchor:end}
svg .cell{text-anchor:middle}
svg g.hcell:focus{outline:none}
svg g.hcell:focus rect,svg g.hcell:hover rect{stroke:#1b1f24;stroke-width:3}
:focus-visible{outline:2px solid var(--accent);outline-offset:1px}
.phone-axis{display:none}
.cards{display:flex;flex-wrap:wrap;gap:6px 32px;align-items:flex-start}.cards>*{max-width:100%}
.doctext{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--band);border:1px solid var(--line);border-radius:6px;padding:10px;max-height:36em;overflow:auto;font-size:13px;margin:6px 0}
details.document summary{cursor:pointer;font-weight:600}
details.document .note{overflow-wrap:anywhere}
.nonprotocol-why{font-size:13px}
.answer{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--band);border:1px solid var(--line);border-radius:6px;padding:10px;max-height:30em;overflow:auto;font-size:14px;margin:6px 0}
.verdict{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;color:var(--muted);margin:4px 0}
.status{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;background:#eaeef2;white-space:nowrap}
.status.ok{background:#dafbe1;color:#116329}.status.fail{background:#ffebe9;color:#a40e26}
.status.open{background:#fff8c5;color:#7d4e00}.status.ooc{background:#eaeef2;color:#57606a}.status.accepted{background:#f3e8ff;color:#6f42c1}
.sq{display:inline-block;min-width:2.5em;text-align:center;border-radius:3px;font-size:12px;padding:1px 0}
.route{border:1px solid var(--line);border-radius:8px;padding:10px 14px;margin:14px 0}
.route h3{margin:0 0 6px}
.question{font-size:16px;background:var(--band);border-left:4px solid var(--accent);padding:8px 12px;overflow-wrap:anywhere;white-space:pre-wrap}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:14px}
dl.kv dt{color:var(--muted)}dl.kv dd{margin:0;overflow-wrap:anywhere}
td.q{min-width:16em;max-width:420px;overflow-wrap:anywhere}
ul.groups{padding-left:0;list-style:none}ul.groups li{margin:3px 0}
footer{color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding:10px 20px;overflow-wrap:anywhere}
@media (max-width:700px){
 body{font-size:14px} main{padding:6px 10px 30px}
 header.top,nav,.rehearsal,.custom,footer{padding-left:10px;padding-right:10px}
 header.top h1{font-size:18px}
 th,td{padding:4px 5px}
 nav{gap:4px 12px}
 .key{white-space:normal}
 td.q{min-width:14em;max-width:260px} /* a question in lines of words: the table scrolls sideways instead */
 /* The leaderboard as one card per route: no column needs a horizontal scroll. The header row
    gives way to each cell's own label (data-label, shown before it and read with it). */
 table.leaderboard,table.leaderboard tbody{display:block;width:100%}
 table.leaderboard thead{display:none}
 table.leaderboard caption{display:block}
 table.leaderboard tr.route-row{display:grid;grid-template-columns:auto minmax(0,1fr) minmax(0,1fr);
  grid-template-areas:"rank name name" "all all scored" "plot plot plot" "cov cov cov";gap:4px 10px;align-items:start;
  border-bottom:1px solid var(--line);padding:8px 0}
 table.leaderboard tr.route-row>*{display:block;border:0;padding:0;min-width:0}
 table.leaderboard .rank{grid-area:rank;text-align:left}
 table.leaderboard .name{grid-area:name;overflow-wrap:anywhere}
 table.leaderboard td.name a,table.leaderboard th.name a{white-space:normal}
 table.leaderboard .all{grid-area:all;text-align:left}
 table.leaderboard td.plot{grid-area:plot;padding:0 10px}
 table.leaderboard .scored{grid-area:scored;text-align:left}
 table.leaderboard .cov{grid-area:cov}
 table.leaderboard .cov .ci{white-space:normal}
 table.leaderboard td[data-label]::before{content:attr(data-label);display:block;font-size:11px;color:var(--muted);white-space:normal}
 table.leaderboard svg.ivbar{width:100%;height:auto}
 table.leaderboard svg.covbar{width:100%}
 .phone-axis{display:block}
}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


p_fmt = format_p  # p-values to 3 significant digits, never rounded to 0


def ci_text(lo: float | None, hi: float | None, *, sep: str = "–", fmt_: Callable[[float | None], str] = fmt) -> str:
    """An interval on the 0-100 scale, "—" where it is not estimable (too few documents)."""
    return "—" if lo is None or hi is None else f"{fmt_(lo)}{sep}{fmt_(hi)}"


def code_spans(text: object) -> str:
    """Text holding Markdown code spans (the breakdowns' rules: "dataset field `name` (...)", shared
    with the Markdown report) as HTML: escaped first, since a span may quote the user's text (a
    dataset field's name), then each `span` made <code>span</code>. Escaping leaves backticks as
    they are and no markup behind, so the <code> tags are the only markup in the result."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", e(text))


def signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f}"


def task_slugs(task_ids: Iterable[str]) -> dict[str, str]:
    """A file name per task id: the id where it is a safe name, else a safe form plus a hash
    (also where two ids differ only in case, for case-insensitive file systems)."""
    ids = list(task_ids)
    base = {t: re.sub(r"[^A-Za-z0-9._-]", "_", t)[:80].lstrip(".") or "task" for t in ids}
    folded: dict[str, int] = defaultdict(int)
    for t in ids:
        folded[base[t].lower()] += 1
    out = {}
    for t in ids:
        s = base[t]
        if s != t or folded[s.lower()] > 1:
            s = f"{s}-{hashlib.sha256(t.encode()).hexdigest()[:10]}"
        out[t] = s
    return out


def page(title: str, body: str, *, rehearsal: str | None, subtitle: str = "", protocol_note: str | None = None) -> str:
    banner = (f'<div class="rehearsal">Rehearsal on the emulator at {e(rehearsal)} — not real results</div>' if rehearsal else "")
    banner += f'<div class="custom">{e(protocol_note)}</div>' if protocol_note else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{e(("[rehearsal] " if rehearsal else "") + title)}</title><style>{CSS}</style></head>'
            f'<body>{banner}<header class="top"><h1>{e(title)}</h1><div class="meta">{subtitle}</div></header>{body}</body></html>\n')


def short_status(status: str) -> str:
    return {"out_of_context_scope": "out of context"}.get(status, status)
