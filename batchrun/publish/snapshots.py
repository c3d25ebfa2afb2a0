"""What changed since the last refresh: snapshots of the leaderboard as each refresh left it.

The views say what the state *is*; they cannot say what it was. So `refresh` and `demo` record a
compact snapshot at the end of each run (tables `snapshots`, `snapshot_routes`,
`snapshot_cells`, migration m009): for every current cell its generation policy, the answer
being scored (`result_id`), the hash of the question and rubric its judges graded, its status
and score; for every route its headline. A snapshot is written only when it differs from the
newest one (`digest`), and the newest KEEP are kept: they are derived rows, recomputable from
the facts at the time, not facts themselves.

Kept in state.db rather than a JSON file beside results/: it travels with the state it
describes, a reader (`report`) sees it in the same transaction as the views it compares with,
and it is auditable in SQL ("which cells changed?" is a join).

`changes()` compares the current state with the newest snapshot that differs from it: right
after a refresh, that is the state the refresh before it left, so the report shows what the
last refresh changed (and keeps showing it until something changes again).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..ledger.store import Store

KEEP = 10

# Why a cell differs between two snapshots, in the order they are tested.
REASONS = (
    "new route", "route removed", "new task", "task removed", "changed policy", "accepted failure",
    "changed question or rubric", "changed judge panel", "newly failed", "answered", "retried", "judged",
    "re-judged", "status changed",
)
FAILED_STATUSES = ("refusal", "empty", "blocked", "waiting")
HEADLINE = ("all_tasks_overall", "scored_overall", "scored_n", "out_of_context_n", "failed_n", "pending_n", "complete")


@dataclass(frozen=True)
class Cell:
    policy_fp: str
    result_id: int | None
    graded_sha256: str | None
    status: str
    score: float | None


@dataclass(frozen=True)
class State:
    cells: dict[tuple[str, str], Cell]
    routes: dict[str, dict[str, Any]]  # route -> model, policy_fp and the HEADLINE keys
    panel: tuple[tuple[str, str, str], ...]  # (judge route, model, policy fingerprint)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(self.panel).encode())
        for route in sorted(self.routes):
            r = self.routes[route]
            h.update(json.dumps([route, r["policy_fp"], *[r[k] for k in HEADLINE]]).encode())
        for key in sorted(self.cells):
            c = self.cells[key]
            h.update(json.dumps([*key, c.policy_fp, c.result_id, c.graded_sha256, c.status,
                                 None if c.score is None else round(c.score, 9)]).encode())
        return h.hexdigest()


def _headline(r: dict[str, Any]) -> dict[str, Any]:
    """The HEADLINE keys of a leaderboard row, the view's or outputs.leaderboard's (counts 0 not null)."""
    return {k: bool(r[k]) if k == "complete" else (r[k] or 0) if k.endswith("_n") else r[k] for k in HEADLINE}


def current_state(store: Store, board: list[dict[str, Any]] | None = None) -> State:
    """The state now; reads the `cells_now` table (outputs.snapshot_cells must have filled it).
    `board`: the leaderboard rows if already read (the view costs a second at full scale)."""
    cells = {
        (r[0], r[1]): Cell(r[2], r[3], r[4], r[5], r[6])
        for r in store.db.execute(
            """SELECT cs.route, cs.task_id, cs.policy_fp, cs.result_id, t.graded_sha256, cs.status, cs.score
               FROM cells_now cs JOIN tasks t ON t.task_id = cs.task_id""")
    }
    policies = dict(store.db.execute("SELECT route, policy_fp FROM config_routes WHERE role = 'contestant'"))
    routes = {}
    if board is None:
        from ..ledger.pending import view_sql

        board = store.rows(view_sql(store, "leaderboard", cell_status="temp.cells_now"))
    for r in board:
        if r["route"] in policies:
            routes[r["route"]] = {"model": r["model"], "policy_fp": policies[r["route"]], **_headline(r)}
    panel = tuple((r[0], r[1], r[2]) for r in store.db.execute(
        "SELECT route, model, policy_fp FROM config_routes WHERE role = 'judge' ORDER BY panel_position, route"))
    return State(cells, routes, panel)


def take(store: Store, command: str, state: State | None = None) -> int | None:
    """Record the current state if it differs from the newest snapshot; return the new id (None: unchanged)."""
    state = state or current_state(store)
    digest = state.digest
    if store.scalar("SELECT digest FROM snapshots ORDER BY id DESC LIMIT 1") == digest:
        return None
    with store.db.atomic():
        cur = store.db.execute(
            "INSERT INTO snapshots (taken_at, run_id, command, digest, panel_json, n_cells) VALUES (?, ?, ?, ?, ?, ?)",
            [time.time(), store.run_id, command, digest, json.dumps([list(p) for p in state.panel]), len(state.cells)])
        sid = cur.lastrowid
        store.db.conn.executemany(
            """INSERT INTO snapshot_routes (snapshot_id, route, model, policy_fp, complete, all_tasks_overall, scored_overall,
               scored_n, out_of_context_n, failed_n, pending_n) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [(sid, route, r["model"], r["policy_fp"], int(r["complete"]), r["all_tasks_overall"], r["scored_overall"],
              r["scored_n"], r["out_of_context_n"], r["failed_n"], r["pending_n"]) for route, r in state.routes.items()])
        store.db.conn.executemany(
            """INSERT INTO snapshot_cells (snapshot_id, route, task_id, policy_fp, result_id, graded_sha256, status, score)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            [(sid, route, task, c.policy_fp, c.result_id, c.graded_sha256, c.status, c.score)
             for (route, task), c in state.cells.items()])
        old = [r[0] for r in store.db.execute("SELECT id FROM snapshots ORDER BY id DESC LIMIT -1 OFFSET ?", [KEEP])]
        for table, key in (("snapshot_cells", "snapshot_id"), ("snapshot_routes", "snapshot_id"), ("snapshots", "id")):
            store.db.conn.executemany(f"DELETE FROM {table} WHERE {key} = ?", [(i,) for i in old])
    return sid


def load(store: Store, snapshot_id: int) -> State:
    cells = {
        (r[0], r[1]): Cell(r[2], r[3], r[4], r[5], r[6])
        for r in store.db.execute(
            """SELECT route, task_id, policy_fp, result_id, graded_sha256, status, score FROM snapshot_cells
               WHERE snapshot_id = ?""", [snapshot_id])
    }
    routes = {}
    for r in store.rows("SELECT * FROM snapshot_routes WHERE snapshot_id = ?", [snapshot_id]):
        routes[r["route"]] = {"model": r["model"], "policy_fp": r["policy_fp"], **_headline(r)}
    panel = tuple(tuple(p) for p in json.loads(store.scalar("SELECT panel_json FROM snapshots WHERE id = ?", [snapshot_id])))
    return State(cells, routes, panel)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if ts else None


def _reason(before: Cell, after: Cell, panel_changed: bool) -> str | None:
    if before.policy_fp != after.policy_fp:
        return "changed policy"
    if (before.status, before.score, before.result_id) == (after.status, after.score, after.result_id):
        return None
    if after.status == "accepted":
        return "accepted failure"
    if before.graded_sha256 != after.graded_sha256:
        return "changed question or rubric"
    if panel_changed and before.result_id == after.result_id:
        return "changed judge panel"
    if before.result_id != after.result_id:
        if after.status in FAILED_STATUSES:
            return "newly failed"
        return "answered" if before.result_id is None else "retried"
    if after.status in FAILED_STATUSES and before.status not in FAILED_STATUSES:
        return "newly failed"
    if after.status == "ok":
        return "re-judged" if before.status == "ok" else "judged"
    return "status changed"


def diff(before: State, after: State) -> dict[str, Any]:
    """Every cell that differs, with its reason, and each route's headline before and after."""
    panel_changed = before.panel != after.panel
    tasks_before = {t for _, t in before.cells}
    tasks_after = {t for _, t in after.cells}
    cells: list[dict[str, Any]] = []
    for key in sorted(set(before.cells) | set(after.cells)):
        route, task = key
        b, a = before.cells.get(key), after.cells.get(key)
        reason: str | None
        if b is None:
            reason = "new route" if route not in before.routes else "new task" if task not in tasks_before else "changed policy"
        elif a is None:
            reason = "route removed" if route not in after.routes else "task removed" if task not in tasks_after else "changed policy"
        else:
            reason = _reason(b, a, panel_changed)
        if reason is None:
            continue
        cells.append({"route": route, "task_id": task, "reason": reason,
                      "before": None if b is None else {"status": b.status, "score": b.score},
                      "after": None if a is None else {"status": a.status, "score": a.score}})
    routes = []
    for route in list(after.routes) + [r for r in before.routes if r not in after.routes]:
        rb, ra = before.routes.get(route), after.routes.get(route)
        reasons: dict[str, int] = {}
        for c in cells:
            if c["route"] == route:
                reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1

        def delta(k: str, ra: dict[str, Any] | None = ra, rb: dict[str, Any] | None = rb) -> float | None:
            if ra is None or rb is None or ra[k] is None or rb[k] is None:
                return None
            return round(ra[k] - rb[k], 6)

        routes.append({
            "route": route, "status": "new" if rb is None else "removed" if ra is None else "kept",
            "before": None if rb is None else {k: rb[k] for k in HEADLINE},
            "after": None if ra is None else {k: ra[k] for k in HEADLINE},
            "delta_all_tasks": delta("all_tasks_overall"), "delta_scored": delta("scored_overall"),
            "cells_changed": sum(reasons.values()), "reasons": reasons,
            "policy_changed": ra is not None and rb is not None and ra["policy_fp"] != rb["policy_fp"],
        })
    totals: dict[str, int] = {}
    for c in cells:
        totals[c["reason"]] = totals.get(c["reason"], 0) + 1
    return {
        "panel": {"changed": panel_changed, "before": [list(p[:2]) for p in before.panel], "after": [list(p[:2]) for p in after.panel]},
        "routes": routes, "reasons": {r: totals[r] for r in REASONS if r in totals}, "cells": cells,
    }


def changes(store: Store, state: State | None = None, board: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What changed since the last refresh (see the module docstring); reads `cells_now`."""
    rule = ("the current state against the newest snapshot that differs from it; refresh and demo record one at the end of "
            "each run that changed anything")
    nothing: dict[str, Any] = {"rule": rule, "previous": None, "current": None, "panel": None, "routes": [], "reasons": {}, "cells": [],
                               "note": "no earlier refresh recorded by this batchrun: nothing to compare with yet"}
    newest = store.one("SELECT id, taken_at, command, digest FROM snapshots ORDER BY id DESC LIMIT 1")
    if newest is None:  # no snapshot at all: the state and its digest (~0.1 s at 15,000 cells) are not needed
        return nothing
    state = state or current_state(store, board)
    digest = state.digest
    previous = store.one("SELECT id, taken_at, command FROM snapshots WHERE digest != ? ORDER BY id DESC LIMIT 1", [digest])
    if previous is None:
        return nothing
    current = ({"snapshot_id": newest["id"], "taken_at": _iso(newest["taken_at"]), "command": newest["command"]}
               if newest and newest["digest"] == digest else {"snapshot_id": None, "taken_at": None, "command": None})
    out = diff(load(store, previous["id"]), state)
    return {"rule": rule,
            "previous": {"snapshot_id": previous["id"], "taken_at": _iso(previous["taken_at"]), "command": previous["command"]},
            "current": current, **out}
