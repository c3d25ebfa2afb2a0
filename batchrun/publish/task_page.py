"""The static site's page per task (site/tasks/<task>.html): the question, the document, the
rubric, each route's answer or why there is none, and each judge's verdict and points.

The document: its file, length and language, what each route's model saw of it (the protocol
sends the whole document or, beyond the route's cap, none of it: nothing in between), and its
text collapsed in a <details>, at most excerpt.EXCERPT_CHARS characters of it with the length
said (a document can be 2.85 M characters; the page stays small). Every value from data is
escaped with `e()` (site.py's docstring).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .excerpt import EXCERPT_CHARS, Excerpt
from .html import STATUS_CLASS, page, pct, short_status
from .svg import e, fmt

Cells = dict[tuple[str, str], dict[str, Any]]
Verdicts = dict[tuple[str, str], dict[str, dict[str, Any]]]


def why_none(c: dict[str, Any], accepted_reasons: list[str]) -> str:
    """Why a cell has no score, in a sentence ("" for a scored one)."""
    st = c["status"]
    if st == "out_of_context_scope":
        kind = "CJK" if c["cjk"] else "en"
        return (f"Not sent: the document ({c['doc_chars']:,} characters) is longer than the route's {kind} cap "
                f"({c['cap']:,} characters). Scored 0 in All-tasks.")
    if st == "refusal":
        return "The model refused" + (f" (finish reason {c['finish_reason']})" if c.get("finish_reason") else "") + ". Scored 0 in All-tasks."
    if st == "empty":
        return "The model returned an empty answer. Scored 0 in All-tasks."
    if st == "accepted":
        why = "; ".join(accepted_reasons) or "no reason recorded"
        return (f"Infrastructure failure accepted by the maintainer's decision ({why}): not the model's failure; counted 0 "
                "only in the route's non-protocol All-tasks"
                + (f"; last error: {c['error_message']}" if c.get("error_message") else "") + ".")
    if st in ("blocked", "waiting"):
        return (f"{st.capitalize()}: " + (c.get("error_message") or "a judge of the panel has not scored this answer yet")
                + ". No score until it finishes.")
    if st in ("pending", "judging"):
        return "Not finished yet (" + st + "). No score until it finishes."
    return ""


def route_link(route: str, route_slugs: dict[str, str], prefix: str = "../") -> str:
    return f'<a href="{prefix}routes/{e(quote(route_slugs[route]))}.html">{e(route)}</a>' if route in route_slugs else e(route)


def _document(t: dict[str, Any], data: dict[str, Any], cells: Cells, excerpt: Excerpt, route_slugs: dict[str, str]) -> str:
    chars = t["doc_chars"]
    length = "—" if chars is None else f"{chars:,}"
    saw = []
    for r in data["routes"]:
        c = cells.get((r["route"], t["task_id"]))
        if c is None:
            continue
        whole = c["status"] != "out_of_context_scope"
        saw.append(f'<tr><th scope="row">{route_link(r["route"], route_slugs)}</th><td class="num">{c["cap"]:,}</td>'
                   f'<td>{"the whole document, in its prompt" if whole else "nothing: longer than its cap, not sent"}</td></tr>')
    table = ('<div class="scroll"><table class="doc-seen"><caption>What each route\'s model saw of this document</caption><thead><tr>'
             '<th scope="col">Route</th><th scope="col" class="num">Cap (characters)</th><th scope="col">Saw</th></tr></thead>'
             f'<tbody>{"".join(saw)}</tbody></table></div>' if saw else "")
    if excerpt.text is None:
        text = f'<p class="note doc-missing">The text is not shown: {e(excerpt.why_not)}</p>'
    else:
        shown = len(excerpt.text)
        cut = chars is not None and shown < chars
        summary = (f"The document: {length} characters, the first {shown:,} shown" if cut
                   else f"The document: {length} characters")
        note = (f'<p class="note">The first {shown:,} of {length} characters, as sent to the routes that saw it; the whole text is '
                f'<code>{e(t["corpus_file"])}</code> in the corpus folder (sha256 {e(t["doc_sha256"])}). A page shows at most '
                f'{EXCERPT_CHARS:,} characters of a document.</p>' if cut else
                f'<p class="note">The whole document, as sent to the routes that saw it (sha256 {e(t["doc_sha256"])}).</p>')
        text = (f'<details class="document"><summary>{e(summary)}</summary>{note}'
                f'<div class="doctext" tabindex="0">{e(excerpt.text)}{"…" if cut else ""}</div></details>')
    return (f'<section id="document"><h2>Document</h2><dl class="kv"><dt>file</dt><dd>{e(t["corpus_file"])}</dd>'
            f'<dt>length</dt><dd>{length} characters · {"CJK" if t["cjk"] else "non-CJK"}</dd></dl>{table}{text}</section>')


def task_page(t: dict[str, Any], data: dict[str, Any], cells: Cells, verdicts: Verdicts, panel: list[str], rehearsal: str | None,
              excerpt: Excerpt, route_slugs: dict[str, str]) -> str:
    rubric = t["rubric"]
    rubric_rows = "".join(f'<tr><th scope="row" class="num">P{i}</th><td class="num">{e(item.get("points"))}</td>'
                          f'<td>{e(item.get("correct_criterion", ""))}</td></tr>' for i, item in enumerate(rubric, 1))
    fields = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in t["fields"].items()
                     if not isinstance(v, (dict, list)) and k not in ("task_id",))
    sections, summary = [], []
    for r in data["routes"]:
        route = r["route"]
        c = cells.get((route, t["task_id"]))
        if c is None:
            continue
        st = c["status"]
        score = f'<b>{fmt(pct(c["score"]))}</b> / 100' if st == "ok" else ""
        accepted = [a["reason"] for a in r["provenance"].get("accepted_failures", [])]
        has_answer = c.get("kind") == "ok" or (st in ("refusal",) and c.get("text"))
        body = ""
        if has_answer:
            body += f'<div class="answer">{e(c.get("text") or "")}</div>'
        why = why_none(c, accepted) if st != "ok" else ""
        if why:
            body += f'<p class="note">{e(why)}</p>'
        jrows = []
        for judge in panel:
            v = verdicts.get((route, t["task_id"]), {}).get(judge)
            if v is None:
                if has_answer:
                    jrows.append(f'<tr><th scope="row">{e(judge)}</th><td colspan="3" class="note">no current verdict</td></tr>')
                continue
            points = v.get("points")
            jrows.append(
                f'<tr class="verdict-row"><th scope="row">{e(judge)}</th><td class="num">{e(fmt(v["total"], 2) if v["total"] is not None else "—")} '
                f'/ {e(fmt(t["rubric_total"], 2))}</td><td class="num"><b>{fmt(pct(v["score"]))}</b></td>'
                f'<td>{e(", ".join(str(p) for p in points)) if isinstance(points, list) else "—"}'
                + (f'<details><summary>verdict</summary><div class="verdict">{e(v["verdict"])}</div></details>' if v.get("verdict") else "")
                + "</td></tr>")
        if jrows:
            body += (f'<div class="scroll"><table><caption>The judges\' verdicts on {e(route)}\'s answer</caption><thead><tr>'
                     '<th scope="col">Judge</th><th scope="col" class="num">Total</th><th scope="col" class="num">Score</th>'
                     '<th scope="col">Points awarded (P1, P2, …)</th></tr></thead><tbody>' + "".join(jrows) + "</tbody></table></div>")
        anchor = "r-" + quote(route, safe="")
        summary.append(f'<tr><th scope="row"><a href="#{e(anchor)}">{e(route)}</a></th><td><span class="status {STATUS_CLASS.get(st, "")}">'
                       f'{e(short_status(st))}</span></td><td class="num">{fmt(pct(c["score"])) if st == "ok" else "—"}</td></tr>')
        sections.append(
            f'<div class="route" id="{e(anchor)}" data-route="{e(route)}"><h3>{e(route)} <span class="status {STATUS_CLASS.get(st, "")}">'
            f'{e(short_status(st))}</span> {score}</h3><span class="model">{e(r["provider"])} · {e(r["model"])} · '
            f'{route_link(route, route_slugs)}\'s page</span>{body}</div>')
    body = (f'<nav><a href="../index.html">← Leaderboard</a><a href="../index.html#tasks">All tasks</a></nav><main>'
            f'<section id="question"><h2>Question</h2><div class="question">{e(t["question"])}</div>'
            + (f'<dl class="kv">{fields}</dl>' if fields else "") + "</section>"
            + _document(t, data, cells, excerpt, route_slugs)
            + f'<section id="rubric"><h2>Rubric ({e(fmt(t["rubric_total"], 2))} points)</h2><div class="scroll"><table>'
            '<caption>The rubric: points per criterion</caption><thead><tr><th scope="col">Item</th><th scope="col" class="num">Points</th>'
            f'<th scope="col">Criterion</th></tr></thead><tbody>{rubric_rows}</tbody></table></div>'
            '<p class="note">Scores are 0–100: each judge\'s clamp(total / rubric points) × 100; the task score is the mean of '
            'the panel, only once every judge scored it. The gold answer and clues are not shown.</p></section>'
            '<section id="scores"><h2>Scores</h2><div class="scroll"><table class="task-scores"><caption>Each route\'s score on this task '
            '(0–100)</caption><thead><tr><th scope="col">Route</th><th scope="col">Status</th>'
            f'<th scope="col" class="num">Score</th></tr></thead><tbody>{"".join(summary)}</tbody></table></div></section>'
            f'<section id="answers"><h2>Answers and verdicts</h2>{"".join(sections)}</section></main>')
    return page(f"Task {t['task_id']}", body, rehearsal=rehearsal, subtitle=f"{len(data['routes'])} routes · panel: {e(', '.join(panel))}",
                protocol_note=data.get("protocol_note"))
