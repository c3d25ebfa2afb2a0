"""`report --format html --out DIR`: the leaderboard as a self-contained static site.

DIR/index.html holds the leaderboard (interval bars, coverage bars), the pairwise comparison
matrix, the breakdowns (heatmaps), judge agreement, the changes since the last refresh, the
provenance and the task list; DIR/routes/<route>.html has one page per route (route_page.py: its
headline, breakdowns, unscored tasks, cost, provenance and tasks by score), DIR/tasks/<task>.html
one per task (task_page.py: the question, the document, the rubric, each route's answer or why
there is none, and each judge's verdict and points).

No script, no network, no external file: every page carries its CSS and plots (inline SVG) and
opens from the file system. A Content-Security-Policy forbids scripts and remote loads, as a
second guard behind escaping: answers and verdicts are untrusted text, and every value that
comes from data goes through `e()` (html.escape). Scores are shown 0-100 everywhere. The page
frame, stylesheet and number formats are html.py's, the plots svg.py's.

For every reader: each table has a <caption> and scoped headers; what a plot's hover title
says is also text a keyboard, a touch screen or a screen reader reaches (the numbers beside the
interval and coverage bars; each heatmap cell focusable with its figures as its label, and the
same figures in a table beside it, named by the plot's aria-details); at a phone's width the
leaderboard stacks each route into a card and the navigation wraps (html.py's stylesheet).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..base.errors import StateError
from ..ledger.store import Store
from ..protocol.config import Config
from ..protocol.grading import score as normalised_score
from .analysis import distinct
from .excerpt import Excerpt, read_excerpt
from .html import STATUS_CLASS, ci_text, code_spans, p_fmt, page, pct, short_status, signed, task_slugs
from .report import host_changed, ranks
from .route_page import leaderboard_row, leaderboard_table, route_costs, route_page
from .svg import coverage_legend, diff_colour, e, fmt, heatmap, score_colour, text_colour
from .task_page import route_link, task_page

MARKER = ".batchrun-site"
MAX_CHANGED_CELLS_SHOWN = 200


# --- index sections ----------------------------------------------------------------------------


def _leaderboard(data: dict[str, Any], st: dict[str, Any], route_slugs: dict[str, str]) -> str:
    routes = data["routes"]
    rank = ranks(data)
    pages = {r["route"]: f"routes/{quote(route_slugs[r['route']])}.html" for r in routes}
    rows = [leaderboard_row(r, st, rank.get(r["route"]), pages[r["route"]], pages[r["route"]] + "#why") for r in routes]
    iv = st["intervals"]
    groups = st["pairwise"]["groups"]
    return (
        '<section id="leaderboard"><h2>Leaderboard</h2>'
        + leaderboard_table("".join(rows), "Routes ranked by All-tasks (0–100), with 95% intervals and coverage; a route's name "
                                           "opens its page")
        + f'<p class="note">{coverage_legend()}</p>'
        f'<p class="note">Scores are 0–100. <b>All-tasks</b> counts every task ({e(data["routes"][0]["n_tasks"] if routes else 0)}), '
        'out of context, refusals and empty answers as 0; <b>Scored</b> is the mean over scored answers. '
        f'Intervals: 95% t intervals with the document as the unit (the questions on one document count as one cluster: '
        f'CR2 standard error, Bell–McCaffrey degrees of freedom), {iv["n_documents"]} documents; — where fewer than '
        f'{iv["min_documents"]} documents leave an interval not estimable. '
        f'<b>Group</b>: {e(groups["rule"])} A route with open cells has no headline (withheld) until they finish. '
        'A route with accepted failures (infrastructure failures the maintainer decided not to wait for) has no protocol '
        'All-tasks (spec 001 §5): it is marked <span class="nonprotocol">not protocol</span> and left out of the ranks, '
        + ('but ranked here with them counted 0 (a provisional report).' if st.get("provisional") else
           'the groups and the comparisons (see <code>batchrun report --provisional</code>).') + '</p>'
        '<p class="note">Every task, with each route\'s answer and the judges\' verdicts: <a href="#tasks">Tasks</a>.</p></section>')


def _pair_lookup(st: dict[str, Any]) -> dict[tuple[str, str], tuple[dict[str, Any], int]]:
    """(row, col) -> (the pair entry, +1 if row is its `a` else -1)."""
    out = {}
    for p in st["pairwise"]["pairs"]:
        out[(p["a"], p["b"])] = (p, 1)
        out[(p["b"], p["a"])] = (p, -1)
    return out


def _variant_text(v: dict[str, Any], sign: int) -> str:
    d = None if v["mean_diff"] is None else sign * 100 * v["mean_diff"]
    lo, hi = (v["low"], v["high"]) if sign > 0 else (None if v["high"] is None else -v["high"], None if v["low"] is None else -v["low"])
    w, l = (v["wins"], v["losses"]) if sign > 0 else (v["losses"], v["wins"])
    t = v["tasks"]
    tw, tl = (t["wins"], t["losses"]) if sign > 0 else (t["losses"], t["wins"])
    perm = v["permutation"]
    return (f"Δ {signed(d)} (95% CI {ci_text(pct(lo), pct(hi), sep=' to ', fmt_=signed)}), {v['n']} tasks on {v['n_documents']} "
            f"documents; documents W/L/T {w}/{l}/{v['ties']}, sign p {p_fmt(v['sign_p'])} (Holm {p_fmt(v['sign_p_holm'])}), "
            f"permutation p {p_fmt(perm['p'])} ({perm['method']}); secondary, tasks as if independent: W/L/T {tw}/{tl}/{t['ties']}, "
            f"sign p {p_fmt(t['sign_p'])}")


def _pairwise(st: dict[str, Any]) -> str:
    pw = st["pairwise"]
    ranked = pw["routes"]
    if len(ranked) < 2:
        return ('<section id="pairwise"><h2>Paired comparisons</h2><p class="note">Fewer than two complete routes: '
                'nothing to compare yet.</p></section>')
    look = _pair_lookup(st)
    alpha = pw["groups"]["alpha"]
    few = pw["few_documents"]

    def docs(v: dict[str, Any]) -> str:  # the documents compared, † when too few differ for any test to reject
        return f'{v["n_documents"]}{"†" if v["wins"] + v["losses"] < few["reject_min_documents_holm"] else ""}'

    values, tips, marks = [], [], []
    for r in ranked:
        vrow: list[float | None] = []
        trow: list[str] = []
        mrow: list[str] = []
        for c in ranked:
            if r == c:
                vrow.append(None)
                trow.append(r)
                mrow.append("")
                continue
            p, sign = look[(r, c)]
            v = p["all_tasks"]
            vrow.append(None if v["mean_diff"] is None else sign * 100 * v["mean_diff"])
            trow.append(f"{r} − {c}, every task zero-filled: {_variant_text(v, sign)}; both scored: {_variant_text(p['both_scored'], sign)}")
            mrow.append("*" if distinct(v, alpha) else "")
        values.append(vrow)
        tips.append(trow)
        marks.append(mrow)
    matrix = heatmap(ranked, ranked, values, tooltips=tips, marks=marks, colour=diff_colour, cell_w=56,
                     label="Pairwise differences in All-tasks points, row minus column", details_id="pairs-table")
    adjacent = []
    for i in range(len(ranked) - 1):
        p, _ = look[(ranked[i], ranked[i + 1])]
        a, b = p["all_tasks"], p["both_scored"]
        adjacent.append(
            f'<tr class="pair-row"><th scope="row">{e(ranked[i])} <span class="model">vs {e(ranked[i + 1])}</span></th>'
            f'<td class="num">{signed(pct(a["mean_diff"]))}<span class="ci">{ci_text(pct(a["low"]), pct(a["high"]), sep=" to ", fmt_=signed)}</span></td>'
            f'<td class="num">{docs(a)}</td><td class="num">{a["wins"]}/{a["losses"]}/{a["ties"]}</td><td class="num">{p_fmt(a["sign_p"])}</td>'
            f'<td class="num"><b>{p_fmt(a["sign_p_holm"])}</b></td><td class="num">{p_fmt(a["permutation"]["p"])}'
            f'<span class="ci">{e(a["permutation"]["method"])}</span></td>'
            f'<td class="num">{signed(pct(b["mean_diff"]))}<span class="ci">{ci_text(pct(b["low"]), pct(b["high"]), sep=" to ", fmt_=signed)}, '
            f'n {b["n"]}</span></td><td class="num">{docs(b)}</td>'
            f'<td class="num">{b["wins"]}/{b["losses"]}/{b["ties"]}</td><td class="num">{p_fmt(b["sign_p_holm"])}</td></tr>')
    every = []
    for p in pw["pairs"]:
        a, b = p["all_tasks"], p["both_scored"]
        every.append(f'<tr><th scope="row">{e(p["a"])} − {e(p["b"])}</th><td class="num">{signed(pct(a["mean_diff"]))}</td>'
                     f'<td class="num">{ci_text(pct(a["low"]), pct(a["high"]), sep=" to ", fmt_=signed)}</td><td class="num">{docs(a)}</td>'
                     f'<td class="num">{a["wins"]}/{a["losses"]}/{a["ties"]}</td>'
                     f'<td class="num">{p_fmt(a["sign_p_holm"])}</td><td class="num">{p_fmt(a["permutation_p_holm"])}</td>'
                     f'<td class="num">{signed(pct(b["mean_diff"]))} (n {b["n"]}, {docs(b)} docs)</td><td class="num">{p_fmt(b["sign_p_holm"])}</td>'
                     f'<td class="num">{p_fmt(a["sign_p"])} · {p_fmt(a["permutation"]["p"])}<span class="ci">{e(a["permutation"]["method"])}</span></td>'
                     f'<td class="num">{a["tasks"]["wins"]}/{a["tasks"]["losses"]}/{a["tasks"]["ties"]}</td></tr>')
    groups = "".join(f'<li><span class="group">{e(g["label"])}</span> {e(", ".join(g["routes"]))}</li>' for g in pw["groups"]["groups"])
    return (
        '<section id="pairwise"><h2>Paired comparisons</h2>'
        f'<h3>Statistically indistinguishable groups</h3><ul class="groups">{groups}</ul><p class="note">{e(pw["groups"]["rule"])}</p>'
        f'<h3>Matrix: row minus column, All-tasks points</h3><div class="scroll">{matrix}</div>'
        f'<p class="note">Blue: the row route scores higher; red: lower. * marks a pair the grouping rule tells apart '
        f'(more documents won, Holm-adjusted sign test on documents p &lt; {alpha}, and an interval of the mean difference on '
        'the same side of 0). Hover a cell, or reach it with Tab, for the interval, documents won/lost/tied and p-values of both '
        'views; the table <a href="#pairs-table">All pairs</a> below holds the same figures.</p>'
        '<h3>Adjacent ranks</h3><div class="scroll"><table class="pairs"><caption>Each route against the next one down the ranks</caption>'
        '<thead><tr><th scope="col">Pair</th><th scope="col" class="num">Δ All-tasks<span class="ci">95% CI</span></th>'
        '<th scope="col" class="num">docs</th><th scope="col" class="num">W/L/T<span class="ci">documents</span></th><th scope="col" class="num">sign p</th>'
        '<th scope="col" class="num">Holm p</th><th scope="col" class="num">perm. p</th>'
        '<th scope="col" class="num">Δ both scored<span class="ci">95% CI, n</span></th><th scope="col" class="num">docs</th>'
        '<th scope="col" class="num">W/L/T<span class="ci">documents</span></th><th scope="col" class="num">Holm p</th></tr></thead><tbody>'
        + "".join(adjacent) + "</tbody></table></div>"
        f'<p class="note">All-tasks: {e(pw["variants"]["all_tasks"])}. Both scored: {e(pw["variants"]["both_scored"])}. '
        f'Tests, with the document as the unit: {e(pw["tests"]["decision"])}; {e(pw["tests"]["also"])}; {e(pw["tests"]["interval"])}. '
        f'Task-level figures (in the hover text and the JSON) are {e(pw["tests"]["tasks"])}.</p>'
        f'<p class="note few-documents">docs: the documents compared. † the two routes differ on fewer than '
        f'{few["reject_min_documents_holm"]} documents: no Holm-adjusted test can reach p &lt; {alpha} on so few. {e(few["note"])}</p>'
        f'<details><summary>All {len(pw["pairs"])} pairs</summary><div class="scroll"><table id="pairs-table"><caption>Every pair, '
        'a minus b: the figures of the matrix above</caption><thead><tr><th scope="col">Pair (a − b)</th>'
        '<th scope="col" class="num">Δ All-tasks</th><th scope="col" class="num">95% CI</th><th scope="col" class="num">docs</th>'
        '<th scope="col" class="num">W/L/T<span class="ci">documents</span></th><th scope="col" class="num">sign Holm p</th>'
        '<th scope="col" class="num">perm. Holm p</th><th scope="col" class="num">Δ both scored</th><th scope="col" class="num">sign Holm p</th>'
        '<th scope="col" class="num">sign p · perm. p<span class="ci">unadjusted</span></th>'
        '<th scope="col" class="num">W/L/T<span class="ci">tasks, secondary</span></th></tr></thead><tbody>'
        + "".join(every) + "</tbody></table></div></details></section>")


def _breakdowns(st: dict[str, Any]) -> str:
    ranked = st["pairwise"]["routes"]
    parts = ['<section id="breakdowns"><h2>Breakdowns</h2>']
    if not ranked:
        return parts[0] + '<p class="note">No complete route yet.</p></section>'
    for i, d in enumerate(st["breakdowns"]):
        heading = f'Dataset field: {d["title"]}' if d["dimension"].startswith("field:") else d["title"]
        labels = [f'{v["value"]} ({v["n_tasks"]} tasks, {v["n_documents"]} docs)' for v in d["values"]]
        values, tips = [], []
        for v in d["values"]:
            vrow, trow = [], []
            for r in ranked:
                x = v["routes"][r]
                a, s = x["all_tasks"], x["scored"]
                vrow.append(pct(a["estimate"]))
                trow.append(f'{r}, {d["title"]} {v["value"]}: All-tasks {fmt(pct(a["estimate"]))} (95% CI {ci_text(pct(a["low"]), pct(a["high"]))}, '
                            f'n {a["n"]}); Scored {fmt(pct(s["estimate"]))} (95% CI {ci_text(pct(s["low"]), pct(s["high"]))}, '
                            f'n {s["n"]}); {v["n_documents"]} document(s)')
            values.append(vrow)
            tips.append(trow)
        chart = heatmap(labels, ranked, values, tooltips=tips, label=f'{d["title"]} × route, All-tasks 0–100',
                        details_id=f"breakdown-{i}-table")
        head = "".join(f"<th scope=\"col\" class=\"num\">{e(r)}</th>" for r in ranked)
        body = "".join(
            f'<tr><th scope="row">{e(v["value"])}</th><td class="num">{v["n_tasks"]}</td><td class="num">{v["n_documents"]}</td>'
            + "".join(f'<td class="num">{fmt(pct(x["all_tasks"]["estimate"]))}<span class="ci">'
                      f'{ci_text(pct(x["all_tasks"]["low"]), pct(x["all_tasks"]["high"]))}</span><span class="ci">Scored '
                      f'{fmt(pct(x["scored"]["estimate"]))} ({x["scored"]["n"]}) {ci_text(pct(x["scored"]["low"]), pct(x["scored"]["high"]))}</span></td>'
                      for x in (v["routes"][r] for r in ranked)) + "</tr>" for v in d["values"])
        parts.append(
            f'<div class="breakdown" data-dimension="{e(d["dimension"])}"><h3>{e(heading)}</h3><p class="note">{code_spans(d["rule"])}</p>'
            f'<div class="scroll">{chart}</div><details><summary>Table with 95% intervals (All-tasks, and Scored with its n)</summary>'
            f'<div class="scroll"><table id="breakdown-{i}-table"><caption>{e(heading)} × route: the figures of the heatmap</caption>'
            f'<thead><tr><th scope="col">{e(d["title"])}</th><th scope="col" class="num">tasks</th><th scope="col" class="num">docs</th>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div></details></div>')
    parts.append('<p class="note">Cells show All-tasks (0–100) over the tasks of that group; hover or Tab to a cell for the 95% '
                 f'interval (documents as the unit, as on the leaderboard) and Scored, or open its table. Each group shows its tasks and documents: an interval '
                 f'needs at least {st["intervals"]["min_documents"]} documents and reads — (not estimable) on fewer, and one '
                 'resting on few documents is wide.</p></section>')
    return "".join(parts)


def _judges(st: dict[str, Any]) -> str:
    j = st["judges"]
    if not j["panel"]:
        return '<section id="judges"><h2>Judge panel</h2><p class="note">No judge panel configured.</p></section>'
    rows = "".join(
        f'<tr class="judge-row"><th scope="row">{e(x["judge"])}<span class="model">{e(x["model"])}</span></th><td class="num">{fmt(pct(x["mean_score"]))}</td>'
        f'<td class="num">{x["n_scored"]}</td><td class="num">{x["attempts"]}</td>'
        f'<td class="num">{fmt(pct(x["retry_rate"]))}%</td><td class="num">{x["parse_failures"]} '
        f'<span class="ci">{fmt(pct(x["parse_failure_rate"]))}%</span></td></tr>' for x in j["judges"])
    agree = "".join(
        f'<tr><th scope="row">{e(p["a"])} · {e(p["b"])}</th><td class="num">{p["n"]}</td><td class="num">{fmt(p["pearson"], 3)}</td>'
        f'<td class="num">{fmt(p["spearman"], 3)}</td><td class="num">{fmt(pct(p["mean_abs_diff"]))}</td></tr>' for p in j["agreement"])
    spread = [s for s in j["spread_by_route"] if s["n"]]
    chart = ""
    if spread:
        labels = [s["route"] for s in spread]
        values = [[pct(s["judge_means"][name]) for name in j["panel"]] for s in spread]
        tips = [[f'{s["route"]}: {name} mean {fmt(pct(s["judge_means"][name]))} over {s["n"]} answers all judges scored'
                 for name in j["panel"]] for s in spread]
        notes = [f'spread {fmt(pct(s["spread"]))}' + (f' · farthest: {s["farthest_from_panel_mean"]}' if s["spread"] else "")
                 for s in spread]
        chart = heatmap(labels, j["panel"], values, tooltips=tips, row_notes=notes, label="Mean score per judge and route, 0–100",
                        details_id="judge-spread-table")
        chart += ('<details><summary>Table of the means per judge and route</summary><div class="scroll"><table id="judge-spread-table">'
                  '<caption>Mean score per judge and route (0–100), over the answers every judge scored: the figures of the heatmap'
                  '</caption><thead><tr><th scope="col">Route</th><th scope="col" class="num">answers</th>'
                  + "".join(f'<th scope="col" class="num">{e(name)}</th>' for name in j["panel"])
                  + '<th scope="col" class="num">spread</th><th scope="col">farthest from the panel mean</th></tr></thead><tbody>'
                  + "".join(f'<tr><th scope="row">{e(s["route"])}</th><td class="num">{s["n"]}</td>'
                            + "".join(f'<td class="num">{fmt(pct(s["judge_means"][name]))}</td>' for name in j["panel"])
                            + f'<td class="num">{fmt(pct(s["spread"]))}</td><td>{e(s["farthest_from_panel_mean"] or "—") if s["spread"] else "—"}</td></tr>'
                            for s in spread) + "</tbody></table></div></details>")
    alpha = j["krippendorff_alpha_interval"]
    return (
        '<section id="judges"><h2>Judge panel</h2>'
        f'<p><b>Krippendorff\'s alpha (interval)</b> for the panel: {fmt(alpha, 3)} over {j["alpha_units"]} answers.</p>'
        '<div class="scroll"><table class="judges"><caption>Each judge of the panel: its scores, attempts and failures</caption>'
        '<thead><tr><th scope="col">Judge</th><th scope="col" class="num">Mean score (0–100)</th><th scope="col" class="num">Scored</th>'
        '<th scope="col" class="num">Attempts</th><th scope="col" class="num">Retry rate</th><th scope="col" class="num">Parse failures</th>'
        '</tr></thead><tbody>'
        + rows + '</tbody></table></div><h3>Pairwise agreement (per-answer scores)</h3><div class="scroll"><table>'
        '<caption>Agreement between two judges on the answers both scored</caption><thead><tr>'
        '<th scope="col">Judges</th><th scope="col" class="num">n</th><th scope="col" class="num">Pearson</th><th scope="col" class="num">Spearman</th>'
        '<th scope="col" class="num">Mean |Δ| (points)</th></tr></thead><tbody>' + agree + '</tbody></table></div>'
        f'<h3>Spread between judges, per route</h3><div class="scroll">{chart}</div><p class="note">{e(j["notes"])}</p></section>')


def _changes(st: dict[str, Any], slugs: dict[str, str]) -> str:
    c = st["changes"]
    head = '<section id="changes"><h2>Since the last refresh</h2>'
    if c["previous"] is None:
        return head + f'<p class="note">{e(c.get("note", ""))}.</p></section>'
    when = c["current"]["taken_at"] or "now"
    intro = (f'<p>Compared with the state the refresh of <b>{e(c["previous"]["taken_at"])}</b> left, as of {e(when)}: '
             + (", ".join(f"{e(k)} {v}" for k, v in c["reasons"].items()) or "no cell changed") + ".</p>")
    if c["panel"]["changed"]:
        intro += (f'<p>The judge panel changed: {e(", ".join(f"{a} ({m})" for a, m in c["panel"]["before"]))} → '
                  f'{e(", ".join(f"{a} ({m})" for a, m in c["panel"]["after"]))}.</p>')
    rows = []
    for r in c["routes"]:
        b, a = r["before"] or {}, r["after"] or {}
        rows.append(f'<tr class="change-row"><th scope="row">{e(r["route"])}<span class="model">{e(r["status"])}'
                    f'{" · policy changed" if r["policy_changed"] else ""}</span></th>'
                    f'<td class="num">{fmt(pct(b.get("all_tasks_overall")))}</td><td class="num">{fmt(pct(a.get("all_tasks_overall")))}</td>'
                    f'<td class="num"><b>{signed(pct(r["delta_all_tasks"]))}</b></td>'
                    f'<td class="num">{fmt(pct(b.get("scored_overall")))} → {fmt(pct(a.get("scored_overall")))}</td>'
                    f'<td class="num">{r["cells_changed"]}</td><td>{e(", ".join(f"{k} {v}" for k, v in r["reasons"].items()))}</td></tr>')
    cells = []
    for x in c["cells"][:MAX_CHANGED_CELLS_SHOWN]:
        b, a = x["before"] or {}, x["after"] or {}
        link = slugs.get(x["task_id"])
        task = f'<a href="tasks/{e(quote(link))}.html">{e(x["task_id"])}</a>' if link else e(x["task_id"])
        cells.append(f'<tr><th scope="row">{e(x["route"])}</th><td>{task}</td><td>{e(x["reason"])}</td>'
                     f'<td>{e(b.get("status", "—"))} {fmt(pct(b.get("score")))}</td><td>{e(a.get("status", "—"))} {fmt(pct(a.get("score")))}</td></tr>')
    more = len(c["cells"]) - MAX_CHANGED_CELLS_SHOWN
    return (head + intro
            + '<div class="scroll"><table><caption>Each route since the last refresh</caption><thead><tr><th scope="col">Route</th>'
              '<th scope="col" class="num">All-tasks before</th><th scope="col" class="num">after</th><th scope="col" class="num">Δ</th>'
              '<th scope="col" class="num">Scored before → after</th><th scope="col" class="num">Cells changed</th><th scope="col">Why</th>'
              '</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>"
            + (f'<details><summary>Changed cells ({len(c["cells"])})</summary><div class="scroll"><table><caption>The cells that changed'
               '</caption><thead><tr><th scope="col">Route</th><th scope="col">Task</th><th scope="col">Why</th><th scope="col">Before</th>'
               '<th scope="col">After</th></tr></thead><tbody>' + "".join(cells) + "</tbody></table></div>"
               + (f'<p class="note">… and {more} more: see <code>batchrun report --format json</code>.</p>' if more > 0 else "")
               + "</details>" if cells else "")
            + f'<p class="note">{e(c["rule"])}.</p></section>')


def _provenance_blocks(data: dict[str, Any]) -> list[str]:
    """Each route's provenance, in the report's order: on the index and on the route's page."""
    blocks = []
    for r in data["routes"]:
        p = r["provenance"]
        d = p["decoding"]
        hosts = ", ".join(p["endpoint_hosts"]) or "— (nothing answered yet)"
        accepted = "".join(f'<dd>{e(a["cells"])} cell(s), {e(a["at"])}: {e(a["reason"])}</dd>' for a in p.get("accepted_failures", []))
        blocks.append(
            f'<div class="route" id="route-{e(quote(r["route"], safe=""))}"><h3>{e(r["route"])}</h3><dl class="kv">'
            f'<dt>provider · model</dt><dd>{e(p["provider"])} · {e(p["model"])}</dd>'
            f'<dt>endpoint</dt><dd>{e(hosts)} {e(p["endpoint"])}'
            + (f' (the config now names {e(p["configured_host"])})' if host_changed(p) else "")
            + (f' · anthropic-version {e(p["api_version"])}' if p.get("api_version") else "") + "</dd>"
            f'<dt>batches</dt><dd>{e(p["endpoint_dates"]["first_submitted"] or "—")} … {e(p["endpoint_dates"]["last_ended"] or "—")}</dd>'
            f'<dt>context caps</dt><dd>{p["context_policy"]["en_cap"]:,} / {p["context_policy"]["cjk_cap"]:,} characters '
            f'(en / CJK; {e(p["context_policy"]["source"])})</dd>'
            f'<dt>decoding</dt><dd>temperature {e(d["temperature"])}, max_tokens {e(d["max_tokens"])}'
            f'{", reasoning" if d.get("reasoning") else ""}</dd>'
            f'<dt>retries</dt><dd>{e(p["retry_policy"]["max_retries"])} per request, {e(p["retry_policy"]["max_resubmits"])} resubmits</dd>'
            + (f"<dt>accepted failures</dt>{accepted}" if accepted else "") + "</dl></div>")
    return blocks


