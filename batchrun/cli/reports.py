"""The commands that read: status, report (Markdown, CSV, JSON or the static site), compare, cost
and verify. Read-only: they work on read-only media and while a writer runs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..base.errors import BatchrunError
from .support import Context, complete_routes, handle_errors, json_header, note_rehearsal, pass_ctx, reader


@click.command()
@click.option("--route", "routes", multiple=True, metavar="NAME", shell_complete=complete_routes, help="Only this route (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def status(ctx: Context, routes: tuple[str, ...], as_json: bool) -> None:
    """Cells per route and batches in flight (read-only; works while a writer runs)."""
    from ..run.status import status_data

    config = ctx.reading_config()
    config.require_routes(routes)
    note_rehearsal(config)
    with reader(config) as store:
        data = status_data(store, config, routes or None)
        header = json_header(config, store) if as_json else {}  # the version lookup costs ~20 ms
    if as_json:
        click.echo(json.dumps({**header, **data}, indent=2))
        return
    for route, counts in data["cells"].items():
        words = sorted(counts.items())
        split = data["pending"].get(route)
        if split:
            # "pending" says nothing about whether it was sent: say which.
            words = [w for w in words if w[0] != "pending"]
            unsent: int | str = split["unsent"]
            if split.get("backing_off"):  # sent again once their backoff after a failure is over
                unsent = f"{unsent} ({split['backing_off']} back off after a failure, the first due {split['next_attempt_at']})"
            words += [(k, v) for k, v in (("pending (unsent)", unsent), ("in flight", split["in_flight"])) if v]
        click.echo(f"{route}: " + ", ".join(f"{k} {v}" for k, v in words))
        if routes:  # asked for this route alone: what holds up the judges of its answers (without --route, their own lines say it)
            for w in data["judges_held"].get(route, []):
                click.echo(f"{route}: judge route {w['judge']!r}, grading {w['requests']} of its answers, held since {w['held_at']}: {w['held']}"
                           if "held" in w else
                           f"{route}: judge route {w['judge']!r} backs off after a failure ({w['backing_off']} judge request(s) in all), "
                           f"the first due {w['next_attempt_at']}")
    for route, b in data["judges_backing_off"].items():
        click.echo(f"{route}: {b['requests']} judge request(s) back off after a failure, the first due {b['next_attempt_at']}")
    for p in data["problems"]:
        click.echo(f"{p['state']}: {p['text']}")
    for t in data["truncated"]:
        click.echo(f"truncated: {t['text']}")
    click.echo(f"{len(data['in_flight'])} batch(es) live")
    for b in data["in_flight"]:
        click.echo(f"  {b['id']}: {b['state']} {b['provider_status'] or ''} {b['provider_batch_id'] or ''} ({b['n_requests']} requests)"
                   + (f": {b['error']}" if b["error"] else "") + (f"; held since {b['held_at']}: {b['held']}" if b["held"] else ""))
    if data["planned"]:
        held = sum(1 for b in data["planned"] if b["held"])
        click.echo(f"{len(data['planned'])} batch(es) planned (not sent)"
                   + (f", {held} of them held back by a submit (each says why)" if held else ": the next submit sends them"))
        for b in data["planned"]:
            click.echo(f"  {b['id']}: {b['state']} ({b['n_requests']} requests)" + (f": {b['error']}" if b["error"] else "")
                       + (f"; held since {b['held_at']}: {b['held']}" if b["held"] else "; the next submit sends it" if held else ""))


MAX_RESAMPLES = 100_000


def statistics_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from ..publish.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    # numpy seeds from any non-negative integer; the bound keeps it an SQLite and JSON integer.
    fn = click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=DEFAULT_SEED, show_default=True,
                      help="Seed of the Monte-Carlo permutation draws (0 or more).")(fn)
    # The Monte-Carlo draws are a resamples x documents matrix: 10**12 would take terabytes
    # (numpy's _ArrayMemoryError); the p-value's Monte-Carlo error is long negligible before that.
    fn = click.option("--resamples", type=click.IntRange(min=100, max=MAX_RESAMPLES), default=DEFAULT_RESAMPLES, show_default=True,
                      help="Monte-Carlo sign flips (of whole documents) for the permutation test, when more than 20 documents "
                           f"differ ({100}-{MAX_RESAMPLES:,}).")(fn)
    return fn


@click.command()
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json", "html"]), default="md", show_default=True,
              help="Output format: Markdown, CSV, JSON (everything), or html: a static site written to --out DIR.")
@click.option("--out", type=click.Path(), help="Write to this file instead of stdout (html: this folder).")
@click.option("--provisional", is_flag=True, help="Rank, compare and group routes with accepted failures too (their numbers are marked: not protocol numbers).")
@statistics_options
@pass_ctx
@handle_errors
def report(ctx: Context, fmt: str, out: str | None, provisional: bool, resamples: int, seed: int) -> None:
    """The leaderboard (read-only), sorted by All-tasks, with intervals, paired comparisons and provenance."""
    from ..publish.analysis import Settings, full_report
    from ..publish.report import render

    config = ctx.reading_config()
    if fmt == "html" and not out:
        raise BatchrunError("--format html writes a folder of pages, not a stream.", "Pass --out DIR, e.g. --out site/.")
    with reader(config) as store:
        # Markdown and CSV print no per-task rows: not built for them (~0.1 s at 32 routes x 100k results).
        data = full_report(store, config, Settings(resamples=resamples, seed=seed, provisional=provisional),
                           with_tasks=fmt in ("json", "html"))
        if fmt == "html":
            from ..publish.site import write_site

            try:
                index = write_site(store, config, data, Path(str(out)))
            except OSError as e:
                # /dev/null, /proc/x, a file, a read-only place: the folder the user named.
                where = f" ({e.filename})" if e.filename and str(e.filename) != str(out) else ""
                raise BatchrunError(f"Cannot write the site to --out {out}: {e.strerror or e}{where}.",
                                    "Pass --out a folder you can create and write (new, empty, or written by an earlier "
                                    "report), e.g. --out site/.") from None
            if not ctx.quiet:
                click.echo(f"wrote {index}", err=True)
            return
    text = render(data, fmt)
    if out:
        try:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise BatchrunError(f"Cannot write the report to --out {out}: {e.strerror}.",
                                "Choose a path in a writable folder (or leave out --out to print the report).")
        if not ctx.quiet:
            click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)


@click.command()
@click.argument("route_a", metavar="A", shell_complete=complete_routes)
@click.argument("route_b", metavar="B", shell_complete=complete_routes)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (differences as fractions 0-1).")
@click.option("--provisional", is_flag=True, help="Compare the tasks both routes have finished, when the runs are not equal and complete (the result says so).")
@statistics_options
@pass_ctx
@handle_errors
def compare(ctx: Context, route_a: str, route_b: str, as_json: bool, provisional: bool, resamples: int, seed: int) -> None:
    """Paired comparison of two routes: mean difference with interval, sign and permutation tests (read-only).

    Both routes must have finished every task (exit 2 naming what is open) and have no accepted
    failures (exit 1); --provisional compares the tasks both have finished, and says so.
    """
    from ..publish.analysis import Settings
    from ..publish.analysis import compare as do_compare
    from ..publish.report import render_comparison
    from ..ledger.store import Store

    config = ctx.reading_config()
    for name in (route_a, route_b):  # a misspelling is said before state.db is opened (compare says the rest)
        if name not in config.routes:
            raise config.route_error(name, what="", among=[r.name for r in config.contestants], kind="contestant route")
    store = Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True)
    data = do_compare(store, config, route_a, route_b, Settings(resamples=resamples, seed=seed, provisional=provisional))
    if as_json:
        click.echo(json.dumps({**json_header(config, store), **data}, ensure_ascii=False, indent=2))
        return
    click.echo(render_comparison(data), nl=False)


@click.command()
@click.option("--since", metavar="YYYY-MM-DD", help="Only nights from this date on.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def cost(ctx: Context, since: str | None, as_json: bool) -> None:
    """Spend per route and per night: estimate vs actual (read-only)."""
    from ..ledger.cost import cost_report, fmt_money

    config = ctx.reading_config()
    note_rehearsal(config)
    with reader(config) as store:
        data = cost_report(store, since, order=list(config.routes))
        header = json_header(config, store) if as_json else {}  # the version lookup costs ~20 ms
    if as_json:
        click.echo(json.dumps({**header, **data}, indent=2))
        return
    # stage: gen, judge or preflight (each preflight is one online request, counted as a "batch")
    click.echo(f"{'night':10} {'route':24} {'stage':9} {'batches':>7} {'in tok':>12} {'out tok':>12} {'expected':>10} {'bound':>10} {'actual':>10}")
    for r in data["rows"]:
        click.echo(f"{r['night']:10} {r['route'][:24]:24} {r['stage']:9} {r['batches']:>7} {r['input_tokens']:>12,} {r['output_tokens']:>12,} "
                   f"{fmt_money(r['expected_cost']):>10} {fmt_money(r['estimated_cost']):>10} {fmt_money(r['actual_cost']):>10}")
    for n in data["nights"]:
        unpriced = n["unpriced_routes"]
        click.echo(f"{n['night']:10} {'TOTAL':24} {'':9} {n['batches']:>7} {'':>12} {'':>12} {fmt_money(n['expected_cost']):>10} "
                   f"{fmt_money(n['estimated_cost']):>10} {fmt_money(n['actual_cost']):>10}"
                   + (f"  priced routes only: {len(unpriced)} route(s) unpriced ({', '.join(unpriced)})" if unpriced else ""))
    if data["nights"]:
        click.echo("Nights run noon to noon, local time (a night is labelled by the date it starts). expected: from the "
                   "output answers really used (or a prior before any); bound: every answer using its whole max_tokens, "
                   "what --budget checks.")
    if data["routes"]:
        click.echo("")
        click.echo("Estimate vs actual per route (collected batches):")
        click.echo(f"{'route':24} {'stage':5} {'batches':>7} {'expected':>10} {'bound':>10} {'actual':>10} {'vs expected':>11}")
        for r in data["routes"]:
            error = "—" if r["error"] is None else f"{100 * r['error']:+.0f}%"
            click.echo(f"{r['route'][:24]:24} {r['stage']:5} {r['batches']:>7} {fmt_money(r['expected_cost']):>10} "
                       f"{fmt_money(r['estimated_cost']):>10} {fmt_money(r['actual_cost']):>10} {error:>11}")


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (still exit 1 on a mismatch).")
@pass_ctx
@handle_errors
def verify(ctx: Context, directory: str | None, as_json: bool) -> None:
    """Check a published leaderboard against its inputs: every checksum in results/manifest.json.

    Recomputes the dataset's, each document's, the config's, each request file's, each downloaded
    provider file's and each results file's checksum from the files present, and compares them with
    the manifest and with state.db (when there is one), which also gives every published number
    again. Exit 0 when all match; exit 1 naming each mismatch.
    """
    from pathlib import Path

    from ..protocol.config_file import CONFIG_NAME
    from ..publish.manifest import MANIFEST_NAME
    from ..publish.verify import verify as do_verify
    from ..publish.verify import writers_config

    if directory and not ctx.config_path and not os.environ.get("BATCHRUN_CONFIG"):
        if (Path(directory) / CONFIG_NAME).is_file():
            # `verify demo-run` from outside it: the project named is checked against its own config.
            ctx.config_path = str(Path(directory) / CONFIG_NAME)
        elif (Path(directory) / MANIFEST_NAME).is_file() and (own := writers_config(Path(directory) / MANIFEST_NAME)):
            # `verify demo-run/results` from the clone's root (the README's example) read them against
            # the root's batchrun.toml, the paper's config, and named 44 files missing: results named
            # by their folder are checked against the config of the project that wrote them.
            ctx.config_path = str(own)
    config = ctx.reading_config()
    folder = Path(directory) if directory else config.paths.results
    if directory and not (folder / MANIFEST_NAME).is_file():
        # A project folder (`verify demo-run`, `verify .` inside it): its results folder, per the
        # config when it is this one's, else results/ below it (a newcomer named the project).
        if folder.resolve() == config.path.resolve().parent:
            folder = config.paths.results
        elif (folder / "results" / MANIFEST_NAME).is_file():
            folder = folder / "results"
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise BatchrunError(f"No {MANIFEST_NAME} in {folder}.",
                            "It is written by `batchrun collect` and `batchrun refresh` beside the results files; DIR is that "
                            "results folder or the project's folder (none: the config's results folder).")
    from ..ledger.store import Store

    # Either kind of store: verify only compares checksums, and says below if it was a rehearsal.
    # Any schema: verify reads only what every version has (verify.py checks for the one
    # later column it reads), and upgrading it would mean a collect, which rewrites the manifest.
    store = Store(config.paths.state, readonly=True, any_schema=True) if config.paths.state.exists() else None
    try:
        result = do_verify(manifest_path, config, store)
        header = json_header(config, store, rehearsal=result.rehearsal)
    finally:
        if store is not None:
            store.close()
    if as_json:
        click.echo(json.dumps({**header, "protocol_note": result.protocol_note, "ok": not result.mismatches,
                               "manifest": str(manifest_path), "state_db": store is not None, "checked": result.checked,
                               "mismatches": result.mismatches, "notes": result.notes}, indent=2, ensure_ascii=False))
    else:
        _print_verification(result, manifest_path, has_store=store is not None)
    if result.mismatches:
        raise BatchrunError(f"{len(result.mismatches)} of {result.checked} checks failed against {manifest_path}.",
                            "The published numbers do not come from these files: see each MISMATCH above."
                            if not as_json else "The published numbers do not come from these files: see `mismatches`.")


def _print_verification(result: Any, manifest_path: Path, *, has_store: bool) -> None:
    for problem in result.mismatches:
        click.echo(f"MISMATCH: {problem}")
    if result.mismatches:
        return
    click.echo(f"verified: {result.checked} checks against {manifest_path}" + ("" if has_store else " (no state.db here: files only)"))
    for note in result.notes:
        click.echo(f"note: {note}.")
    if result.protocol_note:
        click.echo(f"note: {result.protocol_note}")
    if result.rehearsal:
        click.echo(f"note: these results come from a rehearsal on the emulator at {result.rehearsal}, not from real providers.")
