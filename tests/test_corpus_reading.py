"""Documents as the reference harness reads them: `open(path, encoding="utf-8").read()`.

Universal newlines (CRLF and a lone CR become LF, also when a CRLF straddles the 32 KiB pieces
batchrun reads in), a UTF-8 BOM kept as U+FEFF. `len()` of that text decides caps, its first 4,000
characters the CJK rule, and it is what request lines carry; the document's identity stays the
sha256 of its bytes. Measurements cached in state.db under the old reading are not reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from batchrun.protocol.corpus import CHUNK_BYTES
from conftest import Project, route, task

BOM = b"\xef\xbb\xbf"
IDEOGRAPHS = "港口起重机在凌晨三点十四分发生故障操作员是马拉风速达到四十一节维修用了九天"

DOCS: dict[str, bytes] = {
    "crlf.txt": b"The harbor crane failed at 03:14.\r\nThe operator was Mara Quist.\r\n" * 40,
    "cr.txt": b"Old Mac text.\rWind reached 41 knots.\r\rRepairs took nine days.\r",
    "bom.txt": BOM + b"A document saved with a BOM.\r\nSecond line.\n",
    # A CRLF split by the 32 KiB piece boundary: \r ends the first piece, \n starts the second.
    "straddle.txt": b"a" * (CHUNK_BYTES - 1) + b"\r\n" + b"tail\r\n" * 3,
    # A lone \r as the last byte of the first piece and of the file: only the final flush knows.
    "cr-at-end.txt": b"b" * (CHUNK_BYTES - 1) + b"\r",
    # Ideographs past the first 4,000 characters as stored, within them once CRLF counts as one.
    "zh-late.txt": b"x\r\n" * 1400 + IDEOGRAPHS.encode() + b"\r\n",
    "plain.txt": b"Nothing to translate here.\n",
}
ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "gemini": route("gemini", "gemini-2.5-pro"),
}


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


def harness_text(path: Path) -> str:
    """The reference harness's reading, verbatim."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_docs(project: Project, docs: dict[str, bytes]) -> None:
    for name, data in docs.items():
        (project.root / "corpus" / name).write_bytes(data)


def prompt_of(line: dict[str, Any]) -> tuple[str, str]:
    """(custom_id, prompt) of a request line of any provider."""
    if "body" in line:  # OpenAI
        return line["custom_id"], line["body"]["messages"][0]["content"]
    if "params" in line:  # Anthropic
        return line["custom_id"], line["params"]["messages"][0]["content"]
    return line["key"], line["request"]["contents"][0]["parts"][0]["text"]  # Gemini


