"""A per-cell state kept current as state.db changes (issue 30), so that reading commands need not
evaluate the views again.

`cell_status` and `request_status` stay the definition of every state (docs/schema.md); a command
used to evaluate them into temporary tables (`requests_now`, `cells_now`) every time it ran:
~1.3 s at 32 routes and 100,000 results for `status`, and again for every `collect` with nothing
new. `kept_requests` and `kept_cells` hold those same rows, the views' own SQL evaluated over the
current requests and cells (ledger/kept.py), and are brought up to date in the transaction that
changes what they derive from, only for what changed:

- `kept_dirty` names the requests whose state may have changed since. The triggers below fill it
  in the same transaction as the change: a request inserted, updated or deleted, a request put
  into or taken out of a batch, a batch whose status changed, a request reopened. New results need no trigger (collect inserts 100,000 a night): `kept_meta.results_upto`
  is the highest results.id already counted, and every result above it is new.
- `kept_meta.run_id`: the run the kept state was computed in (the retry budgets count the
  current run's failures; a new run can only end a request's `waiting`).
- `kept_meta.inputs`: a digest of the inputs every state depends on (the config's routes, the
  tasks, the current cells); the sync rewrites those tables on every command, so they are
  compared by content. A change there, an accepted failure, a result row corrected or an edited
  judgment sets it to NULL: everything is evaluated again.
- `kept_meta.epoch` grows whenever a kept row changes (what results/ files are stamped with).

The kept rows are a cache, checked against the views (tests/test_kept_state.py): a reader uses
them only when kept_meta says they are current, and evaluates the views itself otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database

_DIRTY = "INSERT OR IGNORE INTO kept_dirty (custom_id) VALUES"
_STALE = "UPDATE kept_meta SET inputs = NULL"


def migrate(db: Database) -> None:
    db.execute("""CREATE TABLE kept_requests (
            custom_id TEXT PRIMARY KEY, stage, route, task_id, policy_fp, parent_custom_id, ok_n, transient_n, resubmit_n,
            batch_failed_n, failure_n, retry_run_n, resubmit_run_n, ok_result_id, final_result_id, last_result_id,
            first_failure_at, reopened_at, state)""")
    db.execute("""CREATE TABLE kept_cells (
            route TEXT NOT NULL, task_id TEXT NOT NULL, policy_fp, custom_id, cap, cap_source, cjk, doc_chars, status,
            result_id, panel_n, judged_n, score, PRIMARY KEY (route, task_id)) WITHOUT ROWID""")
    db.execute("CREATE TABLE kept_dirty (custom_id TEXT PRIMARY KEY) WITHOUT ROWID")
    # A changed request's cell, found by its custom_id (without it, every update scanned the cells).
    db.execute("CREATE INDEX cells_custom_id ON cells (custom_id)")
    db.execute("""CREATE TABLE kept_meta (
            id INTEGER PRIMARY KEY CHECK (id = 1), inputs TEXT, run_id INTEGER, results_upto INTEGER,
            epoch INTEGER NOT NULL DEFAULT 0)""")
    db.execute("INSERT INTO kept_meta (id) VALUES (1)")
    triggers = {
        "kept_requests_insert": f"AFTER INSERT ON requests BEGIN {_DIRTY} (NEW.custom_id); END",
        "kept_requests_update": f"AFTER UPDATE ON requests BEGIN {_DIRTY} (OLD.custom_id); {_DIRTY} (NEW.custom_id); END",
        "kept_requests_delete": f"AFTER DELETE ON requests BEGIN {_DIRTY} (OLD.custom_id); END",
        # A result row corrected in place (collect's conflicting lines): rare, and its text is
        # in the results files whether or not a state changes, so everything is evaluated again.
        "kept_results_update": f"AFTER UPDATE ON results BEGIN {_STALE}; END",
        "kept_results_delete": f"AFTER DELETE ON results BEGIN {_STALE}; END",
        "kept_batch_requests_insert": f"AFTER INSERT ON batch_requests BEGIN {_DIRTY} (NEW.custom_id); END",
        "kept_batch_requests_delete": f"AFTER DELETE ON batch_requests BEGIN {_DIRTY} (OLD.custom_id); END",
        "kept_batches_status": ("AFTER UPDATE OF status ON batches WHEN OLD.status IS NOT NEW.status BEGIN "
                                "INSERT OR IGNORE INTO kept_dirty (custom_id) SELECT custom_id FROM batch_requests "
                                "WHERE batch_id = NEW.id; END"),
        "kept_batches_delete": ("AFTER DELETE ON batches BEGIN INSERT OR IGNORE INTO kept_dirty (custom_id) "
                                "SELECT custom_id FROM batch_requests WHERE batch_id = OLD.id; END"),
        "kept_reopens_insert": f"AFTER INSERT ON reopens BEGIN {_DIRTY} (NEW.custom_id); END",
        "kept_reopens_delete": f"AFTER DELETE ON reopens BEGIN {_DIRTY} (OLD.custom_id); END",
        "kept_reopens_update": f"AFTER UPDATE ON reopens BEGIN {_DIRTY} (OLD.custom_id); {_DIRTY} (NEW.custom_id); END",
        "kept_judgments_update": f"AFTER UPDATE ON judgments BEGIN {_STALE}; END",
        "kept_judgments_delete": f"AFTER DELETE ON judgments BEGIN {_STALE}; END",
        "kept_accepted_insert": f"AFTER INSERT ON accepted_failures BEGIN {_STALE}; END",
        "kept_accepted_update": f"AFTER UPDATE ON accepted_failures BEGIN {_STALE}; END",
        "kept_accepted_delete": f"AFTER DELETE ON accepted_failures BEGIN {_STALE}; END",
    }
    for name, body in triggers.items():
        db.execute(f"CREATE TRIGGER {name} {body}")
