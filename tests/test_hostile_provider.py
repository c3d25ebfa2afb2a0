"""Issue 13, items 1-4: a broken or hostile provider's output never stops the project.

Through the CLI, the real SDKs and the emulator (in process, latency 0), whose faults make it
misbehave on purpose: `corrupt_line` (a result line written as given), `mangle_json` (a batch
object rewritten: no id, fields of the wrong type), `alias_batch` (an
Anthropic batch also listed under a hostile id), `omit_header` (a response without a header),
`truncate` (a download cut inside its last line). A scripted responder gives the answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from batchrun.run.collect import MAX_STORED_CHARS
from batchrun.emulator import Emulator
from batchrun.run.poll import MAX_DOWNLOAD_ATTEMPTS
from conftest import batch_requests, Project, route, task

JUDGE_JSON = '{"points_awarded":[60,40],"total":100}'
DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
       "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 3
TASKS = ["p1", "p2", "p3", "p4", "p5"]
BIG = "[[BIG]]"  # a question with this marker gets the responder's long answer

BATCH_ROUTES = {
    "openai": route("openai", "gpt-5.5"),
    "anthropic": route("anthropic", "claude-sonnet-4-6"),
    "gemini": route("gemini", "gemini-2.5-pro"),
}


class Responder:
    """Short answers; `long_answer` for questions marked BIG; the verdict for judges (whose
    prompts are kept)."""

    def __init__(self, long_answer: str = "") -> None:
        self.long_answer = long_answer
        self.judge_prompts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Any:
        prompt = request["prompt"]
        if prompt.startswith("STRICT grader"):
            with self.lock:
                self.judge_prompts.append(prompt)
            return JUDGE_JSON
        if BIG in prompt:
            return self.long_answer
        return f"ANSWER from {request['model']}: the crane failed at 03:14 on Tuesday; Mara Quist."


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def responder() -> Responder:
    return Responder()


@pytest.fixture
def emu(responder: Responder) -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=responder).start()
    yield e
    e.stop()


def setup(project: Project, routes: dict[str, Any], *, big: tuple[str, ...] = (), panel: list[str] | None = None,
          tasks: list[str] = TASKS, **sections: Any) -> Project:
    project.doc("harbor.txt", DOC)
    project.tasks([task(t, f"{BIG if t in big else ''}Question {t}: when did the crane fail?", "harbor.txt") for t in tasks])
    project.config(routes=routes, panel=panel or [], **sections)
    return project


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


def ids(project: Project, stage: str = "gen") -> dict[str, str]:
    return {r["task_id"]: r["custom_id"] for r in project.sql("SELECT task_id, custom_id FROM requests WHERE stage = ?", [stage])}


def kinds(project: Project) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in project.sql("SELECT q.task_id, r.kind FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                         "WHERE q.stage = 'gen' ORDER BY r.id"):
        out.setdefault(r["task_id"], []).append(r["kind"])
    return out


def tree(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` outside `skip`, with its size and mtime."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip or skip in here.parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = here / name
            if p == skip:
                continue
            st = p.lstat()
            found[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def inside(project: Project) -> None:
    """Every file batchrun wrote under the project resolves inside it."""
    root = project.root.resolve()
    for p in project.root.rglob("*"):
        assert root in p.resolve().parents, p


# --- item 1: a line that is JSON but not a result, or no JSON at all -----------------------------------

def wrong_shape(provider: str) -> str:
    """A line naming its request whose result field has the wrong type (a string)."""
    return {
        "openai": '{"id":"batch_req_x","custom_id":"$CUSTOM_ID","response":"oops","error":null}',
        "anthropic": '{"custom_id":"$CUSTOM_ID","result":"oops"}',
        "gemini": '{"key":"$CUSTOM_ID","response":"oops"}',
    }[provider]


@pytest.mark.parametrize("provider", list(BATCH_ROUTES))
def test_malformed_result_lines_are_per_request_failures_never_a_crash(project: Project, emu: Any, provider: str) -> None:
    setup(project, {"r": BATCH_ROUTES[provider]})
    ok(project.run("plan", emulator=emu))
    cid = ids(project)
    deep = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError
    for t, line in (("p1", "[1,2,3]"), ("p2", "null"), ("p3", '"hello"'), ("p4", wrong_shape(provider)), ("p5", deep)):
        emu.add_fault({"kind": "corrupt_line", "custom_id": cid[t], "line": line})

    ok(project.run("submit", emulator=emu))
    ok(project.run("poll", emulator=emu))
    first = ok(project.run("collect", emulator=emu), 2)  # no exception; the batch is collected
    assert project.sql("SELECT status FROM batches") == [{"status": "collected"}]
    assert "skipped 4 unreadable line(s)" in first.output
    # The line that names its request is that request's infrastructure failure, raw line kept;
    # the lines that name none leave their requests without a line: 'missing', resubmitted.
    assert kinds(project) == {"p1": ["missing"], "p2": ["missing"], "p3": ["missing"], "p4": ["transient"], "p5": ["missing"]}
    # Their rows go in in custom_id order (the order collect wrote them in when it read the
    # batch's requests through batch_requests' key; it reads them in rowid order now).
    missing = [r["custom_id"] for r in project.sql("SELECT custom_id FROM results WHERE kind = 'missing' ORDER BY id")]
    assert missing == sorted(missing) and len(missing) == 4
    bad = project.sql("SELECT * FROM results WHERE custom_id = ?", [cid["p4"]])[0]
    assert bad["error_type"] == "malformed" and "not an object" in bad["error_message"]
    assert json.loads(bad["raw_json"]) == json.loads(wrong_shape(provider).replace("$CUSTOM_ID", cid["p4"]))
    assert {r["state"] for r in project.sql("SELECT state FROM request_status")} == {"pending"}  # never a zero

    # An honest provider the next time: the five requests go out once more and the route completes.
    ok(project.run("submit", emulator=emu))
    assert project.sql("SELECT n_requests FROM batches ORDER BY seq")[-1]["n_requests"] == 5
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), 0)
    assert {t: k[-1] for t, k in kinds(project).items()} == {t: "ok" for t in TASKS}


def test_a_lone_surrogate_in_an_answer_is_stored_replaced_not_a_crash(project: Project, emu: Any) -> None:
    """JSON allows "\\ud800"; Python decodes it to a lone surrogate, which SQLite cannot store."""
    setup(project, {"r": BATCH_ROUTES["anthropic"]}, tasks=["p1", "p2"])
    ok(project.run("plan", emulator=emu))
    line = ('{"custom_id":"$CUSTOM_ID","result":{"type":"succeeded","message":{"content":[{"type":"text",'
            '"text":"Mara Quist \\ud800 at 03:14 \\ud83d\\ude00"}],"stop_reason":"end_turn","usage":{"input_tokens":5}}}}')
    emu.add_fault({"kind": "corrupt_line", "custom_id": ids(project)["p1"], "line": line})
    ok(project.run("submit", emulator=emu))
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), 0)
    row = project.sql("SELECT kind, text FROM results WHERE custom_id = ?", [ids(project)["p1"]])[0]
    assert row == {"kind": "ok", "text": "Mara Quist \ufffd at 03:14 \U0001F600"}


def test_gemini_upload_without_upload_url_waits_for_a_later_round(project: Project, emu: Any) -> None:
    setup(project, {"r": BATCH_ROUTES["gemini"]})
    emu.add_fault({"kind": "omit_header", "header": "X-Goog-Upload-URL", "count": -1})
    held = ok(project.run("submit", emulator=emu), 2)  # a classified provider error: the batch waits (exit 2)
    assert "held 1" in held.output and "X-Goog-Upload-URL" in held.output
    assert project.sql("SELECT status FROM batches") == [{"status": "planned"}]

    emu.clear_faults()
    ok(project.run("refresh", "--interval", "0.01", emulator=emu))


# --- item 2: a long last line is complete; a file cut every time is fetched a bounded number of times -----

@pytest.mark.parametrize("provider", list(BATCH_ROUTES))
def test_a_valid_last_line_over_one_mib_is_complete(project: Project, responder: Responder, emu: Any, provider: str) -> None:
    responder.long_answer = "é" * 800_000  # ~1.6 MB of UTF-8 in one line, under the stored cap
    setup(project, {"r": BATCH_ROUTES[provider]}, big=("p5",))  # the last line of the file
    ok(project.run("submit", emulator=emu))
    polled = ok(project.run("poll", emulator=emu))
    assert "0 batch(es) in flight, 1 downloaded" in polled.output
    downloads = [c for c in emu.calls if c["method"] == "GET" and ("content" in c["path"] or c["path"].endswith(("/results", ":download")))]
    assert len(downloads) == 1  # fetched once, never again
    ok(project.run("collect", emulator=emu), 0)
    big = project.sql("SELECT text, truncated FROM results WHERE custom_id = ?", [ids(project)["p5"]])[0]
    assert (big["text"], big["truncated"]) == (responder.long_answer, None)


def test_a_file_truncated_every_time_is_fetched_a_bounded_number_of_times_then_resubmitted(project: Project, emu: Any) -> None:
    setup(project, {"r": BATCH_ROUTES["openai"]}, tasks=["p1", "p2", "p3", "p4"])
    emu.add_fault({"kind": "truncate", "provider": "openai", "count": -1})
    first = ok(project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=emu), 2)

    batches = project.sql("SELECT * FROM batches ORDER BY seq")
    # The first batch's last line was never readable; its request was resubmitted (three times per
    # run, each batch cut again), then waits for the next run, named with the reason.
    assert len(batches) == 4 and [b["n_requests"] for b in batches] == [4, 1, 1, 1]
    assert all((b["download_attempts"], b["download_truncated"]) == (MAX_DOWNLOAD_ATTEMPTS, 1) for b in batches)
    downloads = [c for c in emu.calls if c["method"] == "GET" and c["path"].endswith("/content")]
    assert len(downloads) == 4 * MAX_DOWNLOAD_ATTEMPTS
    assert kinds(project) == {"p1": ["ok"], "p2": ["ok"], "p3": ["ok"], "p4": ["missing"] * 4}
    assert "result download still truncated after 15 attempt(s)" in first.output
    assert "waiting: route 'r': 1 cell(s)" in first.output and "truncated" in first.output.split("waiting: ", 1)[1]
    status = ok(project.run("status", emulator=emu))
    assert f"truncated: batch {batches[-1]['id']} (r)" in status.output

    emu.clear_faults()  # the provider (or the proxy in between) is fixed
    ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    assert kinds(project)["p4"] == ["missing"] * 4 + ["ok"]
    assert "truncated" not in ok(project.run("status", emulator=emu)).output


# --- item 3: a provider's id never leads outside the project --------------------------------------------------

def test_a_hostile_batch_id_in_a_listing_writes_nothing_outside_the_project(project: Project, emu: Any, tmp_path: Path) -> None:
    setup(project, {"r": BATCH_ROUTES["anthropic"]})
    # The create's answer is lost, so submit lists the provider's batches to adopt its own; the
    # listing shows it a second time under a traversal id (jobs/<batch>/candidate-x/../../../../).
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/messages/batches$"})
    emu.add_fault({"kind": "alias_batch", "id": "x/../../../../PWNED"})
    before = tree(tmp_path, project.root)

    adopted = ok(project.run("submit", emulator=emu))
    assert "adopted 1" in adopted.output
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), 0)

    assert tree(tmp_path, project.root) == before  # nothing written outside the project
    inside(project)
    batch = project.sql("SELECT * FROM batches")[0]
    candidates = [p.name for p in Path(batch["dir"]).iterdir() if p.name.startswith("candidate-")]
    assert candidates == ["candidate-x%2F..%2F..%2F..%2F..%2FPWNED"]
    assert len(batch_requests(emu)) == 5  # adopted, never created twice


# --- item 4: what is stored per answer is capped; the whole line stays on disk ---------------------------------

def test_a_huge_answer_is_stored_cut_with_the_whole_line_on_disk(project: Project, responder: Responder, emu: Any) -> None:
    responder.long_answer = "Mara Quist operated the crane. " + "".join(f"{i:07d} " for i in range(375_000))  # ~3 MB
    setup(project, {"gpt": BATCH_ROUTES["openai"], "judge": route("anthropic", "claude-sonnet-4-6")},
          big=("p1",), panel=["judge"], tasks=["p1", "p2"])
    ok(project.run("refresh", "--interval", "0.01", emulator=emu))

    row = project.sql("SELECT * FROM results WHERE custom_id = ?", [ids(project)["p1"]])[0]
    assert (row["kind"], row["truncated"]) == ("ok", 1)
    assert row["text"] == responder.long_answer[:MAX_STORED_CHARS]
    pointer = json.loads(row["raw_json"])["batchrun_cut"]  # valid JSON: where the whole line is
    raw = Path(pointer["file"]).read_bytes().split(b"\n")[pointer["line"] - 1]
    assert (len(raw), hashlib.sha256(raw).hexdigest()) == (pointer["bytes"], pointer["sha256"])
    assert responder.long_answer in json.loads(raw)["response"]["body"]["choices"][0]["message"]["content"]
    # The judge graded the first 5000 characters, as the protocol says for every answer.
    assert any(responder.long_answer[:5000] + "\n" in p for p in responder.judge_prompts)
    assert project.sql("SELECT count(*) AS n FROM results WHERE truncated = 1")[0]["n"] == 1
    db_bytes = sum(p.stat().st_size for p in project.root.glob("state.db*"))
    assert db_bytes < 3 * MAX_STORED_CHARS  # not 2 x 3 MB (text and raw line)


# --- item 5: all of it in one refresh ---------------------------------------------------------------------------

def test_a_whole_refresh_against_a_hostile_provider_completes_inside_the_project(project: Project, responder: Responder, emu: Any,
                                                                                  tmp_path: Path) -> None:
    responder.long_answer = "Mara Quist. " * (3 << 17)  # 1.5 MiB: the last line of every contestant's file
    setup(project, {"gpt": BATCH_ROUTES["openai"], "claude": route("anthropic", "claude-opus-4-8"), "gem": BATCH_ROUTES["gemini"],
                    "judge": route("anthropic", "claude-sonnet-4-6")},
          big=("p4",), panel=["judge"], tasks=["p1", "p2", "p3", "p4"])
    alias = "x/../../../../PWNED"
    for fault in (
        # Creating claude's batch: a 503 burst, then an answer lost after the batch was made; the
        # listing submit reads to adopt it also shows it under a traversal id.
        {"kind": "http_error", "status": 503, "method": "POST", "path": "^/v1/messages/batches$", "count": 3},
        {"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/messages/batches$"},
        {"kind": "alias_batch", "model": "claude-opus-4-8", "id": alias},
        # One line of each file that is JSON but not a result (or a result of the wrong shape).
        {"kind": "corrupt_line", "model": "gpt-5.5", "line": "[1,2,3]"},
        {"kind": "corrupt_line", "model": "claude-opus-4-8", "line": "null"},
        {"kind": "corrupt_line", "model": "gemini-2.5-pro", "line": '{"key":"$CUSTOM_ID","response":"hello"}'},
        {"kind": "corrupt_line", "model": "claude-sonnet-4-6", "line": '{"custom_id":"$CUSTOM_ID","result":"oops"}'},
    ):
        emu.add_fault(fault)
    before = tree(tmp_path, project.root)

    done = ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    assert "refresh: every route is complete" in done.output

    assert tree(tmp_path, project.root) == before
    inside(project)
    assert emu.faults == []  # every fault fired
    claude = project.sql("SELECT provider_batch_id FROM batches WHERE route = 'claude' ORDER BY seq")
    assert claude[0]["provider_batch_id"] == alias  # adopted (under the id the listing gave), not created twice
    board = project.sql("SELECT route, complete, scored_n FROM leaderboard ORDER BY route")
    assert board == [{"route": r, "complete": 1, "scored_n": 4} for r in ("claude", "gem", "gpt")]
    malformed = project.sql("SELECT kind, error_type FROM results WHERE error_type = 'malformed'")
    assert malformed == [{"kind": "transient", "error_type": "malformed"}] * 2  # gem's and the judge's
    assert project.sql("SELECT count(*) AS n FROM results WHERE kind = 'missing'")[0]["n"] == 2  # gpt's and claude's
    big = project.sql("SELECT q.route, r.truncated, length(r.text) AS n FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                      "WHERE q.task_id = 'p4' AND q.stage = 'gen' AND r.kind = 'ok' ORDER BY q.route")
    assert big == [{"route": r, "truncated": 1, "n": MAX_STORED_CHARS} for r in ("claude", "gem", "gpt")]


# --- the pure halves: parse_line on every JSON value, safe_component on every name ------------------------------

VALID_LINES = {
    "openai": {"id": "r", "custom_id": "g-1", "error": None, "response": {"status_code": 200, "body": {
        "object": "chat.completion", "choices": [{"message": {"content": "x", "refusal": None}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 0},
                  "prompt_tokens_details": {"cached_tokens": 0}}}}},
    "openai-responses": {"custom_id": "g-1", "response": {"status_code": 200, "body": {
        "object": "response", "status": "completed", "incomplete_details": None,
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}, {"type": "refusal", "refusal": "no"}]}],
        "usage": {"input_tokens": 1, "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
                  "input_tokens_details": {"cached_tokens": 0}}}}},
    "openai-error": {"custom_id": "g-1", "response": {"status_code": 400, "body": {"error": {"code": "x", "message": "m"}}}},
    "anthropic": {"custom_id": "g-1", "result": {"type": "succeeded", "message": {
        "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 0}}}},
    "anthropic-error": {"custom_id": "g-1", "result": {"type": "errored", "error": {"error": {"type": "api_error", "message": "m"}}}},
    "gemini": {"key": "g-1", "response": {
        "candidates": [{"content": {"parts": [{"text": "x"}, {"text": "y", "thought": True}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1}, "promptFeedback": {}}},
    "gemini-error": {"key": "g-1", "error": {"code": 429, "message": "m", "status": "RESOURCE_EXHAUSTED"}},
}
ODD_VALUES = [None, True, 0, -1, 1.5, 10**30, "", "hello", [], [1, 2, 3], [None], {}, {"a": [1]}]


def variants(value: Any) -> Any:
    """`value` with, in turn, each field or element anywhere in it replaced by each odd value."""
    yield value
    if isinstance(value, dict):
        for key in value:
            for odd in ODD_VALUES:
                yield {**value, key: odd}
            for inner in variants(value[key]):
                yield {**value, key: inner}
    elif isinstance(value, list):
        for i in range(len(value)):
            for odd in ODD_VALUES:
                yield value[:i] + [odd] + value[i + 1:]
            for inner in variants(value[i]):
                yield value[:i] + [inner] + value[i + 1:]


@pytest.mark.parametrize("shape", list(VALID_LINES))
def test_parse_line_is_total_on_every_json_value(shape: str) -> None:
    from batchrun.providers import LineResult, get_adapter

    adapter = get_adapter(shape.split("-")[0])
    n = 0
    for obj in [*ODD_VALUES, *variants(VALID_LINES[shape])]:
        line = adapter.parse_line(obj)  # never raises
        n += 1
        assert isinstance(line, LineResult) and isinstance(line.custom_id, str)
        assert line.kind in ("ok", "refusal", "empty", "invalid", "auth", "transient", "expired", "cancelled")
        assert line.text is None or isinstance(line.text, str)
        assert all(v is None or isinstance(v, str) for v in (line.finish_reason, line.error_type, line.error_message))
        assert all(v is None or (type(v) is int and 0 <= v < 2**63) for v in vars(line.usage).values())
        # Read by the typed helpers, not rescued by parse_total's last-resort catch.
        assert not (line.error_message or "").startswith("unexpected result line shape"), (obj, line)
        assert line.custom_id == (adapter.custom_id_of(obj) or "")
    assert n > 50


@pytest.mark.parametrize("name", ["../../PWNED", "x/../../../../PWNED", "/etc/passwd", ".", "..", "", "...", "a\\b", "a\x00b",
                                  "batches/abc", "é" * 300, "%2F..", "msgbatch_01AbC-x.y"])
def test_safe_component_is_one_component_inside_the_folder(name: str, tmp_path: Path) -> None:
    from batchrun.base.safepath import safe_component

    component = safe_component(name)
    assert "/" not in component and "\\" not in component and "\x00" not in component
    assert component not in ("", ".", "..") and len(component.encode()) <= 255
    assert (tmp_path / component).resolve().parent == tmp_path.resolve()
    (tmp_path / component).mkdir()  # a name the filesystem accepts
    if name == "msgbatch_01AbC-x.y":
        assert component == name  # real ids stay readable
    assert safe_component(name + "z") != component


def test_the_emulator_refuses_a_gemini_file_name_that_is_not_one(emu: Any, tmp_path: Path) -> None:
    """The emulator stores uploads under a client-chosen name: the Files API's own rule keeps it
    one component inside the emulator's folder."""
    from google import genai
    from google.genai import errors, types

    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=emu.url))
    path = tmp_path / "r.jsonl"
    path.write_text('{"key":"a"}\n')
    with pytest.raises(errors.APIError, match="Invalid file name"):
        client.files.upload(file=str(path), config={"mime_type": "application/jsonl", "name": "files/../../x"})
    assert client.files.upload(file=str(path), config={"mime_type": "application/jsonl", "name": "files/abc-1"}).name == "files/abc-1"


