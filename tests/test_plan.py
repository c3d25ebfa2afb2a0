"""`batchrun plan`: exact prompts, request files on disk, scope, idempotence, re-planning, sharding.

Every assertion reads what plan actually wrote under jobs/ (split on b"\\n" only) or what it
recorded in state.db; nothing is mocked.
"""

from __future__ import annotations

import gc
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from batchrun.base.errors import DataError
from batchrun.run.plan import plan as do_plan

from conftest import Project, route, small_project, task

GEN_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\nQuestion: "
CUSTOM_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --- helpers ------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A request file's records, split on b"\\n" only; every line ends with exactly one \\n."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path} does not end with a newline"
    raw = data.split(b"\n")[:-1]
    assert all(line for line in raw), f"{path} has an empty line"
    return [json.loads(line) for line in raw]


def batch_files(project: Project, status: str = "planned") -> dict[str, list[Path]]:
    """route -> request files of its batches with this status, in seq order."""
    out: dict[str, list[Path]] = {}
    for b in project.sql("SELECT route, request_file FROM batches WHERE status = ? ORDER BY seq", [status]):
        out.setdefault(b["route"], []).append(Path(b["request_file"]))
    return out


def route_lines(project: Project, route_name: str) -> list[dict[str, Any]]:
    return [line for f in batch_files(project).get(route_name, []) for line in read_lines(f)]


def line_id(line: dict[str, Any]) -> str:
    return line["key"] if "key" in line else line["custom_id"]


def line_prompt(line: dict[str, Any]) -> str:
    if "key" in line:  # gemini
        contents = line["request"]["contents"]
        assert len(contents) == 1 and contents[0]["role"] == "user" and len(contents[0]["parts"]) == 1
        return contents[0]["parts"][0]["text"]
    body = line.get("params") or line["body"]
    if "input" in body:  # openai responses
        return body["input"]
    messages = body["messages"]
    assert len(messages) == 1 and messages[0]["role"] == "user", "one user turn, no system prompt"
    return messages[0]["content"]


def expected_prompt(question: str, document: str) -> str:
    # Written out independently of batchrun.protocol.prompts, byte for byte from the spec.
    return ("Answer using ONLY the document below. Include every specific detail from the text.\n\n"
            "Question: " + question + "\n\nDocument:\n" + document)


def cells(project: Project, route_name: str) -> dict[str, dict[str, Any]]:
    return {c["task_id"]: c for c in project.sql(
        """SELECT c.* FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
           WHERE c.route = ?""", [route_name])}


