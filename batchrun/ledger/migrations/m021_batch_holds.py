"""Why submit held a batch back: `batch_holds`, one row each time a submit held a planned batch
for a reason it had not been held for just before (the budget, a route without a price while a
budget is set, a queue limit, a preflight that did not pass, the run's time limit, an uncertain
create, a provider error).

Without it `status` could only say "planned (not sent): the next submit sends them" of a batch
the budget would hold again (issue 29): the reason lived in one submit's output. A row is added
only when the batch's reason changes, so a refresh holding a batch round after round for hours
adds one row, and `held_at` is when the hold began. The latest row of a batch still planned is
why it waits; a batch created since is simply no longer planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute(
        """CREATE TABLE batch_holds (
            id INTEGER PRIMARY KEY, batch_id TEXT NOT NULL, reason TEXT NOT NULL,
            held_at REAL NOT NULL, run_id INTEGER)"""
    )
    db.execute("CREATE INDEX batch_holds_by_batch ON batch_holds (batch_id, id)")