def _provenance(data: dict[str, Any], st: dict[str, Any], blocks: list[str]) -> str:
    common = ""
    if data["routes"]:
        p = data["routes"][0]["provenance"]
        panel = ", ".join(f'{j["route"]} ({j["provider"]} {j["model"]}, temperature {j["temperature"]}, '
                          f'max_tokens {j["max_tokens"]}{", at " + ", ".join(j["endpoint_hosts"]) if j["endpoint_hosts"] else ""})'
                          for j in p["judge_panel"])
        common = (f'<dl class="kv"><dt>judge panel</dt><dd>{e(panel)}</dd>'
                  f'<dt>prompt templates</dt><dd>generation {e(p["prompt_templates"]["generation_sha256"])}<br>judge '
                  f'{e(p["prompt_templates"]["judge_sha256"])}</dd>')
    else:
        common = '<dl class="kv">'
    iv = st["intervals"]
    common += (f'<dt>dataset sha256</dt><dd>{e(data["dataset_sha256"])}</dd><dt>batchrun</dt><dd>{e(data["batchrun_version"])}</dd>'
               f'<dt>statistics</dt><dd>the document as the unit: {e(iv["method"])}, at least {iv["min_documents"]} documents; '
               f'permutation tests flipping whole documents, exact up to {st["permutations"]["exact_up_to"]} documents that differ, '
               f'else {st["permutations"]["resamples"]:,} Monte-Carlo draws, seed {st["permutations"]["seed"]}</dd></dl>')
    return f'<section id="provenance"><h2>Provenance</h2>{common}{"".join(blocks)}</section>'


