"""Result lines that batchrun read wrongly until the sixth session (an adversarial review;
tests/test_no_false_zeros.py), read again with today's adapters and verdict parser: a 200 that was
not an answer, recorded as the model's 'empty' answer (a final 0), and judge replies whose total
was NaN (stored NULL: the judge dropped out of the mean), infinite, too big for a float, or read
from a reply cut at its output budget. Only rows whose reading changes are updated; their requests
then go out again (an error is retried or blocks with its diagnosis, a verdict is asked for again)
as if the lines had been collected today. Once, on the first writer command after the upgrade: ~12
µs of parsing per judge answer (~1-2 s per 100,000 results besides reading them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    _reread_false_zeros(db)


def _reread_false_zeros(db: Database) -> None:
    import json

    from ...protocol.grading import parse_verdict
    from ...providers import get_adapter

    rows = db.execute(
        """SELECT r.id, q.stage, r.kind, r.text, r.raw_json, r.truncated, b.provider, j.total, j.parse_error
           FROM results r JOIN batches b ON b.id = r.batch_id JOIN requests q ON q.custom_id = r.custom_id
           LEFT JOIN judgments j ON j.result_id = r.id
           WHERE (q.stage = 'gen' AND r.kind = 'empty') OR (q.stage = 'judge' AND r.kind = 'ok')""").fetchall()
    for rid, stage, kind, text, raw_json, truncated, provider, total, parse_error in rows:
        try:
            line = json.loads(raw_json) if raw_json else None
        except ValueError:
            line = None
        if not isinstance(line, dict) or "batchrun_cut" in line:
            continue  # nothing to read again (a line over MAX_STORED_CHARS is kept as a pointer)
        try:
            read = get_adapter(provider).parse_line(line)
        except (KeyError, ValueError):
            continue  # an adapter this batchrun no longer has
        if stage == "gen":
            if read.kind != "empty":
                db.execute("UPDATE results SET kind = ?, error_type = ?, error_message = ? WHERE id = ?",
                           [read.kind, read.error_type, read.error_message, rid])
            continue
        if total is None and parse_error is not None:
            continue  # already unparseable as a verdict
        verdict = parse_verdict(text, complete=not (read.at_budget or truncated))
        if verdict.total is None:
            db.execute("UPDATE results SET kind = 'unparseable' WHERE id = ?", [rid])
            db.execute("UPDATE judgments SET total = NULL, score = NULL, parse_error = ? WHERE result_id = ?",
                       [verdict.error or "no usable total", rid])
