"""What changed since the last refresh: snapshots recorded by refresh, and the reason per cell."""

from __future__ import annotations

import json

from batchrun.publish import snapshots
from batchrun.publish.snapshots import Cell, State
from conftest import DEFAULT_ROUTES, Project, route, small_project

PANEL = (("judge-a", "claude-sonnet-4-6", "fp-a"), ("judge-g", "gemini-2.5-flash", "fp-g"))


def headline(all_tasks: float | None, complete: bool = True) -> dict:
    return {"model": "m", "policy_fp": "p1", "all_tasks_overall": all_tasks, "scored_overall": all_tasks, "scored_n": 2,
            "out_of_context_n": 0, "failed_n": 0, "pending_n": 0 if complete else 1, "complete": complete}


def state(cells: dict, routes: dict | None = None, panel: tuple = PANEL) -> State:
    return State(cells, routes or {r: headline(0.5) for r, _ in cells}, panel)


def test_each_reason_by_hand() -> None:
    ok = Cell("p1", 10, "g1", "ok", 0.5)
    before = state({
        ("r", "same"): ok,
        ("r", "policy"): ok,
        ("r", "accepted"): Cell("p1", 11, "g1", "blocked", None),
        ("r", "rubric"): Cell("p1", 12, "g1", "ok", 0.5),
        ("r", "retried"): Cell("p1", 13, "g1", "waiting", None),
        ("r", "answered"): Cell("p1", None, "g1", "pending", None),
        ("r", "refused"): Cell("p1", None, "g1", "pending", None),
        ("r", "judged"): Cell("p1", 14, "g1", "judging", None),
        ("r", "judge-blocked"): Cell("p1", 15, "g1", "judging", None),
        ("r", "rejudged"): Cell("p1", 16, "g1", "ok", 0.5),
        ("r", "gone-task"): ok,
    })
    after = state({
        ("r", "same"): ok,
        ("r", "policy"): Cell("p2", 20, "g1", "ok", 0.7),
        ("r", "accepted"): Cell("p1", 11, "g1", "accepted", None),
        ("r", "rubric"): Cell("p1", 12, "g2", "ok", 0.25),
        ("r", "retried"): Cell("p1", 21, "g1", "ok", 0.9),
        ("r", "answered"): Cell("p1", 22, "g1", "ok", 0.8),
        ("r", "refused"): Cell("p1", 23, "g1", "refusal", None),
        ("r", "judged"): Cell("p1", 14, "g1", "ok", 0.6),
        ("r", "judge-blocked"): Cell("p1", 15, "g1", "blocked", None),
        ("r", "rejudged"): Cell("p1", 16, "g1", "ok", 0.75),
        ("r", "new-task"): ok,
        ("new", "t"): ok,
    })
    d = snapshots.diff(before, after)
    reasons = {c["task_id"] if c["route"] == "r" else c["route"]: c["reason"] for c in d["cells"]}
    assert reasons == {
        "policy": "changed policy", "accepted": "accepted failure", "rubric": "changed question or rubric",
        "retried": "retried", "answered": "answered", "refused": "newly failed", "judged": "judged",
        "judge-blocked": "newly failed", "rejudged": "re-judged", "gone-task": "task removed", "new-task": "new task",
        "new": "new route",
    }
    assert d["panel"]["changed"] is False
    assert d["reasons"]["newly failed"] == 2 and sum(d["reasons"].values()) == 12
    by_route = {r["route"]: r for r in d["routes"]}
    assert by_route["new"]["status"] == "new" and by_route["new"]["before"] is None
    assert by_route["r"]["cells_changed"] == 11 and by_route["r"]["delta_all_tasks"] == 0


def test_a_changed_panel_explains_changed_scores_of_the_same_answers() -> None:
    before = state({("r", "t1"): Cell("p1", 10, "g1", "ok", 0.5), ("r", "t2"): Cell("p1", 11, "g1", "ok", 0.5)})
    after = state({("r", "t1"): Cell("p1", 10, "g1", "ok", 0.7), ("r", "t2"): Cell("p1", 11, "g1", "ok", 0.5)},
                  routes={"r": headline(0.6)}, panel=PANEL[:1])
    d = snapshots.diff(before, after)
    assert [(c["task_id"], c["reason"]) for c in d["cells"]] == [("t1", "changed judge panel")]
    assert d["panel"] == {"changed": True, "before": [["judge-a", "claude-sonnet-4-6"], ["judge-g", "gemini-2.5-flash"]],
                          "after": [["judge-a", "claude-sonnet-4-6"]]}
    assert d["routes"][0]["delta_all_tasks"] == 0.1


