"""A stop signal (Ctrl-C's SIGINT, SIGTERM, SIGHUP) that must not be lost.

The CLI's handler (cli.support.handle_errors) records the signal here and raises Stopped, which
is usually all it takes. But Python runs a signal handler at whatever bytecode comes next, and
some places swallow what it raises: a weakref callback or a __del__ that the garbage collector
runs, where the exception is printed as "Exception ignored in: ..." and the interrupted code goes
on (CPython docs, "Note on Signal Handlers and Exceptions" in the signal module, and
PyErr_WriteUnraisable). A refresh whose Ctrl-C landed in one ran on to the end of the night
(CI, stop 35). So the stop stays recorded until the command ends, and `checkpoint()`, called
where a long command loops and where a writer ends well, raises it again. Below the CLI so the
run layer can call it (imports go down the stack).

Where it is called: before each paid step (submit's next batch, a sync route's next online
request, probe's next step), in each wait (refresh's rounds and sleeps, poll --wait, --wait-lock),
before a writer or the demo records its run as `ok`, and when a command returns (handle_errors).
Outside a CLI command nothing records a signal, and it is a no-op.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Stopped(KeyboardInterrupt):
    """Ctrl-C (SIGINT), SIGTERM (`timeout`, systemd, a `kill`) or SIGHUP (the terminal closed, an
    ssh session dropped) arrived while a command ran. A KeyboardInterrupt, so all take the one path
    Ctrl-C always took: every open state.db transaction rolls back, the run is recorded as
    `interrupted` (Store.fail_run), the lock is let go, handle_errors says so and exits 128 + N."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# The stop signal received during the command running now, if any. Set by the handler, put back
# by handle_errors when the command ends.
_signal: int | None = None


def stop_signal() -> int | None:
    """The signal (SIGINT, SIGTERM, SIGHUP) that is stopping the command running now, or None."""
    return _signal


def record(signum: int | None) -> int | None:
    """Record `signum` as the command's stop signal (None: no stop); returns the one before."""
    global _signal
    before, _signal = _signal, signum
    return before


def checkpoint() -> None:
    """Raise Stopped if a stop signal arrived during this command: again, if the first raise was
    swallowed where it landed (see the module's docstring). A no-op otherwise, cheap enough for
    every round of a loop."""
    if _signal is not None:
        raise Stopped(_signal)


@contextmanager
def swallowed_stops_unsaid() -> Iterator[None]:
    """While a command runs, a Stopped swallowed where it landed is not printed as "Exception
    ignored in: ... Traceback" (the default sys.unraisablehook; CI, stop 35): it is no bug and no
    loss, the stop is recorded and a checkpoint raises it again. Anything else unraisable is
    printed as before."""
    before = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Stopped):
            return
        before(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = before
