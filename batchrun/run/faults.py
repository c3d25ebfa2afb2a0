"""Deterministic crash points for the crash-safety tests.

`BATCHRUN_DIE_AT=submit.after_create` makes the process SIGKILL itself the first time it reaches
that point (`name:N` for the N-th time). Unset, `point()` is a dictionary lookup and nothing else.
The points sit exactly between a provider call and the state.db write that records it: the
windows where a naive tool loses or double-pays a batch.
"""

from __future__ import annotations

import os
import signal

_hits: dict[str, int] = {}

POINTS = (
    "submit.before_upload", "submit.after_upload", "submit.before_create", "submit.after_create",
    "poll.after_retrieve", "poll.after_download", "poll.sync_line",
    "collect.mid_batch", "collect.after_batch",
)
# Reached only when a downloaded result file was lost before collect read it (tests/test_redownload.py):
# poll found that the provider no longer holds the results and is about to record it.
REDOWNLOAD_POINTS = ("poll.results_gone",)


def point(name: str) -> None:
    target = os.environ.get("BATCHRUN_DIE_AT")
    if not target:
        return
    wanted, _, nth = target.partition(":")
    if wanted != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
