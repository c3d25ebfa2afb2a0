"""`batchrun probe ROUTE` against emulator windows the tests set (issue 18, spec §3), and a run
whose provider refuses a document as too long: a config problem named by route, never a zero.

Everything real: the CLI, the official SDKs over HTTP to the emulator, state.db on disk. The
emulator's tokenizer is deterministic (~4 Latin characters a token, 1 per CJK ideograph), so each
test computes the true largest document that fits its window and checks the probe against it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from batchrun.protocol.caps import is_cjk
from batchrun.protocol.config_file import load_config
from batchrun.protocol.policy import generation_max_tokens
from batchrun.emulator import Emulator
from batchrun.emulator.wire import count_input_tokens
from batchrun.protocol.prompts import generation_prompt
from conftest import KEY_ENV, Project, route, task

EN_DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
          "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 40
ZH_DOC = "港口起重机在凌晨三点十四分发生故障。操作员是马拉。风速达到四十一节。维修用了九天。\n" * 60
EN_Q = "When did the harbor crane fail and who was the operator?"
ZH_Q = "起重机何时发生故障？"
PRICE = {"input": 1.0, "output": 2.0}
JUDGE = {"judge": route("gemini", "gemini-2.5-flash")}
WINDOW = 30_000  # tokens: ~120,000 English characters, ~30,000 CJK characters


@pytest.fixture
def emu() -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    yield e
    e.stop()


def setup(project: Project, routes: dict[str, Any]) -> Project:
    project.doc("harbor.txt", EN_DOC)
    project.doc("zh.txt", ZH_DOC)
    project.tasks([task("t1", EN_Q, "harbor.txt"), task("t2", ZH_Q, "zh.txt")])
    project.config(routes={**routes, **JUDGE}, panel=["judge"])
    return project


def true_cap(document: str, question: str, window: int) -> int:
    """The longest prefix of the document (repeated as the probe repeats it) whose generation
    prompt fits the window, by the emulator's own tokenizer."""
    unit = document + "\n\n"

    def fits(n: int) -> bool:
        return count_input_tokens(generation_prompt(question, (unit * (n // len(unit) + 1))[:n])) <= window

    lo, hi = 0, window * 8
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def probe(project: Project, emu: Any, *args: str, code: int = 0) -> Any:
    result = project.run("probe", *args, emulator=emu)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


SEARCH_ROUTES = {
    "openai batch": route("openai", "gpt-5.2", price=PRICE),
    "openai-compatible sync": route("openai-compatible", "qwen3.8-max", transport="sync", price=PRICE),
    # The Responses API's refusal states no token counts: plain halving, no jump to the window.
    "openai responses": route("openai", "gpt-5.2-pro", endpoint="responses", price=PRICE),
}
TOKEN_ROUTES = {
    "gemini batch": route("gemini", "gemini-3-flash-preview", price=PRICE),
    "anthropic sync": route("anthropic", "claude-opus-4-7", transport="sync", price=PRICE),
}


@pytest.mark.parametrize("kind", list(SEARCH_ROUTES))
def test_search_finds_the_window_within_the_precision_en_and_cjk(project: Project, emu: Any, kind: str) -> None:
    r = SEARCH_ROUTES[kind]
    emu.set_windows({r["model"]: WINDOW})
    setup(project, {"new": r})
    emu.add_fault({"kind": "request_error", "status": 429, "count": 1})  # a rate limit is no answer about length
    out = probe(project, emu, "new", "--max-cost", "5", "--precision", "2%", "--json")
    data = json.loads(out.stdout)
    assert data["method"] == "search"
    by_script = {s["script"]: s for s in data["scripts"]}
    for script, doc, question in (("en", EN_DOC, EN_Q), ("cjk", ZH_DOC, ZH_Q)):
        s = by_script[script]
        truth = true_cap(doc, question, WINDOW)
        assert s["largest_accepted"] <= truth < s["smallest_rejected"], (script, truth, s)
        assert s["smallest_rejected"] - s["largest_accepted"] <= 0.02 * s["smallest_rejected"]
        # OpenAI counts max_tokens against the window: the cap leaves the route's answer budget free.
        config = load_config(project.config_path)
        answer_chars = math.ceil(generation_max_tokens(config, config.routes["new"]) * s["chars_per_token"])
        assert s["reserved_chars"] == answer_chars > 0
        assert s["cap"] == s["largest_accepted"] - answer_chars and data["suggested_caps"][script] == s["cap"]
    # Every step was a real online request with a minimal budget, and each refusal stated the window.
    sent = [s for s in data["steps"] if s["outcome"] != "not sent (budget)"]
    assert len([q for q in emu.requests if q["batch"] == "online"]) == len(sent) + 1  # the 429, tried again
    refusals = [s for s in sent if s["outcome"] == "too_long"]
    if kind == "openai responses":
        assert all(s["window"] is None for s in refusals) and len(sent) > 8  # halving only
    else:
        # The refusals state the window and the prompt's tokens: two steps around it close the bracket.
        assert all(s["window"] == WINDOW for s in refusals) and len(sent) <= 8
    # Spend: accepted steps at the online price (input + the output budget sent: 1 token, 16 on the
    # Responses API, whose minimum max_output_tokens is 16); refusals are free.
    budget = 16 if kind == "openai responses" else 1
    expected = sum((s["input_tokens"] * PRICE["input"] + budget * PRICE["output"]) / 1e6 for s in sent if s["outcome"] == "accepted")
    assert data["spent"] == pytest.approx(expected, rel=1e-6) and data["spent"] <= 5
    # Recorded for audit.
    row = project.sql("SELECT * FROM probes")[0]
    assert (row["route"], row["model"], row["method"], row["written"]) == ("new", r["model"], "search", 0)
    assert (row["en_cap"], row["cjk_cap"]) == (by_script["en"]["cap"], by_script["cjk"]["cap"])
    assert row["cost"] == pytest.approx(data["spent"]) and json.loads(row["evidence_json"])["steps"]


@pytest.mark.parametrize("kind", list(TOKEN_ROUTES))
def test_stated_window_and_token_counts_give_the_caps_without_a_completion(project: Project, emu: Any, kind: str) -> None:
    r = TOKEN_ROUTES[kind]
    emu.set_windows({r["model"]: WINDOW})
    setup(project, {"new": r})
    out = probe(project, emu, "new")  # no --max-cost: nothing is billed
    assert "window stated by the provider: 30,000 input tokens" in out.stdout
    config = load_config(project.config_path)
    caps = {s: int(line.split(f"{s} = ")[1].split(",")[0].split(" ")[0]) for line in out.stdout.splitlines()
            if line.startswith("caps = ") for s in ("en", "cjk")}
    assert caps["en"] != config.routes["new"].caps.en
    evidence = {s["script"]: s for s in json.loads(project.sql("SELECT evidence_json FROM probes")[0]["evidence_json"])["scripts"]}
    for script, doc, question in (("en", EN_DOC, EN_Q), ("cjk", ZH_DOC, ZH_Q)):
        # Anthropic counts max_tokens against the window (the answer's room is left free); Gemini does not.
        reserved = evidence[script]["reserved_chars"]
        assert (reserved > 0) == (kind == "anthropic sync")
        truth = true_cap(doc, question, WINDOW) - reserved
        assert caps[script] <= truth and caps[script] >= 0.99 * truth, (script, caps[script], truth)
    assert emu.requests == []  # no generation request was sent
    row = project.sql("SELECT method, window_tokens, cost FROM probes")[0]
    assert row == {"method": "tokens", "window_tokens": WINDOW, "cost": 0.0}


def test_max_cost_is_never_exceeded_and_the_spend_is_shown(project: Project, emu: Any) -> None:
    emu.set_windows({"gpt-5.2": WINDOW})
    setup(project, {"new": route("openai", "gpt-5.2", price={"input": 100.0, "output": 100.0})})
    out = probe(project, emu, "new", "--max-cost", "5")
    # At $100 per million tokens: the first English step (40,000 characters, estimated at a token
    # a character: $4) is sent and costs ~$1; the next, four times as long, is estimated over the
    # rest of the budget and not sent; likewise the CJK steps (12,000 characters sent).
    spent = next(line for line in out.stdout.splitlines() if line.startswith("spent: "))
    assert "of --max-cost $5.00 (2 requests)" in spent and float(spent.split("$")[1].split(" ")[0]) <= 5
    assert "stopped before precision" in out.stdout and "not sent (budget)" in out.stdout
    row = project.sql("SELECT cost, max_cost, evidence_json, en_cap, cjk_cap FROM probes")[0]
    assert 0 < row["cost"] <= 5 and row["max_cost"] == 5
    # Stopped before any rejection, the search knows only a lower bound: no cap is suggested
    # (written, it would evaluate the model far below its window).
    assert row["en_cap"] is None and row["cjk_cap"] is None
    assert "no cap suggested: the window is at least 40,000 characters" in out.stdout
    steps = json.loads(row["evidence_json"])["steps"]
    assert sum(s["cost"] or 0 for s in steps) == pytest.approx(row["cost"])
    assert all(s["cost"] <= s["est_cost"] for s in steps if s["outcome"] == "accepted")  # estimates are never low
    assert len([q for q in emu.requests if q["batch"] == "online"]) == len([s for s in steps if s["outcome"] != "not sent (budget)"])


def test_search_without_max_cost_or_price_refuses_before_sending(project: Project, emu: Any) -> None:
    setup(project, {"new": route("openai", "gpt-5.2", price=PRICE), "free": route("openai", "gpt-5-mini")})
    out = probe(project, emu, "new", code=1)
    assert "no --max-cost was given" in out.output and "batchrun probe new --dry-run" in out.output
    out = probe(project, emu, "free", "--max-cost", "1", code=1)
    assert "has no price" in out.output
    assert emu.calls == []


def test_dry_run_shows_the_plan_and_sends_nothing(project: Project, emu: Any) -> None:
    setup(project, {"new": route("openai", "gpt-5.2", price=PRICE), "gem": route("gemini", "gemini-3-flash-preview", price=PRICE)})
    out = probe(project, emu, "new", "--dry-run")
    assert "dry run, nothing sent" in out.stdout
    assert "grow:     40,000 characters" in out.stdout and "halvings" in out.stdout and "worst case" in out.stdout
    assert "harbor.txt" in out.stdout and "zh.txt" in out.stdout
    out = probe(project, emu, "gem", "--dry-run")
    assert "input window from the provider" in out.stdout
    assert emu.calls == []
    assert not project.state_path.exists() or project.sql("SELECT count(*) AS n FROM probes")[0]["n"] == 0


TOML = """\
# A hand-written config: comments and layout must survive --write.
protocol = "custom"   # a one-judge panel

[paths]
dataset = "data/tasks.json"   # the tasks

[judging]
panel = ["judge"]

[routes."new-model"]
provider = "openai"
model = "gpt-5.2"
base_url = "{url}/v1"
api_key_env = "{key}"
price = {{ input = 1.0, output = 2.0 }}
# a comment that belongs to the next table

[routes.judge]
provider = "gemini"
model = "gemini-2.5-flash"
base_url = "{url}"
api_key_env = "{key}"
"""


def test_write_puts_the_caps_in_the_route_and_changes_nothing_else(project: Project, emu: Any) -> None:
    emu.set_windows({"gpt-5.2": WINDOW})
    setup(project, {})
    project.config_path = project.root / "batchrun.toml"
    original = TOML.format(url=emu.url, key=KEY_ENV)
    project.config_path.write_text(original, encoding="utf-8")

    out = project.run("probe", "new-model", "--max-cost", "5", "--write")  # the config's own base_url: a real run
    assert out.exit_code == 0, out.output
    text = project.config_path.read_text(encoding="utf-8")
    added = [line for line in text.splitlines() if line not in original.splitlines()]
    assert len(added) == 2 and added[0].startswith("# caps probed ") and "binary search" in added[0]
    assert added[1].startswith("caps = { en = ")
    assert "\n".join(line for line in text.splitlines() if line not in added) + "\n" == original  # byte for byte
    assert text.index(added[1]) < text.index("# a comment that belongs to the next table")
    config = load_config(project.config_path)
    row = project.sql("SELECT en_cap, cjk_cap, written FROM probes")[0]
    assert (config.routes["new-model"].caps.en, config.routes["new-model"].caps.cjk, row["written"]) == (row["en_cap"], row["cjk_cap"], 1)
    assert config.routes["new-model"].caps.source == "config"
    assert "planned afresh" not in out.output  # nothing was planned under the old caps

    # Probing again replaces the caps line and its comment, adding nothing; the cells planned
    # under the first caps are re-planned under the new ones, and the probe says so.
    assert project.run("plan").exit_code == 0
    emu.set_windows({"gpt-5.2": WINDOW // 2})
    out = project.run("probe", "new-model", "--max-cost", "5", "--write")
    assert out.exit_code == 0, out.output
    assert "the caps are part of route 'new-model'" in out.output and "planned afresh" in out.output
    again = project.config_path.read_text(encoding="utf-8")
    assert len(again.splitlines()) == len(text.splitlines()) and again.count("# caps probed") == 1
    assert load_config(project.config_path).routes["new-model"].caps.en < config.routes["new-model"].caps.en


def test_write_refuses_a_json_config_and_a_rehearsal(project: Project, emu: Any) -> None:
    emu.set_windows({"gpt-5.2": WINDOW})
    setup(project, {"new": route("openai", "gpt-5.2", price=PRICE)})
    before = project.config_path.read_bytes()
    out = probe(project, emu, "new", "--max-cost", "5", "--write", code=1)
    assert "--write on a rehearsal (--emulator" in out.output
    project.point_at(emu)
    before = project.config_path.read_bytes()
    out = project.run("probe", "new", "--max-cost", "5", "--write")
    assert out.exit_code == 1 and "is JSON" in out.output and '"caps": {"en": ' in out.output
    assert project.config_path.read_bytes() == before


def test_a_rehearsal_s_state_db_is_refused_before_the_search_sends_anything(project: Project, emu: Any) -> None:
    """Issue 29 item 9: a real probe (and its --write) over a rehearsal's state.db, as in the
    demo's folder, was refused only once the whole (paid) search had run."""
    emu.set_windows({"gpt-5.2": WINDOW})
    setup(project, {"new": route("openai", "gpt-5.2", price=PRICE)})
    assert project.run("plan", emulator=emu).exit_code == 0  # rehearsal/state.db, marked as a rehearsal's
    project.point_at(emu)  # a real run, whose config names the rehearsal's state.db
    cfg = json.loads(project.config_path.read_text())
    cfg["paths"]["state"] = "rehearsal/state.db"
    project.config_path.write_text(json.dumps(cfg))
    before = project.config_path.read_bytes()
    for args in (["--write"], []):
        out = project.run("probe", "new", "--max-cost", "5", *args)
        assert out.exit_code == 1 and f"was made by a rehearsal on the emulator at {emu.url}" in out.output, out.output
        assert emu.calls == [] and project.config_path.read_bytes() == before
    # --dry-run sends nothing and records nothing: it still shows the plan.
    assert project.run("probe", "new", "--max-cost", "5", "--dry-run").exit_code == 0 and emu.calls == []


@pytest.mark.parametrize("provider,model,transport", [
    ("openai", "gpt-5.2", "batch"), ("anthropic", "claude-opus-4-7", "batch"), ("gemini", "gemini-3-flash-preview", "batch"),
    ("openai-compatible", "qwen3.8-max", "sync"),
])
def test_a_document_refused_as_too_long_blocks_the_route_and_points_at_probe(
        project: Project, emu: Any, provider: str, model: str, transport: str) -> None:
    # The route's caps (the default row) are far above the model's real window: the long English
    # document is sent and refused; the short Chinese one fits.
    emu.set_windows({model: 500})
    setup(project, {"new": route(provider, model, transport=transport)})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=emu)
    assert result.exit_code == 2, result.output
    assert "route 'new'" in result.output and "longer than the model's context window" in result.output
    assert "batchrun probe new" in result.output
    status = {r["task_id"]: r["status"] for r in project.sql("SELECT task_id, status FROM cell_status WHERE route = 'new'")}
    assert status["t1"] == "blocked"  # a config problem: open, never a published zero
    types = {r["error_type"] for r in project.sql("SELECT error_type FROM results WHERE kind = 'invalid'")}
    assert types == {"context_too_long"}
    board = {r["route"]: r for r in project.sql("SELECT * FROM leaderboard")}
    assert board["new"]["all_tasks_overall"] is None and board["new"]["failed_n"] == 0


def test_emulator_window_control_and_cli_option(emu: Any) -> None:
    import urllib.request

    from batchrun.emulator.windows import DEFAULT_WINDOW, parse_window

    assert emu.window("claude-opus-4-8-20260101") >= 850_000 and emu.window("some-new-model") == DEFAULT_WINDOW
    req = urllib.request.Request(f"{emu.url}/_emulator/windows", data=json.dumps({"models/m": 0, "x": 77}).encode(), method="POST")
    with urllib.request.urlopen(req) as resp:
        assert json.loads(resp.read())["ok"]
    assert emu.window("m") is None and emu.window("x") == 77  # 0: no limit; matched on the normalised name
    assert parse_window("gpt-5.2=1_050_000") == ("gpt-5.2", 1_050_000)
    with pytest.raises(ValueError):
        parse_window("gpt-5.2")


def test_write_route_caps_replaces_a_hand_written_caps_line_and_refuses_what_it_cannot_edit(tmp_path: Any) -> None:
    from batchrun.protocol.config_write import write_route_caps
    from batchrun.base.errors import ConfigError

    path = tmp_path / "batchrun.toml"
    text = ('[routes."a"]\r\nprovider = "openai"\r\ncaps = { en = 40000, cjk = 12000 }  # a guess\r\nmodel = "m"\r\n\r\n'
            '[routes.b]\r\nprovider = "openai"\r\nmodel = "n"\r\n')
    path.write_bytes(text.encode())
    write_route_caps(path, "a", 123, 45, "caps probed 2026-01-01 by hand")
    assert path.read_bytes().decode() == text.replace("caps = { en = 40000, cjk = 12000 }  # a guess",
                                                      "# caps probed 2026-01-01 by hand\r\ncaps = { en = 123, cjk = 45 }")
    write_route_caps(path, "b", 7, 8, "caps probed 2026-01-02 by hand")  # the last table, CRLF kept
    assert path.read_bytes().decode().endswith('model = "n"\r\n# caps probed 2026-01-02 by hand\r\ncaps = { en = 7, cjk = 8 }\r\n')

    inline = tmp_path / "inline.toml"
    inline.write_text('[routes]\nx = { provider = "openai", model = "m" }\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        write_route_caps(inline, "x", 1, 2, "c")
    assert "by hand" in err.value.hint and "caps = { en = 1, cjk = 2 }" in err.value.hint
    assert inline.read_text(encoding="utf-8") == '[routes]\nx = { provider = "openai", model = "m" }\n'

    multiline = tmp_path / "multi.toml"
    original = '[routes.x]\nprovider = "openai"\ncaps.en = 5\ncaps.cjk = 6\n'
    multiline.write_text(original, encoding="utf-8")
    with pytest.raises(ConfigError):
        write_route_caps(multiline, "x", 1, 2, "c")
    assert multiline.read_text(encoding="utf-8") == original


# --- the CJK sample: mostly CJK text, not any document the CJK rule passes (issue 26) ----------------------

# An English report that quotes a Chinese sentence near its start: more than 20 ideographs in its
# first 4,000 characters (the protocol's rule gives it the cjk cap), almost all of it Latin text,
# and longer than the Chinese document.
QUOTING = ("Field notes, harbor audit.\nThe sign read: 港口起重机在凌晨三点十四分发生故障操作员是马拉风速达到\n"
           + "The inspector walked the quay and counted the bollards one by one, noting the rust.\n" * 120)
# The protocol's panel (no protocol key needed); the probe sends nothing to the judges.
PANEL_TOML = """\
[paths]
dataset = "data/tasks.json"
[judging]
panel = ["judge-a", "judge-g", "judge-q"]
[routes."new-model"]
provider = "gemini"
model = "gemini-3-flash-preview"  # served by the emulator, not in the caps table
base_url = "{url}"
api_key_env = "{key}"
[routes.judge-a]
provider = "anthropic"
model = "claude-sonnet-4-6"
base_url = "{url}"
api_key_env = "{key}"
[routes.judge-g]
provider = "gemini"
model = "gemini-2.5-flash"
base_url = "{url}"
api_key_env = "{key}"
[routes.judge-q]
provider = "openai"
model = "gpt-4.1"
base_url = "{url}/v1"
api_key_env = "{key}"
"""


def _probe_project(project: Project, emu: Any, docs: dict[str, str]) -> None:
    emu.set_windows({"gemini-3-flash-preview": WINDOW})
    for name, text in docs.items():
        project.doc(name, text)
    project.tasks([task(f"t{i}", f"What does {name} say?", name) for i, name in enumerate(docs, 1)])
    project.config_path = project.root / "batchrun.toml"
    project.config_path.write_text(PANEL_TOML.format(url=emu.url, key=KEY_ENV), encoding="utf-8")


def test_the_probe_s_cjk_sample_is_mostly_cjk_text_not_any_document_the_cjk_rule_passes(project: Project, emu: Any) -> None:
    assert is_cjk(QUOTING) and len(QUOTING) > len(ZH_DOC)
    _probe_project(project, emu, {"harbor.txt": EN_DOC, "quoting.txt": QUOTING, "zh.txt": ZH_DOC})
    r = project.run("probe", "new-model", "--json")
    assert r.exit_code == 0, r.output
    cjk = next(s for s in json.loads(r.stdout)["scripts"] if s["script"] == "cjk")
    assert cjk["sample"]["corpus_file"] == "zh.txt" and cjk["sample"]["cjk_share"] > 0.9
    # ~1 character a token: about the window in characters, not the ~4x an English sample gives.
    assert 0.8 * WINDOW < cjk["cap"] < 1.2 * WINDOW


def test_without_a_mostly_cjk_document_the_probe_says_so_and_suggests_and_writes_no_cjk_cap(project: Project, emu: Any) -> None:
    _probe_project(project, emu, {"harbor.txt": EN_DOC, "quoting.txt": QUOTING})
    r = project.run("probe", "new-model", "--write")
    assert r.exit_code == 0, r.output
    assert "no mostly-CJK document in the project (1 document(s) pass the protocol's CJK rule" in r.stdout
    assert "not measured, no cjk cap suggested" in r.stdout
    suggestion = re.search(r"^caps = \{ en = (\d+) \}$", r.stdout, re.M)
    assert suggestion, r.stdout
    text = project.config_path.read_text(encoding="utf-8")
    assert f"caps = {{ en = {suggestion.group(1)} }}" in text and "cjk =" not in text
    assert "cjk not measured (no suitable document), not written" in text
    caps = load_config(project.config_path).routes["new-model"].caps
    assert (caps.en, caps.cjk) == (int(suggestion.group(1)), 850_000)  # cjk: the default row, as before the probe
    row = project.sql("SELECT en_cap, cjk_cap, written FROM probes")[0]
    assert (row["en_cap"], row["cjk_cap"], row["written"]) == (int(suggestion.group(1)), None, 1)