def _tasks_table(data: dict[str, Any], tasks: list[dict[str, Any]], slugs: dict[str, str], cells: dict[tuple[str, str], dict[str, Any]],
                 route_slugs: dict[str, str]) -> str:
    routes = [r["route"] for r in data["routes"]]
    head = "".join(f'<th scope="col" class="num">{route_link(r, route_slugs, prefix="")}</th>' for r in routes)
    rows = []
    for t in tasks:
        tds = []
        for r in routes:
            c = cells.get((r, t["task_id"]))
            if c is None:
                tds.append("<td></td>")
                continue
            if c["status"] == "ok":
                v = pct(c["score"])
                bg = score_colour(v)
                tds.append(f'<td class="num"><span class="sq" style="background:{bg};color:{text_colour(bg)}">{fmt(v, 0)}</span></td>')
            else:
                tds.append(f'<td class="num"><span class="status {STATUS_CLASS.get(c["status"], "")}">{e(short_status(c["status"]))}</span></td>')
        q = t["question"]
        rows.append(f'<tr class="task-row"><th scope="row"><a href="tasks/{e(quote(slugs[t["task_id"]]))}.html">{e(t["task_id"])}</a></th>'
                    f'<td class="q">{e(q if len(q) <= 140 else q[:139] + "…")}</td><td>{e(t["lang"])}</td>'
                    f'<td class="num">{"—" if t["doc_chars"] is None else format(t["doc_chars"], ",")}</td>{"".join(tds)}</tr>')
    return ('<section id="tasks"><h2>Tasks</h2><p class="note">Each task\'s score per route (0–100), or why it has none. '
            'Open a task for its question, each answer and each judge\'s verdict.</p>'
            '<div class="scroll"><table class="tasks"><caption>Every task: its score per route (0–100); a route\'s name opens its page'
            '</caption><thead><tr><th scope="col">Task</th><th scope="col">Question</th><th scope="col">Lang.</th>'
            f'<th scope="col" class="num">Doc. chars</th>{head}</tr></thead><tbody>' + "".join(rows) + "</tbody></table></div></section>")


