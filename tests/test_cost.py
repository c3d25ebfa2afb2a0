"""Issue 7: cost and quotas.

Estimates are computed by hand here (characters / 3.3 for English and / 1.5 for CJK, ceil per
request; output = the route's completion budget; cost = (in x price_in + out x price_out) / 1e6 x
discount) and compared with what `plan --json`, `submit --dry-run` and `batchrun cost` print.
Actual spend is computed by hand from the prompts and answers the emulator saw (its usage rule:
ceil(non-CJK chars / 4) + CJK chars in, ceil(len(answer) / 4) out). Budgets, queue quotas and
provider quota refusals are checked through what reaches the emulator and in which order.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sqlite3
from datetime import datetime
from typing import Any

import pytest
from conftest import KEY_ENV, batch_requests, Project, route, task

from batchrun.emulator import Emulator
from batchrun.emulator.responder import builtin_responder
from batchrun.protocol.prompts import generation_prompt_overhead

# --- a small fixture of our own -------------------------------------------------------------

HARBOR = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
          "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 5
LAB = ("The freezer alarm sounded at 22:05. Dr. Ilse Varga moved 340 samples to unit B. "
       "The compressor relay was replaced by Tomasz Reyes.\n") * 5
ZH = "港口起重机在凌晨三点十四分发生故障。操作员是马拉。风速达到四十一节。维修用了九天。\n" * 5
DOCS = {"harbor.txt": HARBOR, "lab.txt": LAB, "zh.txt": ZH}
CJK_DOCS = {"zh.txt"}

TASKS = [
    ("t1", "When did the harbor crane fail and who was the operator?", "harbor.txt"),
    ("t2", "How long did the crane repairs take and what was the wind speed?", "harbor.txt"),
    ("t3", "Who moved the freezer samples and how many?", "lab.txt"),
    ("t4", "起重机何时发生故障？", "zh.txt"),
]
EXTRA_TASKS = [
    ("t5", "Who replaced the compressor relay?", "lab.txt"),
    ("t6", "谁是操作员？", "zh.txt"),
]

# Generation budgets (config defaults) and the judge budget.
BUDGET_PLAIN, BUDGET_REASONING, BUDGET_JUDGE = 8192, 32768, 16384
FREE = {"input": 0, "output": 0}  # a judge that costs nothing keeps budget arithmetic about generation


def setup(project: Project, routes: dict[str, Any], panel: list[str], tasks: list[tuple[str, str, str]] = TASKS,
          **sections: Any) -> Project:
    for name, text in DOCS.items():
        project.doc(name, text)
    project.tasks([task(tid, q, f) for tid, q, f in tasks])
    project.config(routes=routes, panel=panel, **sections)
    return project


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


# --- hand arithmetic ----------------------------------------------------------------------


def est_in(question: str, corpus_file: str, en: float = 3.3, cjk: float = 1.5) -> int:
    """Estimated input tokens of one generation request: prompt characters / ratio, rounded up."""
    chars = len(DOCS[corpus_file]) + generation_prompt_overhead(question)
    return math.ceil(chars / (cjk if corpus_file in CJK_DOCS else en))


def price_at(price: dict[str, Any], input_tokens: int) -> tuple[float, float]:
    pin, pout = price["input"], price["output"]
    for tier in sorted(price.get("tiers", []), key=lambda t: t["above_input_tokens"]):
        if input_tokens > tier["above_input_tokens"]:
            pin, pout = tier["input"], tier["output"]
    return pin, pout


def cost(price: dict[str, Any], input_tokens: int, output_tokens: int, discount: float) -> float:
    pin, pout = price_at(price, input_tokens)
    return (input_tokens * pin + output_tokens * pout) / 1e6 * discount


def money(value: float) -> str:
    """As batchrun shows money: cents, or four decimals below a dollar so it never reads as $0.00."""
    if 0 < abs(value) < 1:
        return f"${value:.4f}"
    return f"${value:,.2f}"


def emulator_tokens(prompt: str) -> int:
    cjk = sum(1 for ch in prompt if "\u4e00" <= ch <= "\u9fff")
    return math.ceil((len(prompt) - cjk) / 4) + cjk


def table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The plan table printed by `plan` / `submit --dry-run`: (route, stage) -> columns."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 14 and parts[1] in ("gen", "judge"):
            rows[(parts[0], parts[1])] = parts
    return rows


def plan_rows(stdout: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["route"], r["stage"]): r for r in json.loads(stdout)["routes"]}


def held_lines(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("  held "):
            bid, _, why = line[len("  held "):].partition(": ")
            out[bid] = why
    return out


def runs(project: Project, log: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(route, stage) of the requests in the order they reached the emulator, consecutive repeats merged."""
    kind = {r["custom_id"]: (r["route"], r["stage"]) for r in project.sql("SELECT custom_id, route, stage FROM requests")}
    out: list[tuple[str, str]] = []
    for entry in log:
        k = kind[entry["custom_id"]]
        if not out or out[-1] != k:
            out.append(k)
    return out


def gen_batches(project: Project, route_name: str) -> list[dict[str, Any]]:
    return project.sql("SELECT * FROM batches WHERE route = ? AND stage = 'gen' ORDER BY seq", [route_name])


def members(project: Project, batch_id: str) -> list[str]:
    return [r["custom_id"] for r in project.sql("SELECT custom_id FROM batch_requests WHERE batch_id = ? ORDER BY position", [batch_id])]


def cid_of(project: Project, route_name: str, task_id: str) -> str:
    return project.sql("SELECT custom_id FROM requests WHERE route = ? AND task_id = ? AND stage = 'gen'", [route_name, task_id])[0]["custom_id"]


# --- estimates ------------------------------------------------------------------------------

GPT_PRICE = {"input": 1.25, "output": 10.0}
CLAUDE_PRICE = {"input": 5.0, "output": 25.0}
# Two long-context tiers; prices switch per request on its own estimated input tokens.
GEM_PRICE = {"input": 1.25, "output": 10.0, "tiers": [
    {"above_input_tokens": 190, "input": 2.5, "output": 15.0},
    {"above_input_tokens": 204, "input": 4.0, "output": 20.0},
]}
GEM_RATIO = {"en": 4.4, "cjk": 1.7}
JUDGE_A_PRICE = {"input": 3.0, "output": 15.0}
JUDGE_G_PRICE = {"input": 0.3, "output": 2.5}


def estimate_routes() -> dict[str, Any]:
    return {
        # reasoning route, batch transport (discount 0.5)
        "gpt": route("openai", "gpt-5.5", reasoning=True, price=GPT_PRICE),
        # non-reasoning route, sync transport (no discount)
        "claude": route("anthropic", "claude-opus-4-8", transport="sync", price=CLAUDE_PRICE),
        # non-reasoning batch route with its own chars_per_token and long-context tiers
        "gem": route("gemini", "gemini-2.5-pro", chars_per_token=GEM_RATIO, price=GEM_PRICE),
        "judge-a": route("anthropic", "claude-sonnet-4-6", price=JUDGE_A_PRICE),
        "judge-g": route("gemini", "gemini-2.5-flash", price=JUDGE_G_PRICE),
    }


