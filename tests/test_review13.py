"""Session 13's adversarial review of what merged since 57d2c5e: each finding's repro."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest


@pytest.mark.parametrize(("theirs", "sent", "code"), [(signal.SIGTERM, signal.SIGHUP, 129), (signal.SIGHUP, signal.SIGTERM, 143)],
                         ids=["own-SIGTERM", "own-SIGHUP"])
def test_a_stop_leaves_a_library_callers_own_signal_handler_in_place(theirs: int, sent: int, code: int) -> None:
    """handle_errors puts back the handlers it replaced; one it did not replace (a library caller's
    or a test runner's own SIGTERM or SIGHUP handler) is not its to touch. A SIGHUP set the
    caller's SIGTERM handler to SIG_IGN for the rest of the process (and a SIGTERM its SIGHUP's)."""
    from batchrun.cli.support import handle_errors

    def theirs_handler(*_: Any) -> None:
        pass

    before = signal.signal(theirs, theirs_handler)
    try:
        @handle_errors
        def command() -> None:
            os.kill(os.getpid(), sent)

        with pytest.raises(SystemExit) as ended:
            command()
        assert ended.value.code == code
        assert signal.getsignal(theirs) is theirs_handler
    finally:
        signal.signal(theirs, before)
