"""Every request batchrun sends fits the official SDKs' own request types (issue 25, item 3: the
request direction).

Whole refreshes (generation and judging) run through the real SDKs against the emulator, with
routes of every kind batchrun supports: OpenAI Chat Completions and Responses, an
OpenAI-compatible batch API, the sync (online) transport of each provider, Anthropic Message
Batches and Gemini Batch Mode. Then every line of every request file under jobs/, every body the
emulator received (batch lines and online calls alike, recorded by the responder), and every
``batches.create`` call batchrun made with the openai SDK are checked against the installed SDKs'
types: openai's ``CompletionCreateParamsNonStreaming``, ``ResponseCreateParamsNonStreaming`` and
``BatchCreateParams``; anthropic's ``MessageCreateParamsNonStreaming`` inside its batch
``Request``; google-genai's ``Content`` / ``GenerationConfig`` for the REST body. A TypedDict does
not say that other keys are refused (and the SDKs' pydantic models allow extra keys), so
``batchrun.emulator.schema.check`` counts every key outside the type as a violation.

Zero violations, except the protocol's one allowance, counted and checked apart: ``temperature``
in an Anthropic request under ``anthropic-version: 2023-06-01``. SDK 2.x types the API as of its
default version 2026-10-21, which removed the field; the protocol sends temperature 0.1, which
2023-06-01 still takes (provider-apis.md §3.6; ARCHITECTURE.md, "Anthropic API version"), as a
number from 0 to 1 (anthropic SDK 0.x's ``temperature: float`` in message_create_params.py,
"Ranges from 0.0 to 1.0").
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest
from typing_extensions import Required, TypedDict

from batchrun.protocol.config_file import load_config, parse_config
from batchrun.emulator import Emulator, builtin_responder
from batchrun.emulator.schema import Violation, check, dotted
from batchrun.providers import RequestSpec, get_adapter
from conftest import Project, route, task

from google.genai import types as gtypes  # noqa: E402  (after the project imports: heavy)


# --------------------------------------------------------------------------- the types


def chat_type() -> Any:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return CompletionCreateParamsNonStreaming


def responses_type() -> Any:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return ResponseCreateParamsNonStreaming


def messages_type() -> Any:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return MessageCreateParamsNonStreaming


def anthropic_request_type() -> Any:
    from anthropic.types.messages.batch_create_params import Request

    return Request


def batch_create_type() -> Any:
    from openai.types.batch_create_params import BatchCreateParams

    return BatchCreateParams


class OpenAIBatchLine(TypedDict, total=False):
    """The Batch API's request input object (developers.openai.com/api/reference, batch "The
    request input object": custom_id, method "POST", url, body); the SDK has no type for it."""

    custom_id: Required[str]
    method: Required[Literal["POST"]]
    url: Required[str]
    body: Required[dict]


class GeminiRequest(TypedDict, total=False):
    """A GenerateContentRequest in REST (proto-JSON) form, its messages google-genai's own types
    (the fields ``_GenerateContentParameters_to_mldev`` sends to the Gemini API)."""

    contents: Required[list[gtypes.Content]]
    generationConfig: gtypes.GenerationConfig
    systemInstruction: gtypes.Content
    safetySettings: list[gtypes.SafetySetting]
    tools: list[gtypes.Tool]
    toolConfig: gtypes.ToolConfig
    cachedContent: str


class GeminiLine(TypedDict, total=False):
    """A Batch Mode input-file line (ai.google.dev/gemini-api/docs/batch-mode: ``{"key", "request"}``)."""

    key: Required[str]
    request: Required[GeminiRequest]


# --------------------------------------------------------------------------- the checks

ALLOWANCE = "anthropic temperature under 2023-06-01"


def body_violations(kind: str, body: Any, *, api_version: str | None = None, allowances: Counter | None = None) -> list[str]:
    """Violations of one request body (what goes to the online endpoint, or a batch line's body)."""
    if kind in ("openai-chat", "compat-chat"):
        found = check(body, chat_type())
    elif kind == "openai-responses":
        found = check(body, responses_type())
    elif kind == "anthropic":
        found = check(body, messages_type())
        if isinstance(body, dict) and "temperature" in body and api_version == "2023-06-01":
            # The one allowance (module docstring): counted, and held to its own type and range.
            found = [v for v in found if v.path != ("temperature",)]
            temperature = body["temperature"]
            found += check(temperature, float, ("temperature",))
            if isinstance(temperature, (int, float)) and not 0 <= temperature <= 1:
                found.append(Violation("value", ("temperature",), "a number from 0 to 1", repr(temperature)))
            if allowances is not None:
                allowances[ALLOWANCE] += 1
    elif kind == "gemini":
        found = check(body, GeminiRequest)
    else:
        raise AssertionError(f"unknown kind {kind}")
    return [f"{kind}: {v.kind} at {dotted(v.path) or '(body)'} {v.expected} {v.got}".rstrip() for v in found]