def test_estimate_by_hand_matches_plan_json_and_dry_run(project: Project, emulator: Emulator) -> None:
    setup(project, estimate_routes(), ["judge-a", "judge-g"])
    # The fixture by hand: document sizes and per-request estimates at the paper's ratios.
    assert (len(HARBOR), len(LAB), len(ZH)) == (730, 655, 210)
    default = {tid: est_in(q, f) for tid, q, f in TASKS}
    assert default == {"t1": 271, "t2": 273, "t3": 244, "t4": 218}  # 892/3.3, 900/3.3, 804/3.3, 326/1.5, rounded up
    gem = {tid: est_in(q, f, GEM_RATIO["en"], GEM_RATIO["cjk"]) for tid, q, f in TASKS}
    assert gem == {"t1": 203, "t2": 205, "t3": 183, "t4": 192}  # 892/4.4, 900/4.4, 804/4.4, 326/1.7
    # Rounding is per request: rounding the route's total characters once would give fewer tokens.
    assert 271 + 273 + 244 == 788 > math.ceil((892 + 900 + 804) / 3.3) == 787

    expected = {
        "gpt": (default, BUDGET_REASONING, GPT_PRICE, 0.5),
        "claude": (default, BUDGET_PLAIN, CLAUDE_PRICE, 1.0),
        "gem": (gem, BUDGET_PLAIN, GEM_PRICE, 0.5),
    }
    hand = {}
    for name, (ins, out, price, discount) in expected.items():
        batch = sum(cost(price, ins[t], out, discount) for t in ins)
        online = sum(cost(price, ins[t], out, 1.0) for t in ins)
        # Expected: before any answer, the prior (a quarter of max_tokens) per request.
        expected_out = math.ceil(out * 0.25)
        hand_expected = sum(cost(price, ins[t], expected_out, discount) for t in ins)
        hand[name] = {"in": sum(ins.values()), "out": out * len(ins), "batch": batch, "online": online,
                      "exp_out": expected_out * len(ins), "expected": hand_expected}
    # The tiers by hand: t1 (203) is above 190 but not above 204, t2 (205) above 204, t3 (183) base,
    # t4 (192) above 190 -- so gem's estimate is not the base price applied to its total.
    assert hand["gem"]["batch"] == pytest.approx(
        ((203 * 2.5 + 8192 * 15) + (205 * 4.0 + 8192 * 20) + (183 * 1.25 + 8192 * 10) + (192 * 2.5 + 8192 * 15)) / 1e6 * 0.5)
    assert hand["gpt"]["batch"] == pytest.approx((1006 * 1.25 + 4 * 32768 * 10) / 1e6 * 0.5)
    assert hand["claude"]["batch"] == hand["claude"]["online"]

    # submit --dry-run: the same numbers, as a table; nothing reaches the network, nothing is written.
    dry = ok(project.run("submit", "--dry-run", emulator=emulator))
    assert emulator.calls == [] and project.jobs_files() == []
    rows = table(dry.stdout)
    for name, h in hand.items():
        r = rows[(name, "gen")]
        assert r[4] == "4", r  # to send
        assert r[7:14] == [f"{h['in']:,}", f"{h['exp_out']:,}", f"{h['out']:,}", "8", money(h["expected"]), money(h["batch"]),
                           money(h["online"])], r
    for judge in ("judge-a", "judge-g"):
        assert rows[(judge, "judge")][7:11] == ["0", "0", "0", "0"]
    total = sum(h["batch"] for h in hand.values())
    expected_total = sum(h["expected"] for h in hand.values())
    assert (f"total estimated at the batch rate: {money(expected_total)} expected, {money(total)} bound (what --budget checks)"
            in dry.stdout)
    assert "expected output: 25% of max_tokens before any answer (claude, gem, gpt); bound: every answer uses its whole max_tokens" in dry.stdout

    # plan --json: exact numbers per route.
    data = plan_rows(ok(project.run("plan", "--json", emulator=emulator)).stdout)
    for name, h in hand.items():
        r = data[(name, "gen")]
        assert (r["to_send"], r["est_input_tokens"], r["est_output_tokens"]) == (4, h["in"], h["out"]), r
        assert r["est_cost_batch"] == pytest.approx(h["batch"], rel=1e-12)
        assert r["est_cost_online"] == pytest.approx(h["online"], rel=1e-12)
        assert r["est_cost_expected"] == pytest.approx(h["expected"], rel=1e-12) and r["expected_basis"] == "prior: 25% of max_tokens"
        assert r["judge_requests_expected"] == 4 * 2  # requests to send x panel size
    assert data[("claude", "gen")]["est_cost_batch"] == data[("claude", "gen")]["est_cost_online"]  # sync: no discount
    assert data[("gpt", "gen")]["est_cost_online"] == pytest.approx(2 * data[("gpt", "gen")]["est_cost_batch"])

    # Per request in state.db, and per batch (the figure the budget checks).
    per_request = {(r["route"], r["task_id"]): r for r in project.sql("SELECT * FROM requests WHERE stage = 'gen'")}
    for name, (ins, out, price, discount) in expected.items():
        for tid, n in ins.items():
            assert (per_request[(name, tid)]["est_input_tokens"], per_request[(name, tid)]["est_output_tokens"]) == (n, out)
        (b,) = gen_batches(project, name)
        assert (b["est_input_tokens"], b["est_output_tokens"]) == (hand[name]["in"], hand[name]["out"])
        assert b["est_cost"] == pytest.approx(hand[name]["batch"], rel=1e-12)


def test_estimate_uses_observed_output_once_a_route_has_five_results(project: Project, emulator: Emulator) -> None:
    lab_only = {"en": len(LAB), "cjk": 850_000}  # harbor.txt (730 chars) is out of this route's context
    assert len(HARBOR) > len(LAB)
    routes = {
        "gpt": route("openai", "gpt-5.5", reasoning=True, price=GPT_PRICE),
        "four": route("anthropic", "claude-opus-4-8", caps=lab_only, price=CLAUDE_PRICE),
        "j": route("openai", "gpt-4.1", price=FREE),
    }
    setup(project, routes, ["j"], TASKS + EXTRA_TASKS)
    before = plan_rows(ok(project.run("plan", "--json", emulator=emulator)).stdout)
    assert before[("gpt", "gen")]["est_output_tokens"] == 6 * BUDGET_REASONING
    assert before[("four", "gen")]["est_output_tokens"] == 4 * BUDGET_PLAIN
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))

    def answers(name: str) -> list[str]:
        return [r["text"] for r in project.sql(
            "SELECT r.text FROM results r JOIN requests q USING (custom_id) WHERE q.route = ? AND q.stage = 'gen' AND r.kind = 'ok'", [name])]

    gpt_answers, four_answers = answers("gpt"), answers("four")
    assert len(gpt_answers) == 6 and len(four_answers) == 4
    observed = math.ceil(sum(math.ceil(len(a) / 4) for a in gpt_answers) / 6)  # the emulator's output rule, averaged
    assert 0 < observed < BUDGET_REASONING

    # A new task in the dataset: gpt (6 results) is estimated from its average, `four` (4 results) from its budget.
    new = ("t7", "What happened at 22:05 in the lab?", "lab.txt")
    project.tasks([task(tid, q, f) for tid, q, f in TASKS + EXTRA_TASKS + [new]])
    after = plan_rows(ok(project.run("plan", "--json", emulator=emulator)).stdout)
    n_in = est_in(new[1], new[2])
    g = after[("gpt", "gen")]
    assert (g["to_send"], g["est_input_tokens"], g["est_output_tokens"]) == (1, n_in, observed)
    assert g["est_cost_batch"] == pytest.approx(cost(GPT_PRICE, n_in, observed, 0.5), rel=1e-12)
    f = after[("four", "gen")]
    assert (f["to_send"], f["est_input_tokens"], f["est_output_tokens"]) == (1, n_in, BUDGET_PLAIN)
    assert f["est_cost_batch"] == pytest.approx(cost(CLAUDE_PRICE, n_in, BUDGET_PLAIN, 0.5), rel=1e-12)
    (b,) = [b for b in gen_batches(project, "gpt") if b["status"] == "planned"]
    assert b["est_output_tokens"] == observed


