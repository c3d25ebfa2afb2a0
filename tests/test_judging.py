"""Judging, scoring and aggregation end to end: the CLI, the real SDKs, the emulator, a script.

Every model and judge answer comes from a scripted responder (`Script`), so each number in the
leaderboard can be computed by hand here and compared with results/<route>.scores.json, the
`report` output and the `leaderboard` view in state.db. Spec 001 §4-5; issue 4.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import PREFLIGHT_ID, batch_requests, KEY_ENV, Project, route, task

import batchrun
from batchrun.emulator import Emulator

JUDGE_HEAD = "STRICT grader. Only award points for SPECIFIC details present.\n"
GEN_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\n"
REPLY_LINE = 'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
PERSISTENT = "persistent infrastructure failure"

HEADLINE = ("overall", "all_tasks_overall", "scored_overall")
SCORES_KEYS = {"route", "model", "provider", "overall", "all_tasks_overall", "scored_overall", "scored_n", "n_tasks",
               "out_of_context_n", "failed_n", "pending_n", "complete", "tasks", "provenance"}


def verdict(total: Any, points: list[Any] | None = None) -> str:
    return json.dumps({"points_awarded": points if points is not None else [total], "total": total})


class Script:
    """The emulator's responder: scripted answers and verdicts, and a log of what it was asked.

    answers[(model, question)] -> reply (str | {"refusal": ...} | {"error": ...});
    verdicts[(judge model, answer as it appears in the judge prompt)] -> reply, or a list of
    replies consumed one per call (the last one repeats).
    """

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Any] = {}
        self.verdicts: dict[tuple[str, str], Any] = {}
        self.log: list[dict[str, Any]] = []
        self.unscripted: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.emu: Emulator

    def __call__(self, request: dict[str, Any]) -> Any:
        if request.get("custom_id") == PREFLIGHT_ID:
            return "OK"  # a route's preflight, before its first upload under a policy: not scripted work
        with self.lock:
            self.log.append(request)
            prompt, model = request["prompt"], request["model"]
            if prompt.startswith(JUDGE_HEAD):
                answer = judged_answer(prompt)
                reply = self.verdicts.get((model, answer))
                if isinstance(reply, list):
                    reply = reply.pop(0) if len(reply) > 1 else reply[0]
            else:
                assert prompt.startswith(GEN_HEAD)
                question = prompt[len(GEN_HEAD) + len("Question: "): prompt.index("\n\nDocument:\n")]
                reply = self.answers.get((model, question))
                answer = question
            if reply is None:
                self.unscripted.append((model, answer[:80]))
                return {"error": {"status": 400, "message": "unscripted request"}}
            return reply

    def judge_prompts(self, model: str | None = None) -> list[str]:
        return [r["prompt"] for r in self.log if r["prompt"].startswith(JUDGE_HEAD) and model in (None, r["model"])]

    def gen_prompts(self) -> list[dict[str, Any]]:
        return [r for r in self.log if r["prompt"].startswith(GEN_HEAD)]


def judged_answer(prompt: str) -> str:
    return prompt[prompt.index("\nRESPONSE:\n") + len("\nRESPONSE:\n"): prompt.rindex("\n" + REPLY_LINE)]


@pytest.fixture
def script() -> Any:
    s = Script()
    s.emu = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=s).start()
    yield s
    s.emu.stop()


def run(project: Project, script: Script, *args: str) -> Any:
    return project.run(*args, emulator=script.emu)


def refresh(project: Project, script: Script) -> Any:
    return run(project, script, "refresh", "--interval", "0")


def results(project: Project, route_name: str, kind: str) -> dict[str, Any]:
    return json.loads((project.results_dir / f"{route_name}.{kind}.json").read_text(encoding="utf-8"))


def by_task(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for t in doc["tasks"]}


def emu_requests(script: Script, start: int = 0) -> list[dict[str, Any]]:
    """The requests the emulator processed for batches and sync lines (no preflights), from `start`."""
    return batch_requests(script.emu)[start:]


def clamp(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def board_row(project: Project, route_name: str) -> dict[str, Any]:
    rows = [r for r in project.sql("select * from leaderboard") if r["route"] == route_name]
    assert len(rows) == 1
    return rows[0]


def assert_no_invented_zero(project: Project) -> None:
    """Every judgment row is either a parsed verdict or a recorded parse error, never a made-up 0."""
    for j in project.sql("select * from judgments"):
        assert (j["total"] is None) == (j["score"] is None) == (j["parse_error"] is not None), j


# --- a small two-task project with one contestant and two judges --------------------------------

DOC = "The pump failed at 04:10. Engineer Lia Brandt restarted it. The tank held 900 litres.\n"
Q1 = "When did the pump fail and who restarted it?"
Q2 = "How much did the tank hold?"
ANS1 = "It failed at 04:10; Lia Brandt restarted it."
ANS2 = "900 litres."
JUDGE_A, JUDGE_G = "claude-sonnet-4-6", "gemini-2.5-flash"


def two_task_project(project: Project, script: Script, *, panel: tuple[str, ...] = ("judge-a", "judge-g"),
                     judge_g_model: str = JUDGE_G, judging: dict[str, Any] | None = None) -> Project:
    project.doc("pump.txt", DOC)
    project.tasks([
        task("t1", Q1, "pump.txt", [(30, "failed at 04:10"), (20, "Lia Brandt restarted it")]),  # sums to 50
        task("t2", Q2, "pump.txt", [(12.5, "900 litres"), (12.5, "the tank")]),  # sums to 25
    ])
    routes = {"gpt": route("openai", "gpt-5.5"), "judge-a": route("anthropic", JUDGE_A)}
    if "judge-g" in panel:
        routes["judge-g"] = route("gemini", judge_g_model)
    extra: dict[str, Any] = {"judging": {"panel": list(panel), **(judging or {})}}
    project.config(routes=routes, panel=list(panel), **extra)
    script.answers[("gpt-5.5", Q1)] = ANS1
    script.answers[("gpt-5.5", Q2)] = ANS2
    script.verdicts[(JUDGE_A, ANS1)] = verdict(40, [30, 10])  # 40/50 = 0.8
    script.verdicts[(JUDGE_A, ANS2)] = verdict(25, [12.5, 12.5])  # 25/25 = 1.0
    script.verdicts[(JUDGE_G, ANS1)] = verdict(30, [30, 0])  # 30/50 = 0.6
    script.verdicts[(JUDGE_G, ANS2)] = verdict(10, [10, 0])  # 10/25 = 0.4
    return project


# --- the exact judge prompt and settings, per judge provider -------------------------------------


def _native(provider: str, line: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(custom_id, prompt, settings) from a request-file line in the provider's own format."""
    if provider == "anthropic":
        p = line["params"]
        return line["custom_id"], p["messages"][0]["content"], p
    if provider == "gemini":
        r = line["request"]
        return line["key"], r["contents"][0]["parts"][0]["text"], r["generationConfig"]
    b = line["body"]
    return line["custom_id"], b["messages"][0]["content"], b


