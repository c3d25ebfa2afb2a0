"""The dataset and corpus: both released representations, rubric forms, ids, documents, the CJK rule."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from batchrun.protocol.caps import is_cjk
from batchrun.protocol.dataset import load_dataset
from batchrun.base.errors import DataError
from batchrun.run.plan import plan as do_plan

from conftest import Project, route, small_project, task


def plan_ok(project: Project) -> Any:
    result = project.run("plan")
    assert result.exit_code == 0, result.output
    return result


def plan_output(project: Project) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
    files = {str(p.relative_to(project.root)): p.read_bytes() for p in project.jobs_files()}
    cells = project.sql("SELECT route, task_id, custom_id, scope, cap, cjk, doc_chars FROM cells ORDER BY route, task_id")
    return files, cells


def records() -> list[dict[str, Any]]:
    return [
        task("t1", "When did the harbor crane fail?", "harbor.txt", [(60, "03:14 on Tuesday"), (40, "Mara Quist")],
             language="en", category="incident", paradigm="single-hop"),
        task("t2", "起重机何时发生故障？", "zh.txt", [(100, "凌晨三点十四分")], language="zh", category="incident"),
        task("t3", 'Quote "exactly" the {wind} speed\u2028 please', "corpus/harbor.txt", [(1, "41 knots")], language="en"),
    ]


def docs(project: Project) -> None:
    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. Wind 41 knots.\n" * 3)
    project.doc("zh.txt", "港口起重机在凌晨三点十四分发生故障。操作员是马拉。\n" * 3)


ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "gemini": route("gemini", "gemini-2.5-pro"),
    "compat": route("openai-compatible", "qwen3.6-plus"),
}


def build(root: Path, recs: list[dict[str, Any]], fmt: str) -> Project:
    p = Project(root)
    docs(p)
    p.tasks(recs, fmt=fmt)
    p.config(routes=ROUTES, panel=[])
    plan_ok(p)
    return p


# --- both representations -------------------------------------------------------------------------


def test_a_missing_dataset_names_a_release_lying_beside_it(tmp_path: Path) -> None:
    """Step 1 of the README allows the .jsonl release; the config names the .json one: the error
    names the file that is there and the line to set (a newcomer was told to put the release in
    data/, where it already was)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wildtrace_strict481.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "data" / "batchrun.json").write_text("{}", encoding="utf-8")  # a config: never suggested
    (tmp_path / "data" / "a_notes.json").write_text("{}", encoding="utf-8")  # named after the release's
    with pytest.raises(DataError) as e:
        load_dataset(tmp_path / "data" / "wildtrace_strict481.with_answers.json")
    assert "data has wildtrace_strict481.jsonl, a_notes.json." in e.value.message
    assert e.value.hint == f'If that is the WildTrace release, set it in the config: [paths] dataset = "{tmp_path / "data" / "wildtrace_strict481.jsonl"}".'
    with pytest.raises(DataError) as e:  # nothing beside it: where to put the release
        load_dataset(tmp_path / "elsewhere" / "x.json")
    assert "put the WildTrace release in data/" in (e.value.hint or "")


def test_nested_json_and_hf_jsonl_give_identical_plans(tmp_path: Path) -> None:
    nested = build(tmp_path / "nested", records(), "json")
    hf = build(tmp_path / "hf", records(), "jsonl")
    # The .jsonl really carries ground_truth as serialized JSON (a string).
    first = json.loads(hf.dataset_path.read_bytes().split(b"\n")[0])
    assert isinstance(first["ground_truth"], str)

    files_a, cells_a = plan_output(nested)
    files_b, cells_b = plan_output(hf)
    assert len(files_a) == 4
    assert files_a == files_b, "byte-identical request files"
    assert cells_a == cells_b, "same custom_ids and scope decisions"
    cols = "task_id, position, question, corpus_file, doc_sha256, rubric_json, rubric_total, task_sha256"
    assert nested.sql(f"SELECT {cols} FROM tasks ORDER BY task_id") == hf.sql(f"SELECT {cols} FROM tasks ORDER BY task_id")
    # Each records its own dataset checksum.
    import hashlib

    for p in (nested, hf):
        sha = hashlib.sha256(p.dataset_path.read_bytes()).hexdigest()
        assert p.sql("SELECT sha256, n_tasks FROM datasets") == [{"sha256": sha, "n_tasks": 3}]
        assert p.sql("SELECT value FROM meta WHERE key = 'dataset_sha256'")[0]["value"] == sha


def test_jsonl_is_split_on_newline_only(project: Project) -> None:
    """A raw U+2028 / U+0085 inside a JSONL record is part of the record, not a line break."""
    docs(project)
    recs = records()
    recs[0]["question_text"] = "Crane\u2028failure\u0085time\u2029?"
    project.tasks(recs, fmt="jsonl")
    raw = project.dataset_path.read_bytes()
    assert "\u2028".encode() in raw and "\u0085".encode() in raw  # written raw by ensure_ascii=False
    dataset = load_dataset(project.dataset_path)
    assert [t.task_id for t in dataset.tasks] == ["t1", "t2", "t3"]
    assert dataset.tasks[0].question == "Crane\u2028failure\u0085time\u2029?"