# --- a batch object that is not one: missing id, fields of the wrong type ------------------------------------

# Per provider: the path of a batch's status, of the listing, the id field, and fields of the wrong type.
MANGLED_BATCHES = {
    "openai": ("^/v1/batches/[^/]+$", "^/v1/batches$", "id",
               {"request_counts": "lots", "errors": ["x"], "metadata": "m", "created_at": "yesterday", "status": 7,
                "output_file_id": 12}),
    "anthropic": ("^/v1/messages/batches/[^/]+$", "^/v1/messages/batches$", "id",
                  {"request_counts": [1], "processing_status": 5, "created_at": {"a": 1}, "results_url": 3}),
    "gemini": ("/batches/[^/:]+$", "/batches$", "name",
               {"metadata.state": 12, "metadata.createTime": "not a time", "metadata.batchStats": "x",
                "metadata.displayName": ["y"], "response": "z"}),
}


HUGE = {"openai": {"created_at": 10**400, "request_counts": {"total": 10**30, "completed": 10**30, "failed": 1}},
        "anthropic": {"request_counts": {"processing": 10**30, "succeeded": 1}, "created_at": 10**400},
        # Year 1 without a timezone: datetime.timestamp() raises ValueError (found by the second review).
        "gemini": {"metadata.createTime": "0001-01-01T00:00:00"}}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("mangle", ["huge numbers", "a body that is not JSON", "a number of 5,000 digits"])