def line_violations(kind: str, line: Any, endpoint_path: str | None = None, **kw: Any) -> list[str]:
    """Violations of one request-file line: its wrapper and its body."""
    if kind in ("openai-chat", "openai-responses", "compat-chat"):
        found = [f"{kind} line: {v.kind} at {dotted(v.path)}" for v in check(line, OpenAIBatchLine)]
        if isinstance(line, dict) and endpoint_path is not None and line.get("url") != endpoint_path:
            found.append(f"{kind} line: url {line.get('url')!r} is not the route's endpoint {endpoint_path!r}")
        return found + body_violations(kind, line.get("body") if isinstance(line, dict) else None, **kw)
    if kind == "anthropic":
        found = [f"anthropic line: {v.kind} at {dotted(v.path)}" for v in check(line, anthropic_request_type()) if v.path[:1] != ("params",)]
        return found + body_violations(kind, line.get("params") if isinstance(line, dict) else None, **kw)
    found = [f"gemini line: {v.kind} at {dotted(v.path)}" for v in check(line, GeminiLine) if v.path[:1] != ("request",)]
    return found + body_violations(kind, line.get("request") if isinstance(line, dict) else None, **kw)


def kind_of(provider: str, endpoint: str) -> str:
    if provider == "openai":
        return "openai-responses" if endpoint == "responses" else "openai-chat"
    return {"openai-compatible": "compat-chat", "anthropic": "anthropic", "gemini": "gemini"}[provider]


def file_violations(project: Project, allowances: Counter) -> tuple[list[str], set[tuple[str, str, str]]]:
    """Every line of every request file batchrun wrote, checked; and the (kind, transport, stage) seen."""
    config = load_config(project.config_path)
    problems: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for b in project.sql("SELECT route, stage, transport, request_file FROM batches"):
        r = config.routes[b["route"]]
        kind = kind_of(r.provider, r.endpoint)
        seen.add((kind, b["transport"], b["stage"]))
        adapter = get_adapter(r.provider)
        for n, raw in enumerate(Path(b["request_file"]).read_text(encoding="utf-8").split("\n"), start=1):
            if not raw:
                continue
            line = json.loads(raw)
            where = f"{b['request_file']}:{n}"
            endpoint = r.endpoint_path if kind not in ("anthropic", "gemini") else None
            problems += [f"{where}: {p}" for p in line_violations(kind, line, endpoint, api_version=r.api_version, allowances=allowances)]
            if b["transport"] == "sync":  # what the online transport sends for this line
                _, body = adapter.online_body(line)
                problems += [f"{where} (online body): {p}" for p in body_violations(kind, body, api_version=r.api_version)]
    return problems, seen


# --------------------------------------------------------------------------- the runs

# One project per panel: a judge panel is three judge routes, so three projects cover a judge of
# every kind. Contestants: every kind in the first.
PROJECTS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "contestants-of-every-kind": ({
        "oa-chat": route("openai", "gpt-4.1"),
        "oa-resp": route("openai", "gpt-5.5", endpoint="responses", reasoning=True),
        "oa-chat-sync": route("openai", "gpt-5.4", transport="sync", reasoning=True),
        "oa-resp-sync": route("openai", "gpt-5.1", endpoint="responses", transport="sync"),
        "compat-batch": route("openai-compatible", "qwen3.7-plus", completion_window="72h"),
        "compat-sync": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False),
        "ant-batch": route("anthropic", "claude-opus-4-8"),
        "ant-sync": route("anthropic", "claude-opus-4-6", transport="sync"),
        "gem-batch": route("gemini", "gemini-2.5-pro", reasoning=True),
        "gem-sync": route("gemini", "gemini-3.1-pro-preview", transport="sync"),
        "judge-a": route("anthropic", "claude-sonnet-4-6", role="judge", send_temperature=True),
        "judge-g": route("gemini", "gemini-2.5-flash", role="judge", send_temperature=True),
        "judge-q": route("openai-compatible", "qwen3.5-plus", role="judge", transport="sync"),
    }, ["judge-a", "judge-g", "judge-q"]),
    "openai-judges": ({
        "c": route("anthropic", "claude-opus-4-6"),
        "j-chat": route("openai", "gpt-4.1", role="judge"),
        "j-resp": route("openai", "gpt-5.5", endpoint="responses", role="judge"),
        "j-compat": route("openai-compatible", "deepseek-v3.2", role="judge"),
    }, ["j-chat", "j-resp", "j-compat"]),
    "online-judges": ({
        "c": route("gemini", "gemini-2.5-pro"),
        "j-chat": route("openai", "gpt-5.1", role="judge", transport="sync"),
        "j-ant": route("anthropic", "claude-sonnet-4-6", role="judge", transport="sync", send_temperature=True),
        "j-gem": route("gemini", "gemini-2.5-flash", role="judge", transport="sync", send_temperature=True),
    }, ["j-chat", "j-ant", "j-gem"]),
}