def test_jsonl_tolerates_blank_lines_crlf_and_no_final_newline(project: Project) -> None:
    docs(project)
    lines = []
    for r in records():
        r = dict(r)
        r["ground_truth"] = json.dumps(r["ground_truth"], ensure_ascii=False)
        lines.append(json.dumps(r, ensure_ascii=False))
    path = project.root / "data" / "tasks.jsonl"
    path.write_bytes(("\n\n".join(lines[:2]) + "\r\n" + lines[2]).encode("utf-8"))
    dataset = load_dataset(path)
    assert [t.task_id for t in dataset.tasks] == ["t1", "t2", "t3"]


# --- rubric forms, ids, extra fields ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_rubric_as_list_and_as_json_string_give_the_same_plan(tmp_path: Path, fmt: str) -> None:
    as_list = records()
    as_string = copy.deepcopy(as_list)
    for r in as_string:
        r["ground_truth"]["scoring_rubric"] = json.dumps(r["ground_truth"]["scoring_rubric"], ensure_ascii=False)
    a = build(tmp_path / "list", as_list, fmt)
    b = build(tmp_path / "string", as_string, fmt)
    assert plan_output(a) == plan_output(b)
    rubric_a = a.sql("SELECT task_id, rubric_json, rubric_total, task_sha256 FROM tasks ORDER BY task_id")
    assert rubric_a == b.sql("SELECT task_id, rubric_json, rubric_total, task_sha256 FROM tasks ORDER BY task_id")
    assert json.loads(rubric_a[0]["rubric_json"]) == [{"points": 60, "correct_criterion": "03:14 on Tuesday"},
                                                     {"points": 40, "correct_criterion": "Mara Quist"}]
    assert rubric_a[0]["rubric_total"] == 100


def test_rubric_extra_keys_and_other_fields_are_kept(project: Project) -> None:
    docs(project)
    recs = records()
    recs[0]["ground_truth"]["scoring_rubric"][0]["evidence_span"] = [3, 9]
    recs[0]["ground_truth"]["scoring_rubric"][1]["points"] = 12.5
    project.tasks(recs)
    project.config(routes=ROUTES, panel=[])
    plan_ok(project)
    row = project.sql("SELECT rubric_json, rubric_total, fields_json FROM tasks WHERE task_id = 't1'")[0]
    rubric = json.loads(row["rubric_json"])
    assert rubric[0] == {"points": 60, "correct_criterion": "03:14 on Tuesday", "evidence_span": [3, 9]}
    assert rubric[1]["points"] == 12.5 and row["rubric_total"] == 72.5
    fields = json.loads(row["fields_json"])
    assert (fields["language"], fields["category"], fields["paradigm"]) == ("en", "incident", "single-hop")
    assert fields["ground_truth"]["answer"] == "GOLD ANSWER for t1"


def test_task_id_falls_back_to_question_id_then_id(project: Project) -> None:
    docs(project)
    recs = records()
    del recs[0]["task_id"]
    recs[0]["question_id"] = "Q-001"
    del recs[1]["task_id"]
    recs[1]["id"] = 42
    recs[2]["question_id"] = "ignored-because-task_id-wins"
    path = project.tasks(recs)
    assert [t.task_id for t in load_dataset(path).tasks] == ["Q-001", "42", "t3"]


def test_corpus_file_with_corpus_prefix_resolves_to_the_same_document(project: Project) -> None:
    docs(project)
    project.tasks(records())
    project.config(routes=ROUTES, panel=[])
    plan_ok(project)
    t1, t3 = (project.sql("SELECT doc_sha256 FROM tasks WHERE task_id = ?", [t])[0]["doc_sha256"] for t in ("t1", "t3"))
    assert t1 == t3
    assert project.sql("SELECT count(*) AS n FROM documents")[0]["n"] == 2