def test_length_cjk_rule_and_request_text_follow_the_harness_reading(project: Project) -> None:
    write_docs(project, DOCS)
    names = sorted(DOCS)
    project.tasks([task(f"t-{n}", f"What does {n} say?", n) for n in names])
    project.config(routes=ROUTES, panel=[])
    ok(project.run("plan"))

    expected = {n: harness_text(project.root / "corpus" / n) for n in names}
    # The cases are what they claim to be.
    assert expected["bom.txt"].startswith("\ufeff") and "\r" not in "".join(expected.values())
    assert expected["straddle.txt"] == "a" * (CHUNK_BYTES - 1) + "\n" + "tail\n" * 3
    assert expected["cr-at-end.txt"] == "b" * (CHUNK_BYTES - 1) + "\n"
    assert expected["zh-late.txt"].index(IDEOGRAPHS) < 4000 < DOCS["zh-late.txt"].decode().index(IDEOGRAPHS)

    cells = {(c["route"], c["task_id"]): c for c in project.sql("SELECT * FROM cells")}
    for n in names:
        for r in ROUTES:
            c = cells[(r, f"t-{n}")]
            assert c["doc_chars"] == len(expected[n]), (r, n)
            assert c["doc_sha256"] == hashlib.sha256(DOCS[n]).hexdigest()  # identity: the bytes
            assert c["cjk"] == (n == "zh-late.txt"), (r, n)
    readings = {r["sha256"]: r["chars"] for r in project.sql("SELECT * FROM document_readings")}
    assert readings == {hashlib.sha256(d).hexdigest(): len(expected[n]) for n, d in DOCS.items()}

    # Each request line carries exactly that text as the end of its prompt.
    task_of = {r["custom_id"]: r["task_id"] for r in project.sql("SELECT custom_id, task_id FROM requests")}
    seen = set()
    for f in project.jobs_files():
        for raw in f.read_bytes().splitlines():
            custom_id, prompt = prompt_of(json.loads(raw))
            name = task_of[custom_id][len("t-"):]
            assert prompt.endswith("\n\nDocument:\n" + expected[name]), name
            seen.add((f.parent.name.split("-")[1], name))
    assert seen == {(r, n) for r in ROUTES for n in names}


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_measurements_made_under_the_old_reading_are_not_reused(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    data = DOCS["crlf.txt"]
    new_len, old_len = len(data.decode().replace("\r\n", "\n")), len(data.decode())
    write_docs(project, {"crlf.txt": data})
    _age(project.root / "corpus" / "crlf.txt", 3600)  # cacheable, as an unchanged corpus is
    project.tasks([task("t1", "When did the crane fail?", "crlf.txt")])
    # A cap between the two counts: the scope decision depends on which one is used.
    project.config(routes={"gpt": route("openai", "gpt-5.5", caps={"en": new_len, "cjk": new_len})}, panel=[])
    plan_module = sys.modules["batchrun.protocol.corpus"]
    ok(project.run("plan"))

    # state.db as a batchrun before this reading left it (then migrated): the file cache and the
    # document row with the count CRLF made, no measurement under the current reading.
    sha = hashlib.sha256(data).hexdigest()
    conn = sqlite3.connect(project.state_path)
    with conn:
        conn.execute("DELETE FROM document_readings")
        conn.execute("UPDATE documents SET chars = ? WHERE sha256 = ?", [old_len, sha])
        conn.execute("UPDATE cells SET doc_chars = ?, scope = 'out_of_context_scope', custom_id = NULL", [old_len])
    conn.close()
    assert project.sql("SELECT count(*) AS n FROM document_files")[0]["n"] == 1

    measured: list[str] = []
    real = plan_module.measure_file

    def counting(name: str, path: Path, **kwargs: Any) -> Any:
        measured.append(name)
        return real(name, path, **kwargs)

    monkeypatch.setattr(plan_module, "measure_file", counting)
    ok(project.run("plan"))
    assert measured == ["crlf.txt"]  # measured again, once (the CLI's check and plan share it)
    (cell,) = project.sql("SELECT * FROM cells")
    assert (cell["doc_chars"], cell["scope"]) == (new_len, "send") and cell["custom_id"]
    assert project.sql("SELECT chars FROM documents")[0]["chars"] == old_len  # the old row stays, for audit
    assert project.sql("SELECT reading, chars FROM document_readings") == [
        {"reading": "utf-8/universal-newlines/bom-kept", "chars": new_len}]

    # From then on the cache answers.
    ok(project.run("plan"))
    assert measured == ["crlf.txt"]


def test_generation_ids_change_only_for_documents_whose_reading_translated_newlines(tmp_path: Path) -> None:
    """An answer produced from a prompt with \\r\\n (batchrun before 0.2) must not stand for the prompt a
    clean-room run sends now; every other document keeps its id and so its answers."""
    from batchrun.protocol.corpus import measure_file
    from batchrun.protocol.dataset import RubricItem, Task
    from batchrun.ledger.ids import digest, generation_custom_id

    (tmp_path / "lf.txt").write_bytes(b"one\ntwo\n")
    (tmp_path / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    task = Task("t1", "q?", "lf.txt", (RubricItem(100, "x"),), {}, 0)
    lf = measure_file("lf.txt", tmp_path / "lf.txt", where="test")
    crlf = measure_file("crlf.txt", tmp_path / "crlf.txt", where="test")
    assert (lf.newlines_translated, crlf.newlines_translated) == (False, True)
    assert generation_custom_id("fp", task, lf) == "g-" + digest("gen", "fp", "t1", lf.sha256, "q?")[:40]  # as before
    assert generation_custom_id("fp", task, crlf) != "g-" + digest("gen", "fp", "t1", crlf.sha256, "q?")[:40]
