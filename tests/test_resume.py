"""Issue 18: a resume that finds an input changed under work already sent refuses, naming the input.

Real projects, batchrun as real subprocesses, the emulator as a separate process. For each input
the run manifest lists (document, dataset record, config, prompt template, request file, results
file): the refusal names it and its fix, exits 1 without a traceback, leaves state.db as it was,
and each fix it offers works.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, batch_requests, route, small_project
from test_reliability import EmulatorProcess, emu, emu_proc, integrity_ok, run_batchrun  # noqa: F401 (emu, emu_proc: its fixtures)

ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "judge-a": route("anthropic", "claude-sonnet-4-6"),
}


def make(project: Project) -> Project:
    return small_project(project, routes=ROUTES, panel=["judge-a"])


def snapshot(project: Project) -> dict[str, Any]:
    """What a refused command must leave as it was."""
    return {
        "batches": project.sql("SELECT id, status, provider_state FROM batches ORDER BY id"),
        "tasks": project.sql("SELECT task_id, task_sha256, doc_sha256, graded_sha256 FROM tasks ORDER BY task_id"),
        "cells": project.sql("SELECT route, task_id, custom_id, policy_fp FROM cells ORDER BY route, task_id, policy_fp"),
        "requests": project.sql("SELECT count(*) AS n FROM requests"),
        "results": project.sql("SELECT count(*) AS n FROM results"),
    }


def refused(project: Project, emu: EmulatorProcess, *commands: list[str]) -> str:
    """Each command exits 1 with the same message and changes nothing; returns the message."""
    before = snapshot(project)
    sent = len(emu.requests)
    messages = []
    for command in commands:
        r = run_batchrun(project, *command, emu=emu)
        assert r.returncode == 1, (command, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "Error:" in r.stderr and "Hint:" in r.stderr, r.stderr
        messages.append(r.stderr)
        assert snapshot(project) == before, command
        assert len(emu.requests) == sent, f"{command} sent a request"
    integrity_ok(project)
    return messages[0]


def cancel_commands(stderr: str) -> list[list[str]]:
    hint = stderr.split("Hint:", 1)[1]
    return [["cancel", "--batch", bid] for bid in re.findall(r"batchrun cancel --batch (\S+?)[`\s]", hint)]


def finish(project: Project, emu: EmulatorProcess) -> None:
    r = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "60s", emu=emu)
    assert r.returncode == 0, r.stderr
    integrity_ok(project)


def gen_in_flight(project: Project, emu: EmulatorProcess) -> list[str]:
    r = run_batchrun(project, "submit", emu=emu)
    assert r.returncode == 0, r.stderr
    rows = project.sql("SELECT id, status FROM batches WHERE stage = 'gen'")
    assert rows and {b["status"] for b in rows} == {"in_flight"}
    return [b["id"] for b in rows]


def judges_in_flight(project: Project, emu: EmulatorProcess) -> list[str]:
    gen_in_flight(project, emu)
    assert run_batchrun(project, "poll", emu=emu).returncode == 0
    assert run_batchrun(project, "collect", emu=emu).returncode == 2  # judging still to do
    assert run_batchrun(project, "submit", emu=emu).returncode == 0
    rows = project.sql("SELECT id, status FROM batches WHERE stage = 'judge'")
    assert rows and {b["status"] for b in rows} == {"in_flight"}
    return [b["id"] for b in rows]


# --- a document --------------------------------------------------------------------------------


def test_a_document_changed_under_batches_in_flight_is_refused_by_name_and_restoring_it_resumes(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    batches = gen_in_flight(project, emu)
    doc = project.root / "corpus" / "harbor.txt"
    original = doc.read_bytes()
    doc.write_bytes(original.replace(b"nine days", b"ten days"))
    err = refused(project, emu, ["submit"], ["collect"], ["refresh", "--interval", "0.05", "--timeout", "30s"], ["plan"])
    assert "the document corpus/harbor.txt" in err and "sha256" in err
    assert "put corpus/harbor.txt back as it was" in err
    assert {c[2] for c in cancel_commands(err)} == set(batches)  # every contestant sent t1/t2
    assert "lab.txt" not in err and "zh.txt" not in err
    # Fix 1: put it back; the batches in flight go on and nothing is sent twice.
    doc.write_bytes(original)
    finish(project, emu)
    assert project.sql("SELECT count(*) AS n FROM batches WHERE stage = 'gen'")[0]["n"] == len(batches)


def test_cancelling_the_named_batches_takes_the_new_document(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    gen_in_flight(project, emu)
    doc = project.root / "corpus" / "harbor.txt"
    doc.write_bytes(doc.read_bytes().replace(b"nine days", b"ten days"))
    err = refused(project, emu, ["submit"])
    for command in cancel_commands(err):  # Fix 2, as the hint prints it
        r = run_batchrun(project, *command, emu=emu)
        assert r.returncode == 0, r.stderr
    finish(project, emu)
    new_sha = project.sql("SELECT doc_sha256 FROM tasks WHERE task_id = 't1'")[0]["doc_sha256"]
    cells = project.sql("""SELECT c.doc_sha256 FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
                           WHERE c.task_id = 't1'""")
    assert len(cells) == 2 and {c["doc_sha256"] for c in cells} == {new_sha}
    assert all(r["complete"] for r in project.sql("SELECT complete FROM leaderboard"))


def test_a_document_edited_before_anything_was_sent_is_simply_planned_again(project: Project, emu: EmulatorProcess) -> None:
    """Edit, re-plan: a planned (never uploaded) batch is superseded, not refused, not sent."""
    make(project)
    assert run_batchrun(project, "plan", emu=emu).returncode == 0
    doc = project.root / "corpus" / "harbor.txt"
    doc.write_bytes(doc.read_bytes().replace(b"nine days", b"ten days"))
    finish(project, emu)
    assert project.sql("SELECT count(*) AS n FROM batches WHERE status = 'superseded'")[0]["n"] == 2



def test_a_document_edited_under_batches_uploaded_but_not_created_is_planned_again(project: Project, emu: EmulatorProcess) -> None:
    """A create refused for quota leaves each batch uploaded with no batch at the provider:
    nothing was sent to a model, so an edit supersedes the batches built from the edited document
    (no refusal, no cancel needed) and only those: the held batches of the other documents are
    created as they were, and no request is ever sent from the old text."""
    # Anthropic refuses the create itself for quota (HTTP 429); OpenAI's quota fails a created
    # batch. One request per file, so each batch holds one task.
    small_project(project, routes={"claude": route("anthropic", "claude-opus-4-8", max_requests_per_file=1),
                                   "judge-a": ROUTES["judge-a"]}, panel=["judge-a"])
    emu.fault({"kind": "quota", "count": -1})
    r = run_batchrun(project, "submit", emu=emu)
    assert r.returncode in (0, 2), r.stderr
    held = {b["id"]: b["task_id"] for b in project.sql(
        """SELECT b.id, q.task_id FROM batches b JOIN batch_requests br ON br.batch_id = b.id JOIN requests q ON q.custom_id = br.custom_id
           WHERE b.status = 'uploaded' AND b.stage = 'gen'""")}
    harbor = {t["task_id"] for t in project.sql("SELECT task_id FROM tasks WHERE corpus_file LIKE '%harbor.txt'")}
    assert set(held.values()) >= harbor and set(held.values()) - harbor, held
    doc = project.root / "corpus" / "harbor.txt"
    doc.write_bytes(doc.read_bytes().replace(b"nine days", b"ten days"))
    emu._call("DELETE", "/_emulator/faults")  # the queue has room again; the request log is kept
    finish(project, emu)
    statuses = {b["id"]: b["status"] for b in project.sql("SELECT id, status FROM batches")}
    assert {bid for bid, task in held.items() if statuses[bid] == "superseded"} == {bid for bid, task in held.items() if task in harbor}
    assert all(statuses[bid] == "collected" for bid, task in held.items() if task not in harbor)
    stale = {r["custom_id"] for r in project.sql(
        """SELECT br.custom_id FROM batch_requests br JOIN batches b ON b.id = br.batch_id WHERE b.status = 'superseded'""")}
    assert stale and not stale & {r["custom_id"] for r in emu.requests}  # never sent from the old document
    assert all(r["complete"] for r in project.sql("SELECT complete FROM leaderboard"))


def test_a_batch_left_creating_by_a_crash_is_not_created_from_a_document_edited_since(project: Project, emu: EmulatorProcess) -> None:
    """A crash before the create leaves the batch 'creating'; the document is edited; the next
    submit finds no such batch at the provider (adoption: absent) and, instead of creating it
    from the old text, supersedes it and plans the cells again (found by review)."""
    small_project(project, routes={"claude": ROUTES["claude"], "judge-a": ROUTES["judge-a"]}, panel=["judge-a"])
    r = run_batchrun(project, "submit", emu=emu, env={"BATCHRUN_DIE_AT": "submit.before_create"})
    assert r.returncode != 0 and project.sql("SELECT status FROM batches WHERE stage = 'gen'") == [{"status": "creating"}]
    doc = project.root / "corpus" / "harbor.txt"
    doc.write_bytes(doc.read_bytes().replace(b"nine days", b"ten days"))
    finish(project, emu)
    stale = {r["custom_id"] for r in project.sql(
        """SELECT br.custom_id FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
           WHERE q.stage = 'gen' AND br.custom_id NOT IN (SELECT custom_id FROM cells)""")}
    assert stale and not stale & {r["custom_id"] for r in emu.requests}
    assert all(r["complete"] for r in project.sql("SELECT complete FROM leaderboard"))


def test_a_sync_batch_is_not_sent_online_from_a_changed_document(project: Project, emu: EmulatorProcess) -> None:
    """poll sends a sync batch's lines itself: it checks the inputs first, on a resumed run too."""
    small_project(project, routes={"online": route("openai", "gpt-5.5", transport="sync", sync_concurrency=1),
                                   "judge-a": ROUTES["judge-a"]}, panel=["judge-a"])
    assert run_batchrun(project, "submit", emu=emu).returncode == 0
    assert project.sql("SELECT status FROM batches")[0]["status"] == "in_flight"
    assert batch_requests(emu) == []  # (the routes' preflights went with submit)
    doc = project.root / "corpus" / "lab.txt"
    doc.write_bytes(doc.read_bytes().replace(b"340 samples", b"341 samples"))
    err = refused(project, emu, ["poll"], ["refresh", "--interval", "0.05", "--timeout", "30s"])
    assert "the document corpus/lab.txt" in err and "being sent online" in err
    for command in cancel_commands(err):
        assert run_batchrun(project, *command, emu=emu).returncode == 0
    finish(project, emu)
    stale = project.sql("""SELECT q.custom_id FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
                           JOIN batches b ON b.id = br.batch_id WHERE b.status = 'withdrawn' AND q.task_id = 't3'""")
    current = project.sql("SELECT custom_id FROM cells WHERE route = 'online' AND task_id = 't3' AND doc_sha256 = "
                          "(SELECT doc_sha256 FROM tasks WHERE task_id = 't3')")
    sent = {r["custom_id"] for r in emu.requests}
    assert len(stale) == 1 and stale[0]["custom_id"] not in sent  # never sent from the old document
    assert len(current) == 1 and current[0]["custom_id"] in sent