# --- budget ---------------------------------------------------------------------------------


def budget_routes(**gpt_extra: Any) -> dict[str, Any]:
    return {
        # one request per file: four generation batches, in the order plan writes them (t1..t4)
        "gpt": route("openai", "gpt-5.5", price=GPT_PRICE, max_requests_per_file=1, **gpt_extra),
        "j": route("openai", "gpt-4.1", price=FREE),
    }


def gen_estimates() -> list[float]:
    """Estimated cost of each single-request gpt batch, t1..t4, by hand."""
    return [cost(GPT_PRICE, est_in(q, f), BUDGET_PLAIN, 0.5) for _, q, f in TASKS]


def two_batches_budget() -> float:
    c = gen_estimates()
    # Room for batches 1 and 2, and half of the cheapest of the others: exactly two go.
    return c[0] + c[1] + 0.5 * min(c[2:])


def test_budget_lets_the_first_batches_through_and_a_higher_budget_continues(project: Project, emulator: Emulator) -> None:
    setup(project, budget_routes(), ["j"])
    c = gen_estimates()
    x = two_batches_budget()
    first = ok(project.run("submit", "--budget", repr(x), emulator=emulator), code=2)  # work held back: incomplete
    assert "created 2 batch(es), adopted 0, held 2" in first.stdout
    batches = gen_batches(project, "gpt")
    assert [b["est_cost"] for b in batches] == pytest.approx(c, rel=1e-12)
    assert [members(project, b["id"]) for b in batches] == [[cid_of(project, "gpt", t)] for t in ("t1", "t2", "t3", "t4")]
    assert [b["status"] for b in batches] == ["in_flight", "in_flight", "planned", "planned"]
    held = held_lines(first.stdout)
    assert set(held) == {batches[2]["id"], batches[3]["id"]}
    assert held[batches[2]["id"]] == (f"budget: {money(c[0] + c[1])} committed tonight + est. {money(c[2])} "
                                      f"would exceed {money(x)}")
    assert held[batches[3]["id"]].startswith("budget: ")
    assert [r["custom_id"] for r in batch_requests(emulator)] == [cid_of(project, "gpt", t) for t in ("t1", "t2")]

    # A later run with a budget that covers everything sends the rest, and only the rest.
    second = ok(project.run("submit", "--budget", repr(sum(c) + 1e-6), emulator=emulator))
    assert "created 2 batch(es), adopted 0, held 0" in second.stdout
    assert [r["custom_id"] for r in batch_requests(emulator)] == [cid_of(project, "gpt", t) for t in ("t1", "t2", "t3", "t4")]
    assert [b["status"] for b in gen_batches(project, "gpt")] == ["in_flight"] * 4


def test_budget_in_the_config_and_actual_cost_of_finished_batches_frees_room(project: Project, emulator: Emulator) -> None:
    x = two_batches_budget()
    setup(project, budget_routes(), ["j"], budget=x)
    c = gen_estimates()
    first = ok(project.run("submit", emulator=emulator), code=2)  # no --budget: the config's
    assert "created 2 batch(es), adopted 0, held 2" in first.stdout
    assert all(why.startswith("budget: ") and why.endswith(f"would exceed {money(x)}") for why in held_lines(first.stdout).values())
    ok(project.run("poll", emulator=emulator))
    ok(project.run("collect", emulator=emulator), code=2)

    # The finished batches now count at their actual cost, by hand from the usage in results.
    rows = project.sql("SELECT r.* FROM results r JOIN requests q USING (custom_id) WHERE q.route = 'gpt' ORDER BY r.id")
    assert len(rows) == 2 and all(r["kind"] == "ok" for r in rows)
    actual = sum(cost(GPT_PRICE, r["input_tokens"], r["output_tokens"], 0.5) for r in rows)
    assert actual == pytest.approx(sum(r["cost"] for r in rows), rel=1e-12)
    assert actual < c[0] + c[1]  # short answers: far below the 8192-token budget each
    # Walking the held batches in order against the same budget:
    committed, expect_created = actual, []
    for i in (2, 3):
        if committed + c[i] <= x:
            committed += c[i]
            expect_created.append(i)
    assert expect_created == [2, 3]

    second = ok(project.run("submit", emulator=emulator))
    judge_batches = project.sql("SELECT * FROM batches WHERE stage = 'judge'")
    assert len(judge_batches) == 1 and judge_batches[0]["est_cost"] == 0.0  # the free judge fits any budget
    assert f"created {1 + len(expect_created)} batch(es), adopted 0, held 0" in second.stdout
    assert [b["status"] for b in gen_batches(project, "gpt")][2:] == ["in_flight", "in_flight"]


def test_route_without_a_price_is_held_while_a_budget_is_set(project: Project, emulator: Emulator) -> None:
    routes = budget_routes()
    routes["anon"] = route("anthropic", "claude-opus-4-8")  # no price
    setup(project, routes, ["j"])
    out = ok(project.run("submit", "--budget", "100", emulator=emulator), code=2)
    (anon,) = gen_batches(project, "anon")
    held = held_lines(out.stdout)
    assert set(held) == {anon["id"]}
    assert "'anon' has no price" in held[anon["id"]] and "budget" in held[anon["id"]]
    assert "$0" not in held[anon["id"]]
    assert anon["est_cost"] is None
    assert {r["provider"] for r in batch_requests(emulator)} == {"openai"}  # gpt went, anon did not
    # Without a budget there is nothing to check it against: it goes.
    out = ok(project.run("submit", emulator=emulator))
    assert "created 1 batch(es), adopted 0, held 0" in out.stdout
    assert sum(r["provider"] == "anthropic" for r in batch_requests(emulator)) == 4