class Recorder:
    """A responder that keeps every request body the emulator answered, then answers as the
    built-in one does (its ``params`` is the body as received: a batch line's, or an online call's)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        self.seen.append(request)
        return builtin_responder(request)


def received_kind(request: dict[str, Any]) -> str:
    params = request["params"]
    if request["provider"] == "openai":
        return "openai-responses" if isinstance(params, dict) and "input" in params else "openai-chat"
    return {"dashscope": "compat-chat", "anthropic": "anthropic", "gemini": "gemini"}[request["provider"]]


@pytest.fixture
def creates(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Every ``batches.create`` batchrun makes with the openai SDK: (base URL, keyword arguments)."""
    from openai.resources.batches import Batches

    calls: list[tuple[str, dict[str, Any]]] = []
    original = Batches.create

    def recording(self: Any, **kwargs: Any) -> Any:
        calls.append((str(self._client.base_url), dict(kwargs)))
        return original(self, **kwargs)

    monkeypatch.setattr(Batches, "create", recording)
    return calls


def make_project(project: Project, routes: dict[str, Any], panel: list[str]) -> Project:
    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. Repairs took nine days.\n" * 3)
    project.tasks([
        task("t1", "When did the harbor crane fail and who was the operator?", "harbor.txt", [(60, "failed at 03:14 on Tuesday"), (40, "operator was Mara Quist")]),
    ])
    project.config(routes=routes, panel=panel)
    return project


@pytest.mark.parametrize("name", list(PROJECTS))
def test_every_request_batchrun_sends_fits_the_sdk_types(project: Project, creates: list, name: str) -> None:
    routes, panel = PROJECTS[name]
    make_project(project, routes, panel)
    recorder = Recorder()
    with Emulator(latency=0.0, responder=recorder) as emu:
        result = project.run("refresh", "--interval", "0", emulator=emu)
    assert result.exit_code == 0, result.output

    allowances: Counter = Counter()
    problems, seen = file_violations(project, allowances)
    # Every route kind of this project, in each stage it has, wrote request files (no vacuous pass).
    config = load_config(project.config_path)
    expected = {(kind_of(r.provider, r.endpoint), r.transport, "judge" if n in panel else "gen") for n, r in config.routes.items()}
    assert expected <= seen, expected - seen

    for request in recorder.seen:  # what the emulator received, online and in batches
        version = "2023-06-01" if request["provider"] == "anthropic" else None  # the adapter's pinned default
        problems += [f"received {request['provider']} {request['custom_id']}: {p}"
                     for p in body_violations(received_kind(request), request["params"], api_version=version)]
    assert len(recorder.seen) >= len(project.sql("SELECT custom_id FROM requests"))

    compatible = get_adapter("openai-compatible").base_url_suffix
    for base_url, kwargs in creates:
        params = {k: v for k, v in kwargs.items() if not k.startswith("extra_") and k != "timeout"}
        found = check(params, batch_create_type())
        if base_url.rstrip("/").endswith(compatible):
            # DashScope's window is 24h-336h, not OpenAI's Literal["24h"] (dashscope.py's sources).
            found = [v for v in found if v.path != ("completion_window",)]
        problems += [f"batches.create at {base_url}: {v.kind} at {dotted(v.path)} {v.expected} {v.got}" for v in found]
    assert creates or not any(k[0].startswith(("openai", "compat")) and k[1] == "batch" for k in seen)

    assert problems == []
    # The allowance is used exactly where the protocol needs it: Anthropic requests that carry
    # temperature (the judges'), under 2023-06-01.
    sent_with_temperature = sum(1 for b in project.sql("SELECT route, request_file FROM batches")
                                if config.routes[b["route"]].provider == "anthropic"
                                for raw in Path(b["request_file"]).read_text(encoding="utf-8").splitlines()
                                if "temperature" in json.loads(raw)["params"])
    assert allowances[ALLOWANCE] == sent_with_temperature