def test_documents_record_sha256_character_length_and_cjk_flag(project: Project) -> None:
    import hashlib

    docs(project)
    project.tasks(records())
    project.config(routes=ROUTES, panel=[])
    plan_ok(project)
    rows = {r["name"]: r for r in project.sql("SELECT * FROM documents")}
    for name, cjk in (("harbor.txt", 0), ("zh.txt", 1)):
        data = (project.root / "corpus" / name).read_bytes()
        assert rows[name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert rows[name]["chars"] == len(data.decode("utf-8"))
        assert rows[name]["bytes"] == len(data)
        assert rows[name]["cjk"] == cjk
    assert rows["zh.txt"]["chars"] < rows["zh.txt"]["bytes"], "length is counted in characters"


def test_library_refuses_corpus_paths_that_escape_the_corpus_folder(project: Project) -> None:
    (project.root / "secret.txt").write_text("TOP-SECRET", encoding="utf-8")
    docs(project)
    os.symlink(project.root / "secret.txt", project.root / "corpus" / "link.txt")
    for bad in ("../secret.txt", str(project.root / "secret.txt"), "corpus/../../secret.txt", "link.txt"):
        recs = records()
        recs[1]["corpus_file"] = bad
        project.tasks(recs)
        project.config(routes=ROUTES, panel=[])
        store = project.store()
        try:
            with pytest.raises(DataError, match="outside the corpus folder") as err:
                do_plan(store, project.load())
        finally:
            store.close()
        assert "t2" in str(err.value) and "corpus_file" in str(err.value)
    assert project.jobs_files() == []


# --- the CJK rule at its edges --------------------------------------------------------------------

CJK_ROUTE = {"r": route("openai", "gpt-5.5", caps={"en": 1_000_000, "cjk": 7_777})}


def _cjk_doc(ideographs_at: list[int], length: int = 4_200, fill: str = "a") -> str:
    chars = [fill] * length
    for i in ideographs_at:
        chars[i] = "中"
    return "".join(chars)


CJK_CASES = {
    # name: (document, expected cjk)
    "20_in_window": (_cjk_doc(list(range(20))), False),
    "21_in_window": (_cjk_doc(list(range(21))), True),
    "20_plus_many_after": (_cjk_doc(list(range(20)) + list(range(4_000, 4_150))), False),
    "21st_at_3999": (_cjk_doc(list(range(20)) + [3_999]), True),
    "21st_at_4000": (_cjk_doc(list(range(20)) + [4_000]), False),
    "range_low_edge": ("\u4e00" * 21 + "a" * 10, True),
    "range_high_edge": ("\u9fff" * 21 + "a" * 10, True),
    "outside_range": ("\u3400" * 30 + "\ua000" * 30 + "あ" * 30 + "\uf900" * 30, False),
}


def test_cjk_rule_edges_with_is_cjk() -> None:
    for name, (text, expected) in CJK_CASES.items():
        assert is_cjk(text) is expected, name


def test_cjk_rule_edges_decide_the_cap_recorded_for_each_cell(project: Project) -> None:
    recs = []
    for name, (text, _) in CJK_CASES.items():
        project.doc(f"{name}.txt", text)
        recs.append(task(name, f"Question about {name}?", f"{name}.txt"))
    project.tasks(recs)
    project.config(routes=CJK_ROUTE, panel=[])
    plan_ok(project)
    cells = {c["task_id"]: c for c in project.sql("SELECT task_id, cjk, cap, scope FROM cells")}
    for name, (_, expected) in CJK_CASES.items():
        assert cells[name]["cjk"] == int(expected), name
        assert cells[name]["cap"] == (7_777 if expected else 1_000_000), name
    docs_cjk = {r["name"]: r["cjk"] for r in project.sql("SELECT name, cjk FROM documents")}
    assert docs_cjk["21st_at_3999.txt"] == 1 and docs_cjk["21st_at_4000.txt"] == 0


def test_cjk_flag_flips_scope_via_the_cjk_cap(project: Project) -> None:
    """The same 5,000-character length is in scope under the en cap and out of scope under the cjk cap."""
    project.doc("en.txt", _cjk_doc(list(range(20)), length=5_000))
    project.doc("zh.txt", _cjk_doc(list(range(21)), length=5_000))
    project.tasks([task("en", "Q?", "en.txt"), task("zh", "Q?", "zh.txt")])
    project.config(routes={"r": route("openai", "gpt-5.5", caps={"en": 5_000, "cjk": 4_999})}, panel=[])
    plan_ok(project)
    cells = {c["task_id"]: c["scope"] for c in project.sql("SELECT task_id, scope FROM cells")}
    assert cells == {"en": "send", "zh": "out_of_context_scope"}


def test_documents_are_decoded_strictly_and_bom_is_content(project: Project) -> None:
    """The document is the file's text as the harness reads it: a BOM is kept, CRLF becomes LF."""
    (project.root / "corpus" / "bom.txt").write_bytes("\ufeffLine one\r\nLine two".encode("utf-8"))
    project.tasks([task("b", "Q?", "bom.txt")])
    project.config(routes={"r": route("anthropic", "claude-opus-4-8")}, panel=[])
    plan_ok(project)
    (f,) = project.jobs_files()
    line = json.loads(f.read_bytes().split(b"\n")[0])
    assert line["params"]["messages"][0]["content"].endswith("Document:\n\ufeffLine one\nLine two")
    assert project.sql("SELECT chars FROM documents")[0]["chars"] == len("\ufeffLine one\nLine two")


def test_small_project_fixture_plans_every_cell(project: Project) -> None:
    small_project(project)
    plan_ok(project)
    assert project.sql("SELECT count(*) AS n FROM cells")[0]["n"] == 12
    assert project.sql("SELECT count(*) AS n FROM tasks")[0]["n"] == 4
