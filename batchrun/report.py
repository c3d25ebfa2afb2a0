"""The leaderboard as Markdown, CSV or JSON, sorted by All-tasks, with its provenance."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from .providers import get_adapter


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def rehearsal_title(url: str) -> str:
    return f"Rehearsal on the emulator at {url} — not real results"


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
        w.writerow(["rank", "route", "model", "all_tasks_overall", "scored_overall", "scored_n", "n_tasks",
                    "out_of_context_n", "failed_n", "pending_n", "complete", "rehearsal"])
        for i, r in enumerate(routes, 1):
            w.writerow([i, r["route"], r["model"], r["all_tasks_overall"], r["scored_overall"], r["scored_n"], r["n_tasks"],
                        r["out_of_context_n"], r["failed_n"], r["pending_n"], r["complete"], rehearsal or ""])
        return buf.getvalue()
    lines = [f"# {rehearsal_title(rehearsal)}", ""] if rehearsal else []
    lines += [
        "| # | Route | Model | All-tasks | Scored (n) | Out of context | Failed | Pending |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(routes, 1):
        lines.append(
            f"| {i} | {r['route']} | {r['model']} | {_pct(r['all_tasks_overall'])} | {_pct(r['scored_overall'])} ({r['scored_n']}) "
            f"| {r['out_of_context_n']} | {r['failed_n']} | {r['pending_n']} |"
        )
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
    accepted = [(r["route"], a) for r in routes for a in r["provenance"].get("accepted_failures", [])]
    if accepted:
        lines += ["", "Accepted failures (zero-filled by the maintainer's decision):"]
        lines += [f"- {route}: {a['cells']} cell(s), {a['at']}: {a['reason']}" for route, a in accepted]
    mp = data["matched_panel"]
    lines += ["", f"Matched panel ({mp['n_tasks']} tasks scored by every route; robustness view only): "
              + ", ".join(f"{k} {_pct(v)}" for k, v in mp["routes"].items())]
    lines += ["", "Provenance:"]
    for r in routes:
        p = r["provenance"]
        d = p["decoding"]
        # The hosts the scored answers came from; the configured one too when it differs.
        if not p["endpoint_hosts"]:
            host = f"— (nothing answered yet; the config names {p['configured_host']})"
        elif p["endpoint_hosts"] != [p["configured_host"]]:
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