def test_a_batch_status_with_huge_numbers_or_no_json_is_never_a_crash(project: Project, emu: Any, provider: str, mangle: str) -> None:
    """Numbers no float holds (a creation time of 10**400, counts of 10**30) read as absent or
    clamped; a 200 whose body is an HTML page, or holds a number of 5,000 digits (over Python's
    int conversion limit), is a malformed answer, tried again (found by review: OverflowError,
    JSONDecodeError and ValueError tracebacks). Then the run completes as usual."""
    status_path = MANGLED_BATCHES[provider][0]
    setup(project, {"r": BATCH_ROUTES[provider]})
    ok(project.run("submit", emulator=emu))
    change = ({"set": HUGE[provider]} if mangle == "huge numbers" else
              {"raw": "<html><body>502 Bad Gateway</body></html>"} if mangle == "a body that is not JSON" else
              {"raw": '{"id": "x", "name": "x", "created_at": ' + "9" * 5000 + "}"})
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": status_path, "count": -1, **change})
    result = ok(project.run("poll", emulator=emu))
    assert "Traceback" not in result.output
    if mangle != "huge numbers":
        assert "will try again" in result.output
    emu.clear_faults()
    ok(project.run("refresh", emulator=emu))
    assert sorted(kinds(project)) == TASKS and all(k == ["ok"] for k in kinds(project).values())


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("mangle", ["no id", "an id of the wrong type", "wrong types"])
def test_a_batch_status_that_is_not_one_is_retried_then_waits_never_a_crash(project: Project, emu: Any, provider: str,
                                                                              mangle: str) -> None:
    """A status answer without the batch's id, or with an id that is not a string: a malformed
    answer (retried, then "will try again"; the batch stays in flight), never a traceback. With
    every other field of the wrong type: those fields read as absent. Once the provider answers
    properly the run completes as usual."""
    status_path, _, id_field, wrong = MANGLED_BATCHES[provider]
    setup(project, {"r": BATCH_ROUTES[provider]})
    ok(project.run("submit", emulator=emu))
    fault: dict[str, Any] = {"kind": "mangle_json", "method": "GET", "path": status_path, "count": -1}
    fault.update({"no id": {"remove": [id_field]}, "an id of the wrong type": {"set": {id_field: 12345}},
                  "wrong types": {"set": wrong}}[mangle])
    emu.add_fault(fault)
    result = project.run("poll", emulator=emu)
    ok(result)  # poll's exit code says nothing about batches in flight
    assert "Traceback" not in result.output
    if mangle != "wrong types":
        # Read by batchrun ("answered without its id") or already refused by the SDK's own models
        # (google-genai validates them): either way a malformed answer, tried again later.
        assert "will try again" in result.output
        assert "answered without its id" in result.output or "does not have the shape" in result.output
    assert project.sql("SELECT status FROM batches")[0]["status"] == "in_flight"
    emu.clear_faults()
    ok(project.run("refresh", emulator=emu))
    assert sorted(kinds(project)) == TASKS and all(k == ["ok"] for k in kinds(project).values())


