"""The cookbook's judge stage as a user would run it: a script, in its own process.

    python bench/_cookbook_judge.py CONFIG OUT_DIR

bench/plan.py times it spawn to exit, as it times `batchrun plan`'s child: interpreter start-up,
the imports, reading the config and the dataset, opening state.db with sqlite3 and reading every
queued judge request with the answer it grades, then per judge route a text-mode file, per request
the same dict as the in-process cookbook (the adapters' `build_line`: same model, prompt, budget
and temperature), `json.dumps` with its defaults, one write per line, fsync at the end of each file.
Like the in-process cookbook it records nothing in state.db and hashes nothing. It reads the
state.db plan reads (the answers collected, the judge requests queued, nothing planned yet).
Prints {"requests": N, "bytes": B} on stdout.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

from batchrun.protocol.config_file import load_config
from batchrun.protocol.policy import route_policies
from batchrun.protocol.prompts import judge_prompt
from batchrun.providers import RequestSpec, get_adapter


class _Item:
    def __init__(self, points: object, criterion: str):
        self.points, self.criterion = points, criterion


def main(config_path: str, out: str) -> None:
    config = load_config(Path(config_path))
    tasks = {t["task_id"]: t for t in json.loads(config.paths.dataset.read_text(encoding="utf-8"))}
    con = sqlite3.connect(config.paths.state)
    rows = con.execute("""SELECT q.route, q.task_id, a.text FROM requests q JOIN results a ON a.id = q.parent_result_id
                          WHERE q.stage = 'judge' ORDER BY q.route, q.rowid""").fetchall()
    con.close()
    by_route: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for route, task_id, text in rows:
        by_route[route].append((task_id, text))
    policies = route_policies(config)
    n = nbytes = 0
    for route_name, items in by_route.items():
        route, policy = config.routes[route_name], policies[route_name]
        adapter = get_adapter(route.provider)
        path = Path(out) / f"{route_name}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for task_id, text in items:
                task = tasks[task_id]
                rubric = [_Item(r["points"], r["correct_criterion"]) for r in task["ground_truth"]["scoring_rubric"]]
                prompt = judge_prompt(task["question_text"], rubric, text or "")
                spec = RequestSpec(f"{route_name}-{task_id}-{n}", route.model, prompt, policy.max_tokens, policy.temperature)
                f.write(json.dumps(adapter.build_line(route, spec)) + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        nbytes += path.stat().st_size
    print(json.dumps({"requests": n, "bytes": nbytes}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