# --- the site ----------------------------------------------------------------------------------------


def _read_tasks(store: Store) -> list[dict[str, Any]]:
    out = []
    per_task = {r[0]: (r[1], r[2]) for r in store.db.execute("SELECT task_id, max(doc_chars), max(cjk) FROM cells_now GROUP BY task_id")}
    for task_id, question, corpus_file, doc_sha256, rubric_json, rubric_total, fields_json in store.db.execute(
            "SELECT task_id, question, corpus_file, doc_sha256, rubric_json, rubric_total, fields_json FROM tasks ORDER BY position"):
        chars, cjk = per_task.get(task_id, (None, None))
        out.append({"task_id": task_id, "question": question, "corpus_file": corpus_file, "doc_sha256": doc_sha256,
                    "rubric": json.loads(rubric_json),
                    "rubric_total": rubric_total, "fields": json.loads(fields_json or "{}"), "doc_chars": chars,
                    "cjk": None if cjk is None else bool(cjk), "lang": "—" if cjk is None else ("CJK" if cjk else "non-CJK")})
    return out


def _read_cells(store: Store) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["route"], r["task_id"]): r for r in store.rows(
        """SELECT cs.route, cs.task_id, cs.status, cs.score, cs.cap, cs.doc_chars, cs.cjk, res.kind, res.text, res.finish_reason,
                  res.error_message
           FROM cells_now cs LEFT JOIN results res ON res.id = cs.result_id""")}


