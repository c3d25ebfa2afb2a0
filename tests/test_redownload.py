"""A downloaded result file lost before collect read it is downloaded again, not paid for again.

The providers keep a batch's results for weeks (resume.py cites each), so a result file deleted
(or the whole jobs/ folder lost, or a file changed) between poll and collect sends its batch back
from `downloaded` to `ended` and the next poll fetches it again; only if the provider no longer
holds the results (a 404 from a provider that otherwise answers) are its requests sent again, as
before. Through the CLI, the real SDKs over HTTP and the emulator (in process, latency 0), a
3-route project (one route per provider, no judges); the crash cases as real killed subprocesses.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from batchrun.providers.clients import make_client
from conftest import PREFLIGHT_ID, Project, route, small_project
from test_reliability import integrity_ok, run_batchrun

ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "gemini": route("gemini", "gemini-2.5-pro"),
}


def make(project: Project) -> Project:
    return small_project(project, routes=ROUTES, panel=[])


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


def downloaded(project: Project, emu: Any) -> dict[str, dict[str, Any]]:
    """Submit and poll: each route's generation batch, downloaded and not collected yet."""
    ok(project.run("submit", emulator=emu))
    ok(project.run("poll", emulator=emu))
    rows = {b["route"]: b for b in project.sql("SELECT * FROM batches")}
    assert set(rows) == set(ROUTES) and {b["status"] for b in rows.values()} == {"downloaded"}
    for b in rows.values():
        b["files"] = [Path(p) for p in json.loads(b["result_files_json"])]
        assert b["files"] and all(p.is_file() for p in b["files"])
    return rows


def sent(emu: Any) -> Counter[str]:
    """How often the emulator processed each request (what a provider bills), preflights aside."""
    return Counter(r["custom_id"] for r in emu.requests if r["custom_id"] != PREFLIGHT_ID)


def creates(emu: Any) -> int:
    """Batches created at the providers (each provider's create call)."""
    return sum(1 for c in emu.calls if c["method"] == "POST"
               and (c["path"].endswith("/batches") or c["path"].endswith(":batchGenerateContent")))


def answers(project: Project) -> list[tuple[Any, ...]]:
    """Every result row as a clean run would make it (not the batch ids or times)."""
    return [tuple(r.values()) for r in project.sql(
        """SELECT q.route, q.task_id, r.kind, r.text, r.finish_reason, r.input_tokens, r.output_tokens, r.error_type, r.cost
           FROM results r JOIN requests q ON q.custom_id = r.custom_id ORDER BY q.route, q.task_id, r.id""")]


def board(project: Project) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in project.sql(
        "SELECT route, scored_n, failed_n, pending_n, complete, scored_overall FROM leaderboard ORDER BY route")]


