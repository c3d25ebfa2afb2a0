"""docs/schema.md, generated from the migrations so it cannot drift: every table and view of a
state.db they build, as SQL.

    python -m batchrun.ledger.schema_doc > docs/schema.md
"""

from __future__ import annotations

import sys

from .migrations import database, migrations


def schema_markdown() -> str:
    """docs/schema.md's content (tests/test_docs.py checks the file is current)."""
    db = database()
    migrations.apply(db)
    out = [
        "# state.db schema",
        "",
        "Generated from the migrations in `batchrun/ledger/migrations/` (one file each) by `python -m batchrun.ledger.schema_doc`;",
        "do not edit by hand (a test checks it is current).",
        "",
        "Scores are fractions 0–1 in every table and view (`judgments.score`, `leaderboard.all_tasks_overall`,",
        "`leaderboard.scored_overall`, `cell_status.score`...), as in JSON and CSV; Markdown and HTML show 0–100.",
        "",
    ]
    for kind in ("table", "view"):
        for (name, sql) in db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%' ORDER BY name", [kind]
        ).fetchall():
            out += [f"## {kind} `{name}`", "", "```sql", sql.strip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(schema_markdown())
