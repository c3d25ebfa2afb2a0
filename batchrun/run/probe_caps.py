"""What a probe's evidence becomes (probe.py measures it): the caps it suggests, its description for
a person, its row in state.db (`probes`, m013: kept for audit whether or not its caps were
written), and the caps written into the route's table of the config file with a comment saying
when and how they were measured (`probe --write`)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ..base.errors import BatchrunError
from ..ledger.cost import fmt_money
from ..ledger.store import Store
from ..protocol.config import Config, Route
from .probe import SCRIPTS, ProbeResult, route_for

def record(store: Store, result: ProbeResult, *, written: bool) -> int:
    """The probe as a row of `probes` (m013), evidence included."""
    row = {
        "route": result.route, "provider": result.provider, "model": result.model, "method": result.method,
        "en_cap": result.caps.get("en"), "cjk_cap": result.caps.get("cjk"), "window_tokens": result.window,
        "cost": result.spent, "max_cost": result.max_cost, "precision": result.precision,
        "evidence_json": json.dumps(result.evidence(), ensure_ascii=False, sort_keys=True), "written": int(written),
        "probed_at": result.probed_at, "run_id": store.run_id,
    }
    with store.db.atomic():
        cur = store.db.execute(f"INSERT INTO probes ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))
    return int(cur.lastrowid or 0)


def suggested_caps(result: ProbeResult, route: Route) -> tuple[int | None, int | None]:
    """The caps to suggest and write: the measured ones; None for a script not measured (its cap
    is not suggested: a cap not measured on a document of its script is no evidence)."""
    return result.caps.get("en"), result.caps.get("cjk")


def caps_text(en: int | None, cjk: int | None) -> str:
    """The TOML the suggestion reads as (only the caps measured)."""
    parts = [f"{k} = {v}" for k, v in (("en", en), ("cjk", cjk)) if v is not None]
    return f"caps = {{ {', '.join(parts)} }}" if parts else ""


def describe(result: ProbeResult, route: Route) -> list[str]:
    """The report a person reads: the evidence per script, then the suggestion."""
    method = {"tokens": "the provider's stated window and token counts",
              "search": f"binary search on document length (max_tokens 1), precision {result.precision:.1%}"}[result.method]
    lines = [f"route {result.route!r} ({result.provider} {result.model}): {method}"]
    if result.dry_run:
        lines[0] += " -- dry run, nothing sent"
        return lines + [f"  {p}" for p in result.plan]
    if result.window is not None:
        lines.append(f"  window stated by the provider: {result.window:,} input tokens")
    for r in result.scripts:
        head = f"  {r.script}: "
        if r.sample is not None:
            head += f"{r.sample.corpus_file} ({r.sample.chars:,} characters), task {r.sample.task_id}; "
        if r.tokens:
            head += (f"{r.tokens['sample_chars']:,} characters = {r.tokens['prompt_with_sample'] - r.tokens['prompt_without_document']:,} "
                     f"tokens ({r.chars_per_token} characters a token), prompt without document {r.tokens['prompt_without_document']:,} tokens")
        lines.append(head.rstrip("; "))
        for s in (s for s in result.steps if s.script == r.script):
            told = f", {s.input_tokens:,} tokens" if s.input_tokens else ""
            told += f" > window {s.window:,}" if s.window else ""
            cost = f"cost {fmt_money(s.cost)}" if s.outcome == "accepted" else ""
            lines.append(f"    {s.chars:>10,} characters  est. {s.est_tokens:>9,} tokens {fmt_money(s.est_cost):>9}  {s.outcome}{told} {cost}".rstrip())
        if result.method == "search" and r.sample is not None:
            rejected = f"{r.smallest_rejected:,}" if r.smallest_rejected else "none"
            lines.append(f"    largest accepted {r.largest_accepted or 0:,} characters, smallest rejected {rejected}")
        if r.note:
            lines.append(f"    note: {r.note}")
        lines.append(f"    cap: {r.cap:,} characters" if r.cap is not None else f"    cap: not measured (the route keeps {getattr(route.caps, r.script):,})")
    if result.method == "search":
        budget = f" of --max-cost {fmt_money(result.max_cost)}" if result.max_cost is not None else ""
        lines.append(f"spent: {fmt_money(result.spent)}{budget} ({sum(s.outcome != 'not sent (budget)' for s in result.steps)} requests)")
    en, cjk = suggested_caps(result, route)
    if en is None and cjk is None:
        lines.append("suggested: no caps (nothing was measured; see the notes above)")
        return lines
    lines.append(f"suggested, under [routes.\"{result.route}\"]:")
    lines.append(caps_text(en, cjk))
    for script, cap in (("en", en), ("cjk", cjk)):
        if cap is None:
            lines.append(f"(no {script} cap suggested: the route keeps its {script} cap, {getattr(route.caps, script):,} "
                         f"characters ({route.caps.source}))")
    return lines


def missing_caps(result: ProbeResult) -> list[str]:
    """Scripts the project has a document of that the probe found no cap for."""
    return [r.script for r in result.scripts if r.cap is None and r.sample is not None] if not result.dry_run else list(SCRIPTS)


def write_caps(config: Config, result: ProbeResult) -> tuple[int | None, int | None]:
    """Put the suggested caps into the route's table of the config file (config_write), with a
    comment naming the date and the method; refused while a script with a document has no cap."""
    from ..protocol.config_write import write_route_caps

    route = route_for(config, result.route)
    missing = missing_caps(result)
    if missing:
        raise BatchrunError(f"Not written: the probe measured no {' / '.join(missing)} cap for route {result.route!r}.",
                            "See the notes above (raise --max-cost, or fix what the provider refused), and probe again.")
    en, cjk = suggested_caps(result, route)
    if en is None and cjk is None:
        raise BatchrunError(f"Not written: the probe measured no cap for route {result.route!r}.", "See the notes above.")
    write_route_caps(Path(config.path), result.route, en, cjk, caps_comment(result))
    return en, cjk


_SAFE_COMMENT = re.compile(r"[^\x20-\x7e]")


def caps_comment(result: ProbeResult) -> str:
    """The comment --write puts above the caps: the date and the method."""
    day = time.strftime("%Y-%m-%d", time.gmtime(result.probed_at))
    how = (f"window {result.window} tokens stated by the provider, characters per token counted on the project's documents"
           if result.method == "tokens" else f"binary search on document length, max_tokens 1, precision {result.precision:.1%}")
    kept = [r.script for r in result.scripts if r.cap is None]
    how += f"; {'/'.join(kept)} not measured (no suitable document), not written" if kept else ""
    return _SAFE_COMMENT.sub("?", f"caps probed {day} by `batchrun probe {result.route}` ({result.model}): {how}")

