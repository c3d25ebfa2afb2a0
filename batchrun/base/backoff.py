"""Backoff between attempts: of one provider call (providers.clients.call), of a create (submit),
and of a failed request in a later round (ledger: when it is due again). Arithmetic only."""

from __future__ import annotations

import hashlib
import os
import random


def retry_base() -> float:
    """Base backoff in seconds; tests lower it with BATCHRUN_RETRY_BASE."""
    try:
        return float(os.environ.get("BATCHRUN_RETRY_BASE", "1.0"))
    except ValueError:
        return 1.0


# Backoff between attempts of one request (the protocol: transient errors "retry up to 5x with
# backoff"). A batch retry goes out in a later round, never in the minute of the failure: batch
# providers report transient failures in bulk (an overloaded region, a rate limit), and a retry
# sent at once lands in the same trouble. Online (sync) requests back off from a second.
ROUND_BACKOFF_BASE = {"batch": 60.0, "sync": 1.0}
ROUND_BACKOFF_CAP = {"batch": 1800.0, "sync": 120.0}


# The longest wait a provider's Retry-After is honoured for: a day (a daily quota resets within
# one). It is the provider's word, and a bigger one is garbage (a gateway sending its reset time in
# epoch milliseconds asked for 55,000 years): a due time past year 9999 broke every date shown.
MAX_RETRY_AFTER = 86_400.0


def backoff(attempt: int, *, base: float, cap: float, retry_after: float | None = None, jitter_key: str | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...): base * 2^(attempt-1), up to
    half as much again of jitter, at most `cap`, and never less than the provider's Retry-After.

    With `jitter_key` the jitter is derived from it (stable, so a due time computed twice is the
    same; requests that failed together in one batch are retried together in one batch);
    without, it is random."""
    if jitter_key is None:
        u = random.random()
    else:
        u = int(hashlib.sha256(f"{jitter_key}:{attempt}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    delay = min(base * (2 ** max(attempt - 1, 0)) * (1 + u / 2), cap)
    return max(delay, min(retry_after or 0.0, MAX_RETRY_AFTER))


def round_backoff(transport: str, attempt: int, *, retry_after: float | None, jitter_key: str) -> float:
    """The wait before a failed request is sent again in a later round (scaled by retry_base())."""
    scale = retry_base()
    return backoff(attempt, base=ROUND_BACKOFF_BASE[transport] * scale, cap=ROUND_BACKOFF_CAP[transport] * scale,
                   retry_after=retry_after, jitter_key=jitter_key)
