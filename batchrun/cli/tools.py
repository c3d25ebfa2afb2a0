"""The commands around a run: preflight (prove each route in seconds), probe (measure a model's
context window), emulator (the local provider emulator) and demo (a whole refresh on it)."""

from __future__ import annotations

import json
import sys

import click

from ..base.errors import BatchrunError
from ..base.redaction import redact
from .support import (Context, Number, check_store_kind, complete_routes, handle_errors, json_header, note_rehearsal, pass_ctx,
                      seconds, wait_lock_option, writer)


@click.command()
@click.option("--route", "routes", multiple=True, metavar="NAME", shell_complete=complete_routes, help="Only this route (repeatable; default: every route that sends).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@wait_lock_option
@pass_ctx
@handle_errors
def preflight(ctx: Context, routes: tuple[str, ...], as_json: bool, wait_lock: bool) -> None:
    """Check each route with one tiny online request and one batch listing: route → ok, or the
    provider's message and the fix, in seconds (a few tokens each, counted in `cost`).

    Exit 1 when any route does not pass. submit and refresh run it for each route whose policy has
    not passed one.
    """
    from ..run.preflight import preflight as do_preflight

    config = ctx.config()
    names = list(routes) or list(config.routes)
    config.require_routes(names)
    with writer(ctx, "preflight", config, wait_lock=wait_lock, inputs=False) as (store, inputs):
        checks = do_preflight(store, inputs, names, each=False, progress=ctx.progress())
        header = json_header(config, store)
    skipped = [name for name in names if name not in {c.route for c in checks}]
    if as_json:
        click.echo(json.dumps({**header, "ok": all(c.ok for c in checks), "routes": [c.as_json() for c in checks], "skipped_idle": skipped},
                              indent=2, ensure_ascii=False))
    else:
        for check in checks:
            click.echo(redact(check.describe()))
        for name in skipped:
            click.echo(f"{name} → skipped: idle (role = \"judge\" outside judging.panel), it sends nothing")
    if not all(c.ok for c in checks):
        sys.exit(1)


@click.command()
@click.argument("route", shell_complete=complete_routes)
@click.option("--max-cost", type=Number(min=0), metavar="USD", help="Never spend more than this on the search's requests (required when it sends any).")
@click.option("--dry-run", is_flag=True, help="Show the plan and its estimated cost; send nothing.")
@click.option("--write", is_flag=True, help="Put the suggested caps into ROUTE's table in the config file, with a comment (date, method).")
@click.option("--precision", default="2%", show_default=True, metavar="PCT", help="Stop the search when the largest accepted length is within this of the smallest rejected.")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence and the suggestion as JSON.")
@pass_ctx
@handle_errors
def probe(ctx: Context, route: str, max_cost: float | None, dry_run: bool, write: bool, precision: str, as_json: bool) -> None:
    """Measure ROUTE's real context window and suggest its caps in characters (spec §3: a new model is probed)."""
    from ..ledger.inputs import resolve_inputs
    from ..run import probe as probing
    from ..run import probe_caps

    # A dry run sends nothing: like plan and submit --dry-run, it reads a rehearsal's folder (the
    # demo's) as the rehearsal it is, and says so (its JSON's `rehearsal` key, stderr).
    config = ctx.reading_config(fallback=False) if dry_run else ctx.config()
    if dry_run:
        note_rehearsal(config)
    if write and config.rehearsal:
        raise BatchrunError("--write on a rehearsal (--emulator, or a rehearsal's state.db as in the demo's folder) would put "
                            "the emulator's window into the real config.",
                            "Probe the real provider to write caps, or copy the suggestion by hand.")
    probing.route_for(config, route)  # an unknown route is said before the dataset is read
    if not dry_run:
        # The probe records its evidence in state.db: one of the other kind (a rehearsal's, as in
        # the demo's folder) is refused now, before the search sends (and pays for) anything.
        check_store_kind(config)
    inputs = resolve_inputs(None, config)
    result = probing.probe(inputs, route, max_cost=max_cost, precision=probing.parse_precision(precision), dry_run=dry_run,
                           progress=ctx.progress().event)
    target = config.routes[route]
    if not as_json:
        # The evidence first: it was paid for, and it stays on screen even if the lock or the
        # config write below fails.
        click.echo("\n".join(probe_caps.describe(result, target)))
    written = None
    if not result.dry_run:
        with writer(ctx, "probe", config, resolved=inputs) as (store, _):
            written = probe_caps.write_caps(config, result) if write and not probe_caps.missing_caps(result) else None
            probe_caps.record(store, result, written=written is not None)
            if written:
                # Caps are part of the route's generation policy: new caps re-plan its cells.
                sent = store.scalar("""SELECT count(*) FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
                                       WHERE c.route = ? AND c.custom_id IS NOT NULL""", [route]) or 0
                if sent:
                    click.echo(f"Note: the caps are part of route {route!r}'s policy: its {sent:,} planned or answered cell(s) "
                               f"are planned afresh under the new caps by the next run (batches still in flight are refused "
                               f"until they end or `batchrun cancel --route {route}`).", err=True)
    if as_json:
        en, cjk = probe_caps.suggested_caps(result, target)
        click.echo(json.dumps({**json_header(config), **result.evidence(), "plan": list(result.plan), "suggested_caps": {"en": en, "cjk": cjk},
                               "written": written is not None}, indent=2, ensure_ascii=False))
    else:
        if written:
            click.echo(f"written to {config.path}: {probe_caps.caps_text(*written)}")
    if write and not result.dry_run and written is None:
        probe_caps.write_caps(config, result)  # raises: says which cap is missing and what to do


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0 = any free port).")
@click.option("--latency", type=seconds(), default="1s", show_default=True, help="Time before a batch finishes (0.5, 1s, 2m).")
@click.option("--responder", metavar="FILE.py:FUNCTION", help="Answer requests with your own function (or module:function).")
@click.option("--fault", "faults_", multiple=True, metavar="JSON", help="Inject a fault (repeatable), e.g. '{\"kind\":\"http_error\",\"status\":429,\"count\":3}'.")
@click.option("--window", "windows_", multiple=True, metavar="MODEL=TOKENS", help="A model's context window in input tokens, 0 = none (repeatable; the paper's models have defaults).")
@click.option("--model", "models_", multiple=True, metavar="ID", help="Accept this model id besides each provider's built-in table (repeatable).")
@click.option("--key", "keys_", multiple=True, metavar="VALUE", help="Accept only these API keys; any other gets the provider's invalid-key error (repeatable; default: any key).")
@handle_errors
def emulator(host: str, port: int, latency: float, responder: str | None, faults_: tuple[str, ...], windows_: tuple[str, ...],
             models_: tuple[str, ...], keys_: tuple[str, ...]) -> None:
    """Serve a local emulator of the OpenAI, Anthropic and Gemini batch APIs (for rehearsals and tests)."""
    from ..emulator import normalize_fault, run_emulator
    from ..emulator.server import check_loopback

    try:
        check_loopback(host)
    except ValueError as e:
        raise BatchrunError(f"{e}.", "Run it on this machine and point batchrun at it with --emulator http://127.0.0.1:PORT.")

    parsed = []
    for f in faults_:
        try:
            parsed.append(normalize_fault(json.loads(f)))
        except ValueError as e:  # JSONDecodeError is a ValueError too
            raise BatchrunError(f"--fault {f!r} is not a valid fault: {e}",
                                "Pass a JSON object, e.g. --fault '{\"kind\":\"http_error\",\"status\":500,\"count\":3}'.")
    from ..emulator.windows import parse_window

    try:
        windows = dict(parse_window(w) for w in windows_)
    except ValueError as e:
        raise BatchrunError(f"{e}.", "Pass --window MODEL=TOKENS, e.g. --window my-model=200000.")
    if responder:
        from ..emulator import load_responder

        try:
            responder_fn = load_responder(responder)
        except Exception as e:  # noqa: BLE001 - the user's file: any failure to load it is their error to see
            raise BatchrunError(f"--responder {responder!r} cannot be loaded: {e}",
                                "Pass FILE.py:FUNCTION or package.module:FUNCTION naming a function that takes the request dict.")
    try:
        if any(not m.strip() for m in models_):
            raise BatchrunError("--model was given an empty model id.", "Pass the provider's model id, e.g. --model gpt-5.5.")
        if any(not k for k in keys_):
            raise BatchrunError("--key was given an empty key.", "Pass the key the rehearsal should accept, e.g. --key sk-rehearsal.")
        run_emulator(host, port, latency, responder_fn if responder else None, parsed, windows, models_, keys_ or None)
    except OSError as e:
        import errno

        if e.errno == errno.EADDRINUSE:
            raise BatchrunError(f"Port {port} on {host} is already in use.", "Stop what is using it, or pass --port 0 for any free port.")
        raise


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Working folder to create/use [default: demo-run; inside a demo folder, that folder].")
@pass_ctx
@handle_errors
def demo(ctx: Context, directory: str | None) -> None:
    """Run a whole leaderboard refresh on the built-in emulator, no keys needed."""
    from .demo import run_demo

    code = run_demo(directory, progress=ctx.progress(), echo=click.echo, quiet=ctx.quiet)
    sys.exit(code)
