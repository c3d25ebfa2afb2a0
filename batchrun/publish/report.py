"""The leaderboard as Markdown, CSV or JSON, sorted by All-tasks, with its provenance.

With the statistics of analysis.full_report (`data["statistics"]`), Markdown and CSV gain the 95%
intervals, coverage and indistinguishable groups, and Markdown the adjacent-rank comparisons,
breakdowns by language and document length, the judge panel's agreement and what changed since
the last refresh; JSON carries all of it. One scale per medium, labelled where it is read: Markdown
(like the HTML site and the terminal) shows 0-100 in headers that say so; CSV and JSON carry
fractions 0-1 (as state.db does), in a `score_scale` column / field that says "0-1".
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from ..providers import get_adapter
from .stats import format_p

# The scale of every score in JSON and CSV (and state.db): fractions. Said in the output itself.
SCORE_SCALE = "0-1"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _ci(iv: dict[str, Any] | None) -> str:
    if not iv or iv.get("low") is None:
        return "—"
    return f"{_pct(iv['low'])}–{_pct(iv['high'])}"


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}"


def _dci(v: dict[str, Any]) -> str:
    """A difference's interval, "—" where it is not estimable (too few documents)."""
    return "—" if v.get("low") is None else f"{_signed(v['low'])} to {_signed(v['high'])}"


_p = format_p  # p-values to 3 significant digits, never rounded to 0 (stats.format_p)


