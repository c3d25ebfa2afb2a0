"""The resume check's quick answer (`resume._any_change`, the whole check whenever nothing
changed) says "something changed" exactly when the full check (changed_inputs' own loop over
every request, which names the changes) finds one, on random histories in a real state.db:
routes in and out of the config, policies, generation requests and judge requests (with and
without their parent) changed or not, in batches in and out of the statuses asked about."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from batchrun.ledger import resume
from batchrun.ledger.resume import Change
from batchrun.ledger.store import Store

_CHANGE = Change("an input", "it changed", "put it back")


class _Known:
    """What changed, drawn at random: the checks `_Changes` answers, with the same signatures.
    (The real `_Changes` compares the command's resolved inputs with the requests; the tests in
    test_resume.py go through it end to end. Here the point is which requests get asked about.)"""

    def __init__(self, rng: random.Random, routes: list[str], fps: list[str], tasks: list[str], cids: list[str],
                 graded: list[str]) -> None:
        self.policies = {r: (rng.choice(["gen", "judge"]), {}) for r in routes if rng.random() < 0.8}
        rate = rng.choice([0.0, 0.001, 0.02, 0.2])
        self.changed_fps = {(r, fp) for r in routes for fp in fps if rng.random() < rate}
        self.changed_gens = {c for c in cids if rng.random() < rate}
        self.changed_graded = {(t, g) for t in tasks for g in [*graded, None] if rng.random() < rate}

    def policy_change(self, route: str, stage: str, old_fp: str) -> Change | None:
        cur = self.policies.get(route)
        return _CHANGE if cur is not None and cur[0] == stage and (route, old_fp) in self.changed_fps else None

    def generation_change(self, route: str, task_id: str, custom_id: str) -> Change | None:
        return _CHANGE if custom_id in self.changed_gens else None

    def judge_change(self, task_id: str, graded_sha256: str | None) -> Change | None:
        return _CHANGE if (task_id, graded_sha256) in self.changed_graded else None


def _history(store: Store, rng: random.Random) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    routes = [f"r{i}" for i in range(rng.randint(1, 5))]
    fps = [f"fp{i}" for i in range(rng.randint(1, 3))]
    tasks = [f"t{i}" for i in range(rng.randint(1, 6))]
    graded = [f"g{i}" for i in range(rng.randint(1, 3))]
    gens: list[tuple[str, str]] = []  # (custom_id, task_id)
    rows: list[tuple[Any, ...]] = []
    for i in range(rng.randint(0, 40)):
        cid, task = f"g-{i}", rng.choice(tasks)
        gens.append((cid, task))
        rows.append((cid, "gen", rng.choice(routes), task, rng.choice(fps), None, None))
    for i in range(rng.randint(0, 80)):
        parent, task = rng.choice(gens) if gens and rng.random() < 0.9 else (f"g-gone-{i}", rng.choice(tasks))
        if rng.random() < 0.1:
            task = rng.choice(tasks)  # a judge request of another task than its parent's
        rows.append((f"j-{i}", "judge", rng.choice(routes), task, rng.choice(fps), parent if rng.random() < 0.95 else None,
                     rng.choice([*graded, None])))
    with store.db.atomic():
        store.db.conn.executemany(
            """INSERT INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id, graded_sha256, max_retries,
               max_resubmits, prompt_chars, est_input_tokens, est_output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 5, 2, 1, 1, 1, 0)""",
            rows)
        if rows:
            # Some requests are in no batch; some parents were deleted (their judge requests still name them).
            for b in range(rng.randint(1, 4)):
                status = rng.choice(["downloaded", "in_flight", "collected"])
                store.db.execute(
                    """INSERT INTO batches (id, seq, route, stage, provider, transport, model, status, dir, request_file, created_at,
                       provider_state) VALUES (?, ?, 'r', 'gen', 'openai', 'batch', 'm', ?, 'd', 'f', 0, ?)""",
                    [f"b{b}", b, status, rng.choice([None, None, "cancel_requested"])])
                members = rng.sample(rows, rng.randint(0, len(rows)))
                store.db.conn.executemany("INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                                          [(f"b{b}", r[0], n) for n, r in enumerate(members)])
            store.db.execute("DELETE FROM requests WHERE custom_id IN (SELECT custom_id FROM requests WHERE stage = 'gen' "
                             "ORDER BY custom_id LIMIT ?)", [rng.choice([0, 0, 1, 3])])
    return routes, fps, tasks, [c for c, _ in gens], graded


@pytest.mark.parametrize("seed", range(2))
def test_the_quick_check_finds_a_change_exactly_when_the_full_check_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          seed: int) -> None:
    rng = random.Random(seed)
    outcomes = set()
    store = Store(tmp_path / "state.db")
    for n in range(60):
        with store.db.atomic():
            for table in ("batch_requests", "batches", "requests"):
                store.db.execute(f"DELETE FROM {table}")
        routes, fps, tasks, cids, graded = _history(store, rng)
        for _ in range(4):
            known = _Known(rng, routes, fps, tasks, cids, graded)
            monkeypatch.setattr(resume, "_Changes", lambda store, inputs: known)
            statuses = rng.choice([("downloaded",), ("in_flight",), ("downloaded", "in_flight")])
            batches = tuple(r[0] for r in store.db.execute(
                f"SELECT id FROM batches WHERE status IN ({', '.join('?' * len(statuses))}) "
                "AND coalesce(provider_state, '') != 'cancel_requested' ORDER BY seq", statuses))
            quick = resume._any_change(store, known, batches) if batches else False  # type: ignore[arg-type]
            # The full check, which names every change: the quick one made to say yes, always.
            with monkeypatch.context() as m:
                m.setattr(resume, "_any_change", lambda *a: True)
                full = resume.changed_inputs(store, None, statuses=statuses)  # type: ignore[arg-type]
            assert quick == bool(full), (seed, n, known.policies, statuses)
            outcomes.add(quick)
    store.close()
    assert outcomes == {True, False}  # both answers were met