# What adoption tells a batch by, of the wrong type: OpenAI's tag in the metadata, Anthropic's
# request counts (it tags nothing); Gemini's output of the wrong shape, which google-genai's
# converters trip over before building its model (found by the second review).
IDENTITY = {"openai": {"metadata.batchrun_batch": 5}, "anthropic": {"request_counts.succeeded": "5"},
            "gemini": {"metadata.output": "s"}}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("mangle", ["wrong types", "no id", "identity of the wrong type"])
def test_a_listing_with_an_unreadable_entry_holds_the_batch_never_creates_it_twice(project: Project, emu: Any, provider: str,
                                                                                   mangle: str) -> None:
    """The create's answer is lost, so submit lists the provider's batches to adopt its own; every
    entry of the listing has fields of the wrong type, or no id. Such an entry could be the batch
    (reading it as absent would create it again, paid twice: found by review), so the listing is
    a malformed answer: the batch is held, never a traceback. Once the listing is readable, the
    batch is adopted: exactly one create at the provider."""
    _, list_path, id_field, wrong = MANGLED_BATCHES[provider]
    setup(project, {"r": BATCH_ROUTES[provider]})
    create = {"openai": "^/v1/batches$", "anthropic": "^/v1/messages/batches$", "gemini": ":batchGenerateContent$"}[provider]
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": create})
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": list_path, "count": -1,
                   **({"set": wrong} if mangle == "wrong types" else {"set": IDENTITY[provider]}
                      if mangle == "identity of the wrong type" else {"remove": [id_field]})})
    first = project.run("submit", emulator=emu)
    assert "Traceback" not in first.output and first.exit_code in (0, 2), first.output
    assert project.sql("SELECT status FROM batches WHERE stage = 'gen'") == [{"status": "creating"}]
    emu.clear_faults()
    ok(project.run("refresh", emulator=emu))
    assert sorted(kinds(project)) == TASKS and all(k == ["ok"] for k in kinds(project).values())
    creates = [c for c in emu.calls if c["method"] == "POST" and re.search(create, c["path"])]
    assert len(creates) == 1, creates
    inside(project)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_status_of_another_batch_is_not_taken_for_the_one_asked(project: Project, emu: Any, provider: str) -> None:
    """A status answer naming another batch: a malformed answer (its results downloaded for this
    batch would leave this one's requests missing, sent again); once the provider answers for
    the batch asked about, the run completes with each request sent once."""
    status_path, _, id_field, _ = MANGLED_BATCHES[provider]
    setup(project, {"r": BATCH_ROUTES[provider]})
    ok(project.run("submit", emulator=emu))
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": status_path, "count": -1,
                   "set": {id_field: "batches/someone-elses" if provider == "gemini" else "someone-elses"}})
    result = ok(project.run("poll", emulator=emu))
    assert "answer is about batch" in result.output and "will try again" in result.output
    emu.clear_faults()
    ok(project.run("refresh", emulator=emu))
    assert sorted(kinds(project)) == TASKS and all(k == ["ok"] for k in kinds(project).values())
    assert len(batch_requests(emu)) == len(TASKS)