def _statistics_md(st: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    pw = st["pairwise"]
    ranked = pw["routes"]
    index = {(p["a"], p["b"]): p for p in pw["pairs"]}
    few = pw["few_documents"]
    if len(ranked) > 1:
        lines += ["", "Adjacent ranks (a − b in points, 0–100; All-tasks: every task, zero-filled; Both scored: the tasks both scored). "
                      "The document is the unit: docs counts the documents compared, W/L/T the documents won, lost and tied (by the "
                      "sign of their summed difference), sign p and perm. p are the exact sign test and the permutation test over "
                      f"documents, Holm p the sign test adjusted across all {len(pw['pairs'])} pairs:", "",
                  "| a | b | Δ All-tasks (95% CI) | docs | W/L/T | sign p | Holm p | perm. p | Δ Both scored (95% CI) | n | docs | Holm p |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        marked = False
        for a, b in zip(ranked, ranked[1:]):
            x, y = index[(a, b)]["all_tasks"], index[(a, b)]["both_scored"]
            mx, my = (("†" if v["wins"] + v["losses"] < few["reject_min_documents_holm"] else "") for v in (x, y))
            marked = marked or bool(mx or my) or x["low"] is None or y["low"] is None
            lines.append(f"| {a} | {b} | {_signed(x['mean_diff'])} ({_dci(x)}) | {x['n_documents']}{mx} "
                         f"| {x['wins']}/{x['losses']}/{x['ties']} | {_p(x['sign_p'])} | {_p(x['sign_p_holm'])} "
                         f"| {_p(x['permutation']['p'])} ({x['permutation']['method']}) "
                         f"| {_signed(y['mean_diff'])} ({_dci(y)}) | {y['n']} | {y['n_documents']}{my} | {_p(y['sign_p_holm'])} |")
        if marked:
            lines += ["", f"† differs on fewer than {few['reject_min_documents_holm']} documents: no Holm-adjusted test can reach "
                          f"p < {pw['groups']['alpha']} on so few. {few['note']}"]
    groups = pw["groups"]
    if groups["groups"]:
        lines += ["", "Statistically indistinguishable groups: "
                  + "; ".join(f"{g['label']}: {', '.join(g['routes'])}" for g in groups["groups"]) + ".",
                  f"Rule: {groups['rule']} All {len(pw['pairs'])} pairs, with the permutation test too, are in the JSON report "
                  "and the HTML site."]
    for d in st["breakdowns"]:
        if d["dimension"] not in ("language", "doc_length") or not ranked:
            continue
        values = d["values"]
        lines += ["", f"{d['title']} ({d['rule']}): All-tasks 0–100 (95% CI)", "",
                  "| Route | " + " | ".join(f"{v['value']} ({v['n_tasks']} tasks, {v['n_documents']} docs)" for v in values) + " |",
                  "|---|" + "---:|" * len(values)]
        for r in ranked:
            lines.append(f"| {r} | " + " | ".join(
                f"{_pct(v['routes'][r]['all_tasks']['estimate'])} ({_ci(v['routes'][r]['all_tasks'])})" for v in values) + " |")
        if any(v["routes"][r]["all_tasks"]["low"] is None for v in values for r in ranked):
            few_docs = [f"{v['value']}: {v['n_documents']}" for v in values if v["n_documents"] < st["intervals"]["min_documents"]]
            lines += ["", f"—: not estimable: an interval needs at least {st['intervals']['min_documents']} documents"
                          + (f" ({'; '.join(few_docs)})." if few_docs else ".")]
    fields = [d["title"] for d in st["breakdowns"] if d["dimension"].startswith("field:")]
    if fields:
        lines += ["", f"Breakdowns by dataset field ({', '.join(fields)}): in the JSON report and the HTML site."]
    j = st["judges"]
    if j["panel"]:
        alpha = j["krippendorff_alpha_interval"]
        lines += ["", f"Judge panel: Krippendorff's alpha (interval) {'—' if alpha is None else f'{alpha:.3f}'} over "
                      f"{j['alpha_units']} answers; scores 0–100: " + "; ".join(
                          f"{x['judge']} mean {_pct(x['mean_score'])}, retries {_pct(x['retry_rate'])}%, "
                          f"parse failures {x['parse_failures']}" for x in j["judges"]) + "."]
        if j["agreement"]:
            lines.append("Agreement: " + "; ".join(
                f"{p['a']}·{p['b']} Pearson {_r(p['pearson'])}, Spearman {_r(p['spearman'])}, mean |Δ| {_pct(p['mean_abs_diff'])}"
                for p in j["agreement"]) + ".")
    c = st["changes"]
    if c["previous"] is None:
        lines += ["", f"Since the last refresh: {c.get('note', 'nothing to compare with')}."]
    else:
        lines += ["", f"Since the refresh of {c['previous']['taken_at']}: "
                      + (", ".join(f"{k} {v}" for k, v in c["reasons"].items()) or "no cell changed") + "."]
        for r in c["routes"]:
            if not r["cells_changed"] and r["status"] == "kept" and not r["delta_all_tasks"]:
                continue
            b, a = r["before"] or {}, r["after"] or {}
            lines.append(f"- {r['route']} ({r['status']}): All-tasks {_pct(b.get('all_tasks_overall'))} → "
                         f"{_pct(a.get('all_tasks_overall'))} ({_signed(r['delta_all_tasks'])}); {r['cells_changed']} cell(s)"
                         + (": " + ", ".join(f"{k} {v}" for k, v in r["reasons"].items()) if r["reasons"] else ""))
    return lines


def _r(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def render_comparison(c: dict[str, Any]) -> str:
    """`batchrun compare A B` as text; differences in points (0-100)."""
    a, b = c["a"], c["b"]
    lines = [f"# {rehearsal_title(c['rehearsal'])}", ""] if c.get("rehearsal") else []
    if c.get("protocol_note"):
        lines += [f"# {c['protocol_note']}", ""]
    if c.get("provisional"):
        lines += ["# PROVISIONAL comparison: not on equal, complete runs of the protocol (see the notes)", ""]
    h = c["headline"]
    lines.append(f"{a} vs {b} (differences a − b in points, 0-100; the document is the unit of every interval and test)")
    for r in (a, b):
        accepted = h[r].get("accepted_overall")
        lines.append(f"  {r}: All-tasks {_pct(h[r]['all_tasks_overall'])}, Scored {_pct(h[r]['scored_overall'])}"
                     + ("" if h[r]["complete"] else " (incomplete)")
                     + (f" (accepted failures: {_pct(accepted)} with them as 0, not a protocol number)" if accepted is not None else ""))
    for key, title in (("all_tasks", "All tasks, zero-filled"), ("both_scored", "Tasks both scored")):
        v = c[key]
        if not v["n"]:
            lines += ["", f"{title} ({c['variants'][key]}): n = 0, nothing to compare"]
            continue
        perm = v["permutation"]
        how = (f"exact over {perm['n_nonzero']} documents that differ" if perm["method"] == "exact"
               else f"Monte-Carlo, {perm['resamples']} draws, seed {perm['seed']}" if perm["method"] == "monte-carlo" else "no difference")
        ci = (f"95% CI {_signed(v['low'])} to {_signed(v['high'])}" if v["low"] is not None
              else f"95% CI —: fewer than {c['intervals']['min_documents']} documents")
        t = v["tasks"]
        lines += ["", f"{title} ({c['variants'][key]}): n = {v['n']} tasks on {v['n_documents']} document(s)",
                  f"  mean difference {_signed(v['mean_diff'])} ({ci})",
                  f"  documents won/lost/tied {v['wins']}/{v['losses']}/{v['ties']}",
                  f"  sign test on documents (exact, two-sided) p = {_p(v['sign_p'])}",
                  f"  permutation test (sign flips of whole documents, {how}) p = {_p(perm['p'])}",
                  f"  secondary, treating tasks as independent: tasks won/lost/tied {t['wins']}/{t['losses']}/{t['ties']}, "
                  f"sign test over tasks p = {_p(t['sign_p'])}"]
    iv = c["intervals"]
    lines += ["", f"Intervals: t intervals with the document as the cluster (CR2 standard error, Bell-McCaffrey degrees of freedom) "
                  f"over {iv['n_documents']} documents; none below {iv['min_documents']} documents."]
    lines += [f"Note: {n}" for n in c["notes"]]
    return "\n".join(lines) + "\n"


def _protocol_cell(r: dict[str, Any]) -> str:
    """The Markdown table's "Protocol number" cell: yes, why not, or — (no number yet)."""
    if not r.get("non_protocol"):
        return "yes" if r.get("all_tasks_overall") is not None else "—"
    why = []
    if r.get("accepted_n"):
        why.append(f"{r['accepted_n']} accepted failure(s) (All-tasks {_pct(r.get('accepted_overall'))} with them as 0)")
    if any(x.startswith("custom protocol") for x in r["non_protocol"]):
        why.append("custom protocol")
    return "no: " + "; ".join(why)


def host_changed(p: dict[str, Any]) -> bool:
    """Whether a route's provenance `p` should say "the config now names" another host than the one
    its scored answers came from: a maintainer who edits a route's base_url moves where its next
    answers come from, and the published ones say where theirs did.

    Never in a rehearsal: there no route's host comes from the config. config.with_emulator sends
    every route to the emulator, whose address is the rehearsal's own (the --emulator URL, or the
    free loopback port each `batchrun demo` binds), so a second demo, or a rehearsal read with
    --emulator at another port, is not a change anyone made to the route."""
    return bool(p["endpoint_hosts"]) and not p.get("rehearsal") and p["endpoint_hosts"] != [p["configured_host"]]


def rehearsal_title(url: str) -> str:
    return f"Rehearsal on the emulator at {url} — not real results"


def _csv_row(values: list[Any]) -> list[Any]:
    """A CSV row with booleans as 1 and 0 (csv.writer would write Python's True/False): as
    state.db's own views hold them (`leaderboard.complete`), so the report's CSV reads like
    `sqlite-utils state.db "select * from leaderboard" --csv` and Datasette's CSV export, and
    `sqlite-utils insert --csv --detect-types` reads them back as integers."""
    return [int(v) if isinstance(v, bool) else v for v in values]


def ranks(data: dict[str, Any]) -> dict[str, int]:
    """The leaderboard's rank of each ranked route: the complete ones (as the statistics count
    them, which `--provisional` widens), numbered in the order the report lists them (ranked
    first). An incomplete route has none: its place in the list is not a rank (Markdown "—", CSV
    empty), as on the site."""
    st = data.get("statistics")
    if st is not None:
        ranked = [r["route"] for r in data["routes"] if st["routes"].get(r["route"], {}).get("complete")]
    else:
        ranked = [r["route"] for r in data["routes"] if r["complete"] and r["all_tasks_overall"] is not None]
    return {route: i for i, route in enumerate(ranked, 1)}


def render(data: dict[str, Any], fmt: str) -> str:
    # A rehearsal says so in every format: JSON has `rehearsal` (the emulator URL, null for real
    # results); CSV has no place for a title, so every row carries it in a `rehearsal` column
    # (empty for real results); Markdown starts with a title.
    rehearsal = data.get("rehearsal")
    if fmt == "json":
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    routes = data["routes"]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        st = data.get("statistics")
        extra = ["all_tasks_low", "all_tasks_high", "scored_low", "scored_high", "group", "waiting_n", "blocked_n", "accepted_n",
                 "all_tasks_documents", "scored_documents"] if st else []
        # `rehearsal` stays the last column. A number that is not a WildTrace-protocol number says so
        # on its row: protocol (wildtrace | custom), protocol_number (false) and non_protocol (why).
        w.writerow(["rank", "route", "model", "all_tasks_overall", "scored_overall", "scored_n", "n_tasks",
                    "out_of_context_n", "failed_n", "pending_n", "complete", *extra, "accepted_overall", "protocol",
                    "protocol_number", "non_protocol", "score_scale", "rehearsal"])
        rank = ranks(data)
        for r in routes:
            row = [rank.get(r["route"]), r["route"], r["model"], r["all_tasks_overall"], r["scored_overall"], r["scored_n"], r["n_tasks"],
                   r["out_of_context_n"], r["failed_n"], r["pending_n"], r["complete"]]
            if st:
                s = st["routes"].get(r["route"], {})
                a, sc = s.get("all_tasks") or {}, s.get("scored") or {}
                row += [a.get("low"), a.get("high"), sc.get("low"), sc.get("high"), s.get("group"), r.get("waiting_n"),
                        r.get("blocked_n"), r.get("accepted_n"), a.get("n_documents"), sc.get("n_documents")]
            w.writerow(_csv_row([*row, r.get("accepted_overall"), data.get("protocol", "wildtrace"), not r.get("non_protocol"),
                                 "; ".join(r.get("non_protocol", [])), SCORE_SCALE, rehearsal or ""]))
        return buf.getvalue()
    lines = [f"# {rehearsal_title(rehearsal)}", ""] if rehearsal else []
    if data.get("protocol_note"):
        lines += [f"# {data['protocol_note']}", ""]
    st = data.get("statistics")
    lines += [
        "| # | Route | Model | All-tasks (0–100) | Scored (0–100) (n) | Out of context | Failed | Pending |"
        + (" All-tasks 95% CI (0–100) | Scored 95% CI (0–100) | Group |" if st else "") + " Protocol number |",
        "|---|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|:---:|" if st else "") + "---|",
    ]
    rank = ranks(data)
    for r in routes:
        line = (f"| {rank.get(r['route'], '—')} | {r['route']} | {r['model']} | {_pct(r['all_tasks_overall'])} | {_pct(r['scored_overall'])} ({r['scored_n']}) "
                f"| {r['out_of_context_n']} | {r['failed_n']} | {r['pending_n']} |")
        if st:
            s = st["routes"].get(r["route"], {})
            line += f" {_ci(s.get('all_tasks'))} | {_ci(s.get('scored'))} | {s.get('group') or '—'} |"
        lines.append(line + f" {_protocol_cell(r)} |")
    if st:
        b = st["intervals"]
        lines += ["", f"Scores are 0-100. 95% intervals: t intervals with the document as the unit (the questions on one document "
                      f"count as one cluster: CR2 standard error, Bell-McCaffrey degrees of freedom), {b['n_documents']} documents; "
                      f"\"—\": fewer than {b['min_documents']} documents, not estimable. Routes sharing a group letter are "
                      "statistically indistinguishable (rule below)."]
    incomplete = [r["route"] for r in routes if not r["complete"]]
    if incomplete:
        lines += ["", f"Incomplete (headline numbers withheld until every cell is done): {', '.join(incomplete)}."]
    for p in data.get("problems", []):
        what = "answer(s) to judge" if p["stage"] == "judge" else "cell(s)"
        if p["state"] == "blocked":
            lines.append(f"- Blocked: route {p['route']}: {p['requests']} {what}: {p['cause']} ({p['message']}). Fix: {p['fix']}")
        else:
            lines.append(f"- Waiting for the next run: route {p['route']}: {p['requests']} {what} after infrastructure failures "
                         f"(last: {p['message']}).")
    marked = [r["route"] for r in routes if r.get("accepted_n")]
    if marked:
        ranked = st is not None and st.get("provisional")
        lines += ["", f"Not protocol numbers: {', '.join(marked)} (accepted infrastructure failures, which are not the model's "
                      "failures: the protocol leaves All-tasks null, spec 001 §5). "
                      + ("This report is PROVISIONAL: they are ranked, compared and grouped with them counted 0."
                         if ranked else "Left out of the comparisons and groups; `batchrun report --provisional` ranks them with "
                                        "them counted 0.")]
    accepted = [(r["route"], a) for r in routes for a in r["provenance"].get("accepted_failures", [])]
    if accepted:
        lines += ["", "Accepted failures (the maintainer's decision not to wait for these infrastructure failures):"]
        lines += [f"- {route}: {a['cells']} cell(s), {a['at']}: {a['reason']}" for route, a in accepted]
    if st:
        lines += _statistics_md(st)
    mp = data["matched_panel"]
    lines += ["", f"Matched panel ({mp['n_tasks']} tasks scored by every route; robustness view only; 0–100): "
              + ", ".join(f"{k} {_pct(v)}" for k, v in mp["routes"].items())]
    lines += ["", "Provenance:"]
    for r in routes:
        p = r["provenance"]
        d = p["decoding"]
        # The hosts the scored answers came from; the configured one too when it differs.
        if not p["endpoint_hosts"]:
            host = "— (nothing answered yet" + ("" if p.get("rehearsal") else f"; the config names {p['configured_host']}") + ")"
        elif host_changed(p):
            host = f"{p['endpoint_host']} (the config now names {p['configured_host']})"
        else:
            host = p["endpoint_host"]
        lines.append(
            f"- {r['route']}: {p['provider']} {p['model']} at {host} {p['endpoint']}"
            + (f" ({get_adapter(p['provider']).api_version_header} {p['api_version']})" if p.get("api_version") else "")
            + f"; batches {p['endpoint_dates']['first_submitted'] or '—'} … {p['endpoint_dates']['last_ended'] or '—'}"
            + f"; caps {p['context_policy']['en_cap']:,}/{p['context_policy']['cjk_cap']:,} ({p['context_policy']['source']})"
            + f"; temperature {d['temperature']}, max_tokens {d['max_tokens']}"
            + f"; retries {p['retry_policy']['max_retries']}"
        )
    if routes:
        p = routes[0]["provenance"]
        panel = ", ".join(f"{j['route']} ({j['model']})" for j in p["judge_panel"])
        lines += [f"- judge panel: {panel}",
                  f"- prompts: generation {p['prompt_templates']['generation_sha256'][:12]}, judge {p['prompt_templates']['judge_sha256'][:12]}",
                  f"- dataset sha256 {data['dataset_sha256']}; batchrun {data['batchrun_version']}"]
    return "\n".join(lines) + "\n"