def test_held_work_exits_2_and_dry_run_and_status_say_why(project: Project, emulator: Emulator,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 items 2 and 8: a budget in the config and a route without a price (as the shipped
    batchrun.toml has). The dry run says what would be held and why, and names the key variable
    not set (never a value); submit says each hold once and exits 2; status gives each held
    batch's reason, from state.db."""
    routes = budget_routes()
    routes["anon"] = route("anthropic", "claude-opus-4-8", api_key_env="BATCHRUN_TEST_ANON_KEY")  # no price
    routes["j"] = {**routes["j"], "api_key_env": "BATCHRUN_TEST_JUDGE_KEY"}  # needed tonight, for the answers
    setup(project, routes, ["j"], budget=100.0)
    project.point_at(emulator)  # real runs (keys needed), offline

    dry = ok(project.run("submit", "--dry-run"))
    no_price = "route 'anon' has no price, so its cost cannot be checked against the budget (set price for the route)"
    assert f"  would hold new requests of route 'anon' (gen, 4): {no_price}" in dry.stdout
    assert "would hold new requests of route 'gpt'" not in dry.stdout  # it fits the budget
    assert "2 API key variable(s) not set" in dry.stdout and "BATCHRUN_TEST_ANON_KEY (route 'anon')" in dry.stdout
    assert "BATCHRUN_TEST_JUDGE_KEY (route 'j')" in dry.stdout
    assert KEY_ENV not in dry.stdout and "test-key-not-secret" not in dry.output  # a key that is set: neither named nor shown
    assert emulator.calls == []

    monkeypatch.setenv("BATCHRUN_TEST_ANON_KEY", "anon-key-not-secret")
    monkeypatch.setenv("BATCHRUN_TEST_JUDGE_KEY", "judge-key-not-secret")
    first = ok(project.run("submit"), code=2)
    (anon,) = gen_batches(project, "anon")
    assert held_lines(first.stdout) == {anon["id"]: no_price}
    assert first.output.count(f"held {anon['id']}") == 1  # said once (it was logged and summarised)
    assert "submit: 1 batch(es) held back, not sent" in first.stderr
    assert {r["provider"] for r in batch_requests(emulator)} == {"openai"}

    status = ok(project.run("status"))
    assert f"  {anon['id']}: planned (not sent) (4 requests); held since " in status.stdout
    assert status.stdout.rstrip().endswith(f": {no_price}") and "the next submit sends them" not in status.stdout
    (planned,) = json.loads(ok(project.run("status", "--json")).stdout)["planned"]
    assert planned["id"] == anon["id"] and planned["held"] == no_price and planned["held_at"]
    assert f"  would hold {anon['id']}: {no_price}" in ok(project.run("submit", "--dry-run")).stdout

    # refresh says each hold once too: its `held` line, not again in the summary (-q: the held
    # line still, since held work needs action, and the summary).
    for args in (("refresh", "--interval", "0.05"), ("-q", "refresh", "--interval", "0.05")):
        r = ok(project.run(*args), code=2)
        assert r.stderr.count(no_price) == 1 and r.stderr.count(f"held {anon['id']}: ") == 1, r.stderr
        assert "refresh: 1 batch(es) held back, not sent (why: each 'held' line)" in r.stderr, r.stderr
    ok(project.run("submit"), code=2)  # held again for the same reason: one row, since the first
    assert [h["reason"] for h in project.sql("SELECT * FROM batch_holds")] == [no_price]
    # Without a budget nothing is held: it goes, submit exits 0, and status no longer lists it.
    cfg = json.loads(project.config_path.read_text())
    del cfg["budget"]
    project.config_path.write_text(json.dumps(cfg))
    assert "held 0" in ok(project.run("submit")).stdout
    assert "planned (not sent)" not in ok(project.run("status")).stdout


def test_refresh_with_a_budget_sends_the_rest_once_actuals_are_known_then_holds(project: Project, emulator: Emulator) -> None:
    setup(project, budget_routes(), ["j"])
    x = two_batches_budget()
    ok(project.run("refresh", "--budget", repr(x), "--interval", "0.05", emulator=emulator))
    gen = [cid_of(project, "gpt", t) for t in ("t1", "t2", "t3", "t4")]
    log = [r["custom_id"] for r in batch_requests(emulator)]
    # Round 1: t1 and t2 only. Round 2 (their actual cost known): their judging first, then t3 and t4.
    assert [i for i in log if i in gen] == gen and log[:2] == gen[:2]
    assert runs(project, batch_requests(emulator)) == [("gpt", "gen"), ("j", "judge"), ("gpt", "gen"), ("j", "judge")]
    spent = sum(r["cost"] for r in project.sql("SELECT cost FROM results"))
    assert spent <= x

    # A new task whose estimate does not fit what is left tonight: refresh says so and exits 2.
    project.tasks([task(tid, q, f) for tid, q, f in TASKS + EXTRA_TASKS[:1]])
    c5 = cost(GPT_PRICE, est_in(EXTRA_TASKS[0][1], EXTRA_TASKS[0][2]), BUDGET_PLAIN, 0.5)
    tight = spent + 0.5 * c5
    sent = len(batch_requests(emulator))
    r = ok(project.run("refresh", "--budget", repr(tight), "--interval", "0.05", emulator=emulator), code=2)
    assert re.search(r"\] held \S+: budget: ", r.stderr) and "batch(es) held back, not sent" in r.stderr and f"would exceed {money(tight)}" in r.stderr
    assert len(batch_requests(emulator)) == sent


def test_judging_goes_before_new_generation_of_other_routes(project: Project, emulator: Emulator) -> None:
    routes = {
        "a": route("openai", "gpt-5.5", price=GPT_PRICE),
        "b": route("anthropic", "claude-opus-4-8", price=CLAUDE_PRICE),
        "j": route("gemini", "gemini-2.5-flash", price=JUDGE_G_PRICE),
    }
    setup(project, routes, ["j"])
    ok(project.run("plan", emulator=emulator))  # files for a and b
    ok(project.run("submit", "--route", "a", emulator=emulator))
    ok(project.run("poll", emulator=emulator))
    ok(project.run("collect", emulator=emulator), code=2)  # a's answers are in; judging is queued
    ok(project.run("plan", emulator=emulator))  # the judge batch is planned after b's generation batch
    (b_batch,) = gen_batches(project, "b")
    (j_batch,) = project.sql("SELECT * FROM batches WHERE stage = 'judge'")
    assert b_batch["seq"] < j_batch["seq"] and b_batch["status"] == j_batch["status"] == "planned"
    # A budget with room for the judge batch only: judging goes, b's new generation waits.
    budget = j_batch["est_cost"] + 0.5 * b_batch["est_cost"]
    out = ok(project.run("submit", "--budget", repr(budget), emulator=emulator), code=2)
    assert set(held_lines(out.stdout)) == {b_batch["id"]}
    ok(project.run("submit", emulator=emulator))
    assert runs(project, batch_requests(emulator)) == [("a", "gen"), ("j", "judge"), ("b", "gen")]

    # Without a budget, in one submit: judging first, even when generation was planned earlier.
    project.tasks([task(tid, q, f) for tid, q, f in TASKS + EXTRA_TASKS[:1]])
    ok(project.run("plan", emulator=emulator))  # t5 for a and b, planned before b's answers are judged
    ok(project.run("poll", emulator=emulator))
    ok(project.run("collect", emulator=emulator), code=2)  # b's answers are in: their judging is queued
    before = len(batch_requests(emulator))
    ok(project.run("submit", emulator=emulator))
    planned = project.sql("SELECT route, stage, seq FROM batches WHERE seq > ? ORDER BY seq", [j_batch["seq"]])
    assert [(b["route"], b["stage"]) for b in planned] == [("a", "gen"), ("b", "gen"), ("j", "judge")]
    assert runs(project, batch_requests(emulator)[before:]) == [("j", "judge"), ("a", "gen"), ("b", "gen")]


# --- actual spend ---------------------------------------------------------------------------

# Prices inflated a thousandfold so that the tiny fixture's spend shows in dollars and cents.
ACT_GPT = {"input": 1250.0, "output": 10000.0}
ACT_CLAUDE = {"input": 5000.0, "output": 25000.0}
ACT_GEM = {"input": 1250.0, "output": 10000.0, "tiers": [{"above_input_tokens": 224, "input": 2500.0, "output": 15000.0}]}
ACT_JA = {"input": 3000.0, "output": 15000.0}
ACT_JG = {"input": 300.0, "output": 2500.0}


class Recorder:
    """The built-in responder, remembering each prompt and answer by custom_id (as the emulator saw them)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str]] = {}

    def __call__(self, request: dict[str, Any]) -> Any:
        reply = builtin_responder(request)
        assert isinstance(reply, str)
        self.seen[request["custom_id"]] = (request["prompt"], reply)
        return reply


def hand_is_cjk(text: str) -> bool:
    return sum(1 for ch in text[:4000] if "\u4e00" <= ch <= "\u9fff") > 20


def test_actual_cost_from_usage_matches_hand_computation(project: Project) -> None:
    recorder = Recorder()
    emu = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=recorder).start()
    try:
        routes = {
            "gpt": route("openai", "gpt-5.5", price=ACT_GPT),
            "claude": route("anthropic", "claude-opus-4-8", transport="sync", price=ACT_CLAUDE),
            "gem": route("gemini", "gemini-2.5-pro", price=ACT_GEM),
            "judge-a": route("anthropic", "claude-sonnet-4-6", price=ACT_JA),
            "judge-g": route("gemini", "gemini-2.5-flash", price=ACT_JG),
        }
        setup(project, routes, ["judge-a", "judge-g"])
        ok(project.run("refresh", "--interval", "0.05", emulator=emu))
    finally:
        emu.stop()
    prices = {"gpt": ACT_GPT, "claude": ACT_CLAUDE, "gem": ACT_GEM, "judge-a": ACT_JA, "judge-g": ACT_JG}
    discount = {"gpt": 0.5, "claude": 1.0, "gem": 0.5, "judge-a": 0.5, "judge-g": 0.5}
    questions = {tid: q for tid, q, _ in TASKS}

    results = project.sql(
        """SELECT r.*, q.route, q.stage, q.task_id, b.ended_at FROM results r JOIN requests q USING (custom_id)
           JOIN batches b ON b.id = r.batch_id ORDER BY r.id""")
    assert len(results) == 3 * 4 + 2 * 12 and {r["kind"] for r in results} == {"ok"}
    tiered = set()
    hand_actual: dict[str, float] = {}
    hand_estimate: dict[str, float] = {}
    for r in results:
        prompt, answer = recorder.seen[r["custom_id"]]
        n_in, n_out = emulator_tokens(prompt), math.ceil(len(answer) / 4)
        assert (r["input_tokens"], r["output_tokens"], r["text"]) == (n_in, n_out, answer), r["custom_id"]
        assert not r["reasoning_tokens"] and not r["cached_tokens"]
        expected = cost(prices[r["route"]], n_in, n_out, discount[r["route"]])
        assert r["cost"] == pytest.approx(expected, rel=1e-12), (r["route"], r["task_id"])
        if price_at(prices[r["route"]], n_in) != (prices[r["route"]]["input"], prices[r["route"]]["output"]):
            tiered.add((r["route"], r["task_id"]))
        hand_actual[r["batch_id"]] = hand_actual.get(r["batch_id"], 0.0) + expected
        # The estimate this request carried, by hand too.
        if r["stage"] == "gen":
            e_in = est_in(questions[r["task_id"]], {t: f for t, _, f in TASKS}[r["task_id"]])
            e_out = BUDGET_PLAIN
        else:
            parent = project.sql("SELECT res.text FROM requests j JOIN results res ON res.id = j.parent_result_id WHERE j.custom_id = ?",
                                 [r["custom_id"]])[0]["text"]
            e_in = math.ceil(len(prompt) / (1.5 if hand_is_cjk(questions[r["task_id"]] + parent) else 3.3))
            e_out = BUDGET_JUDGE
        hand_estimate[r["batch_id"]] = hand_estimate.get(r["batch_id"], 0.0) + cost(prices[r["route"]], e_in, e_out, discount[r["route"]])
    assert {t for rt, t in tiered if rt == "gem"} and {t for rt, t in tiered if rt == "gem"} != {"t1", "t2", "t3", "t4"}
    batches = {b["id"]: b for b in project.sql("SELECT * FROM batches")}
    # Each route's preflight (one tiny online request before its first upload), at the online rate:
    # no batch discount. Its bound: the prompt's estimated tokens with a margin of 16, and its budget.
    from batchrun.run.preflight import MAX_TOKENS, PROMPT

    preflights = project.sql("SELECT * FROM preflights")
    assert sorted(p["route"] for p in preflights) == sorted(routes) and {p["outcome"] for p in preflights} == {"ok"}
    for p in preflights:
        assert p["input_tokens"] == emulator_tokens(PROMPT) and 0 < p["output_tokens"]
        bid = f"preflight-{p['id']}"
        hand_actual[bid] = cost(prices[p["route"]], p["input_tokens"], p["output_tokens"], 1.0)
        hand_estimate[bid] = cost(prices[p["route"]], math.ceil(len(PROMPT) / 3.3) + 16, MAX_TOKENS, 1.0)
        assert p["cost"] == pytest.approx(hand_actual[bid], rel=1e-12) and p["est_cost"] == pytest.approx(hand_estimate[bid], rel=1e-12)
        batches[bid] = {"route": p["route"], "stage": "preflight", "ended_at": p["started_at"]}
        results += [{"route": p["route"], "stage": "preflight", "input_tokens": p["input_tokens"]}]

    # The cost view: one row per batch (and preflight), estimate and actual side by side.
    view = {v["batch_id"]: v for v in project.sql("SELECT * FROM cost")}
    assert set(view) == set(hand_actual) == set(batches)
    for bid, v in view.items():
        assert v["actual_cost"] == pytest.approx(hand_actual[bid], rel=1e-12)
        assert v["estimated_cost"] == pytest.approx(hand_estimate[bid], rel=1e-12)
        # A night runs noon to noon and is named by the date it began.
        assert v["night"] == datetime.fromtimestamp(batches[bid]["ended_at"] - 12 * 3600).strftime("%Y-%m-%d")

    # `batchrun cost --json`: per route (and stage) and per night.
    data = json.loads(ok(project.run("cost", "--json", emulator=emu)).stdout)
    per_route: dict[tuple[str, str, str], dict[str, float]] = {}
    for bid, b in batches.items():
        key = (view[bid]["night"], b["route"], b["stage"])
        acc = per_route.setdefault(key, {"estimated_cost": 0.0, "actual_cost": 0.0, "batches": 0})
        acc["estimated_cost"] += hand_estimate[bid]
        acc["actual_cost"] += hand_actual[bid]
        acc["batches"] += 1
    got = {(r["night"], r["route"], r["stage"]): r for r in data["rows"]}
    assert set(got) == set(per_route)
    for key, acc in per_route.items():
        assert got[key]["batches"] == acc["batches"]
        assert got[key]["estimated_cost"] == pytest.approx(acc["estimated_cost"], rel=1e-12)
        assert got[key]["actual_cost"] == pytest.approx(acc["actual_cost"], rel=1e-12)
        assert got[key]["input_tokens"] == sum(r["input_tokens"] for r in results if (r["route"], r["stage"]) == key[1:])
    nights = sorted({k[0] for k in per_route})
    assert [n["night"] for n in data["nights"]] == nights
    for n in data["nights"]:
        assert n["actual_cost"] == pytest.approx(sum(a["actual_cost"] for k, a in per_route.items() if k[0] == n["night"]), rel=1e-12)
        assert n["estimated_cost"] == pytest.approx(sum(a["estimated_cost"] for k, a in per_route.items() if k[0] == n["night"]), rel=1e-12)
        assert n["actual_cost"] < n["estimated_cost"]  # estimates assume the whole completion budget

    # The table: both figures per route, in dollars.
    text = ok(project.run("cost", emulator=emu)).stdout
    for (night, name, stage), acc in per_route.items():
        (line,) = [ln for ln in text.splitlines() if ln.split()[:3] == [night, name, stage]]
        assert line.split()[-2:] == [money(acc["estimated_cost"]), money(acc["actual_cost"])]
    # --since: a later night has nothing yet.
    later = json.loads(ok(project.run("cost", "--json", "--since", "9999-01-01", emulator=emu)).stdout)
    assert later["rows"] == [] and later["nights"] == [] and later["routes"] == []


def test_failed_request_lines_cost_nothing_not_unknown(project: Project, emulator: Emulator) -> None:
    routes = {
        "gpt": route("openai", "gpt-5.5", price=ACT_GPT),
        "claude": route("anthropic", "claude-opus-4-8", price=ACT_CLAUDE),
        "j": route("openai", "gpt-4.1", price=FREE),
    }
    setup(project, routes, ["j"])
    # One generation line fails (its prompt has a document: not the route's preflight).
    emulator.add_fault({"kind": "request_error", "provider": "openai", "model": "gpt-5.5", "status": 500, "prompt_contains": "Document:"})
    emulator.add_fault({"kind": "expire", "provider": "anthropic", "complete_fraction": 0.5})  # two requests never run
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    failed = project.sql("SELECT * FROM results WHERE kind != 'ok'")
    assert sorted(r["kind"] for r in failed) == ["expired", "expired", "transient"]
    assert all(r["input_tokens"] is None and r["cost"] == 0.0 for r in failed)  # nothing billed: $0, not unknown
    data = json.loads(ok(project.run("cost", "--json", emulator=emulator)).stdout)
    rows = {r["route"]: r for r in data["rows"] if r["stage"] != "preflight"}
    for name, price, discount in (("gpt", ACT_GPT, 0.5), ("claude", ACT_CLAUDE, 0.5)):
        ok_rows = project.sql("SELECT r.* FROM results r JOIN requests q USING (custom_id) WHERE q.route = ? AND r.kind = 'ok'", [name])
        assert len(ok_rows) == 4  # retried and answered
        assert rows[name]["batches"] == 2
        assert rows[name]["actual_cost"] == pytest.approx(
            sum(cost(price, r["input_tokens"], r["output_tokens"], discount) for r in ok_rows), rel=1e-12)
    (night,) = data["nights"]
    assert night["actual_cost"] == pytest.approx(sum(r["actual_cost"] for r in data["rows"]), rel=1e-12)


def test_one_overnight_run_across_midnight_is_one_night(project: Project, emulator: Emulator) -> None:
    setup(project, budget_routes(), ["j"])
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    gen = gen_batches(project, "gpt")[:2]
    # As if the first batch ended at 23:30 and the second at 00:30 the same night.
    evening = datetime(2026, 3, 10, 23, 30).timestamp()
    conn = sqlite3.connect(project.state_path)
    with conn:
        conn.execute("UPDATE batches SET submitted_at = ?, ended_at = ? WHERE id = ?", [evening - 600, evening, gen[0]["id"]])
        conn.execute("UPDATE batches SET submitted_at = ?, ended_at = ? WHERE id = ?", [evening + 3000, evening + 3600, gen[1]["id"]])
        conn.execute("UPDATE batches SET submitted_at = ?, ended_at = ? WHERE id NOT IN (?, ?)",
                     [evening + 3700, evening + 3800, gen[0]["id"], gen[1]["id"]])
        conn.execute("UPDATE preflights SET started_at = ?", [evening - 1200])  # before the first upload
    conn.close()
    nights = json.loads(ok(project.run("cost", "--json", emulator=emulator)).stdout)["nights"]
    assert [n["night"] for n in nights] == ["2026-03-10"]


# --- unknown prices -------------------------------------------------------------------------


def test_unknown_price_is_unknown_everywhere_never_zero(project: Project, emulator: Emulator) -> None:
    routes = {
        "gpt": route("openai", "gpt-5.5", price=GPT_PRICE),
        "anon": route("anthropic", "claude-opus-4-8"),  # no price
        "jx": route("gemini", "gemini-2.5-flash"),  # a judge without a price
    }
    setup(project, routes, ["jx"])
    gpt_batch = sum(cost(GPT_PRICE, est_in(q, f), BUDGET_PLAIN, 0.5) for _, q, f in TASKS)
    gpt_expected = sum(cost(GPT_PRICE, est_in(q, f), BUDGET_PLAIN // 4, 0.5) for _, q, f in TASKS)

    def check_table(stdout: str, pending: bool = True) -> None:
        rows = table(stdout)
        assert rows[("anon", "gen")][11:] == ["unknown", "unknown", "unknown"]
        assert rows[("jx", "judge")][11:] == ["unknown", "unknown", "unknown"]
        if pending:
            assert rows[("gpt", "gen")][11:] == [money(gpt_expected), money(gpt_batch), money(2 * gpt_batch)]
            assert "total estimated at the batch rate: unknown expected, unknown bound" in stdout
        assert not any("$0" in line for line in stdout.splitlines() if line.startswith(("anon ", "jx ")))

    check_table(ok(project.run("submit", "--dry-run", emulator=emulator)).stdout)
    data = plan_rows(ok(project.run("plan", "--json", emulator=emulator)).stdout)
    for key in (("anon", "gen"), ("jx", "judge")):
        assert data[key]["est_cost_batch"] is None and data[key]["est_cost_online"] is None
    assert data[("anon", "gen")]["est_input_tokens"] == data[("gpt", "gen")]["est_input_tokens"] > 0  # tokens are still estimated
    assert data[("gpt", "gen")]["est_cost_batch"] == pytest.approx(gpt_batch, rel=1e-12)
    check_table(ok(project.run("plan", emulator=emulator)).stdout, pending=False)  # nothing new to send: still unknown, not $0

    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    by_route = {}
    for r in project.sql("SELECT q.route, r.cost, r.input_tokens FROM results r JOIN requests q USING (custom_id)"):
        by_route.setdefault(r["route"], []).append(r)
    assert all(r["cost"] is None and r["input_tokens"] > 0 for name in ("anon", "jx") for r in by_route[name])
    assert all(r["cost"] > 0 for r in by_route["gpt"])
    # (Each route's preflight too: unknown without a price, its own cost for gpt.)
    for stage in ("gen", "judge", "preflight"):
        view = {v["route"]: v for v in project.sql("SELECT * FROM cost WHERE stage = ?", [stage])}
        for name in {"gen": ["anon"], "judge": ["jx"], "preflight": ["anon", "jx"]}[stage]:
            assert view[name]["estimated_cost"] is None and view[name]["actual_cost"] is None, (stage, name)

    data = json.loads(ok(project.run("cost", "--json", emulator=emulator)).stdout)
    rows = {(r["route"], r["stage"]): r for r in data["rows"]}
    for key in (("anon", "gen"), ("jx", "judge"), ("anon", "preflight"), ("jx", "preflight")):
        assert rows[key]["estimated_cost"] is None and rows[key]["actual_cost"] is None, key
    assert rows[("gpt", "gen")]["actual_cost"] == pytest.approx(sum(r["cost"] for r in by_route["gpt"]), rel=1e-12)
    (preflight,) = project.sql("SELECT cost, est_cost FROM preflights WHERE route = 'gpt'")
    assert rows[("gpt", "preflight")]["actual_cost"] == pytest.approx(preflight["cost"], rel=1e-12) and preflight["cost"] > 0
    (night,) = data["nights"]
    # A night's total is the priced routes' sum, with the unpriced ones named: not an unknown total.
    assert night["actual_cost"] == pytest.approx(rows[("gpt", "gen")]["actual_cost"] + preflight["cost"], rel=1e-12)
    assert night["estimated_cost"] == pytest.approx(rows[("gpt", "gen")]["estimated_cost"] + preflight["est_cost"], rel=1e-12)
    assert sorted(night["unpriced_routes"]) == ["anon", "jx"]
    text = ok(project.run("cost", emulator=emulator)).stdout
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] in ("anon", "jx"):
            assert parts[-3:] == ["unknown", "unknown", "unknown"], line
    (total,) = [line for line in text.splitlines() if " TOTAL " in line]
    assert "unknown" not in total and money(night["actual_cost"]) in total
    assert "priced routes only: 2 route(s) unpriced (anon, jx)" in total
    assert "Nights run noon to noon, local time" in text
    assert "unknown" not in next(line for line in text.splitlines() if " gpt " in line)


# --- provider queue quotas --------------------------------------------------------------------


@pytest.fixture
def slow_emulator() -> Any:
    """Batches take 0.3 s: a batch is still in flight when the next submit runs."""
    emu = Emulator(host="127.0.0.1", port=0, latency=0.3).start()
    yield emu
    emu.stop()


MAX_SINGLE = max(est_in(q, f) for _, q, f in TASKS)  # 273 (t2)
QUOTAS = {
    # OpenAI-style: at most one batch in flight; two requests per file -> two batches.
    "batches": (route("openai", "gpt-5.5", price=GPT_PRICE, max_batches_in_flight=1, max_requests_per_file=2),
                "queue: route 'x' already has 1 batch(es) in flight (max_batches_in_flight = 1)"),
    # Enqueued prompt tokens: room for one request's estimate at a time -> four one-request batches.
    "tokens": (route("anthropic", "claude-opus-4-8", price=CLAUDE_PRICE, max_enqueued_tokens=MAX_SINGLE),
               (f"queue: route 'x' has ~{est_in(*TASKS[0][1:]):,} prompt tokens enqueued; this batch adds "
                f"~{est_in(*TASKS[1][1:]):,} (max_enqueued_tokens = {MAX_SINGLE:,})")),
}


@pytest.mark.parametrize("kind", sorted(QUOTAS))
def test_queue_quota_sends_batches_in_waves(project: Project, slow_emulator: Emulator, kind: str) -> None:
    emu = slow_emulator
    x_route, first_reason = QUOTAS[kind]
    setup(project, {"x": x_route, "j": route("gemini", "gemini-2.5-flash", price=JUDGE_G_PRICE)}, ["j"])
    first = ok(project.run("submit", emulator=emu), code=2)
    batches = gen_batches(project, "x")
    assert len(batches) == (2 if kind == "batches" else 4)
    assert f"created 1 batch(es), adopted 0, held {len(batches) - 1}" in first.stdout
    held = held_lines(first.stdout)
    assert set(held) == {b["id"] for b in batches[1:]}
    assert held[batches[1]["id"]] == first_reason
    # Submitting again while the first batch is in flight sends nothing more.
    again = ok(project.run("submit", emulator=emu), code=2)
    assert f"created 0 batch(es), adopted 0, held {len(batches) - 1}" in again.stdout
    assert [r["custom_id"] for r in batch_requests(emu)] == members(project, batches[0]["id"])

    # refresh creates each batch as the previous one finishes, and logs each hold once, not every
    # round the queue still holds it (issue 29 item 8).
    r = ok(project.run("refresh", "--interval", "0.1", emulator=emu))
    said = [line.split("] ", 1)[1] for line in r.stderr.splitlines() if "] held " in line]
    assert said and len(said) == len(set(said)), said
    batches = gen_batches(project, "x")
    gen_ids = {cid for b in batches for cid in members(project, b["id"])}
    log = [r["custom_id"] for r in batch_requests(emu)]
    # All of batch 1's custom_ids, then all of batch 2's, ...
    assert [cid for cid in log if cid in gen_ids] == [cid for b in batches for cid in members(project, b["id"])]
    # ... and between two waves, the judging of the earlier wave's answers: batch k+1 went out only
    # after batch k had finished and been collected (without the quota, every batch would go first).
    assert runs(project, batch_requests(emu)) == [("x", "gen"), ("j", "judge")] * len(batches)
    for earlier, later in itertools.pairwise(batches):
        assert later["submitted_at"] >= earlier["ended_at"]
    assert {r["kind"] for r in project.sql("SELECT kind FROM results")} == {"ok"}


QUOTA_ROUTES = {
    "openai": route("openai", "gpt-5.5", price=GPT_PRICE),
    "anthropic": route("anthropic", "claude-opus-4-8", price=CLAUDE_PRICE),
    "gemini": route("gemini", "gemini-2.5-pro", price=GPT_PRICE),
}


@pytest.mark.parametrize("provider", sorted(QUOTA_ROUTES))
def test_provider_quota_refusal_leaves_requests_pending_and_a_later_submit_sends_them(
        project: Project, emulator: Emulator, provider: str) -> None:
    judge = "anthropic" if provider != "anthropic" else "openai"
    setup(project, {"x": QUOTA_ROUTES[provider], "j": route(judge, "claude-sonnet-4-6" if judge == "anthropic" else "gpt-4.1",
                                                            price=FREE)}, ["j"])
    emulator.add_fault({"kind": "quota", "provider": provider})
    # OpenAI's refusal comes later (the batch fails); the others refuse the create: held, exit 2.
    first = ok(project.run("submit", emulator=emulator), code=0 if provider == "openai" else 2)
    (b,) = gen_batches(project, "x")
    ids = members(project, b["id"])
    if provider == "openai":
        # OpenAI accepts the create, then fails the batch: "Enqueued token limit reached".
        assert "created 1 batch(es)" in first.stdout
        ok(project.run("poll", emulator=emulator))
        (b,) = gen_batches(project, "x")
        assert b["quota"] == 1 and "Enqueued token limit" in b["error"]
        ok(project.run("collect", emulator=emulator), code=2)
        (b,) = gen_batches(project, "x")
        assert b["status"] == "refused"
        states = {r["state"] for r in project.sql("SELECT state FROM request_status WHERE route = 'x'")}
        assert states == {"pending"}
    else:
        # Anthropic and Gemini answer the create with 429: nothing was created, the batch waits.
        assert "created 0 batch(es), adopted 0, held 1" in first.stdout
        assert held_lines(first.stdout)[b["id"]].startswith("provider quota: ")
        assert b["status"] == "uploaded" and b["provider_batch_id"] is None
        states = {r["state"] for r in project.sql("SELECT state FROM request_status WHERE route = 'x'")}
        assert "failed" not in states
    assert batch_requests(emulator) == []  # the refused requests were never accepted
    assert project.sql("SELECT * FROM results") == []  # not a failure of any request
    assert {c["status"] for c in project.sql("SELECT status FROM cell_status")} == {"pending"}

    second = ok(project.run("submit", emulator=emulator))
    assert "created 1 batch(es), adopted 0, held 0" in second.stdout
    assert sorted(r["custom_id"] for r in batch_requests(emulator)) == sorted(ids)
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    kinds = {r["custom_id"]: r["kind"] for r in project.sql("SELECT * FROM results r JOIN requests q USING (custom_id) WHERE q.route = 'x'")}
    assert kinds == {cid: "ok" for cid in ids}
    assert sorted(r["custom_id"] for r in batch_requests(emulator) if r["custom_id"] in ids) == sorted(ids)  # each sent once
    assert {c["status"] for c in project.sql("SELECT status FROM cell_status")} == {"ok"}
    # The refused attempt cost nothing and does not make the night's spend unknown.
    (night,) = json.loads(ok(project.run("cost", "--json", emulator=emulator)).stdout)["nights"]
    spent = sum(r["cost"] for r in project.sql("SELECT cost FROM results"))
    spent += sum(r["cost"] for r in project.sql("SELECT cost FROM preflights"))  # each route's, before its first upload
    assert night["actual_cost"] == pytest.approx(spent, rel=1e-12)


# --- expected cost and bound ------------------------------------------------------------------


def test_expected_cost_learns_from_answers_and_cost_shows_its_error(project: Project, emulator: Emulator) -> None:
    """Before any answer the expected cost uses the stated prior (a quarter of max_tokens); once a
    route has answered, the mean of its answers. `cost` puts the expected estimate beside the bound
    and the actual spend, per route, with the error."""
    routes = {"gpt": route("openai", "gpt-5.5", price=GPT_PRICE), "judge-a": route("anthropic", "claude-sonnet-4-6", price=CLAUDE_PRICE)}
    setup(project, routes, ["judge-a"])
    # plan then submit --dry-run: the planned, unsent batches are listed with both figures.
    ok(project.run("plan", emulator=emulator))
    dry = ok(project.run("submit", "--dry-run", emulator=emulator)).stdout
    (planned,) = project.sql("SELECT id, expected_cost, est_cost FROM batches WHERE stage = 'gen'")
    assert 0 < planned["expected_cost"] < planned["est_cost"]
    assert (f"  {planned['id']}  gpt gen  planned  4 request(s)  expected {money(planned['expected_cost'])}, "
            f"bound {money(planned['est_cost'])}") in dry
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))

    data = json.loads(ok(project.run("cost", "--json", emulator=emulator)).stdout)
    per_route = {(r["route"], r["stage"]): r for r in data["routes"]}
    gen = per_route[("gpt", "gen")]
    batches = project.sql("SELECT sum(expected_cost) AS expected, sum(est_cost) AS bound FROM batches WHERE route = 'gpt' AND stage = 'gen'")[0]
    actual = project.sql("SELECT sum(r.cost) AS c FROM results r JOIN requests q USING (custom_id) WHERE q.route = 'gpt'")[0]["c"]
    assert gen["expected_cost"] == pytest.approx(batches["expected"]) and gen["estimated_cost"] == pytest.approx(batches["bound"])
    assert gen["actual_cost"] == pytest.approx(actual) and gen["error"] == pytest.approx((actual - batches["expected"]) / batches["expected"])
    assert data["nights_run"].startswith("noon to noon")
    text = ok(project.run("cost", emulator=emulator)).stdout
    assert "Estimate vs actual per route (collected batches):" in text
    (line,) = [ln for ln in text.splitlines() if ln.split()[:3] == ["gpt", "gen", "1"]]
    assert line.split()[-4:] == [money(batches["expected"]), money(batches["bound"]), money(actual), f"{100 * gen['error']:+.0f}%"]

    # New tasks: gpt has answered, so its expected output is the mean of its answers (not the prior).
    setup(project, routes, ["judge-a"], tasks=TASKS + EXTRA_TASKS)
    seen = project.sql("SELECT count(*) AS n, avg(r.output_tokens) AS out FROM results r JOIN requests q USING (custom_id) "
                       "WHERE q.route = 'gpt' AND q.stage = 'gen' AND r.output_tokens IS NOT NULL")[0]
    plan = plan_rows(ok(project.run("plan", "--json", emulator=emulator)).stdout)[("gpt", "gen")]
    assert plan["to_send"] == 2 and plan["expected_basis"] == f"observed: mean of {seen['n']} answer(s)"
    assert plan["expected_output_tokens"] == 2 * math.ceil(seen["out"])
    ins = [est_in(q, f) for _, q, f in EXTRA_TASKS]
    assert plan["est_cost_expected"] == pytest.approx(sum(cost(GPT_PRICE, n, math.ceil(seen["out"]), 0.5) for n in ins), rel=1e-12)
    assert plan["est_cost_batch"] == pytest.approx(sum(cost(GPT_PRICE, n, BUDGET_PLAIN, 0.5) for n in ins), rel=1e-12)