def test_a_sync_answer_that_is_not_json_is_retried_never_scored_empty(project: Project, emu: Any) -> None:
    """An OpenAI-shaped sync route whose online call is answered 200 with an HTML page: an
    infrastructure failure (transient, retried), never an "empty" answer scored zero (found by
    the second review: the 200 was rendered as a response without choices)."""
    setup(project, {"r": route("openai", "gpt-5.5", transport="sync", sync_concurrency=1)})
    ok(project.run("preflight", emulator=emu))  # passed: the fault below is for a request line
    emu.add_fault({"kind": "mangle_json", "method": "POST", "path": "/chat/completions$", "raw": "<html>502 Bad Gateway</html>"})
    ok(project.run("refresh", emulator=emu))
    assert sorted(kinds(project)) == TASKS
    first = [k[0] for k in kinds(project).values()]
    assert "empty" not in first and first.count("transient") == 1, kinds(project)
    assert all(k[-1] == "ok" for k in kinds(project).values())


def test_a_listing_that_stays_unreadable_holds_its_batch_and_submit_goes_on(project: Project, emu: Any) -> None:
    """A batch left 'creating' by a lost create answer, and a provider whose listing stays
    unreadable: the next submit holds that batch (still 'creating', never created twice) and
    goes on, instead of stopping every route with an error (found by the second review)."""
    setup(project, {"a": BATCH_ROUTES["openai"], "b": BATCH_ROUTES["anthropic"]})
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/batches$"})
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": "^/v1/batches$", "count": -1, "remove": ["id"]})
    first = project.run("submit", emulator=emu)
    assert "Traceback" not in first.output, first.output
    again = project.run("submit", emulator=emu)
    assert "Traceback" not in again.output and again.exit_code in (0, 2), again.output
    assert "held" in again.output
    assert project.sql("SELECT status FROM batches WHERE route = 'a' AND stage = 'gen'") == [{"status": "creating"}]
    emu.clear_faults()
    ok(project.run("refresh", emulator=emu))
    creates = [c for c in emu.calls if c["method"] == "POST" and c["path"] == "/v1/batches"]
    assert len(creates) == 1, creates
