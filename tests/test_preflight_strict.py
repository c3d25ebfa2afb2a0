"""Issue 25 item 5, last sentence: against the strict emulator, `submit` catches a wrong model id,
a wrong key and a parameter the model's API does not take, each in under 10 s and before any
request file is uploaded, naming the provider's own words and the fix.

Nothing here is fault injection: the refusals are the emulator's own rules, modelled on the real
APIs (batchrun/emulator/*_rules.py, models.py): its model tables, the keys it was started with
(`Emulator(keys=...)`, `--key`), and what each API refuses. Through the CLI, the real SDKs and
real HTTP, each project holding one route (so "nothing uploaded" is about that route).

The parameter: batchrun's config has no free-form request fields, so a config cannot add an
unknown one; what it can do is make batchrun send a field the model's API does not take. The
real way tested here: an `openai-compatible` route pointed at OpenAI's own API for a gpt-5 model
(a relay, or the generic kind picked for OpenAI). That kind sends the completion budget as
`max_tokens` (what compatible servers read), and OpenAI's reasoning models refuse it: "Unsupported
parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
(the issue threads cited in openai_rules). And the protocol's own parameter: temperature sent
(`send_temperature = true`) to a model whose API refuses it.

Also: `batchrun --emulator URL preflight` on the shipped batchrun.toml reports every route, the
routes the emulator cannot serve (their real providers are not DashScope) with a fix that says so.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from batchrun.emulator import Emulator
from batchrun.emulator.openai_rules import masked_key
from conftest import KEY_ENV, Project, route, task

# What a route may send before it uploads (the preflight's online request, its batch listing):
# everything else that POSTs is an upload or a create (files, batches, Gemini's resumable upload).
UPLOAD_OR_CREATE = re.compile(r"/files$|/batches$|^/upload/|:batchGenerateContent$")
LIMIT = 10.0  # seconds: issue 25 item 5
SECRET = "test-key-not-secret"  # conftest's value of the key variable: not one the keyed emulator takes
RIGHT_KEY = "sk-emulator-right-key-0123456789"
DOC = "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist.\n" * 4


@pytest.fixture
def emu() -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    yield e
    e.stop()


@pytest.fixture
def keyed() -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, keys=[RIGHT_KEY]).start()
    yield e
    e.stop()


def one_route(project: Project, bad: dict[str, Any]) -> Project:
    project.doc("harbor.txt", DOC)
    project.tasks([task(f"t{i}", f"Question {i}: when did the crane fail?", "harbor.txt") for i in (1, 2)])
    project.config(routes={"bad": bad}, panel=[])
    return project


def submit_is_stopped(project: Project, emu: Emulator, words: str, fix: str, *, rehearsal: bool = True) -> str:
    """`submit` (a rehearsal, or a real run at the emulator's address): the route refused by its
    preflight within LIMIT seconds, its request file written and nothing uploaded or created.
    The refusal's line on stderr."""
    started = time.monotonic()
    r = project.run("submit", emulator=emu if rehearsal else None)
    took = time.monotonic() - started
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and took < LIMIT, (took, r.output)
    line = next((x for x in r.stderr.splitlines() if x.startswith("preflight: bad → ")), "")
    assert line.startswith(f"preflight: bad → refused: {words}"), r.stderr
    assert f"Fix: {fix}" in line, line
    assert "held" in r.stdout and "preflight of route 'bad' refused" in r.stdout
    sent = [c for c in emu.calls if c["method"] == "POST" and UPLOAD_OR_CREATE.search(c["path"])]
    assert sent == [], sent
    (batch,) = project.sql("SELECT status, request_file FROM batches")
    assert batch["status"] == "planned" and Path(batch["request_file"]).stat().st_size > 0
    (row,) = project.sql("SELECT outcome, message, fix FROM preflights")
    assert row["outcome"] == "refused" and row["message"].startswith(words) and fix in row["fix"]
    return line


# --- a wrong model id ---------------------------------------------------------------------------

WRONG_MODELS = {
    # provider: (the route, what the provider says)
    "openai": (route("openai", "gpt-5-5"), "The model `gpt-5-5` does not exist or you do not have access to it."),
    # Anthropic's ids are hyphenated: the dotted spelling (the paper's display name) is refused.
    "anthropic": (route("anthropic", "claude-opus-4.8"), "model: claude-opus-4.8"),
    # There is no bare gemini-3.1 (models.py): Gemini 3.1 Pro is gemini-3.1-pro-preview.
    "gemini": (route("gemini", "gemini-3.1"), "models/gemini-3.1 is not found for API version v1, or is not supported for generateContent."),
    "openai-compatible": (route("openai-compatible", "qwen3.7-plus-latest"),
                          "The model `qwen3.7-plus-latest` does not exist or you do not have access to it."),
}


@pytest.mark.parametrize("provider", sorted(WRONG_MODELS))
def test_a_wrong_model_id_is_caught_before_any_upload(provider: str, project: Project, emu: Emulator) -> None:
    bad, words = WRONG_MODELS[provider]
    one_route(project, bad)
    line = submit_is_stopped(project, emu, words, 'Correct model under [routes."bad"]')
    # A rehearsal: the fix also says the emulator's tables may lack an id that is right.
    assert f"start the emulator with --model {bad['model']}" in line


# --- a wrong key ----------------------------------------------------------------------------------

WRONG_KEYS = {
    # OpenAI quotes the wrong key masked (its first 8 and last 4 characters): redacted whole.
    "openai": (route("openai", "gpt-5.5"),
               "Incorrect API key provided: [REDACTED]. You can find your API key at https://platform.openai.com/account/api-keys."),
    "anthropic": (route("anthropic", "claude-opus-4-8"), "invalid x-api-key"),
    "gemini": (route("gemini", "gemini-2.5-pro"), "API key not valid. Please pass a valid API key."),
    "openai-compatible": (route("openai-compatible", "qwen3.7-plus"), "Incorrect API key provided."),
}


@pytest.mark.parametrize("provider", sorted(WRONG_KEYS))
def test_a_wrong_key_is_caught_before_any_upload_and_never_kept(provider: str, project: Project, keyed: Emulator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    bad, words = WRONG_KEYS[provider]
    one_route(project, bad)
    submit_is_stopped(project, keyed, words, f"Check the key in {KEY_ENV} for route 'bad'")
    # Neither the key nor the masked echo of it (a part of it) is in any file of the project:
    # state.db (its WAL checkpointed), jobs/, results/.
    project.sql("PRAGMA wal_checkpoint(TRUNCATE)")
    for path in (p for p in project.root.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", "replace")
        assert SECRET not in text and masked_key(SECRET) not in text, path
    # With the right key, the route passes and is sent.
    monkeypatch.setenv(KEY_ENV, RIGHT_KEY)
    r = project.run("submit", emulator=keyed)
    assert r.exit_code == 0 and "preflight bad → ok" in r.stderr, r.output


# --- a parameter the model's API does not take ---------------------------------------------------

def test_a_parameter_the_api_does_not_take_is_caught_before_any_upload(project: Project, emu: Emulator) -> None:
    """An `openai-compatible` route at OpenAI's own API (here the emulator's OpenAI part, its /v1)
    for gpt-5.4: the kind sends `max_tokens`, which OpenAI's reasoning models refuse. A real run
    at the emulator's address (a rehearsal would send the route to DashScope's part)."""
    one_route(project, route("openai-compatible", "gpt-5.4", base_url=f"{emu.url}/v1"))
    submit_is_stopped(project, emu, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                      "Use 'max_completion_tokens' instead.", 'Set provider (and base_url) under [routes."bad"]', rehearsal=False)
    # Fixed as the message says (the kind whose API this is): the same model passes and is sent.
    project.config(routes={"bad": route("openai", "gpt-5.4", base_url=f"{emu.url}/v1")}, panel=[])
    r = project.run("submit")
    assert r.exit_code == 0 and "preflight bad → ok" in r.stderr, r.output


@pytest.mark.parametrize("bad, words", [
    (route("openai", "gpt-5.4", send_temperature=True),
     "Unsupported value: 'temperature' does not support 0.1 with this model. Only the default (1) value is supported."),
    (route("anthropic", "claude-opus-4-8", send_temperature=True), "`temperature` is deprecated for this model."),
], ids=["openai", "anthropic"])
def test_temperature_sent_to_a_model_that_refuses_it_is_caught_before_any_upload(bad: dict[str, Any], words: str,
                                                                                project: Project, emu: Emulator) -> None:
    one_route(project, bad)
    submit_is_stopped(project, emu, words, 'Set send_temperature = false under [routes."bad"]')


# --- the shipped config, rehearsed ---------------------------------------------------------------

def test_preflight_of_the_shipped_config_on_the_emulator_reports_every_route(tmp_path: Path, emu: Emulator) -> None:
    """`batchrun --emulator URL preflight` on the repository's batchrun.toml (no dataset, no keys:
    a rehearsal needs none): every route is reported, none crashes; the routes whose real provider
    the emulator does not play (Zhipu, Volcengine Ark, MiniMax; deepseek-v4-pro, which its
    DashScope tables lack) are refused as unknown models with a fix that says how to rehearse
    them, and the others pass."""
    import cliproc

    shipped = Path(__file__).resolve().parents[1] / "batchrun.toml"
    config = tmp_path / "batchrun.toml"
    config.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    r = cliproc.run(["--config", str(config), "--emulator", emu.url, "preflight"], timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    lines = {line.split(" → ")[0]: line for line in r.stdout.splitlines()}
    import tomllib

    routes = tomllib.loads(shipped.read_text(encoding="utf-8"))["routes"]
    assert set(lines) == set(routes)
    unserved = {name for name, line in lines.items() if " → refused: " in line}
    assert unserved == {"deepseek-v4", "glm-5.2", "doubao-seed-2.1", "minimax-m2.7"}, r.stdout
    for name in unserved:
        assert f"does not exist or you do not have access to it. Fix: Correct model under [routes.\"{name}\"]" in lines[name]
        assert f"start the emulator with --model {routes[name]['model']}" in lines[name]
    assert all(" → ok (" in lines[n] for n in set(routes) - unserved)


def test_a_batch_endpoint_the_emulated_provider_does_not_take_is_refused_with_the_fix(project: Project) -> None:
    """Zhipu's batch lines go to /v4/chat/completions; rehearsed, the route goes to DashScope's
    compatible mode, which takes only its own endpoints: the create is refused (nothing created)
    with DashScope's words and a hint to fix the config, not to wait. That route waits for its
    fix; the routes after it go on (one refused route used to stop every later one, every night):
    exit 2, as for a refused preflight."""
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, models=["glm-5.2"]).start()
    try:
        one_route(project, route("openai-compatible", "glm-5.2", base_url="https://open.bigmodel.cn/api/paas/v4",
                                 endpoint_path="/v4/chat/completions"))
        project.config(routes={"bad": route("openai-compatible", "glm-5.2", base_url="https://open.bigmodel.cn/api/paas/v4",
                                            endpoint_path="/v4/chat/completions"),
                               "good": route("openai", "gpt-5.5")}, panel=[])
        r = project.run("submit", emulator=e)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert "endpoint '/v4/chat/completions' is not supported" in r.stderr
        assert "Hint: The provider refused the call itself: fix what its message names for route 'bad'" in r.stderr
        held = [line for line in r.stdout.splitlines() if line.startswith("  held ")]
        assert len(held) == 1 and "-bad-gen" in held[0] and "fix what its message names for route 'bad'" in held[0], r.stdout
        # Uploaded, not created: the next run creates it from the same file once the config is fixed.
        statuses = {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")}
        assert statuses == {"bad": "uploaded", "good": "in_flight"}, statuses
        # Again: the same answer (nothing created twice), the other route's batch left alone.
        r = project.run("submit", emulator=e)
        assert r.exit_code == 2 and "endpoint '/v4/chat/completions' is not supported" in r.stdout, r.output
        assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == statuses
        # A night's refresh finishes the other route and ends, naming the one waiting for its fix.
        r = project.run("refresh", "--timeout", "60s", "--interval", "1s", emulator=e)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"bad": "uploaded",
                                                                                                        "good": "collected"}
    finally:
        e.stop()


def test_a_refresh_with_a_refused_route_still_waits_for_another_route_s_retries(project: Project,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A route held for its refused create does not end the night while another route's failed
    requests back off: refresh waits for them, says when the next attempt is (a line off a
    terminal too), sends them and collects them (it used to end at once, exit 2, and the retries
    waited, silent, for a later run)."""
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "0.02")  # a batch retry's backoff ~1.2-1.8 s
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, models=["glm-5.2"]).start()
    try:
        one_route(project, route("openai", "gpt-5.5"))  # the documents and tasks
        project.config(routes={"bad": route("openai-compatible", "glm-5.2", base_url="https://open.bigmodel.cn/api/paas/v4",
                                            endpoint_path="/v4/chat/completions"),
                               "good": route("openai", "gpt-5.5")}, panel=[])
        e.add_fault({"kind": "expire", "complete_fraction": 0.5, "model": "gpt-5.5"})  # one of good's two tasks runs
        r = project.run("refresh", "--timeout", "60s", "--interval", "1s", emulator=e)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert re.search(r"1 request\(s\) back off after a failure: next attempt at \d\d:\d\d:\d\d \(in \d+s\)", r.stderr), r.stderr
        states = {(c["route"], c["task_id"]): c["status"] for c in project.sql("SELECT route, task_id, status FROM cell_status")}
        assert {t: s for (rt, t), s in states.items() if rt == "good"} == {"t1": "ok", "t2": "ok"}, states
        assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches WHERE route = 'bad'")} == {"bad": "uploaded"}
        # The refused create is asked once in the run, not again every round (the review found 15
        # in one refresh), and said once as it happens and once in refresh's `held` line.
        creates = [c for c in e.calls if c.get("method") == "POST" and c.get("path") == "/compatible-mode/v1/batches"]
        assert len(creates) == 1, len(creates)
        assert r.stderr.count("endpoint '/v4/chat/completions' is not supported") == 2, r.stderr
    finally:
        e.stop()