# --------------------------------------------------------------------------- the check can fail


def real_lines() -> dict[str, tuple[Any, dict[str, Any]]]:
    """One real request line per kind, built by batchrun's own adapters."""
    config_routes = {
        "openai-chat": route("openai", "gpt-4.1"),
        "openai-responses": route("openai", "gpt-5.5", endpoint="responses"),
        "compat-chat": route("openai-compatible", "qwen3.7-plus"),
        "anthropic": route("anthropic", "claude-sonnet-4-6"),
        "gemini": route("gemini", "gemini-2.5-pro"),
    }
    out = {}
    for kind, spec in config_routes.items():
        r = parse_config({"protocol": "custom", "routes": {kind: spec}}, Path("/nonexistent/batchrun.json")).routes[kind]
        out[kind] = (r, get_adapter(r.provider).build_line(r, RequestSpec("c-1", r.model, "Question: q\n\nDocument:\nd", 64, 0.1)))
    return out


def body_of(kind: str, line: dict[str, Any]) -> dict[str, Any]:
    return line["params"] if kind == "anthropic" else line["request"] if kind == "gemini" else line["body"]


def _drop_required(kind: str, line: dict[str, Any]) -> None:
    if kind == "openai-responses":  # ResponseCreateParams requires nothing: the line's own url then
        line.pop("url")
    else:
        body_of(kind, line).pop("contents" if kind == "gemini" else "messages")


BREAKAGES = {
    "an extra key": lambda kind, line: body_of(kind, line).update(foo=1),
    "an extra key in a message": lambda kind, line: (body_of(kind, line).get("messages") or body_of(kind, line).get("contents"))[0].update(foo=1)
    if kind != "openai-responses" else body_of(kind, line).update(input=[{"role": "user", "content": "x", "foo": 1}]),
    "a wrong type": lambda kind, line: body_of(kind, line).update(**({"generationConfig": {"maxOutputTokens": "64"}} if kind == "gemini" else
                                                                     {"max_output_tokens": "64"} if kind == "openai-responses" else
                                                                     {"max_tokens": "64"})),
    "a missing required field": _drop_required,
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
@pytest.mark.parametrize("kind", ["openai-chat", "openai-responses", "compat-chat", "anthropic", "gemini"])
def test_a_deliberately_broken_line_fails_the_check(project: Project, kind: str, breakage: str) -> None:
    r, line = real_lines()[kind]
    version = r.api_version
    assert line_violations(kind, line, api_version=version) == []  # the line as batchrun writes it passes
    broken = json.loads(json.dumps(line))
    BREAKAGES[breakage](kind, broken)
    found = line_violations(kind, broken, api_version=version)
    assert found, f"{breakage} in a {kind} line was not caught"
    # And the file-level check used on real runs fails on a request file holding that line.
    jobs = project.root / "jobs" / "000001-x-gen"
    jobs.mkdir(parents=True)
    (jobs / "requests.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(broken) + "\n", encoding="utf-8")
    lines = [json.loads(x) for x in (jobs / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [bool(line_violations(kind, x, api_version=version)) for x in lines] == [False, True]


def test_the_temperature_allowance_is_only_for_anthropic_2023_06_01() -> None:
    r, line = real_lines()["anthropic"]
    assert "temperature" in line["params"]
    counted: Counter = Counter()
    assert line_violations("anthropic", line, api_version="2023-06-01", allowances=counted) == [] and counted[ALLOWANCE] == 1
    # Under the SDK's own default version the type rules: temperature is an unknown field there.
    assert any("unknown at temperature" in p for p in line_violations("anthropic", line, api_version="2026-10-21"))
    hot = json.loads(json.dumps(line))
    hot["params"]["temperature"] = 1.5
    assert line_violations("anthropic", hot, api_version="2023-06-01")  # held to 0-1 even when allowed


def test_the_types_are_the_sdks_own() -> None:
    """The field sets are not written here: they come from the installed SDKs."""
    assert "max_completion_tokens" in typing.get_type_hints(chat_type())
    assert "max_output_tokens" in typing.get_type_hints(responses_type())
    assert "temperature" not in typing.get_type_hints(messages_type())  # anthropic SDK 2.x: see the module docstring
    assert gtypes.GenerationConfig.model_config.get("extra") == "forbid"
