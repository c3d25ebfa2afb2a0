"""The sync writes only the cells that are new or differ (ledger/sync.py), and the cells table
is then what writing every cell gives: after random edits of the inputs (a route's caps, model or
removal, a document's text, a question, a task added or dropped), every cell equals the one a sync
writes into an empty cells table (the cells of earlier settings kept beside them), and a cell the edit did not touch keeps its row as it was."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from batchrun import Store, load_config
from batchrun.ledger.inputs import resolve_inputs
from batchrun.ledger.sync import sync_state
from conftest import Project, route, small_project, task

_COLUMNS = "policy_fp, task_id, route, doc_sha256, doc_chars, cjk, cap, cap_source, scope, custom_id, task_sha256"


def _sync(path: Path, config_path: Path, *, from_empty: bool = False) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Every cell after a sync (planned_at last), by key."""
    with Store(path) as store:
        if from_empty:
            store.db.execute("DELETE FROM cells")
        sync_state(store, resolve_inputs(store, load_config(config_path)), queue=False)
        return {(r[0], r[1]): r for r in store.db.execute(f"SELECT {_COLUMNS}, planned_at FROM cells")}


def _edit(project: Project, rng: random.Random) -> None:
    cfg = json.loads(project.config_path.read_text())
    records = json.loads(project.dataset_path.read_text())
    what = rng.choice(["caps", "model", "drop_route", "document", "question", "add_task", "drop_task", "nothing"])
    routes = [name for name in cfg["routes"] if not name.startswith("judge")]
    if what == "caps":
        cfg["routes"][rng.choice(routes)]["caps"] = {"en": rng.choice([100, 400, 900_000]), "cjk": rng.choice([10, 60, 900_000])}
    elif what == "model":
        name = rng.choice(routes)
        cfg["routes"][name]["model"] = rng.choice(["gpt-5.5", "gpt-4.1", "o3"]) if cfg["routes"][name]["provider"] == "openai" \
            else cfg["routes"][name]["model"]
    elif what == "drop_route" and len(routes) > 1:
        del cfg["routes"][rng.choice(routes)]
    elif what == "document":
        doc = project.root / "corpus" / rng.choice(["harbor.txt", "lab.txt", "zh.txt"])
        doc.write_text(doc.read_text(encoding="utf-8") + rng.choice(["More text.\n", "更多。\n"]) * rng.randint(1, 40), encoding="utf-8")
    elif what == "question":
        r = rng.choice(records)
        r["question_text"] += " Why?"
    elif what == "add_task":
        n = len(records) + rng.randint(1, 1000)
        records.append(task(f"t{n}", f"Question {n}?", rng.choice(["harbor.txt", "lab.txt", "zh.txt"])))
    elif what == "drop_task" and len(records) > 1:
        records.pop(rng.randrange(len(records)))
    project.config_path.write_text(json.dumps(cfg, indent=1))
    project.dataset_path.write_text(json.dumps(records, ensure_ascii=False, indent=1))


def test_only_changed_cells_are_written_and_the_table_is_what_writing_every_cell_gives(project: Project) -> None:
    small_project(project, panel=[], routes={"gpt": route("openai", "gpt-5.5"), "claude": route("anthropic", "claude-opus-4-8"),
                                             "gemini": route("gemini", "gemini-2.5-pro")})
    rng = random.Random(11)
    before = _sync(project.state_path, project.config_path)
    for step in range(12):
        _edit(project, rng)
        after = _sync(project.state_path, project.config_path)
        reference = project.root / f"reference-{step}.db"
        shutil.copyfile(project.state_path, reference)
        everything = _sync(reference, project.config_path, from_empty=True)  # every current cell, written
        # The old way: every current cell replaced (by key) on top of the cells the table held.
        assert {k: v[:-1] for k, v in after.items()} == {k: v[:-1] for k, v in {**before, **everything}.items()}, step
        for key, row in after.items():
            if key in before and before[key][:-1] == row[:-1]:
                assert row[-1] == before[key][-1], "an unchanged cell is not written again"
            else:
                assert row[-1] == everything[key][-1] or row[-1] > before.get(key, (0,) * len(row))[-1]
        before = after