def test_a_document_changed_under_judge_batches_in_flight_names_the_document_their_answers_came_from(project: Project, emu: EmulatorProcess) -> None:
    """A judge request is built from its answer's inputs too: the check reads each answer (its
    parent request) once for all the judges grading it, and still names the document."""
    make(project)
    judge_batches = judges_in_flight(project, emu)
    doc = project.root / "corpus" / "harbor.txt"
    original = doc.read_bytes()
    doc.write_bytes(original.replace(b"nine days", b"ten days"))
    err = refused(project, emu, ["submit"], ["collect"])
    assert "the document corpus/harbor.txt" in err and "put corpus/harbor.txt back as it was" in err
    assert "(task t" not in err and {c[2] for c in cancel_commands(err)} <= set(judge_batches)
    doc.write_bytes(original)
    finish(project, emu)


def test_answers_that_came_back_before_the_edit_are_kept_never_scored_and_said_so(project: Project, emu: EmulatorProcess) -> None:
    """The batch had ended (downloaded) when the document changed: nothing left to stop or pay for.
    collect records its answers for audit, says which input they answer, and scores none of them."""
    make(project)
    gen_in_flight(project, emu)
    old_ids = {r["custom_id"] for r in project.sql(
        "SELECT br.custom_id FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id WHERE q.task_id IN ('t1', 't2')")}
    assert run_batchrun(project, "poll", emu=emu).returncode == 0
    doc = project.root / "corpus" / "harbor.txt"
    doc.write_bytes(doc.read_bytes().replace(b"nine days", b"ten days"))
    r = run_batchrun(project, "collect", emu=emu)
    assert r.returncode == 2, r.stderr  # t1 and t2 are to do again
    assert "its answers are to the document corpus/harbor.txt as it was before it changed" in r.stderr
    assert "never scored" in r.stderr and "Traceback" not in r.stderr
    assert project.sql("SELECT count(*) AS n FROM results WHERE kind = 'ok'")[0]["n"] == 8  # kept for audit
    finish(project, emu)
    new_sha = project.sql("SELECT doc_sha256 FROM tasks WHERE task_id = 't1'")[0]["doc_sha256"]
    current = project.sql("SELECT custom_id, doc_sha256 FROM cells c JOIN config_routes cr ON cr.route = c.route "
                          "AND cr.policy_fp = c.policy_fp WHERE c.task_id IN ('t1', 't2')")
    assert len(old_ids) == 4 and len(current) == 4
    assert all(c["doc_sha256"] == new_sha and c["custom_id"] not in old_ids for c in current)