def write_site(store: Store, config: Config, data: dict[str, Any], out: Path, *,
               judgments: list[dict[str, Any]] | None = None) -> Path:
    """Write the site for `data` (analysis.full_report) into `out`; return index.html's path.

    Reads `cells_now` for the answers. Refuses a non-empty folder it did not write (MARKER)."""
    from .outputs import judge_scores

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise StateError(f"{out} is not empty and was not written by batchrun report --format html.",
                         "Pass --out with a new or empty folder (or a folder a previous report wrote).")
    st = data["statistics"]
    rehearsal = data.get("rehearsal")
    tasks = _read_tasks(store)
    cells = _read_cells(store)
    slugs = task_slugs(t["task_id"] for t in tasks)
    panel = [j.name for j in config.judges]
    verdicts: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for v in judgments if judgments is not None else judge_scores(store, with_text=True):
        verdicts[(v["route"], v["task_id"])][v["judge"]] = {
            "total": v["total"], "score": v["score"] if "score" in v else normalised_score(v["total"], v["rubric_total"]),
            "points": json.loads(v["points_awarded_json"]) if v.get("points_awarded_json") else None, "verdict": v.get("verdict")}
    route_slugs = task_slugs(r["route"] for r in data["routes"])
    (out / MARKER).parent.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by batchrun report --format html; the folder is rewritten on each report\n", encoding="utf-8")
    for folder, names in (("tasks", slugs), ("routes", route_slugs)):
        (out / folder).mkdir(exist_ok=True)
        wanted = {f"{s}.html" for s in names.values()}
        for old in (out / folder).glob("*.html"):
            if old.name not in wanted:
                old.unlink()
    excerpts: dict[tuple[str, str], Excerpt] = {}  # one read per document, however many tasks ask about it
    for t in tasks:
        key = (t["corpus_file"], t["doc_sha256"])
        if key not in excerpts:
            excerpts[key] = read_excerpt(store, config.paths.corpus, *key)
        _write(out / "tasks" / f"{slugs[t['task_id']]}.html",
               task_page(t, data, cells, verdicts, panel, rehearsal, excerpts[key], route_slugs))
    blocks = _provenance_blocks(data)
    rank = ranks(data)
    costs = route_costs(store)
    for r, block in zip(data["routes"], blocks):
        _write(out / "routes" / f"{route_slugs[r['route']]}.html",
               route_page(r, data, st, rank.get(r["route"]), tasks, cells, verdicts, panel, costs.get(r["route"], []), block, slugs))
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    n_docs = st["intervals"]["n_documents"]
    subtitle = (f"{len(tasks)} tasks over {n_docs} documents · {len(data['routes'])} routes · judge panel "
                f"{e(', '.join(panel) or '—')} · generated {e(generated)} · batchrun {e(data['batchrun_version'])}")
    nav = ('<nav><a href="#leaderboard">Leaderboard</a><a href="#pairwise">Comparisons</a><a href="#breakdowns">Breakdowns</a>'
           '<a href="#judges">Judges</a><a href="#changes">Changes</a><a href="#provenance">Provenance</a><a href="#tasks">Tasks</a></nav>')
    problems = "".join(f'<li>{e(p["state"])}: route {e(p["route"])}: {e(p["requests"])} request(s): {e(p["message"])}'
                       + (f' Fix: {e(p["fix"])}' if p.get("fix") else "") + "</li>" for p in data.get("problems", []))
    body = (nav + "<main>" + _leaderboard(data, st, route_slugs)
            + (f'<section id="problems"><h2>Open problems</h2><ul>{problems}</ul></section>' if problems else "")
            + _pairwise(st) + _breakdowns(st) + _judges(st) + _changes(st, slugs) + _provenance(data, st, blocks)
            + _tasks_table(data, tasks, slugs, cells, route_slugs) + "</main>"
            + f'<footer>Scores are 0–100. Dataset sha256 {e(data["dataset_sha256"])}. Generated {e(generated)} from state.db by '
              f'batchrun {e(data["batchrun_version"])}; no script, no network.</footer>')
    index = out / "index.html"
    _write(index, page("WildTrace leaderboard", body, rehearsal=rehearsal, subtitle=subtitle, protocol_note=data.get("protocol_note")))
    return index


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
