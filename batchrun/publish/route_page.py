"""The static site's page per route (site/routes/<route>.html), and the leaderboard row both it
and the index show.

A route's page: its headline (the leaderboard's row: rank and group, All-tasks and Scored with
their 95% intervals, the interval plot, coverage), its breakdowns (each value's tasks and
documents, All-tasks and Scored with intervals, "—" where too few documents leave one not
estimable, as on the leaderboard), the tasks it has no score on and why (refusals, empty
answers, accepted failures, out of context, open), its cost (generation, the judging of its
answers, preflights: expected, bound and actual, from the `cost` view and the results), its
provenance, and every task sorted by its score, each linked to the task's page.

Every value from data is escaped with `e()` (site.py's docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ..ledger.cost import fmt_money
from ..ledger.lifecycle import Status
from ..ledger.store import Store
from .html import STATUS_CLASS, ci_text, code_spans, page, pct, short_status
from .svg import axis, coverage_bar, e, fmt, interval_bar, score_colour, text_colour
from .task_page import Cells, Verdicts, why_none

COVERAGE_WORDS = (("scored", "scored"), ("out_of_context", "out of context"), ("failed", "failed"), ("accepted", "accepted"),
                  ("pending", "open"))
LEADERBOARD_HEAD = (
    '<thead><tr><th scope="col" class="num"># <span class="ci">group</span></th><th scope="col">Route</th>'
    '<th scope="col" class="num">All-tasks (0–100)<span class="ci">95% CI</span></th><th scope="col" class="plot">● All-tasks ◇ Scored, 95% CI'
    f'{axis()}</th><th scope="col" class="num">Scored (0–100) (n)<span class="ci">95% CI</span></th><th scope="col">Coverage</th></tr></thead>')


def leaderboard_row(r: dict[str, Any], st: dict[str, Any], rank: int | None, href: str, why_href: str) -> str:
    """One route's row: its numbers are text beside the plots (the plots' titles say nothing the
    row does not), and each cell names itself (data-label) for the phone's stacked layout. The
    "not protocol" mark links to the reasons in words (`why_href`, on the route's page): its
    title shows them only under a mouse."""
    s = st["routes"].get(r["route"], {})
    a, sc, cov = s.get("all_tasks"), s.get("scored"), s.get("coverage", {})
    complete = bool(s.get("complete"))
    # Not a protocol number (accepted failures; a custom panel): a mark beside the route's name.
    mark = (f'<a class="nonprotocol" href="{e(why_href)}" title="{e("; ".join(r["non_protocol"]))}">not protocol</a>'
            if r.get("non_protocol") else "")
    if complete and a:
        label = (f"{r['route']}: All-tasks {fmt(pct(a['estimate']))} (95% CI {ci_text(pct(a['low']), pct(a['high']))}); "
                 f"Scored {fmt(pct(sc['estimate']))} (95% CI {ci_text(pct(sc['low']), pct(sc['high']))})")
        all_cell = f'<b>{fmt(pct(a["estimate"]))}</b><span class="ci">{ci_text(pct(a["low"]), pct(a["high"]))}</span>'
        plot = interval_bar((pct(a["estimate"]), pct(a["low"]), pct(a["high"])),
                            (pct(sc["estimate"]), pct(sc["low"]), pct(sc["high"])), label=label)
        scored_cell = (f'{fmt(pct(sc["estimate"]))} <small>({sc["n"]})</small>'
                       f'<span class="ci">{ci_text(pct(sc["low"]), pct(sc["high"]))}</span>')
    elif r.get("accepted_overall") is not None:
        # Complete, but All-tasks is not a protocol number (spec 001 §5): shown apart, unranked.
        all_cell = (f'withheld<span class="ci">{cov.get("accepted", 0)} accepted failure(s)</span>'
                    f'<span class="ci">{fmt(pct(r["accepted_overall"]))} with them as 0</span>')
        plot = interval_bar((None, None, None), label=f"{r['route']}: accepted failures, no protocol headline")
        scored_cell = f'{fmt(pct(r["scored_overall"]))} <small>({r["scored_n"]})</small><span class="ci">no interval (not ranked)</span>'
    else:
        all_cell = 'withheld<span class="ci">incomplete</span>'
        plot = interval_bar((None, None, None), label=f"{r['route']}: incomplete, no headline")
        scored_cell = f'withheld<span class="ci">{cov.get("pending", 0)} open</span>'
    counts = ", ".join(f"{cov.get(k, 0)} {name}" for k, name in COVERAGE_WORDS if cov.get(k, 0))
    title = ' title="not a protocol number"' if r.get("accepted_overall") is not None and not (complete and a) else ""
    return (f'<tr class="route-row" data-route="{e(r["route"])}"><td class="num rank" data-label="#, group">{rank or ""} '
            f'<span class="group">{e(s.get("group") or "–")}</span></td>'
            f'<th scope="row" class="name"><a href="{e(href)}">{e(r["route"])}</a>{mark}'
            f'<span class="model">{e(r["provider"])} · {e(r["model"])}</span></th>'
            f'<td class="num all" data-label="All-tasks (0–100), 95% CI"{title}>{all_cell}</td>'
            f'<td class="plot"><span class="phone-axis" aria-hidden="true">{axis()}</span>{plot}</td>'
            f'<td class="num scored" data-label="Scored (0–100) (n), 95% CI">{scored_cell}</td>'
            f'<td class="cov" data-label="Coverage">{coverage_bar(cov, cov.get("n_tasks", 0))}<span class="ci">{e(counts)}</span></td></tr>')


def leaderboard_table(rows: str, caption: str) -> str:
    return f'<div class="scroll"><table class="leaderboard"><caption>{caption}</caption>{LEADERBOARD_HEAD}<tbody>{rows}</tbody></table></div>'


# --- cost --------------------------------------------------------------------------------------------


def route_costs(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Per route: generation and preflights (the `cost` view, as `batchrun cost` reads it) and
    the judging of its answers (the judges' results on its answers). A cost is None (unknown)
    unless every part of it is priced: never shown as $0."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in store.rows(
            """SELECT route, stage, count(*) AS batches, coalesce(sum(results), 0) AS results,
                      coalesce(sum(input_tokens), 0) AS input_tokens, coalesce(sum(output_tokens), 0) AS output_tokens,
                      CASE WHEN count(expected_cost) = count(*) THEN sum(expected_cost) END AS expected_cost,
                      CASE WHEN count(estimated_cost) = count(*) THEN sum(estimated_cost) END AS estimated_cost,
                      CASE WHEN count(actual_cost) = count(*) THEN sum(actual_cost) END AS actual_cost
               FROM cost WHERE stage IN ('gen', 'preflight') AND batch_id NOT IN (SELECT id FROM batches WHERE status = ?)
               GROUP BY route, stage""", [Status.REFUSED]):
        out.setdefault(r["route"], []).append(r)
    # A judge's request names the answer it grades (parent_custom_id), whose request names the route.
    for r in store.rows(
            """SELECT g.route AS route, 'judging its answers' AS stage, count(DISTINCT res.batch_id) AS batches,
                      count(*) AS results, coalesce(sum(res.input_tokens), 0) AS input_tokens,
                      coalesce(sum(res.output_tokens), 0) AS output_tokens, NULL AS expected_cost, NULL AS estimated_cost,
                      CASE WHEN count(res.cost) = count(*) THEN sum(res.cost) END AS actual_cost
               FROM results res JOIN requests j ON j.custom_id = res.custom_id AND j.stage = 'judge'
               JOIN requests g ON g.custom_id = j.parent_custom_id GROUP BY g.route"""):
        out.setdefault(r["route"], []).append(r)
    order = {"gen": 0, "judging its answers": 1, "preflight": 2}
    for rows in out.values():
        rows.sort(key=lambda r: order.get(r["stage"], 3))
    return out


def _cost(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<section id="cost"><h2>Cost</h2><p class="note">Nothing sent yet.</p></section>'
    names = {"gen": "generation", "preflight": "preflights"}
    body = "".join(
        f'<tr><th scope="row">{e(names.get(r["stage"], r["stage"]))}</th><td class="num">{r["batches"]:,}</td>'
        f'<td class="num">{r["results"]:,}</td><td class="num">{r["input_tokens"]:,}</td><td class="num">{r["output_tokens"]:,}</td>'
        f'<td class="num">{e(fmt_money(r["expected_cost"]) if r["stage"] != "judging its answers" else "—")}</td>'
        f'<td class="num">{e(fmt_money(r["estimated_cost"]) if r["stage"] != "judging its answers" else "—")}</td>'
        f'<td class="num"><b>{e(fmt_money(r["actual_cost"]))}</b></td></tr>' for r in rows)
    return ('<section id="cost"><h2>Cost</h2><div class="scroll"><table class="cost"><caption>What this route cost, by stage (US dollars)'
            '</caption><thead><tr><th scope="col">Stage</th><th scope="col" class="num">Batches</th><th scope="col" class="num">Results</th>'
            '<th scope="col" class="num">Input tokens</th><th scope="col" class="num">Output tokens</th>'
            '<th scope="col" class="num">Expected</th><th scope="col" class="num">Bound</th><th scope="col" class="num">Actual</th>'
            f'</tr></thead><tbody>{body}</tbody></table></div><p class="note">As <code>batchrun cost</code> counts it: the expected '
            'estimate, the bound (every answer at its max_tokens) and the actual spend from the providers\' usage at the route\'s price; '
            '"unknown" where a price is missing, never $0. Judging its answers: what the panel\'s judges spent grading them (all '
            'attempts), at the judges\' prices.</p></section>')


# --- the page ------------------------------------------------------------------------------------------


def _breakdowns(route: str, st: dict[str, Any]) -> str:
    head = '<section id="breakdowns"><h2>Breakdowns</h2>'
    if route not in st["pairwise"]["routes"]:
        return head + ('<p class="note">Not yet: breakdowns are of complete routes (ranked on the leaderboard; '
                       '<code>--provisional</code> includes routes with accepted failures).</p></section>')
    parts = [head, '<div class="cards">']
    for d in st["breakdowns"]:
        rows = []
        for v in d["values"]:
            a, s = v["routes"][route]["all_tasks"], v["routes"][route]["scored"]
            rows.append(f'<tr><th scope="row">{e(v["value"])}</th><td class="num">{v["n_tasks"]}</td><td class="num">{v["n_documents"]}</td>'
                        f'<td class="num"><b>{fmt(pct(a["estimate"]))}</b><span class="ci">{ci_text(pct(a["low"]), pct(a["high"]))}</span></td>'
                        f'<td class="num">{fmt(pct(s["estimate"]))} <small>({s["n"]})</small>'
                        f'<span class="ci">{ci_text(pct(s["low"]), pct(s["high"]))}</span></td></tr>')
        heading = f'Dataset field: {d["title"]}' if d["dimension"].startswith("field:") else d["title"]
        parts.append(
            f'<div class="breakdown" data-dimension="{e(d["dimension"])}"><div class="scroll"><table><caption>{e(heading)}: '
            f'{code_spans(d["rule"])}</caption><thead><tr><th scope="col">{e(d["title"])}</th><th scope="col" class="num">tasks</th>'
            '<th scope="col" class="num">docs</th><th scope="col" class="num">All-tasks (0–100)<span class="ci">95% CI</span></th>'
            '<th scope="col" class="num">Scored (0–100) (n)<span class="ci">95% CI</span></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></div>')
    parts.append(f'</div><p class="note">Intervals with the document as the unit, as on the leaderboard; — where fewer than '
                 f'{st["intervals"]["min_documents"]} documents leave one not estimable.</p></section>')
    return "".join(parts)


def _unscored(r: dict[str, Any], tasks: list[dict[str, Any]], cells: Cells, task_href: Callable[[str], str]) -> str:
    accepted = [a["reason"] for a in r["provenance"].get("accepted_failures", [])]
    rows = []
    for t in tasks:
        c = cells.get((r["route"], t["task_id"]))
        if c is None or c["status"] == "ok":
            continue
        rows.append(f'<tr class="unscored-row"><th scope="row"><a href="{e(task_href(t["task_id"]))}">{e(t["task_id"])}</a></th>'
                    f'<td><span class="status {STATUS_CLASS.get(c["status"], "")}">{e(short_status(c["status"]))}</span></td>'
                    f'<td>{e(why_none(c, accepted))}</td></tr>')
    head = '<section id="failures"><h2>Failures, refusals and other unscored tasks</h2>'
    if not rows:
        return head + '<p class="note">None: every task has a score.</p></section>'
    return (head + '<div class="scroll"><table class="unscored"><caption>The tasks this route has no score on, and why</caption>'
            '<thead><tr><th scope="col">Task</th><th scope="col">Status</th><th scope="col">Why</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def _tasks(r: dict[str, Any], tasks: list[dict[str, Any]], cells: Cells, verdicts: Verdicts, panel: list[str],
           task_href: Callable[[str], str]) -> str:
    route = r["route"]
    order = {"ok": 0, "refusal": 1, "empty": 1, "out_of_context_scope": 2, "accepted": 3}
    mine = [(t, cells[(route, t["task_id"])]) for t in tasks if (route, t["task_id"]) in cells]
    # Best first; then the unscored, failures before out of context before open; ties in dataset order.
    mine.sort(key=lambda tc: (order.get(tc[1]["status"], 4), -(tc[1]["score"] or 0) if tc[1]["status"] == "ok" else 0))
    rows = []
    for t, c in mine:
        if c["status"] == "ok":
            v = pct(c["score"])
            bg = score_colour(v)
            cell = f'<span class="sq" style="background:{bg};color:{text_colour(bg)}">{fmt(v)}</span>'
        else:
            cell = f'<span class="status {STATUS_CLASS.get(c["status"], "")}">{e(short_status(c["status"]))}</span>'
        judged = verdicts.get((route, t["task_id"]), {})
        judges = "".join(f'<td class="num">{fmt(pct(judged[j]["score"])) if j in judged else "—"}</td>' for j in panel)
        q = t["question"]
        rows.append(f'<tr class="route-task" data-task="{e(t["task_id"])}"><th scope="row"><a href="{e(task_href(t["task_id"]))}">'
                    f'{e(t["task_id"])}</a></th><td class="num">{cell}</td>'
                    f'<td class="q">{e(q if len(q) <= 140 else q[:139] + "…")}</td>{judges}'
                    f'<td class="num">{"—" if t["doc_chars"] is None else format(t["doc_chars"], ",")}</td></tr>')
    judge_head = "".join(f'<th scope="col" class="num">{e(j)}</th>' for j in panel)
    return ('<section id="tasks"><h2>Tasks, best first</h2><div class="scroll"><table class="tasks">'
            f'<caption>Every task by this route\'s score (0–100), then those without one; each judge\'s score beside it</caption>'
            f'<thead><tr><th scope="col">Task</th><th scope="col" class="num">Score</th><th scope="col">Question</th>{judge_head}'
            f'<th scope="col" class="num">Doc. chars</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def route_page(r: dict[str, Any], data: dict[str, Any], st: dict[str, Any], rank: int | None, tasks: list[dict[str, Any]],
               cells: Cells, verdicts: Verdicts, panel: list[str], costs: list[dict[str, Any]], provenance: str,
               task_slugs: dict[str, str]) -> str:
    """`provenance`: the route's provenance block as the index shows it."""
    def task_href(task_id: str) -> str:
        return f"../tasks/{quote(task_slugs[task_id])}.html"

    route = r["route"]
    reasons = (f'<p class="nonprotocol-why" id="why"><span class="nonprotocol">not protocol</span> {e("; ".join(r["non_protocol"]))}</p>'
               if r.get("non_protocol") else "")
    body = ('<nav><a href="../index.html">← Leaderboard</a><a href="#breakdowns">Breakdowns</a><a href="#failures">Failures</a>'
            '<a href="#cost">Cost</a><a href="#provenance">Provenance</a><a href="#tasks">Tasks</a></nav><main>'
            f'<section id="headline"><h2>Headline</h2>'
            + leaderboard_table(leaderboard_row(r, st, rank, "../index.html#leaderboard", "#why"), f"{e(route)} on the leaderboard")
            + reasons + '<p class="note">Scores are 0–100; intervals are 95%, with the document as the unit (see the '
            '<a href="../index.html#leaderboard">leaderboard</a>\'s notes).</p></section>'
            + _breakdowns(route, st) + _unscored(r, tasks, cells, task_href) + _cost(costs)
            + f'<section id="provenance"><h2>Provenance</h2>{provenance}</section>'
            + _tasks(r, tasks, cells, verdicts, panel, task_href) + "</main>")
    return page(f"Route {route}", body, rehearsal=data.get("rehearsal"), subtitle=f"{e(r['provider'])} · {e(r['model'])}",
                protocol_note=data.get("protocol_note"))