def ok(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result


ALL_PROVIDER_ROUTES = {
    "oa-chat": route("openai", "gpt-5.5"),
    "oa-resp": route("openai", "gpt-5.5", endpoint="responses"),
    "compat": route("openai-compatible", "qwen3.6-plus"),
    "anth": route("anthropic", "claude-sonnet-4-6", caps={"en": 2_850_000, "cjk": 850_000}),
    "gem": route("gemini", "gemini-2.5-pro"),
}


# --- exact prompts and byte-level round trips -------------------------------------------------


def test_generation_prompt_is_byte_exact_for_every_provider_including_braces(project: Project) -> None:
    doc = "The crane failed at 03:14. {document} and {question} stay literal.\nEnd {0} {}.\n"
    project.doc("d.txt", doc)
    questions = {
        "plain": "When did the crane fail?",
        "braces": "What does {x} mean, and {{y}}, {0}, {question} and {document}?",
        "percent": "Is 100% of %s and %(name)s kept?",
    }
    project.tasks([task(tid, q, "d.txt") for tid, q in questions.items()])
    project.config(routes=ALL_PROVIDER_ROUTES, panel=[])
    ok(project.run("plan"))

    for name in ALL_PROVIDER_ROUTES:
        lines = route_lines(project, name)
        by_id = {line_id(line): line for line in lines}
        assert len(by_id) == len(questions)
        for tid, q in questions.items():
            cid = cells(project, name)[tid]["custom_id"]
            prompt = line_prompt(by_id[cid])
            assert prompt == expected_prompt(q, doc), (name, tid)
            assert prompt.encode("utf-8") == expected_prompt(q, doc).encode("utf-8")


def test_document_with_line_separators_quotes_backslashes_and_chinese_round_trips(project: Project) -> None:
    doc = ("Line one\u2028line two\u0085line three\u2029new paragraph.\n"
           'She said "stop" and wrote C:\\path\\to\\file and a literal \\n and \\u2028.\r\n'
           "Tabs\tand a form feed\x0c and a bell\x07 and DEL\x7f.\n"
           "中文内容：港口起重机在凌晨三点十四分发生故障。\n"
           "Astral: 𠀋 😀. Lone combining: e\u0301.\n")
    question = 'Who said "stop"\u2028 and where? 问题\\?'
    path = project.doc("weird.txt", doc)
    with open(path, encoding="utf-8") as f:
        harness_doc = f.read()  # the reference harness's reading: its CRLF becomes LF
    project.tasks([task("w1", question, "weird.txt")])
    project.config(routes=ALL_PROVIDER_ROUTES, panel=[])
    ok(project.run("plan"))

    files = project.jobs_files()
    assert len(files) == len(ALL_PROVIDER_ROUTES)
    for f in files:
        data = f.read_bytes()
        # Exactly one request per file: one b"\n", at the very end (no raw newline inside a line).
        assert data.count(b"\n") == 1 and data.endswith(b"\n")
        for raw_breaker in ("\u2028", "\u2029", "\u0085"):
            assert raw_breaker.encode("utf-8") not in data, f"raw {raw_breaker!r} in {f}"
        assert "港口起重机".encode("utf-8") in data, "Chinese must be written as UTF-8"
        assert b"\\u6e2f" not in data.lower(), "Chinese must not be \\u-escaped"
        assert b"\\u2028" in data and b"\\u0085" in data and b"\\u2029" in data
        # Escaped on write: even a reader using str.splitlines sees one line.
        assert len(data.decode("utf-8").splitlines()) == 1
        (line,) = read_lines(f)
        assert line_prompt(line) == expected_prompt(question, harness_doc)


def test_no_rubric_gold_answer_or_clue_text_reaches_generation_files(project: Project) -> None:
    project.doc("a.txt", "The pump was replaced on Monday by Ada.\n" * 3)
    project.doc("b.txt", "水泵在星期一被更换。\n" * 3)
    rec1 = task("s1", "When was the pump replaced?", "a.txt", [(70, "RUBRIC-SECRET-alpha Monday"), (30, "RUBRIC-SECRET-beta Ada")])
    rec1["ground_truth"]["answer"] = "GOLD-SECRET-answer-one"
    rec1["ground_truth"]["clues"] = ["CLUE-SECRET-one"]
    rec1["ground_truth"]["scoring_rubric"][0]["note"] = "RUBRIC-EXTRA-SECRET"
    rec1["evidence"] = "EVIDENCE-SECRET-field"
    rec2 = task("s2", "水泵何时更换？", "b.txt", [(100, "RUBRIC-SECRET-gamma 星期一")])
    rec2["ground_truth"]["answer"] = "GOLD-SECRET-答案"
    project.tasks([rec1, rec2])
    project.config(routes=ALL_PROVIDER_ROUTES, panel=[])
    ok(project.run("plan"))

    files = list((project.root / "jobs").rglob("*"))
    gen_files = [f for f in files if f.is_file()]
    assert len(project.jobs_files()) == len(ALL_PROVIDER_ROUTES)
    for f in gen_files:
        data = f.read_bytes()
        for secret in ("RUBRIC-SECRET", "GOLD-SECRET", "CLUE-SECRET", "RUBRIC-EXTRA-SECRET", "EVIDENCE-SECRET",
                       "GOLD ANSWER", "correct_criterion", "scoring_rubric", "ground_truth"):
            assert secret.encode() not in data, f"{secret} leaked into {f}"
    # ...while state.db does keep the rubric (the judge needs it later).
    rubric = json.loads(project.sql("SELECT rubric_json FROM tasks WHERE task_id = 's1'")[0]["rubric_json"])
    assert rubric[0]["correct_criterion"] == "RUBRIC-SECRET-alpha Monday"


def test_generation_builder_takes_only_question_and_document() -> None:
    import inspect

    from batchrun.protocol.prompts import generation_prompt

    assert list(inspect.signature(generation_prompt).parameters) == ["question", "document"]
    assert generation_prompt("{q}", "{d}") == GEN_HEAD + "{q}\n\nDocument:\n{d}"


# --- provider-native line shapes ------------------------------------------------------------


def test_request_lines_have_each_providers_native_shape(project: Project) -> None:
    project.doc("d.txt", "A short document.\n")
    project.tasks([task("t1", "Q?", "d.txt")])
    project.config(routes=ALL_PROVIDER_ROUTES, panel=[])
    ok(project.run("plan"))

    (chat,) = route_lines(project, "oa-chat")
    assert list(chat) == ["custom_id", "method", "url", "body"]
    assert chat["method"] == "POST" and chat["url"] == "/v1/chat/completions"
    assert chat["body"]["model"] == "gpt-5.5"

    (resp,) = route_lines(project, "oa-resp")
    assert resp["url"] == "/v1/responses" and isinstance(resp["body"]["input"], str) and "messages" not in resp["body"]

    (compat,) = route_lines(project, "compat")
    assert set(compat) == {"custom_id", "method", "url", "body"} and compat["url"] == "/v1/chat/completions"
    assert compat["body"]["model"] == "qwen3.6-plus"

    (anth,) = route_lines(project, "anth")
    assert set(anth) == {"custom_id", "params"}
    assert anth["params"]["model"] == "claude-sonnet-4-6" and "system" not in anth["params"]

    (gem,) = route_lines(project, "gem")
    assert set(gem) == {"key", "request"}
    assert set(gem["request"]) == {"contents", "generationConfig"} and "systemInstruction" not in gem["request"]

    # The id on each line is the cell's custom_id in state.db.
    for name, line in [("oa-chat", chat), ("oa-resp", resp), ("compat", compat), ("anth", anth), ("gem", gem)]:
        assert line_id(line) == cells(project, name)["t1"]["custom_id"]


# --- scope: len == cap is sent, cap + 1 is out of context -----------------------------------------


def test_len_equal_to_cap_is_sent_and_cap_plus_one_is_out_of_scope(project: Project) -> None:
    base = "The valve opened at dawn. "
    at_cap = (base * 40)[:1000]
    over = ("OVERCAP-SECRET " + base * 40)[:1001]
    zh_at = ("阀门在黎明时打开。" * 40)[:300]
    zh_over = ("超出上限秘密文本。" * 40)[:301]
    for name, text in [("at.txt", at_cap), ("over.txt", over), ("zh_at.txt", zh_at), ("zh_over.txt", zh_over)]:
        project.doc(name, text)
    assert len(at_cap) == 1000 and len(over) == 1001 and len(zh_at) == 300 and len(zh_over) == 301
    project.tasks([
        task("at", "Q1?", "at.txt"), task("over", "Q2?", "over.txt"),
        task("zh_at", "问题一？", "zh_at.txt"), task("zh_over", "问题二？", "zh_over.txt"),
    ])
    routes = {
        "capped": route("openai", "gpt-5.5", caps={"en": 1000, "cjk": 300}),
        "roomy": route("anthropic", "claude-opus-4-8"),  # the paper's table: 2.85M / 850k
    }
    project.config(routes=routes, panel=[])
    result = ok(project.run("plan", "--json"))
    summary = {r["route"]: r for r in json.loads(result.stdout)["routes"]}

    c = cells(project, "capped")
    assert {t: (c[t]["scope"], c[t]["cap"], c[t]["cjk"]) for t in c} == {
        "at": ("send", 1000, 0), "over": ("out_of_context_scope", 1000, 0),
        "zh_at": ("send", 300, 1), "zh_over": ("out_of_context_scope", 300, 1),
    }
    assert all(c[t]["cap_source"] == "config" for t in c)
    assert c["over"]["custom_id"] is None and c["zh_over"]["custom_id"] is None
    assert c["over"]["doc_chars"] == 1001 and c["zh_over"]["doc_chars"] == 301  # characters, not bytes

    r = cells(project, "roomy")
    assert all(r[t]["scope"] == "send" for t in r) and {r[t]["cap"] for t in r} == {2_850_000, 850_000}
    assert all(r[t]["cap_source"] == "paper table" for t in r)

    capped_ids = {line_id(line) for line in route_lines(project, "capped")}
    assert capped_ids == {c["at"]["custom_id"], c["zh_at"]["custom_id"]}
    assert summary["capped"]["tasks"] == 4 and summary["capped"]["out_of_context"] == 2 and summary["capped"]["to_send"] == 2
    assert summary["roomy"]["out_of_context"] == 0 and summary["roomy"]["to_send"] == 4
    # An out-of-scope document never appears in the capped route's files (never truncated either).
    for f in batch_files(project)["capped"]:
        data = f.read_bytes()
        assert b"OVERCAP-SECRET" not in data and "超出上限秘密文本".encode() not in data
    # No request row exists for an out-of-scope cell.
    assert project.sql("SELECT count(*) AS n FROM requests WHERE route = 'capped'")[0]["n"] == 2


def test_route_caps_override_only_the_given_half(project: Project) -> None:
    project.doc("en.txt", "x" * 50)
    project.doc("zh.txt", "中" * 50)
    project.tasks([task("en", "Q?", "en.txt"), task("zh", "问？", "zh.txt")])
    project.config(routes={"r": route("openai", "gpt-5.1", caps={"en": 49})}, panel=[])
    ok(project.run("plan"))
    c = cells(project, "r")
    assert (c["en"]["cap"], c["en"]["scope"]) == (49, "out_of_context_scope")
    assert (c["zh"]["cap"], c["zh"]["scope"]) == (320_000, "send")  # gpt-5.1's paper cjk cap kept


# --- idempotence and re-planning --------------------------------------------------------------


def _file_state(project: Project) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(project.root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in (project.root / "jobs").rglob("*") if p.is_file()}


def test_replan_with_nothing_changed_writes_nothing(project: Project) -> None:
    small_project(project)
    first = json.loads(ok(project.run("plan", "--json")).stdout)
    assert first["batches"] and sum(r["to_send"] for r in first["routes"]) == 12
    files_before = _file_state(project)
    batches_before = project.sql("SELECT id, status, blake3, n_requests FROM batches ORDER BY seq")
    requests_before = project.sql("SELECT custom_id FROM requests ORDER BY custom_id")
    cells_before = project.sql("SELECT * FROM cells ORDER BY route, task_id")

    second_run = ok(project.run("plan", "--json"))
    second = json.loads(second_run.stdout)
    assert second["batches"] == []
    assert all(r["to_send"] == 0 and r["files"] == 0 and r["bytes"] == 0 for r in second["routes"])
    assert _file_state(project) == files_before
    assert project.sql("SELECT id, status, blake3, n_requests FROM batches ORDER BY seq") == batches_before
    assert project.sql("SELECT custom_id FROM requests ORDER BY custom_id") == requests_before
    strip = lambda rows: [{k: v for k, v in r.items() if k != "planned_at"} for r in rows]  # noqa: E731
    assert strip(project.sql("SELECT * FROM cells ORDER BY route, task_id")) == strip(cells_before)

    text = ok(project.run("plan"))
    assert "Nothing new to write." in text.stderr
    assert _file_state(project) == files_before


def test_replan_after_cap_change_touches_only_that_routes_cells(project: Project) -> None:
    small_project(project)
    ok(project.run("plan"))
    before = {name: cells(project, name) for name in ("gpt", "claude", "gemini")}
    files_before = batch_files(project)
    bytes_before = {name: [f.read_bytes() for f in fs] for name, fs in files_before.items()}

    # harbor.txt is 730 characters, lab.txt 655: a 700-character en cap puts t1 and t2 out of scope for gpt only.
    harbor_len = before["gpt"]["t1"]["doc_chars"]
    assert harbor_len > 700 >= before["gpt"]["t3"]["doc_chars"]
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["gpt"]["caps"] = {"en": 700, "cjk": 850_000}
    project.config_path.write_text(json.dumps(cfg))
    second = json.loads(ok(project.run("plan", "--json")).stdout)

    # New files only for gpt, holding only its cells that are still in scope.
    new_batches = project.sql("SELECT id, route, request_file FROM batches WHERE id IN (%s)" % ",".join("?" * len(second["batches"])), second["batches"])
    assert {b["route"] for b in new_batches} == {"gpt"}
    after = {name: cells(project, name) for name in ("gpt", "claude", "gemini")}
    for name in ("claude", "gemini"):
        assert {t: c["custom_id"] for t, c in after[name].items()} == {t: c["custom_id"] for t, c in before[name].items()}
        assert [f.read_bytes() for f in batch_files(project)[name]] == bytes_before[name]
    g = after["gpt"]
    assert {t: g[t]["scope"] for t in g} == {"t1": "out_of_context_scope", "t2": "out_of_context_scope", "t3": "send", "t4": "send"}
    assert g["t3"]["custom_id"] != before["gpt"]["t3"]["custom_id"], "a policy change gives new custom_ids"
    assert g["t3"]["policy_fp"] != before["gpt"]["t3"]["policy_fp"]
    assert {line_id(line) for line in route_lines(project, "gpt")} == {g["t3"]["custom_id"], g["t4"]["custom_id"]}
    # The never-uploaded gpt file planned under the old caps is superseded, not sent.
    old_gpt = {str(f) for f in files_before["gpt"]}
    statuses = {b["request_file"]: b["status"] for b in project.sql("SELECT request_file, status FROM batches")}
    assert all(statuses[f] == "superseded" for f in old_gpt)
    summary = {r["route"]: r for r in second["routes"]}
    assert summary["gpt"]["out_of_context"] == 2 and summary["gpt"]["to_send"] == 2
    assert summary["claude"]["to_send"] == 0 and summary["gemini"]["to_send"] == 0
    # The old policy's cells stay in state.db for audit.
    assert project.sql("SELECT count(DISTINCT policy_fp) AS n FROM cells WHERE route = 'gpt'")[0]["n"] == 2


def test_replan_after_temperature_change_touches_only_that_route(project: Project) -> None:
    small_project(project)
    ok(project.run("plan"))
    before = {name: cells(project, name) for name in ("gpt", "claude", "gemini")}
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["gemini"]["send_temperature"] = False
    project.config_path.write_text(json.dumps(cfg))
    second = json.loads(ok(project.run("plan", "--json")).stdout)
    assert {r["route"] for r in second["routes"] if r["to_send"]} == {"gemini"}
    lines = route_lines(project, "gemini")
    assert len(lines) == 4 and all("temperature" not in line["request"]["generationConfig"] for line in lines)
    assert {t: c["custom_id"] for t, c in cells(project, "gpt").items()} == {t: c["custom_id"] for t, c in before["gpt"].items()}
    assert not set(c["custom_id"] for c in cells(project, "gemini").values()) & set(c["custom_id"] for c in before["gemini"].values())


# --- sharding ------------------------------------------------------------------------------


def test_sharding_by_request_count_and_bytes_never_splits_a_line(project: Project) -> None:
    project.doc("d.txt", "Short doc about a pump.\n")
    project.doc("e.txt", "Another short doc, 中文 too.\n")
    project.tasks([task(f"t{i}", f"Question number {i}?", "d.txt" if i % 2 else "e.txt") for i in range(7)])
    routes = {
        "by-count": route("openai", "gpt-5.5", max_requests_per_file=2),
        "by-bytes": route("anthropic", "claude-opus-4-8", max_bytes_per_file=1024),
        "whole": route("gemini", "gemini-2.5-pro"),
        "same-model": route("openai", "gpt-5.5", reasoning=True, max_requests_per_file=3),
    }
    project.config(routes=routes, panel=[])
    summary = {r["route"]: r for r in json.loads(ok(project.run("plan", "--json")).stdout)["routes"]}
    files = batch_files(project)

    assert [len(read_lines(f)) for f in files["by-count"]] == [2, 2, 2, 1]
    assert [len(read_lines(f)) for f in files["same-model"]] == [3, 3, 1]
    assert [len(read_lines(f)) for f in files["whole"]] == [7]
    sizes = [f.stat().st_size for f in files["by-bytes"]]
    assert len(sizes) > 1 and max(sizes) <= 1024
    # A line is never split: each line alone would fit, and adding the next line would not.
    for a, b in zip(files["by-bytes"], files["by-bytes"][1:]):
        first_next = b.read_bytes().split(b"\n")[0] + b"\n"
        assert a.stat().st_size + len(first_next) > 1024

    all_files = [f for fs in files.values() for f in fs]
    assert len({f.parent for f in all_files}) == len(all_files), "one request file per batch folder"
    for name, fs in files.items():
        ids: list[str] = []
        for f in fs:
            lines = read_lines(f)
            models = {(line.get("body") or line.get("params") or {}).get("model") for line in lines}
            assert len(models) == 1, "one model per file"
            ids += [line_id(line) for line in lines]
        assert len(ids) == len(set(ids)) == 7
        assert set(ids) == {c["custom_id"] for c in cells(project, name).values()}
        assert summary[name]["files"] == len(fs) and summary[name]["bytes"] == sum(f.stat().st_size for f in fs)
    # batches rows describe the files exactly.
    import blake3

    for b in project.sql("SELECT * FROM batches WHERE status = 'planned'"):
        data = Path(b["request_file"]).read_bytes()
        # The checksum submit verifies is BLAKE3 (checksums.py); sha256 is left for old batches.
        assert b["bytes"] == len(data) and b["blake3"] == blake3.blake3(data).hexdigest() and b["sha256"] is None
        assert b["n_requests"] == data.count(b"\n")
        positions = project.sql("SELECT custom_id FROM batch_requests WHERE batch_id = ? ORDER BY position", [b["id"]])
        assert [p["custom_id"] for p in positions] == [line_id(json.loads(l)) for l in data.split(b"\n")[:-1]]


def test_a_single_request_larger_than_the_file_limit_is_refused(project: Project) -> None:
    project.doc("big.txt", "word " * 400)
    project.tasks([task("t1", "Q?", "big.txt")])
    project.config(routes={"tiny": route("openai", "gpt-5.5", max_bytes_per_file=1024)}, panel=[])
    with pytest.raises(DataError, match="max_bytes_per_file"):
        do_plan(project.store(), project.load())
    assert project.jobs_files() == []


def test_a_plan_that_fails_mid_write_leaves_no_open_file_or_thread_and_the_next_plan_recovers(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr("batchrun.run.request_files._WRITEBACK_BYTES", 1)  # a write-back in flight when it fails

    project.doc("a-small.txt", "word " * 20)  # written first (documents go in name order)
    project.doc("b-big.txt", "word " * 400)
    project.tasks([task("t1", "Q?", "a-small.txt"), task("t2", "Q?", "b-big.txt")])
    project.config(routes={"tiny": route("openai", "gpt-5.5", max_bytes_per_file=1024)}, panel=[])
    store = project.store()
    with pytest.raises(DataError, match="max_bytes_per_file"):
        do_plan(store, project.load())
    assert not [t for t in threading.enumerate() if t.name.startswith(("batchrun-fsync", "batchrun-checksum"))]
    assert gc.isenabled()  # plan pauses the cyclic garbage collector, and a failure gives it back
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["writing"]
    (partial,) = (project.root / "jobs").glob("*/requests.jsonl.partial")
    assert partial.read_bytes().endswith(b"\n")  # the first line was written, then the file closed
    # With the big document's task gone, the next plan drops the interrupted file and writes t1.
    project.tasks([task("t1", "Q?", "a-small.txt")])
    do_plan(store, project.load())
    assert [b["status"] for b in project.sql("SELECT status FROM batches ORDER BY seq")] == ["abandoned", "planned"]
    assert not partial.exists()
    (f,) = project.jobs_files()
    assert [line_id(line) for line in read_lines(f)] == [cells(project, "tiny")["t1"]["custom_id"]]
    store.close()


def test_a_failed_write_back_fails_the_plan_by_name_and_the_next_plan_recovers(project: Project,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux reports a failed write-back once per open file: a later fsync would return 0. So
    plan must not lose a write-back's error and mark the batch planned with pages the kernel
    dropped: the plan fails (exit 1, the file named, no traceback) and the next one writes again."""
    import errno

    small_project(project)
    project.config(routes={"one": route("openai", "gpt-5.5")}, panel=[])
    monkeypatch.setattr("batchrun.run.request_files._WRITEBACK_BYTES", 1)  # a write-back after every line
    failures = []

    def fail_once(fd: int) -> None:
        if not failures:
            failures.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        os.fsync(fd)

    monkeypatch.setattr("batchrun.run.request_files._DATASYNC", fail_once)
    r = project.run("plan")
    assert r.exit_code == 1 and failures, r.output
    assert "The disk failed while reading or writing" in r.output and "requests.jsonl.partial" in r.output
    assert "Traceback" not in r.output
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["writing"]
    ok(project.run("plan"))
    assert [b["status"] for b in project.sql("SELECT status FROM batches ORDER BY seq")] == ["abandoned", "planned"]
    assert len(project.jobs_files()) == 1


def test_the_closer_keeps_few_files_waiting_and_records_them_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many small files on a slow disk: handing one more over waits once _MAX_PENDING wait (each
    holds a descriptor), and the batch rows still follow in the order the files were finished."""
    import time

    from batchrun.run import request_files

    monkeypatch.setattr(request_files, "_sync_and_place", lambda *args: time.sleep(0.005))
    closer = request_files.Closer()
    recorded: list[int] = []
    most = 0
    try:
        for i in range(40):
            closer.close(None, Path("t"), Path("p"), None, lambda i=i: recorded.append(i))
            most = max(most, len(closer._pending))
        closer.settle(wait=True)
    finally:
        closer.shutdown()
    assert most <= request_files._MAX_PENDING
    assert recorded == list(range(40))


def test_a_complete_file_whose_batch_was_not_recorded_is_dropped_by_the_next_plan(project: Project) -> None:
    """A crash after a finished file's rename and before its batch row says 'planned' leaves the
    row 'writing' beside a whole requests.jsonl: never sent, so the next plan drops both."""
    small_project(project)
    project.config(routes={"one": route("openai", "gpt-5.5")}, panel=[])
    ok(project.run("plan"))
    (f,) = project.jobs_files()
    import sqlite3

    conn = sqlite3.connect(project.state_path)
    with conn:
        conn.execute("DELETE FROM batch_requests")
        conn.execute("UPDATE batches SET status = 'writing', blake3 = NULL, bytes = NULL, n_requests = NULL")
    conn.close()
    ok(project.run("plan"))
    assert [b["status"] for b in project.sql("SELECT status FROM batches ORDER BY seq")] == ["abandoned", "planned"]
    assert not f.exists() and len(project.jobs_files()) == 1


# --- custom_ids ----------------------------------------------------------------------------


def test_custom_ids_are_short_safe_unique_and_deterministic(tmp_path: Path) -> None:
    def build(root: Path) -> dict[tuple[str, str], str]:
        p = small_project(Project(root))
        ok(p.run("plan"))
        return {(c["route"], c["task_id"]): c["custom_id"] for c in p.sql("SELECT route, task_id, custom_id FROM cells")}

    a = build(tmp_path / "a")
    b = build(tmp_path / "elsewhere" / "b")
    assert a == b and len(a) == 12
    assert all(CUSTOM_ID_RE.match(cid) for cid in a.values())
    assert len(set(a.values())) == len(a), "distinct per route and task"
    # The files carry exactly those ids.
    p = Project(tmp_path / "a")
    written = [line_id(line) for f in p.jobs_files() for line in read_lines(f)]
    assert sorted(written) == sorted(a.values())


def test_custom_id_changes_with_the_document_content(project: Project) -> None:
    small_project(project)
    ok(project.run("plan"))
    before = cells(project, "gpt")
    project.doc("lab.txt", "The freezer alarm sounded at 22:06 instead.\n")
    ok(project.run("plan"))
    after = cells(project, "gpt")
    assert after["t3"]["custom_id"] != before["t3"]["custom_id"]
    assert after["t1"]["custom_id"] == before["t1"]["custom_id"]
    assert after["t3"]["doc_sha256"] != before["t3"]["doc_sha256"]
    (new_line,) = [line for line in route_lines(project, "gpt") if line_id(line) == after["t3"]["custom_id"]]
    assert line_prompt(new_line).endswith("22:06 instead.\n")


# --- the summary ---------------------------------------------------------------------------


def test_plan_json_summary_structure_and_numbers(project: Project) -> None:
    small_project(project)
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["gpt"]["caps"] = {"en": 700, "cjk": 850_000}  # harbor (t1, t2) out of context
    project.config_path.write_text(json.dumps(cfg))
    result = ok(project.run("plan", "--json"))
    data = json.loads(result.stdout)  # stdout is pure JSON
    # The keys every JSON output starts with (README, "Machine-readable output"), then plan's own.
    assert set(data) == {"rehearsal", "protocol", "protocol_note", "batchrun_version", "routes", "batches", "warnings"}
    assert data["rehearsal"] is None and data["protocol"] == "custom"
    assert len(data["batches"]) == 3
    assert any("claude-sonnet-4-6" in w for w in data["warnings"]), "unlisted judge model warned"
    rows = {(r["route"], r["stage"]): r for r in data["routes"]}
    assert set(rows) == {("gpt", "gen"), ("claude", "gen"), ("gemini", "gen"), ("judge-a", "judge"), ("judge-g", "judge")}
    for r in data["routes"]:
        for key in ("route", "stage", "provider", "transport", "tasks", "out_of_context", "to_send", "files", "bytes",
                    "est_input_tokens", "est_output_tokens", "est_cost_batch", "est_cost_online"):
            assert key in r, key
    files = batch_files(project)
    expected = {"gpt": (4, 2, 2), "claude": (4, 0, 4), "gemini": (4, 0, 4)}
    for name, (tasks_n, ooc, send) in expected.items():
        r = rows[(name, "gen")]
        assert (r["tasks"], r["out_of_context"], r["to_send"]) == (tasks_n, ooc, send)
        assert r["files"] == len(files[name]) == 1
        assert r["bytes"] == sum(f.stat().st_size for f in files[name])
        assert r["est_input_tokens"] > 0 and r["est_output_tokens"] == send * 8192
    assert rows[("judge-a", "judge")]["to_send"] == 0  # nothing answered yet

    text = ok(project.run("plan"))  # nothing new the second time, but the table is still printed
    header = text.stdout.splitlines()[0].split()
    for col in ("route", "tasks", "ooc", "files", "bytes"):
        assert col in header
    assert "to send" in text.stdout.splitlines()[0]
    gpt_row = next(line for line in text.stdout.splitlines() if line.startswith("gpt "))
    assert gpt_row.split()[:5] == ["gpt", "gen", "4", "2", "0"]


def test_plan_library_call_reports_the_same_as_the_cli(project: Project) -> None:
    small_project(project)
    store = project.store()
    try:
        result = do_plan(store, project.load())
    finally:
        store.close()
    assert result.to_send == 12 and len(result.batches) == 3
    assert {r.route: r.to_send for r in result.routes if r.stage == "gen"} == {"gpt": 4, "claude": 4, "gemini": 4}
    assert len(project.jobs_files()) == 3
    assert os.path.isdir(project.root / "jobs")


def test_plan_pauses_the_garbage_collector_and_leaves_it_as_it_found_it(project: Project,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import batchrun.run.plan as plan_module

    small_project(project)
    seen: list[bool] = []
    sync = plan_module.sync_state
    monkeypatch.setattr(plan_module, "sync_state", lambda *a, **k: (seen.append(gc.isenabled()), sync(*a, **k))[1])
    store = project.store()
    try:
        do_plan(store, project.load())
        assert seen == [False] and gc.isenabled()
        gc.disable()  # a caller that paused it itself (a long refresh) finds it paused still
        try:
            do_plan(store, project.load())
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        store.close()


# --- reading the corpus -----------------------------------------------------------------------


def _plan_module() -> Any:
    import sys

    return sys.modules["batchrun.protocol.corpus"]


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_a_first_plan_reads_and_hashes_each_document_once(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    small_project(project)
    for doc in (project.root / "corpus").iterdir():
        _age(doc, 3600)  # an unchanged corpus, as users have it
    module = _plan_module()
    measured: list[str] = []
    real = module.measure_file

    def counting(name: str, path: Path, **kwargs: Any) -> Any:
        measured.append(name)
        return real(name, path, **kwargs)

    monkeypatch.setattr(module, "measure_file", counting)
    # The CLI resolves the command's inputs once (validating the corpus before it opens state.db),
    # and plan syncs that same measurement: once each file.
    ok(project.run("plan"))
    assert sorted(measured) == ["harbor.txt", "lab.txt", "zh.txt"]
    ok(project.run("plan"))  # state.db's cache answers now
    assert sorted(measured) == ["harbor.txt", "lab.txt", "zh.txt"]


def test_a_same_size_edit_within_the_same_mtime_tick_is_still_seen(project: Project) -> None:
    # File systems stamp mtimes with a coarse clock: an edit right after a plan can keep both the
    # size and the mtime. A document that recent is never served from a cache.
    small_project(project)
    doc = project.root / "corpus" / "lab.txt"
    ok(project.run("plan"))
    before = cells(project, "gpt")["t3"]
    st = doc.stat()
    text = doc.read_text(encoding="utf-8")
    edited = text.replace("22:05", "22:06")
    assert len(edited.encode()) == st.st_size
    doc.write_text(edited, encoding="utf-8")
    os.utime(doc, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    ok(project.run("plan"))
    after = cells(project, "gpt")["t3"]
    assert after["doc_sha256"] != before["doc_sha256"]
    assert after["custom_id"] != before["custom_id"]


# --- request files stay byte-identical across changes to how plan writes them -------------------


def _golden_corpus(project: Project) -> None:
    """Documents that exercise every path of reading and escaping: pieces bigger than the 32 KiB
    read size with a CRLF and multi-byte characters across piece edges, line separators, quotes
    and backslashes, Chinese, astral characters, a BOM, a lone CR."""
    import random

    rng = random.Random(15)
    words = ["crane", "harbor", "relay", "起重机", "故障", "\u2028", "\u0085", '"q"', "C:\\path", "😀", "\t", "e\u0301", "\x7f"]
    big = "".join(rng.choice(words) + (" " if rng.random() < 0.9 else "\r\n") for _ in range(40_000))
    project.doc("a-big.txt", "")
    (project.root / "corpus" / "a-big.txt").write_bytes(big.encode("utf-8"))
    (project.root / "corpus" / "b-bom-cr.txt").write_bytes("\ufeffFirst line\rsecond line\r\nthird 中文\n".encode("utf-8"))
    project.doc("c-plain.txt", "The freezer alarm sounded at 22:05. Dr. Ilse Varga moved 340 samples.\n" * 50)
    project.tasks([
        task("g1", "When did the crane fail?", "a-big.txt"),
        task("g2", 'Who said "stop"\u2028 and where? 问题\\?', "a-big.txt"),
        task("g3", "What is on the second line?", "b-bom-cr.txt"),
        task("g4", "Who moved the samples?", "c-plain.txt"),
        task("g5", "At what time?", "c-plain.txt"),
    ])


# sha256 of every request file of the plan below, in batch order, as written by plan before it kept
# escaped documents in memory (it spooled them to a scratch file and streamed them back): how plan
# writes may change, what it writes may not.
GOLDEN_REQUEST_FILES: list[tuple[str, str]] = [
    ('000001-anth-gen', '2f2b7e1bf21db1cf223d84e88e213478b23f8c7cb95fe50472b3977f9bc6eabb'),
    ('000002-compat-gen', '97dc763f6b8193a0554f7e39f4b2cbdb2839e5beb2d3252dc158fa4912fee321'),
    ('000003-gem-gen', '8a9707dd802f4450371642e54e80367d941b9ac9a24754573bca17325cb2ee39'),
    ('000004-oa-chat-gen', '18b4168dbafdccbf023ca031b6e558eb220acfe88aa330d9763755a91cf1dbed'),
    ('000005-oa-resp-gen', '997c1a7b74cddb7470f9e250a048c9d6137de95ca830fd2cf021c21227c28b74'),
    ('000006-oa-chat-gen', '72c651a870a117ed85a88457be00818d086842b0a55960f025148c5b91e61319'),
    ('000007-oa-chat-gen', 'c2ac6a1498647d5a15668346b17d0ef1bd1f8010b99472eb42790609d05c552d'),
]


@pytest.mark.parametrize("writeback_bytes", [None, 1], ids=["default", "write-back-after-every-line"])
def test_request_files_are_byte_identical_to_the_recorded_ones(project: Project, monkeypatch: pytest.MonkeyPatch,
                                                              writeback_bytes: int | None) -> None:
    """The golden files; also with each file written back to the disk (request_files.Closer.write_back, on
    a thread) after every line, which plan does every 32 MiB: the same bytes, checksums and rows,
    and no fsync thread left behind."""
    import hashlib
    import threading

    import blake3

    if writeback_bytes is not None:
        monkeypatch.setattr("batchrun.run.request_files._WRITEBACK_BYTES", writeback_bytes)
    _golden_corpus(project)
    routes = dict(ALL_PROVIDER_ROUTES)
    routes["oa-chat"] = route("openai", "gpt-5.5", max_requests_per_file=2)
    project.config(routes=routes, panel=[])
    ok(project.run("plan"))
    written = []
    for b in project.sql("SELECT id, request_file, blake3, bytes FROM batches WHERE status = 'planned' ORDER BY seq"):
        data = Path(b["request_file"]).read_bytes()
        assert b["blake3"] == blake3.blake3(data).hexdigest() and b["bytes"] == len(data)
        written.append((b["id"], hashlib.sha256(data).hexdigest()))  # the recorded files' sha256
    assert len(written) == 7  # oa-chat in three files, every other route in one
    assert written == GOLDEN_REQUEST_FILES
    assert not [t for t in threading.enumerate() if t.name.startswith(("batchrun-fsync", "batchrun-checksum"))]


def test_a_judge_line_with_its_answer_spliced_in_is_the_whole_line_serialised(project: Project) -> None:
    """plan builds each judge line around a placeholder and splices the escaped answer in
    (_judge_line; _JudgeLines, which serialises a task's line once around the id and the answer,
    issue 30): the bytes must be those of serialising the whole line, for every
    provider's shape and any answer (quotes, backslashes, control characters, DEL, line breakers,
    Chinese, astral characters, longer than the judge sees, empty)."""
    import random

    from batchrun.base import jsonl
    from batchrun.protocol.dataset import RubricItem, Task
    from batchrun.protocol.policy import route_policies
    from batchrun.protocol.prompts import judge_prompt
    from batchrun.providers import RequestSpec, get_adapter
    from batchrun.run.plan import _judge_line, _JudgeLines

    project.doc("d.txt", "A short document.\n")
    project.tasks([task("t1", "Q?", "d.txt")])
    project.config(routes=ALL_PROVIDER_ROUTES, panel=list(ALL_PROVIDER_ROUTES))
    config = project.load()
    policies = route_policies(config)
    judged = Task("t1", 'Who said "stop"\\now?\u2028', "d.txt", (RubricItem(60, "names \u4e2d\u6587"), RubricItem(40, "time")), {}, 0)
    rng = random.Random(30)
    alphabet = [chr(c) for c in range(0x90)] + list("\u2028\u2029\u0085\ufeff\u4e2d\u6587\U0001f600\"\\")
    answers = ["", "plain", "x\x7fy", "\u4e2d\u6587" * 3000, "a" * 4999 + "\u2028b", "q\"\\\n\t\r\x00" * 900]
    answers += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400))) for _ in range(60)]
    lines = {name: _JudgeLines(get_adapter(r.provider), r, policies[name]) for name, r in config.routes.items()}
    for name, r in config.routes.items():
        adapter, policy = get_adapter(r.provider), policies[name]
        for answer in answers:
            spec = RequestSpec("j-0123abcd", r.model, judge_prompt(judged.question, judged.rubric, answer), policy.max_tokens,
                               policy.temperature)
            whole = jsonl.dumps(adapter.build_line(r, spec)).encode() + b"\n"
            assert _judge_line(adapter, r, policy, "j-0123abcd", judged, answer) == whole, (name, answer[:40])
            assert lines[name].line("j-0123abcd", judged, answer) == whole, (name, answer[:40])
        # A question that holds a placeholder's text cannot move the answer or the id: that task's
        # lines are serialised whole.
        tricky = Task("t2", "Q \x03BATCHRUN-ID-8e2f61\x03 \x02BATCHRUN-ANSWER-4d7a0b\x02?", "d.txt", judged.rubric, {}, 1)
        spec = RequestSpec("j-9", r.model, judge_prompt(tricky.question, tricky.rubric, "an answer"), policy.max_tokens,
                           policy.temperature)
        assert lines[name].line("j-9", tricky, "an answer") == jsonl.dumps(adapter.build_line(r, spec)).encode() + b"\n"


def test_a_written_back_request_file_leaves_the_page_cache(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan drops a request file's pages from the page cache once they are written back
    (request_files._write_back: at 30 routes, 17 GB kept cached made every later write wait for a
    free page), and the rest once the finished file is fsync'ed (_sync_and_place). While it is
    written: only whole pages, only below what was synced, each once. The file is the same bytes,
    and the kernel (fincore, where installed) holds none of it but a page or so."""
    import shutil
    import subprocess

    import blake3

    from batchrun.run import request_files

    if request_files._DROP_CACHED is None:
        pytest.skip("this system has no posix_fadvise (macOS): nothing is dropped")
    # A write-back after every document: each starts past a whole page. (At 1 byte the first one
    # started after the first line's few bytes of JSON, with no whole page to drop, and while its
    # fdatasync waited behind another process's writes, no other started: no page was dropped.)
    monkeypatch.setattr("batchrun.run.request_files._WRITEBACK_BYTES", 1 << 20)
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    project.doc("big.txt", "word " * 300_000)  # 1.5 MB: each line carries it
    project.tasks([task(f"t{i}", f"Question {i}?", "big.txt") for i in range(6)])
    project.config(routes={"one": route("openai", "gpt-5.5")}, panel=[])
    ok(project.run("plan"))
    (b,) = project.sql("SELECT request_file, blake3, bytes FROM batches WHERE status = 'planned'")
    # (tmpfs keeps every page whatever the advice: its pages are the file. stat -f names it.)
    fs = subprocess.run(["stat", "-f", "-c", "%T", b["request_file"]], capture_output=True, text=True).stdout.strip()
    if shutil.which("fincore") and fs != "tmpfs":  # before the file is read back below (which caches it again)
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", b["request_file"]],
                             capture_output=True, text=True, check=True).stdout
        # Every page is clean after the fsync, so the advice drops them all (a few KiB of slack:
        # a page the kernel holds for a moment is not what this is about; the tail was >= 1 MiB).
        assert int(out.split()[0]) <= 65536, out
    data = Path(b["request_file"]).read_bytes()
    assert b["blake3"] == blake3.blake3(data).hexdigest() and b["bytes"] == len(data) > 9_000_000
    *growing, (last_offset, last_length, last_advice) = advised
    assert growing, "no write-back dropped its pages"
    page = request_files._PAGE
    upto = 0
    for offset, length, advice in growing:
        assert advice == os.POSIX_FADV_DONTNEED
        assert offset == upto and offset % page == 0 and length > 0 and (offset + length) % page == 0  # contiguous, whole pages
        upto = offset + length
    assert upto <= len(data) - len(data) % page
    # The finished file: from where the write-backs stopped to its end (length 0).
    assert (last_offset, last_length, last_advice) == (upto, 0, os.POSIX_FADV_DONTNEED)