def clean_run(tmp_path: Path, emu: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    clean = make(Project(tmp_path / "clean"))
    ok(clean.run("refresh", "--interval", "0.01", emulator=emu))
    return answers(clean), board(clean)


def test_a_lost_jobs_folder_is_downloaded_again_by_the_next_refresh_and_nothing_is_paid_twice(
        project: Project, emulator: Any, tmp_path: Path) -> None:
    """All three providers: jobs/ deleted between poll and collect. The next refresh fetches each
    result file again; no batch is created and no request is processed twice; the results are
    those of a clean run."""
    make(project)
    batches = downloaded(project, emulator)
    originals = {p: p.read_bytes() for b in batches.values() for p in b["files"]}
    paid, created = sent(emulator), creates(emulator)
    assert paid and set(paid.values()) == {1}
    shutil.rmtree(project.area / "jobs")
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    for b in batches.values():
        assert f"{b['id']} (route {b['route']}): " in r.stderr
        assert f"downloaded {b['id']} again: " in r.stderr
    assert "was deleted before collect read it; downloading it again from the provider (its requests are not sent again)" in r.stderr
    assert sent(emulator) == paid and creates(emulator) == created  # nothing paid for twice
    assert {p: p.read_bytes() for p in originals} == originals  # the provider's bytes, again
    rows = project.sql("SELECT status, redownload, error, download_attempts FROM batches")
    assert len(rows) == 3 and all(b == {"status": "collected", "redownload": None, "error": None, "download_attempts": 1} for b in rows)
    clean_answers, clean_board = clean_run(tmp_path, emulator)
    assert answers(project) == clean_answers and board(project) == clean_board
    assert all(row[2] == "ok" for row in clean_answers) and len(clean_answers) == 12


def test_collect_sends_a_deleted_file_back_and_the_next_poll_downloads_it(project: Project, emulator: Any) -> None:
    """`collect` alone: the batch whose file is gone is not read as "no result"; `status` says it
    waits for a new download; `poll` fetches it; `collect` then reads it. Nothing is sent twice."""
    make(project)
    gpt = downloaded(project, emulator)["gpt"]
    original = gpt["files"][0].read_bytes()
    paid = sent(emulator)
    gpt["files"][0].unlink()
    r = ok(project.run("collect", emulator=emulator), 2)
    name = gpt["files"][0].relative_to(project.root).as_posix()
    assert (f"{gpt['id']} (route gpt): {name} was deleted before collect read it; the next poll or refresh downloads it again "
            "from the provider (its requests are not sent again)") in r.stderr
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ?", [gpt["id"]])[0]["n"] == 0
    assert project.sql("SELECT status, redownload FROM batches WHERE id = ?", [gpt["id"]]) == [{"status": "ended", "redownload": "pending"}]
    s = project.run("status", emulator=emulator)
    assert f"{gpt['id']}: ended (downloading the results again)" in s.stdout
    r = ok(project.run("poll", emulator=emulator))
    assert f"downloaded {gpt['id']} again: output.jsonl" in r.stderr and gpt["files"][0].read_bytes() == original
    r = ok(project.run("collect", emulator=emulator))
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'ok'", [gpt["id"]])[0]["n"] == 4
    assert sent(emulator) == paid


def test_a_changed_result_file_is_kept_aside_and_the_providers_bytes_downloaded_again(project: Project, emulator: Any) -> None:
    """A file changed after its download (one byte: the same JSON) is never scored: collect keeps
    it as NAME.changed and sends the batch back; the provider's bytes are read instead."""
    make(project)
    claude = downloaded(project, emulator)["claude"]
    path = claude["files"][0]
    original = path.read_bytes()
    changed = original.replace(b"\n", b" \n", 1)
    path.write_bytes(changed)
    paid = sent(emulator)
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    assert f"{path.relative_to(project.root).as_posix()} changed after it was downloaded before collect read it" in r.stderr
    assert path.read_bytes() == original and path.with_name(path.name + ".changed").read_bytes() == changed
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'ok'", [claude["id"]])[0]["n"] == 4
    assert sent(emulator) == paid


def _forget_results(project: Project, emu: Any, batches: dict[str, dict[str, Any]]) -> None:
    """Each provider no longer holds the results, as after its retention (resume.py): OpenAI's
    output file deleted, Anthropic's batch deleted, Gemini's responses file deleted; through
    the real SDKs."""
    routes = project.load(emu).routes
    openai, anthropic, gemini = (make_client(routes[name]) for name in ("gpt", "claude", "gemini"))
    openai.files.delete(openai.batches.retrieve(batches["gpt"]["provider_batch_id"]).output_file_id)
    anthropic.messages.batches.delete(batches["claude"]["provider_batch_id"])
    gemini.files.delete(name=gemini.batches.get(name=batches["gemini"]["provider_batch_id"]).dest.file_name)


def test_results_the_provider_no_longer_holds_are_sent_again_then_and_only_then(project: Project, emulator: Any) -> None:
    """A lost file whose results the provider no longer holds (404, while the provider answers a
    listing): its requests read as no result and are sent again, said so by name."""
    make(project)
    batches = downloaded(project, emulator)
    paid = sent(emulator)
    _forget_results(project, emulator, batches)
    for b in batches.values():
        for p in b["files"]:
            p.unlink()
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    for b in batches.values():
        assert f"{b['id']} (route {b['route']}): the result file was lost before collect read it and the provider no longer holds the results (" in r.stderr
    assert sent(emulator) == Counter({cid: 2 for cid in paid})  # sent again, once
    missing = project.sql("SELECT batch_id, error_message FROM results WHERE kind = 'missing'")
    assert len(missing) == 12 and all("the provider no longer holds the results" in m["error_message"] for m in missing)
    assert project.sql("SELECT DISTINCT redownload FROM batches WHERE id IN (?, ?, ?)", [b["id"] for b in batches.values()]) == [{"redownload": "gone"}]
    assert all(row[4] == 1 for row in board(project))  # complete: every cell answered in the end


def test_a_404_from_a_provider_that_answers_nothing_blocks_the_route_and_sends_nothing(project: Project, emulator: Any) -> None:
    """A lost file whose provider answers 404 to everything (a wrong base URL or a proxy) is not
    taken for results gone: the route is blocked for the run, nothing is sent again, and once the
    provider answers the file is downloaded again."""
    make(project)
    gpt = downloaded(project, emulator)["gpt"]
    paid = sent(emulator)
    gpt["files"][0].unlink()
    emulator.add_fault({"kind": "http_error", "status": 404, "provider": "openai", "count": -1})
    r = ok(project.run("refresh", "--interval", "0.01", "--timeout", "20", emulator=emulator), 2)
    assert "route 'gpt' is blocked for this run" in r.stderr and "no longer holds" not in r.stderr
    assert project.sql("SELECT status, redownload FROM batches WHERE id = ?", [gpt["id"]]) == [{"status": "ended", "redownload": "pending"}]
    emulator.clear_faults()
    ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    assert sent(emulator) == paid
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'ok'", [gpt["id"]])[0]["n"] == 4


def test_deleting_collected_result_files_changes_nothing(project: Project, emulator: Any) -> None:
    """Once collected, the answers are in state.db: jobs/ deleted afterwards sends no call."""
    make(project)
    ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    before = (answers(project), board(project), project.sql("SELECT id, status, redownload FROM batches ORDER BY id"))
    calls = len(emulator.calls)
    shutil.rmtree(project.area / "jobs")
    ok(project.run("collect", emulator=emulator))
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    assert "again" not in r.stderr
    assert (answers(project), board(project), project.sql("SELECT id, status, redownload FROM batches ORDER BY id")) == before
    assert len(emulator.calls) == calls


# --- crashes -----------------------------------------------------------------------------------


def test_killed_while_downloading_again_the_next_refresh_finishes_and_pays_nothing_twice(project: Project, emulator: Any) -> None:
    """Killed with the file fetched again but not recorded (the batch still `ended`): the next run
    fetches it once more (a download is idempotent) and collects it; nothing is sent twice."""
    make(project)
    batches = downloaded(project, emulator)
    paid = sent(emulator)
    shutil.rmtree(project.area / "jobs")
    first = run_batchrun(project, "refresh", "--interval", "0.01", emu=emulator, env={"BATCHRUN_DIE_AT": "poll.after_download"})
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    integrity_ok(project)
    statuses = {b["status"] for b in project.sql("SELECT status FROM batches")}
    assert "ended" in statuses and statuses <= {"ended", "downloaded", "collected"}
    second = run_batchrun(project, "refresh", "--interval", "0.01", emu=emulator)
    assert second.returncode == 0, second.stderr[-2000:]
    integrity_ok(project)
    assert sent(emulator) == paid
    assert project.sql("SELECT count(*) AS n FROM results WHERE kind = 'ok'")[0]["n"] == 4 * len(batches)


def test_killed_as_the_results_were_found_gone_the_next_refresh_finishes(project: Project, emulator: Any) -> None:
    """Killed after the 404 (the batch still `ended`, pending): the next run asks again, finds the
    results still gone and sends the requests once."""
    make(project)
    batches = downloaded(project, emulator)
    paid = sent(emulator)
    _forget_results(project, emulator, batches)
    shutil.rmtree(project.area / "jobs")
    first = run_batchrun(project, "refresh", "--interval", "0.01", emu=emulator, env={"BATCHRUN_DIE_AT": "poll.results_gone"})
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    integrity_ok(project)
    assert {b["redownload"] for b in project.sql("SELECT redownload FROM batches")} >= {"pending"}
    second = run_batchrun(project, "refresh", "--interval", "0.01", emu=emulator)
    assert second.returncode == 0, second.stderr[-2000:]
    integrity_ok(project)
    assert sent(emulator) == Counter({cid: 2 for cid in paid})


def test_a_changed_file_moved_aside_by_a_killed_collect_is_downloaded_again(project: Project, emulator: Any) -> None:
    """What a collect killed between keeping a changed file aside and recording the move leaves
    (the file renamed NAME.changed, the batch still `downloaded`): the next run downloads it again."""
    make(project)
    gemini = downloaded(project, emulator)["gemini"]
    path = gemini["files"][0]
    original = path.read_bytes()
    path.replace(path.with_name(path.name + ".changed"))
    paid = sent(emulator)
    ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    assert path.read_bytes() == original and sent(emulator) == paid
    assert project.sql("SELECT count(*) AS n FROM results WHERE batch_id = ? AND kind = 'ok'", [gemini["id"]])[0]["n"] == 4


def test_a_batch_that_shows_no_result_file_any_more_is_gone(project: Project, emulator: Any) -> None:
    """Sent back for a new download, an Anthropic batch answered without its `results_url` (as an
    archived one may be: "archived and its results became unavailable"): the results are gone."""
    make(project)
    claude = downloaded(project, emulator)["claude"]
    paid = sent(emulator)
    claude["files"][0].unlink()
    emulator.add_fault({"kind": "mangle_json", "method": "GET", "path": f"/messages/batches/{claude['provider_batch_id']}$",
                        "set": {"results_url": None}, "count": 1})
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emulator))
    assert (f"{claude['id']} (route claude): the result file was lost before collect read it and the provider no longer holds "
            "the results (the batch shows no result file any more): its requests without a result are sent again") in r.stderr
    claude_ids = {q["custom_id"] for q in project.sql("SELECT custom_id FROM requests WHERE route = 'claude'")}
    assert sent(emulator) == Counter({cid: 2 if cid in claude_ids else 1 for cid in paid})