# --- a dataset record ----------------------------------------------------------------------------


def test_a_question_changed_under_batches_in_flight_names_the_task(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    gen_in_flight(project, emu)
    records = json.loads(project.dataset_path.read_text())
    original = project.dataset_path.read_bytes()
    records[2]["question_text"] = "Who moved the freezer samples, and to which unit?"
    project.dataset_path.write_text(json.dumps(records))
    err = refused(project, emu, ["submit"], ["collect"])
    assert "the dataset data/tasks.json (task t3): its question changed" in err and "restore task t3 in data/tasks.json" in err
    assert "(task t1)" not in err and "document" not in err
    project.dataset_path.write_bytes(original)
    finish(project, emu)


def test_a_rubric_changed_under_judge_batches_in_flight_names_the_task(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    judge_batches = judges_in_flight(project, emu)
    records = json.loads(project.dataset_path.read_text())
    records[0]["ground_truth"]["scoring_rubric"][1]["points"] = 45
    project.dataset_path.write_text(json.dumps(records))
    err = refused(project, emu, ["submit"], ["collect"])
    assert "(task t1): what the judges grade changed" in err
    assert {c[2] for c in cancel_commands(err)} == set(judge_batches)
    for command in cancel_commands(err):
        assert run_batchrun(project, *command, emu=emu).returncode == 0
    finish(project, emu)  # the rubric edit re-judges t1 with the new rubric, as always


def test_a_changed_gold_answer_is_not_a_change_to_what_was_sent(project: Project, emu: EmulatorProcess) -> None:
    """Neither a generation nor a judge request contains the gold answer: nothing to refuse."""
    make(project)
    judges_in_flight(project, emu)
    records = json.loads(project.dataset_path.read_text())
    records[0]["ground_truth"]["answer"] = "another gold answer"
    project.dataset_path.write_text(json.dumps(records))
    finish(project, emu)


# --- the config ----------------------------------------------------------------------------------


def test_a_route_policy_changed_under_batches_in_flight_names_the_route_and_setting(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    gen_in_flight(project, emu)
    original = project.config_path.read_bytes()
    cfg = json.loads(original)
    cfg["routes"]["gpt"]["caps"] = {"en": 700_000, "cjk": 850_000}
    project.config_path.write_text(json.dumps(cfg))
    err = refused(project, emu, ["submit"], ["collect"])
    assert "the config batchrun.json (route gpt): its policy changed: caps.en" in err
    assert "restore route gpt's settings in batchrun.json" in err
    assert "route claude" not in err.split("Batches:")[0]
    gpt_batch = project.sql("SELECT id FROM batches WHERE route = 'gpt'")[0]["id"]
    assert [c[2] for c in cancel_commands(err)] == [gpt_batch]
    # A change that is no route's policy (the budget) is not a change to what was sent.
    project.config_path.write_bytes(original)
    cfg = json.loads(original)
    cfg["budget"] = 50
    project.config_path.write_text(json.dumps(cfg))
    r = run_batchrun(project, "submit", emu=emu)
    assert r.returncode == 0, r.stderr
    project.config_path.write_bytes(original)
    finish(project, emu)


# --- a prompt template ---------------------------------------------------------------------------


def test_batches_planned_by_a_batchrun_with_another_prompt_template_are_refused(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    # Another batchrun (a different generation template) plans and sends the batches: a child
    # process whose batchrun.protocol.policy says another template digest (forked warm).
    r = run_batchrun(project, "submit", emu=emu, setattrs={"batchrun.protocol.policy.GENERATION_TEMPLATE_SHA256": "0" * 64})
    assert r.returncode == 0, r.stderr
    err = refused(project, emu, ["submit"], ["refresh", "--interval", "0.05", "--timeout", "30s"])
    assert "the generation prompt template (route gpt)" in err and "the generation prompt template (route claude)" in err
    assert "000000000000…" in err and "the batchrun version that planned them" in err
    for command in cancel_commands(err):
        assert run_batchrun(project, *command, emu=emu).returncode == 0
    finish(project, emu)


# --- a request file -----------------------------------------------------------------------------


def test_an_edited_request_file_is_refused_by_name(project: Project, emu: EmulatorProcess) -> None:
    make(project)
    assert run_batchrun(project, "plan", emu=emu).returncode == 0
    path = project.jobs_files()[0]
    path.write_bytes(path.read_bytes().replace(b"harbor", b"HARBOR"))
    err = refused(project, emu, ["submit"])
    assert str(path) in err and "was changed after it was planned" in err and "batchrun cancel --batch" in err


def test_a_request_file_planned_before_blake3_is_checked_with_its_sha256(project: Project, emu: EmulatorProcess) -> None:
    """A batch planned by a batchrun older than m018 recorded only the file's sha256: submit checks
    that one (an edit is still refused), and the manifest lists it under "sha256"."""
    import hashlib

    make(project)
    assert run_batchrun(project, "plan", emu=emu).returncode == 0
    conn = sqlite3.connect(project.state_path)
    with conn:
        for b in project.sql("SELECT id, request_file FROM batches WHERE status = 'planned'"):
            digest = hashlib.sha256(Path(b["request_file"]).read_bytes()).hexdigest()
            conn.execute("UPDATE batches SET blake3 = NULL, sha256 = ? WHERE id = ?", [digest, b["id"]])
    conn.close()
    path = project.jobs_files()[0]
    original = path.read_bytes()
    path.write_bytes(original.replace(b"harbor", b"HARBOR"))
    err = refused(project, emu, ["submit"])
    assert str(path) in err and "was changed after it was planned (sha256 " in err
    path.write_bytes(original)
    finish(project, emu)
    manifest = json.loads((project.area / "results" / "manifest.json").read_text())
    old = [f for f in manifest["request_files"] if "sha256" in f]
    assert old and all("blake3" not in f for f in old)
    assert any("blake3" in f for f in manifest["request_files"])  # the judge batches, planned after
    r = run_batchrun(project, "verify", emu=emu)
    assert r.returncode == 0, r.stdout + r.stderr


# --- a results file ------------------------------------------------------------------------------


def _downloaded(project: Project) -> tuple[str, Path]:
    rows = project.sql("SELECT id, result_files_json FROM batches WHERE status = 'downloaded' AND route = 'gpt'")
    assert rows
    return rows[0]["id"], Path(json.loads(rows[0]["result_files_json"])[0])


SYNC_ROUTES = {**ROUTES, "gpt": route("openai", "gpt-5.5", transport="sync", sync_concurrency=1)}


def test_a_results_file_changed_after_download_is_refused_by_name(project: Project, emu: EmulatorProcess) -> None:
    """A sync batch's results file: batchrun's own record of the answers it was sent online, which
    nothing else holds. (A batch's, which its provider still holds, is downloaded again instead:
    tests/test_redownload.py.)"""
    small_project(project, routes=SYNC_ROUTES, panel=["judge-a"])
    assert run_batchrun(project, "submit", emu=emu).returncode == 0
    assert run_batchrun(project, "poll", emu=emu).returncode == 0
    batch, path = _downloaded(project)
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    assert len(lines) == 4
    # One byte: a space before the line's end. The same JSON, so only the checksum can tell.
    path.write_bytes(lines[0].rstrip(b"\n") + b" \n" + b"".join(lines[1:]))
    err = refused(project, emu, ["collect"], ["refresh", "--interval", "0.05", "--timeout", "30s"])
    assert f"The results file {path.relative_to(project.root).as_posix()} of batch {batch} changed after it was downloaded" in err
    assert "Put " in err and "back as it was downloaded" in err and "or delete it" in err
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ?", [batch])[0]["n"] == 0
    path.write_bytes(original)  # the fix: the provider's bytes back
    finish(project, emu)
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'ok'", [batch])[0]["n"] == 4


def test_a_deleted_results_file_is_sent_again_as_the_hint_says(project: Project, emu: EmulatorProcess) -> None:
    """The refusal's other fix, for a sync batch (nothing but its file holds the answers)."""
    small_project(project, routes=SYNC_ROUTES, panel=["judge-a"])
    assert run_batchrun(project, "submit", emu=emu).returncode == 0
    assert run_batchrun(project, "poll", emu=emu).returncode == 0
    batch, path = _downloaded(project)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\n\n", 1))
    refused(project, emu, ["collect"])
    path.unlink()
    finish(project, emu)
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'missing'", [batch])[0]["n"] == 4