def test_state_digest_ignores_order_and_sees_any_change() -> None:
    a = state({("r", "t1"): Cell("p1", 10, "g1", "ok", 0.5), ("r", "t2"): Cell("p1", 11, "g1", "ok", 0.25)})
    b = state({("r", "t2"): Cell("p1", 11, "g1", "ok", 0.25), ("r", "t1"): Cell("p1", 10, "g1", "ok", 0.5)})
    c = state({("r", "t1"): Cell("p1", 10, "g1", "ok", 0.5), ("r", "t2"): Cell("p1", 11, "g1", "ok", 0.3)})
    assert a.digest == b.digest != c.digest
    assert a.digest != state(dict(a.cells), panel=PANEL[:1]).digest


def test_refresh_records_snapshots_and_the_report_shows_a_new_route(project: Project, emulator) -> None:
    small_project(project)
    assert project.run("refresh", "--interval", "0.05", emulator=emulator).exit_code == 0
    first = json.loads(project.run("report", "--format", "json", emulator=emulator).stdout)["statistics"]["changes"]
    assert first["previous"] is None and "no earlier refresh" in first["note"]
    assert [r["command"] for r in project.sql("select command from snapshots")] == ["refresh"]
    # A second refresh with nothing to do records nothing new.
    assert project.run("refresh", "--interval", "0.05", emulator=emulator).exit_code == 0
    assert len(project.sql("select id from snapshots")) == 1

    routes = dict(DEFAULT_ROUTES)
    routes["newcomer"] = route("openai", "gpt-4.1")
    project.config(routes=routes)
    r = project.run("refresh", "--interval", "0.05", emulator=emulator)
    assert r.exit_code == 0, r.output
    assert "Since the refresh of" in r.stdout and "- newcomer (new): All-tasks — →" in r.stdout
    changes = json.loads(project.run("report", "--format", "json", emulator=emulator).stdout)["statistics"]["changes"]
    snaps = project.sql("select id, taken_at, n_cells from snapshots order by id")
    assert len(snaps) == 2 and changes["previous"]["snapshot_id"] == snaps[0]["id"]
    assert changes["current"]["snapshot_id"] == snaps[1]["id"]
    assert changes["reasons"] == {"new route": 4}
    assert {c["route"] for c in changes["cells"]} == {"newcomer"}
    newcomer = next(x for x in changes["routes"] if x["route"] == "newcomer")
    assert newcomer["status"] == "new" and newcomer["before"] is None and newcomer["after"]["complete"] is True
    assert all(x["cells_changed"] == 0 and x["delta_all_tasks"] == 0 for x in changes["routes"] if x["route"] != "newcomer")
    # The snapshot holds every current cell, as the views say.
    assert snaps[1]["n_cells"] == len(project.sql("select * from cell_status")) == 16


def test_only_the_newest_snapshots_are_kept(project: Project, monkeypatch) -> None:
    small_project(project)
    store = project.store()
    store.db.execute("CREATE TEMP TABLE cells_now AS SELECT * FROM cell_status")
    monkeypatch.setattr(snapshots, "KEEP", 2)
    base = snapshots.current_state(store)
    ids = []
    for i in range(4):  # four different states: the panel differs each time
        s = State(base.cells, base.routes, (("judge", f"model-{i}", "fp"),))
        ids.append(snapshots.take(store, "refresh", s))
        assert snapshots.take(store, "refresh", s) is None  # unchanged: not recorded again
    assert [r[0] for r in store.db.execute("select id from snapshots order by id")] == ids[-2:]
    assert {r[0] for r in store.db.execute("select distinct snapshot_id from snapshot_routes")} <= set(ids[-2:])
    store.close()

