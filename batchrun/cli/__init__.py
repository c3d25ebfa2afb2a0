"""cli: the command line. Each command opens the store, calls one library function, prints.

Data goes to stdout, progress to stderr. A `BatchrunError` (a user's mistake, a provider refusal)
prints its message and hint and exits 1 without a traceback. `collect` and `refresh` exit 2 while
any route is incomplete. The commands' shared plumbing (errors and exit codes, the writer and
reader stores, the inputs each command resolves once, options) is in support.py; the demo (the
shipped project and `batchrun demo`) in demo/.

May import: base, providers, protocol, ledger, publish, run, emulator.
"""

from __future__ import annotations

import click

from . import pipeline, reports, tools
from .support import BatchrunGroup, Context, log_to_stderr

# Nothing heavy is imported at the top of this module: `batchrun --help` loads click and this
# file (each command imports what it runs), and the package __init__ is lazy too. SDKs, numpy and
# sqlite-utils load only in the commands that use them (tests/test_startup.py keeps it so).


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Not click.version_option(__version__): reading the version from the installed metadata
    # (importlib.metadata, ~20 ms) would then happen on every command, not only on --version.
    if not value or ctx.resilient_parsing:
        return
    from ..base.version import __version__

    click.echo(f"batchrun, version {__version__}")
    ctx.exit()


# After the options and commands in `batchrun --help`: where to read on, what the exit codes mean,
# which environment variables count (tests/test_cli_conventions.py checks each is there).
EPILOG = """\b
Global options also work after the command: batchrun status --config PATH.
\b
Exit codes:
  0  done (collect, refresh: every route complete)
  1  a usage or user error, or a provider refusal: the message and its fix on stderr
  2  incomplete: work still open (time limit, budget, a running batch,
     a blocked route); run again later
\b
Environment variables:
  BATCHRUN_CONFIG    the config file, as --config
  BATCHRUN_EMULATOR  rehearse on an emulator, as --emulator URL
  each route's api_key_env holds its key (read, never stored); by default
  OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY
\b
Docs: README.md, sections Commands, Exit codes, Environment variables, Machine-readable output,
Shell completion, Config reference; `batchrun COMMAND --help` for one command.
Shell completion (bash): eval "$(_BATCHRUN_COMPLETE=bash_source batchrun)"
"""


@click.group(cls=BatchrunGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit.")
@click.option("--config", "config_path", envvar="BATCHRUN_CONFIG", metavar="PATH", help="Config file (default: batchrun.toml in this folder or the nearest folder above; env BATCHRUN_CONFIG).")
@click.option("--emulator", envvar="BATCHRUN_EMULATOR", metavar="URL", help="Rehearse: send every route to a local emulator at URL, keeping state.db, jobs/ and results/ under rehearsal/ (env BATCHRUN_EMULATOR).")
@click.option("-q", "--quiet", is_flag=True, help="Data and what needs action only: no progress or notices on stderr (errors, held "
                                                 "and blocked work and why a run is incomplete still print).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, emulator: str | None, quiet: bool) -> None:
    """batchrun: run WildTrace leaderboard evaluations through the providers' batch APIs.

    \b
    batchrun refresh        # submit, poll and collect until done (the cron job)
    batchrun report         # the leaderboard
    batchrun demo           # everything on the built-in emulator, no keys needed
    """
    ctx.obj = Context(config_path, emulator, quiet)
    log_to_stderr(quiet)


# The commands, by theme (each module's docstring says which): registered here, so `batchrun
# --help` lists them all while importing only click and these modules.
for _command in (pipeline.plan, pipeline.submit, pipeline.poll, pipeline.collect, pipeline.refresh, pipeline.retry,
                 pipeline.accept_failures, pipeline.cancel, reports.status, reports.report, reports.compare, reports.cost,
                 reports.verify, tools.preflight, tools.probe, tools.emulator, tools.demo):
    cli.add_command(_command)