def _settings_from_emulator(provider: str, params: dict[str, Any]) -> dict[str, Any]:
    if provider == "gemini":
        return params.get("generationConfig") or params.get("generation_config") or {}
    return params


def test_exact_judge_prompt_truncations_settings_and_clamped_mean_per_judge_provider(project: Project, script: Script) -> None:
    # Each text ends its kept part with a visible marker ("<Q|", "<C|", "<R|"); what follows must go.
    question = ("Which two valves {A} and {B} were closed, by whom, and at what time? " + "q" * 600)[:597] + "<Q|" + "QDROP" * 30
    long_criterion = ("Names valve {A} as V-17 " + "c" * 300)[:257] + "<C|" + "CDROP" * 18
    answer = ("Valves V-17 and V-22 were closed by {Ines Moreau} at 05:40. " + "r" * 5000)[:4997] + "<R|" + "RDROP" * 240
    assert (len(question), len(long_criterion), len(answer)) == (750, 350, 6200)
    assert question[:600].endswith("<Q|") and long_criterion[:260].endswith("<C|") and answer[:5000].endswith("<R|")
    project.doc("plant.txt", "Valves V-17 and V-22 were closed by Ines Moreau at 05:40.\n")
    project.tasks([task("t1", question, "plant.txt", [(30, long_criterion), (12.5, "Names V-22"), (7.5, "Gives 05:40")])])
    judges = {
        "judge-a": route("anthropic", "claude-sonnet-4-6"),
        "judge-g": route("gemini", "gemini-2.5-flash"),
        "judge-o": route("openai", "gpt-4.1"),
        "judge-q": route("openai-compatible", "qwen3.5-plus", send_temperature=False),
    }
    project.config(routes={"gpt": route("openai", "gpt-5.5"), **judges}, panel=list(judges))
    expected_prompt = (
        "STRICT grader. Only award points for SPECIFIC details present.\n"
        f"QUESTION: {question[:600]}\n"
        "RUBRIC:\n"
        f"P1 (30pts): {long_criterion[:260]}\n"
        "P2 (12.5pts): Names V-22\n"
        "P3 (7.5pts): Gives 05:40\n"
        "RESPONSE:\n"
        f"{answer[:5000]}\n"
        'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
    )
    assert "DROP" not in expected_prompt and "<Q|\nRUBRIC:\nP1 (30pts): " in expected_prompt and "<R|\nReply JSON" in expected_prompt
    kept = answer[:5000]
    script.answers[("gpt-5.5", question)] = answer
    # The rubric sums to 50: totals above it and below zero are clamped, strings and fences parse.
    script.verdicts[("claude-sonnet-4-6", kept)] = verdict(50, [30, 12.5, 7.5])  # 1.0
    script.verdicts[("gemini-2.5-flash", kept)] = '```json\n{"points_awarded": ["25"], "total": "25"}\n```'  # 0.5
    script.verdicts[("gpt-4.1", kept)] = "Generous: " + verdict(60) + " (over the max)"  # 60/50 -> 1.0
    script.verdicts[("qwen3.5-plus", kept)] = verdict(-3)  # -> 0.0

    r = refresh(project, script)
    assert r.exit_code == 0, r.output
    assert script.unscripted == []

    expected_settings = {
        "judge-a": ("anthropic", {"max_tokens": 16384, "temperature": 0.1}, ()),
        "judge-g": ("gemini", {"maxOutputTokens": 16384, "temperature": 0.1}, ()),
        "judge-o": ("openai", {"max_completion_tokens": 16384, "temperature": 0.1}, ("max_tokens",)),
        "judge-q": ("openai-compatible", {"max_tokens": 16384}, ("temperature", "max_completion_tokens")),
    }
    judge_batches = project.sql("select route, provider, dir from batches where stage = 'judge' order by route")
    assert [b["route"] for b in judge_batches] == sorted(judges)
    for b in judge_batches:
        provider, present, absent = expected_settings[b["route"]]
        lines = [json.loads(x) for x in (Path(b["dir"]) / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
        assert len(lines) == 1
        _, prompt, settings = _native(provider, lines[0])
        assert prompt == expected_prompt, b["route"]
        for key, value in present.items():
            assert settings[key] == value, (b["route"], key)
        for key in absent:
            assert key not in settings, (b["route"], key)

    # What each judge model actually received (the responder's view of the request).
    received = {r["model"]: r for r in script.log if r["prompt"].startswith(JUDGE_HEAD)}
    assert sorted(received) == sorted(j["model"] for j in judges.values())
    for name, j in judges.items():
        provider, present, absent = expected_settings[name]
        req = received[j["model"]]
        assert req["prompt"] == expected_prompt
        settings = _settings_from_emulator(req["provider"], req["params"])
        for key, value in present.items():
            assert settings[key] == value, (name, key)
        for key in absent:
            assert key not in settings, (name, key)
    # The generation request carried the whole question and no rubric or gold answer.
    (gen,) = script.gen_prompts()
    assert question in gen["prompt"] and long_criterion not in gen["prompt"] and "GOLD ANSWER" not in gen["prompt"]

    scores = results(project, "gpt", "scores")
    t1 = by_task(scores)["t1"]
    assert t1["judges"]["judge-o"]["total"] == 60 and t1["judges"]["judge-o"]["score"] == 1.0
    assert t1["judges"]["judge-q"]["total"] == -3 and t1["judges"]["judge-q"]["score"] == 0.0
    assert t1["judges"]["judge-g"]["total"] == 25 and t1["judges"]["judge-g"]["score"] == 0.5
    assert t1["judges"]["judge-g"]["points_awarded"] == ["25"]
    expected = (clamp(50 / 50) + clamp(25 / 50) + clamp(60 / 50) + clamp(-3 / 50)) / 4
    assert t1["score"] == pytest.approx(expected) == pytest.approx(0.625)
    assert scores["scored_overall"] == scores["all_tasks_overall"] == scores["overall"] == pytest.approx(0.625)
    panel = scores["provenance"]["judge_panel"]
    assert {j["route"]: j["temperature"] for j in panel} == {"judge-a": 0.1, "judge-g": 0.1, "judge-o": 0.1, "judge-q": "omitted"}
    assert {j["max_tokens"] for j in panel} == {16384}


# --- a three-route leaderboard, computed by hand ---------------------------------------------------

# Rubric sums: t1 30+20 = 50, t2 12.5+12.5 = 25, t3 60+40 = 100, t4 100.
RUBRICS = {"t1": [(30, "Alpha fact"), (20, "Beta fact")], "t2": [(12.5, "Gamma fact"), (12.5, "Delta fact")],
           "t3": [(60, "Epsilon fact"), (40, "Zeta fact")], "t4": [(100, "Long fact")]}
QUESTIONS = {"t1": "What are alpha and beta?", "t2": "What are gamma and delta?", "t3": "What are epsilon and zeta?",
             "t4": "What does the long document say?"}
SMALL, BIG, FLAKY = "gpt-5.5", "claude-opus-4-8", "gemini-2.5-pro"
REFUSAL_TEXT = "I can't help with that."


def _answer(route_name: str, tid: str) -> str:
    return f"{route_name} says: answer to {tid}."


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Three contestants, two judges, four tasks; run once to completion for the tests below.

    - small (openai, caps 1,000 chars): t4's document is longer -> out_of_context_scope.
    - big (anthropic): four valid answers.
    - flaky (gemini): t1 valid, t2 empty, t3 an invalid-request error, t4 a refusal.
    """
    with pytest.MonkeyPatch.context() as mp:
        for var in list(os.environ):
            if var.startswith(("OPENAI_", "ANTHROPIC_", "GOOGLE_", "GEMINI_", "BATCHRUN_")):
                mp.delenv(var)
        mp.setenv("BATCHRUN_RETRY_BASE", "0.0001")  # as conftest: 6 ms between retry rounds
        mp.setenv(KEY_ENV, "test-key-not-secret")
        project = Project(tmp_path_factory.mktemp("board") / "proj")
        s = Script()
        s.emu = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=s).start()
        try:
            project.doc("short.txt", "Alpha fact. Beta fact. Gamma fact. Delta fact. Epsilon fact. Zeta fact.\n")
            project.doc("long.txt", "Long fact. " + "Filler sentence about nothing in particular. " * 40)
            assert len((project.root / "corpus" / "long.txt").read_text()) > 1000
            project.tasks([task(t, QUESTIONS[t], "long.txt" if t == "t4" else "short.txt", RUBRICS[t]) for t in RUBRICS])
            project.config(routes={
                "small": route("openai", SMALL, caps={"en": 1000, "cjk": 1000}),
                "big": route("anthropic", BIG),
                "flaky": route("gemini", FLAKY),
                "judge-a": route("anthropic", JUDGE_A),
                "judge-g": route("gemini", JUDGE_G),
            })
            for tid in RUBRICS:
                s.answers[(SMALL, QUESTIONS[tid])] = _answer("small", tid)
                s.answers[(BIG, QUESTIONS[tid])] = _answer("big", tid)
            s.answers[(FLAKY, QUESTIONS["t1"])] = _answer("flaky", "t1")
            s.answers[(FLAKY, QUESTIONS["t2"])] = ""
            s.answers[(FLAKY, QUESTIONS["t3"])] = {"error": {"status": 400, "message": "invalid request for t3"}}
            s.answers[(FLAKY, QUESTIONS["t4"])] = {"refusal": REFUSAL_TEXT}
            v = s.verdicts
            # small
            v[(JUDGE_A, _answer("small", "t1"))] = verdict(50, [30, 20])
            v[(JUDGE_G, _answer("small", "t1"))] = "```json\n" + verdict(50, [30, 20]) + "\n```"
            v[(JUDGE_A, _answer("small", "t2"))] = verdict(25, [12.5, 12.5])
            v[(JUDGE_G, _answer("small", "t2"))] = '{"points_awarded": ["12.5", "7.5"], "total": "20"}'
            v[(JUDGE_A, _answer("small", "t3"))] = verdict(120, [60, 60])  # above the sum
            v[(JUDGE_G, _answer("small", "t3"))] = verdict(-5, [-5])  # below zero
            # big
            v[(JUDGE_A, _answer("big", "t1"))] = "Verdict follows.\n" + verdict(50, [30, 20]) + "\nThanks."
            v[(JUDGE_G, _answer("big", "t1"))] = verdict(40, [30, 10])
            v[(JUDGE_A, _answer("big", "t2"))] = verdict(5, [5, 0])
            v[(JUDGE_G, _answer("big", "t2"))] = verdict(15, [12.5, 2.5])
            v[(JUDGE_A, _answer("big", "t3"))] = verdict(70, [60, 10])
            v[(JUDGE_G, _answer("big", "t3"))] = verdict(80, [60, 20])
            v[(JUDGE_A, _answer("big", "t4"))] = verdict(100)
            v[(JUDGE_G, _answer("big", "t4"))] = verdict(70)
            # flaky
            v[(JUDGE_A, _answer("flaky", "t1"))] = verdict(30, [30, 0])
            v[(JUDGE_G, _answer("flaky", "t1"))] = verdict(35, [30, 5])
            r = project.run("refresh", "--interval", "0", emulator=s.emu)
            # flaky's t3 is an invalid request: blocked (the config's fault), never a zero on its own.
            assert r.exit_code == 2 and "route 'flaky': 1 cell(s) [t3] blocked" in r.output, r.output
            # The maintainer decides to publish anyway: t3 is zero-filled by that recorded decision.
            a = project.run("accept-failures", "--route", "flaky", "--reason", "t3 rejected by the provider", emulator=s.emu)
            assert a.exit_code == 0, a.output
            r = project.run("refresh", "--interval", "0", emulator=s.emu)
            assert r.exit_code == 0, r.output
            yield project, s
        finally:
            s.emu.stop()


# By hand: a task's score is the mean of the two judges' clamp(total / rubric sum).
HAND = {
    "small": {"t1": (50 / 50 + 50 / 50) / 2, "t2": (25 / 25 + 20 / 25) / 2, "t3": (clamp(120 / 100) + clamp(-5 / 100)) / 2},
    "big": {"t1": (50 / 50 + 40 / 50) / 2, "t2": (5 / 25 + 15 / 25) / 2, "t3": (70 / 100 + 80 / 100) / 2, "t4": (100 / 100 + 70 / 100) / 2},
    "flaky": {"t1": (30 / 50 + 35 / 50) / 2},
}
N_TASKS = 4
EXPECTED = {
    name: {"scored_overall": sum(s.values()) / len(s), "scored_n": len(s), "all_tasks_overall": sum(s.values()) / N_TASKS}
    for name, s in HAND.items()
}
EXPECTED["small"].update(out_of_context_n=1, failed_n=0)
EXPECTED["big"].update(out_of_context_n=0, failed_n=0)
EXPECTED["flaky"].update(out_of_context_n=0, failed_n=2)  # t2 empty, t4 refusal; t3 accepted is not the model's failure
ORDER = ["big", "small", "flaky"]  # by All-tasks (0.725, 0.6, 0.1625); by Scored it would be small, big, flaky
# flaky's accepted t3 makes its All-tasks not a protocol number (spec 001 §5, issue 26): the
# published all_tasks_overall is null and the hand value is its accepted_overall (ranked last).
ACCEPTED = {"flaky"}


def published_all_tasks(row: dict[str, Any]) -> Any:
    """All-tasks as published: all_tasks_overall, or for a route with accepted failures (whose
    all_tasks_overall must be null) its accepted_overall."""
    if row["route"] in ACCEPTED:
        assert row["all_tasks_overall"] in (None, "") and row["accepted_overall"] not in (None, ""), row
        return float(row["accepted_overall"])
    assert row["accepted_overall"] in (None, ""), row
    return float(row["all_tasks_overall"])


def test_hand_computed_numbers_sanity() -> None:
    assert EXPECTED["small"]["scored_overall"] == pytest.approx(0.8)
    assert EXPECTED["small"]["all_tasks_overall"] == pytest.approx(0.6)
    assert EXPECTED["big"]["scored_overall"] == EXPECTED["big"]["all_tasks_overall"] == pytest.approx(0.725)
    assert EXPECTED["flaky"]["scored_overall"] == pytest.approx(0.65)
    assert EXPECTED["flaky"]["all_tasks_overall"] == pytest.approx(0.1625)
    assert sorted(EXPECTED, key=lambda r: -EXPECTED[r]["all_tasks_overall"]) == ORDER
    assert sorted(EXPECTED, key=lambda r: -EXPECTED[r]["scored_overall"]) != ORDER


def test_scores_files_match_hand_computation(board: Any) -> None:
    project, _ = board
    for name, exp in EXPECTED.items():
        scores = results(project, name, "scores")
        assert SCORES_KEYS <= set(scores)
        assert scores["complete"] is True and scores["pending_n"] == 0 and scores["n_tasks"] == N_TASKS
        assert scores["scored_overall"] == pytest.approx(exp["scored_overall"], abs=1e-6)
        assert published_all_tasks({**scores, "route": name}) == pytest.approx(exp["all_tasks_overall"], abs=1e-6)
        assert scores["overall"] == scores["all_tasks_overall"]
        # Marked: the accepted failures; and the two-judge panel (protocol = "custom") for every route.
        assert scores["protocol_number"] is False and scores["non_protocol"][0].startswith("custom protocol")
        assert any("accepted infrastructure failure" in x for x in scores["non_protocol"]) is (name in ACCEPTED)
        for key in ("scored_n", "out_of_context_n", "failed_n"):
            assert scores[key] == exp[key], (name, key)
        tasks = by_task(scores)
        assert list(tasks) == ["t1", "t2", "t3", "t4"]
        for tid, t in tasks.items():
            if tid in HAND[name]:
                assert t["status"] == "ok"
                assert t["score"] == pytest.approx(HAND[name][tid])
                assert sorted(t["judges"]) == ["judge-a", "judge-g"]
                assert t["score"] == pytest.approx(sum(j["score"] for j in t["judges"].values()) / 2)
            else:
                assert t["score"] == 0 and t["judges"] == {}, (name, tid)
    small = by_task(results(project, "small", "scores"))
    assert small["t4"]["status"] == "out_of_context_scope"
    assert small["t3"]["judges"]["judge-a"] == {"total": 120, "score": 1.0, "points_awarded": [60, 60]}
    assert small["t3"]["judges"]["judge-g"] == {"total": -5, "score": 0.0, "points_awarded": [-5]}
    assert small["t2"]["judges"]["judge-g"] == {"total": 20, "score": 0.8, "points_awarded": ["12.5", "7.5"]}
    flaky = by_task(results(project, "flaky", "scores"))
    assert [flaky[t]["status"] for t in ("t1", "t2", "t3", "t4")] == ["ok", "empty", "accepted", "refusal"]


def test_leaderboard_view_matches_hand_computation_sorted_by_all_tasks(board: Any) -> None:
    project, _ = board
    rows = project.sql("select * from leaderboard")
    assert [r["route"] for r in rows] == ORDER
    for r in rows:
        exp = EXPECTED[r["route"]]
        assert r["complete"] == 1 and r["pending_n"] == 0 and r["n_tasks"] == N_TASKS
        assert r["scored_overall"] == pytest.approx(exp["scored_overall"], abs=1e-6)
        assert published_all_tasks(r) == pytest.approx(exp["all_tasks_overall"], abs=1e-6)
        assert (r["scored_n"], r["out_of_context_n"], r["failed_n"]) == (exp["scored_n"], exp["out_of_context_n"], exp["failed_n"])
    cells = {(c["route"], c["task_id"]): c for c in project.sql("select * from cell_status")}
    assert cells[("small", "t4")]["status"] == "out_of_context_scope" and cells[("small", "t4")]["score"] is None
    assert cells[("small", "t4")]["cap"] == 1000 and cells[("small", "t4")]["cap_source"] == "config"


def test_out_of_context_and_failed_cells_never_sent_to_judges(board: Any) -> None:
    project, s = board
    valid = {_answer(name, tid) for name, tasks in HAND.items() for tid in tasks}
    assert len(valid) == 8
    for model in (JUDGE_A, JUDGE_G):
        assert sorted(judged_answer(p) for p in s.judge_prompts(model)) == sorted(valid)
    # The emulator accepted exactly one judge request per valid answer and judge, once each.
    judge_reqs = [r for r in batch_requests(s.emu) if str(r["custom_id"]).startswith("j-")]
    assert len(judge_reqs) == 16 == len({r["custom_id"] for r in judge_reqs})
    assert sorted({r["model"] for r in judge_reqs}) == sorted([JUDGE_A, JUDGE_G])
    # The out-of-context cell was never even generated; the failed ones were generated once.
    gen = [(r["model"], r["prompt"]) for r in s.gen_prompts()]
    assert not any(m == SMALL and QUESTIONS["t4"] in p for m, p in gen)
    assert sum(m == FLAKY for m, _ in gen) == 4
    assert project.sql("select count(*) as n from requests where stage = 'judge'")[0]["n"] == 16
    assert s.unscripted == []
    assert_no_invented_zero(project)


def test_responses_files(board: Any) -> None:
    project, _ = board
    batches = {b["id"]: b for b in project.sql("select * from batches")}
    statuses = {}
    for name in ("small", "big", "flaky"):
        doc = results(project, name, "responses")
        assert {k: doc[k] for k in ("route", "model", "provider")} == {
            "small": {"route": "small", "model": SMALL, "provider": "openai"},
            "big": {"route": "big", "model": BIG, "provider": "anthropic"},
            "flaky": {"route": "flaky", "model": FLAKY, "provider": "gemini"}}[name]
        tasks = by_task(doc)
        assert list(tasks) == ["t1", "t2", "t3", "t4"]
        for tid, t in tasks.items():
            statuses[(name, tid)] = t["status"]
            for key in ("status", "response", "finish_reason", "usage", "attempts", "batch_id", "completed_at"):
                assert key in t, (name, tid, key)
            if t["status"] == "out_of_context_scope":
                assert t["response"] is None and t["batch_id"] is None and t["completed_at"] is None and t["attempts"] == 0
                continue
            assert t["attempts"] == 1
            assert batches[t["batch_id"]]["route"] == name and batches[t["batch_id"]]["stage"] == "gen"
            assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", t["completed_at"])
            if t["status"] == "ok":
                assert t["response"] == _answer(name, tid)
                assert t["finish_reason"]
                assert t["usage"]["input_tokens"] > 0 and t["usage"]["output_tokens"] > 0
    assert statuses == {
        **{("small", t): "ok" for t in ("t1", "t2", "t3")}, ("small", "t4"): "out_of_context_scope",
        **{("big", t): "ok" for t in ("t1", "t2", "t3", "t4")},
        ("flaky", "t1"): "ok", ("flaky", "t2"): "empty", ("flaky", "t3"): "accepted", ("flaky", "t4"): "refusal",
    }
    flaky = by_task(results(project, "flaky", "responses"))
    assert flaky["t2"]["response"] == ""
    assert flaky["t4"]["finish_reason"] == "SAFETY"  # Gemini's native refusal: a blocked candidate
    assert flaky["t3"]["response"] is None and "invalid request for t3" in (flaky["t3"].get("error") or "")


def test_scores_files_provenance(board: Any) -> None:
    project, _ = board
    dataset_sha = hashlib.sha256(project.dataset_path.read_bytes()).hexdigest()
    prov = {name: results(project, name, "scores")["provenance"] for name in ("small", "big", "flaky")}
    for name, p in prov.items():
        assert p["route"] == name
        assert p["endpoint_host"] == script_host(project)
        assert p["endpoint"]
        dates = p["endpoint_dates"]
        assert dates["first_submitted"] and dates["last_ended"] and dates["first_submitted"] <= dates["last_ended"]
        assert p["retry_policy"] == {"max_retries": 5, "max_resubmits": 3}
        assert [(j["route"], j["model"]) for j in p["judge_panel"]] == [("judge-a", JUDGE_A), ("judge-g", JUDGE_G)]
        assert all(j["temperature"] == 0.1 and j["max_tokens"] == 16384 for j in p["judge_panel"])
        assert re.fullmatch(r"[0-9a-f]{64}", p["prompt_templates"]["generation_sha256"])
        assert re.fullmatch(r"[0-9a-f]{64}", p["prompt_templates"]["judge_sha256"])
        assert p["dataset_sha256"] == dataset_sha
        assert p["batchrun_version"] == batchrun.__version__
    assert prov["small"]["model"] == SMALL and prov["big"]["model"] == BIG
    assert (prov["small"]["context_policy"]["en_cap"], prov["small"]["context_policy"]["cjk_cap"]) == (1000, 1000)
    assert prov["small"]["context_policy"]["source"] == "config"
    assert prov["big"]["context_policy"]["source"] == "paper table"
    assert prov["small"]["decoding"]["temperature"] == 0.1 and prov["small"]["decoding"]["max_tokens"] == 8192
    assert prov["big"]["decoding"]["temperature"] == "omitted"  # claude-opus-4-8 rejects temperature
    # Different providers, same prompt templates and dataset.
    assert len({json.dumps(p["prompt_templates"], sort_keys=True) for p in prov.values()}) == 1


def script_host(project: Project) -> str:
    host = project.sql("select endpoint_host from config_routes where route = 'small'")[0]["endpoint_host"]
    assert host.startswith("127.0.0.1:")
    return host


def test_report_json_md_csv_and_out(board: Any, tmp_path: Path) -> None:
    project, s = board
    r = run(project, s, "report", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [x["route"] for x in data["routes"]] == ORDER
    for x in data["routes"]:
        scores = results(project, x["route"], "scores")
        for key, value in scores.items():
            if key == "tasks" and key not in x:
                continue  # per-task detail may be left to the scores file
            assert x[key] == value, (x["route"], key)
        assert set(x) >= SCORES_KEYS - {"tasks"}
        assert published_all_tasks(x) == pytest.approx(EXPECTED[x["route"]]["all_tasks_overall"], abs=1e-6)
        assert x["scored_overall"] == pytest.approx(EXPECTED[x["route"]]["scored_overall"], abs=1e-6)
    # Matched panel: only t1 was scored by every route (small's t4 is out of context, flaky failed t2-t4).
    mp = data["matched_panel"]
    assert mp["n_tasks"] == 1
    assert mp["routes"] == {name: pytest.approx(HAND[name]["t1"], abs=1e-6) for name in ORDER}

    md = run(project, s, "report")
    assert md.exit_code == 0
    lines = [ln for ln in md.stdout.splitlines() if ln.startswith("| ") and (ln[2].isdigit() or ln[2] == "—")]
    assert [ln.split("|")[2].strip() for ln in lines] == ORDER
    assert [ln.split("|")[1].strip() for ln in lines] == ["1", "2", "—"]  # flaky: no protocol All-tasks, no rank
    assert "| 72.5 | 72.5 (4) |" in lines[0] and "| 60.0 | 80.0 (3) | 1 | 0 | 0 |" in lines[1]
    assert "| — | 65.0 (1) | 0 | 2 | 0 |" in lines[2] and "no: 1 accepted failure(s) (All-tasks 16.2 with them as 0)" in lines[2]
    assert f"judge-a ({JUDGE_A}), judge-g ({JUDGE_G})" in md.stdout
    assert hashlib.sha256(project.dataset_path.read_bytes()).hexdigest() in md.stdout
    assert "Matched panel (1 tasks" in md.stdout

    c = run(project, s, "report", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(c.stdout)))
    assert [row["route"] for row in rows] == ORDER
    for row in rows:
        exp = EXPECTED[row["route"]]
        assert published_all_tasks(row) == pytest.approx(exp["all_tasks_overall"], abs=1e-6)
        assert row["protocol_number"] == "0" and row["protocol"] == "custom"
        assert ("accepted infrastructure failure" in row["non_protocol"]) is (row["route"] in ACCEPTED)
        assert float(row["scored_overall"]) == pytest.approx(exp["scored_overall"], abs=1e-6)
        assert (int(row["scored_n"]), int(row["out_of_context_n"]), int(row["failed_n"]), int(row["pending_n"])) == (
            exp["scored_n"], exp["out_of_context_n"], exp["failed_n"], 0)

    for fmt, printed in (("json", r.stdout), ("md", md.stdout), ("csv", c.stdout)):
        out = tmp_path / "out" / f"board.{fmt}"
        out.parent.mkdir(exist_ok=True)
        w = run(project, s, "report", "--format", fmt, "--out", str(out))
        assert w.exit_code == 0 and w.stdout == ""
        assert out.read_text(encoding="utf-8") == printed


# --- judge failures: infrastructure, never a zero ----------------------------------------------------


@pytest.mark.parametrize("failure", [
    pytest.param({"error": {"status": 500, "message": "judge backend exploded"}}, id="error-500"),
    pytest.param("I think it is fine.", id="garbled"),
])
def test_judge_failing_once_is_retried_next_run_cli_steps(project: Project, script: Script, failure: Any) -> None:
    two_task_project(project, script)
    script.verdicts[(JUDGE_G, ANS1)] = [failure, verdict(30, [30, 0])]

    assert run(project, script, "submit").exit_code == 0
    c = run(project, script, "collect")  # nothing downloaded yet
    assert c.exit_code == 2
    assert [t["status"] for t in results(project, "gpt", "responses")["tasks"]] == ["pending", "pending"]
    scores = results(project, "gpt", "scores")
    assert all(scores[k] is None for k in HEADLINE) and scores["complete"] is False and scores["pending_n"] == 2

    assert run(project, script, "poll").exit_code == 0
    c = run(project, script, "collect")
    assert c.exit_code == 2 and "4 judge request(s) queued" in c.stdout
    assert [t["status"] for t in results(project, "gpt", "responses")["tasks"]] == ["ok", "ok"]

    before = len(emu_requests(script))
    assert run(project, script, "submit").exit_code == 0
    assert run(project, script, "poll").exit_code == 0
    c = run(project, script, "collect")
    assert c.exit_code == 2, "one judge has not scored t1: the route is incomplete"
    judge_g_t1 = project.sql("""select j.custom_id from requests j join requests g on g.custom_id = j.parent_custom_id
                                where j.stage = 'judge' and j.route = 'judge-g' and g.task_id = 't1'""")[0]["custom_id"]
    failed = project.sql("select * from results where custom_id = ?", [judge_g_t1])
    assert len(failed) == 1 and failed[0]["kind"] != "ok"
    if isinstance(failure, dict):
        assert "judge backend exploded" in (failed[0]["error_message"] or "")
    else:
        (j,) = project.sql("select * from judgments where custom_id = ?", [judge_g_t1])
        assert j["total"] is None and j["score"] is None and j["parse_error"]
    scores = results(project, "gpt", "scores")
    tasks = by_task(scores)
    assert all(scores[k] is None for k in HEADLINE) and scores["complete"] is False and scores["pending_n"] == 1
    # A task's score exists only when every judge scored it; t2 is complete.
    assert tasks["t1"]["status"] == "pending" and tasks["t1"]["score"] is None
    assert list(tasks["t1"]["judges"]) == ["judge-a"]
    cells = {c["task_id"]: c for c in project.sql("select * from cell_status where route = 'gpt'")}
    assert (cells["t1"]["status"], cells["t1"]["judged_n"], cells["t1"]["panel_n"], cells["t1"]["score"]) == ("judging", 1, 2, None)
    assert tasks["t2"]["status"] == "ok" and tasks["t2"]["score"] == pytest.approx((25 / 25 + 10 / 25) / 2)
    row = board_row(project, "gpt")
    assert row["complete"] == 0 and row["scored_overall"] is None and row["all_tasks_overall"] is None

    # Next run: only the failed judge request goes out again, with the same custom_id.
    mark = len(emu_requests(script))
    assert run(project, script, "submit").exit_code == 0
    resent = emu_requests(script, mark)
    assert [r["custom_id"] for r in resent] == [judge_g_t1] and resent[0]["model"] == JUDGE_G
    assert run(project, script, "poll").exit_code == 0
    c = run(project, script, "collect")
    assert c.exit_code == 0, c.output
    scores = results(project, "gpt", "scores")
    t1 = by_task(scores)["t1"]
    assert t1["judges"]["judge-g"] == {"total": 30, "score": 0.6, "points_awarded": [30, 0]}
    assert t1["score"] == pytest.approx((40 / 50 + 30 / 50) / 2)
    expected_overall = ((40 / 50 + 30 / 50) / 2 + (25 / 25 + 10 / 25) / 2) / 2
    assert scores["complete"] is True
    assert scores["overall"] == scores["all_tasks_overall"] == pytest.approx(expected_overall, abs=1e-6)
    assert scores["scored_overall"] == pytest.approx(expected_overall, abs=1e-6)
    assert board_row(project, "gpt")["all_tasks_overall"] == pytest.approx(expected_overall, abs=1e-6)
    assert [r["custom_id"] for r in emu_requests(script, before)].count(judge_g_t1) == 2
    assert not project.sql("select * from judgments where score = 0")
    assert_no_invented_zero(project)
    assert script.unscripted == []


def test_judge_failing_for_a_whole_run_recovers_on_the_next_refresh(project: Project, script: Script) -> None:
    two_task_project(project, script, judging={"max_retries_per_run": 1})
    # One retry per run: two failures use up the first run's budget.
    script.verdicts[(JUDGE_A, ANS2)] = ["no verdict here, sorry", "still no verdict", verdict(20, [12.5, 7.5])]

    first = refresh(project, script)
    assert first.exit_code == 2
    assert PERSISTENT in first.stderr
    assert all(results(project, "gpt", "scores")[k] is None for k in HEADLINE)
    # The judge used this run's budget: the cell waits for the next run (never a zero).
    assert by_task(results(project, "gpt", "scores"))["t2"]["status"] == "waiting"

    mark = len(emu_requests(script))
    second = refresh(project, script)
    assert second.exit_code == 0, second.output
    again = emu_requests(script, mark)
    assert len(again) == 1 and again[0]["model"] == JUDGE_A and again[0]["custom_id"].startswith("j-")
    scores = results(project, "gpt", "scores")
    assert by_task(scores)["t2"]["score"] == pytest.approx((20 / 25 + 10 / 25) / 2)
    assert scores["all_tasks_overall"] == pytest.approx(((40 / 50 + 30 / 50) / 2 + (20 / 25 + 10 / 25) / 2) / 2, abs=1e-6)
    assert_no_invented_zero(project)


def test_judge_that_keeps_failing_leaves_the_route_incomplete_with_null_headline(project: Project, script: Script) -> None:
    two_task_project(project, script)
    script.verdicts[(JUDGE_G, ANS1)] = {"error": {"status": 500, "message": "judge is down"}}

    r = refresh(project, script)
    assert r.exit_code == 2
    assert PERSISTENT in r.stderr and "judge is down" in r.stderr
    judge_g_ids = [x["custom_id"] for x in emu_requests(script) if x["model"] == JUDGE_G]
    # Bounded per run: max_retries_per_run (default 3) retries of the same request, then it waits.
    assert len(judge_g_ids) == 1 + 4  # t2 once, t1 once and three retries
    assert sorted(judge_g_ids.count(c) for c in set(judge_g_ids)) == [1, 4]

    scores = results(project, "gpt", "scores")
    assert all(scores[k] is None for k in HEADLINE)
    assert scores["complete"] is False and scores["pending_n"] == 1 and scores["scored_n"] == 1
    t1 = by_task(scores)["t1"]
    assert t1["status"] == "waiting" and t1["score"] is None and "judge-g" not in t1["judges"]
    assert by_task(results(project, "gpt", "responses"))["t1"]["status"] == "ok"
    row = board_row(project, "gpt")
    assert row["complete"] == 0 and row["pending_n"] == 1
    assert row["scored_overall"] is None and row["all_tasks_overall"] is None
    rep = json.loads(run(project, script, "report", "--format", "json").stdout)
    (gpt,) = rep["routes"]
    assert all(gpt[k] is None for k in HEADLINE) and gpt["complete"] is False
    assert "Incomplete" in run(project, script, "report").stdout

    # The next run tries again (bounded again), and still never turns the failure into a zero.
    r2 = refresh(project, script)
    assert r2.exit_code == 2 and PERSISTENT in r2.stderr
    assert [x["model"] for x in emu_requests(script)].count(JUDGE_G) == 5 + 4
    assert all(results(project, "gpt", "scores")[k] is None for k in HEADLINE)
    assert not project.sql("select * from judgments where score = 0")
    assert_no_invented_zero(project)


# --- changing the panel: reuse every answer, judge only what changed --------------------------------


def test_changed_judge_route_reuses_answers_and_rejudges_only_with_the_new_route(project: Project, script: Script) -> None:
    two_task_project(project, script)
    assert refresh(project, script).exit_code == 0
    old_responses = results(project, "gpt", "responses")
    old_judge_a = {(j["custom_id"]) for j in project.sql("select custom_id from requests where route = 'judge-a'")}
    assert results(project, "gpt", "scores")["all_tasks_overall"] == pytest.approx(((0.8 + 0.6) / 2 + (1.0 + 0.4) / 2) / 2)

    two_task_project(project, script, judge_g_model="gemini-2.5-pro")
    script.verdicts[("gemini-2.5-pro", ANS1)] = verdict(50, [30, 20])  # 1.0
    script.verdicts[("gemini-2.5-pro", ANS2)] = verdict(5, [5, 0])  # 0.2
    c = run(project, script, "collect")
    assert c.exit_code == 2, "the new judge has not scored anything yet"
    assert "2 judge request(s) queued" in c.stdout
    assert all(results(project, "gpt", "scores")[k] is None for k in HEADLINE)

    mark = len(emu_requests(script))
    log_mark = len(script.log)
    assert refresh(project, script).exit_code == 0
    sent = emu_requests(script, mark)
    assert len(sent) == 2
    assert {r["model"] for r in sent} == {"gemini-2.5-pro"} and all(r["custom_id"].startswith("j-") for r in sent)
    assert len(script.gen_prompts()) == 2  # no answer generated again
    assert sorted(judged_answer(r["prompt"]) for r in script.log[log_mark:]) == sorted([ANS1, ANS2])
    assert {j["custom_id"] for j in project.sql("select custom_id from requests where route = 'judge-a'")} == old_judge_a

    new_responses = results(project, "gpt", "responses")
    assert new_responses["tasks"] == old_responses["tasks"]
    scores = results(project, "gpt", "scores")
    tasks = by_task(scores)
    assert tasks["t1"]["score"] == pytest.approx((0.8 + 1.0) / 2) and tasks["t2"]["score"] == pytest.approx((1.0 + 0.2) / 2)
    assert scores["all_tasks_overall"] == pytest.approx(((0.8 + 1.0) / 2 + (1.0 + 0.2) / 2) / 2, abs=1e-6)
    assert [(j["route"], j["model"]) for j in scores["provenance"]["judge_panel"]] == [("judge-a", JUDGE_A), ("judge-g", "gemini-2.5-pro")]
    # The old judge's verdicts stay in state.db for audit.
    assert project.sql("select count(*) as n from judgments")[0]["n"] == 6


def test_adding_a_judge_queues_exactly_the_new_judges_requests(project: Project, script: Script) -> None:
    two_task_project(project, script, panel=("judge-a",))
    assert refresh(project, script).exit_code == 0
    scores = results(project, "gpt", "scores")
    assert scores["all_tasks_overall"] == pytest.approx((0.8 + 1.0) / 2)
    assert [j["route"] for j in scores["provenance"]["judge_panel"]] == ["judge-a"]
    judge_rows = project.sql("select custom_id from requests where stage = 'judge'")
    assert len(judge_rows) == 2

    two_task_project(project, script)
    c = run(project, script, "collect")
    assert c.exit_code == 2 and "2 judge request(s) queued" in c.stdout
    queued = project.sql("select route, custom_id from requests where stage = 'judge' order by route")
    assert [q["route"] for q in queued] == ["judge-a", "judge-a", "judge-g", "judge-g"]
    assert {q["custom_id"] for q in queued if q["route"] == "judge-a"} == {r["custom_id"] for r in judge_rows}

    mark = len(emu_requests(script))
    assert refresh(project, script).exit_code == 0
    sent = emu_requests(script, mark)
    assert sorted(r["custom_id"] for r in sent) == sorted(q["custom_id"] for q in queued if q["route"] == "judge-g")
    assert {r["model"] for r in sent} == {JUDGE_G}
    assert len(script.gen_prompts()) == 2
    scores = results(project, "gpt", "scores")
    assert scores["all_tasks_overall"] == pytest.approx(((0.8 + 0.6) / 2 + (1.0 + 0.4) / 2) / 2, abs=1e-6)
    assert script.unscripted == []


def test_judgments_name_their_result_rows_whichever_ids_sqlite_gives_them(project: Project, script: Script) -> None:
    """collect names each judgment's result by the ids its chunk's insert took (max(id) + 1 on);
    when SQLite gives other ids (a results row at the largest rowid makes it choose them at
    random), it finds them through the (batch_id, custom_id) key. Either way each judgment is
    its own result's verdict."""
    two_task_project(project, script)
    for step in ("submit", "poll", "collect", "submit", "poll"):
        run(project, script, step)
    conn = sqlite3.connect(project.state_path)
    with conn:
        conn.execute("""INSERT INTO results (id, batch_id, custom_id, kind, collected_at)
                        VALUES (9223372036854775807, 'not-a-batch', 'not-a-request', 'missing', 0)""")
    conn.close()
    assert run(project, script, "collect").exit_code == 0
    rows = project.sql("""select j.custom_id, r.custom_id as result_cid, r.text, j.total, j.result_id from judgments j
                          join results r on r.id = j.result_id""")
    assert len(rows) == 4 == len(project.sql("select * from judgments"))
    assert all(r["custom_id"] == r["result_cid"] and json.loads(r["text"])["total"] == r["total"] for r in rows)
    assert any(r["result_id"] != 9223372036854775807 - 1 for r in rows)
    tasks = by_task(results(project, "gpt", "scores"))
    assert tasks["t1"]["score"] == pytest.approx((40 / 50 + 30 / 50) / 2)
    assert tasks["t2"]["score"] == pytest.approx((25 / 25 + 10 / 25) / 2)
