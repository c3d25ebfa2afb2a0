"""custom_ids: deterministic, a hash of everything that makes a request what it is (stage, policy
fingerprint, task, document checksum, question; for a judge request the answer and what it
grades). Re-planning an unchanged cell yields the same id, so nothing is sent twice and a result
is never attributed to other settings; resume.py recomputes them to find what changed."""

from __future__ import annotations

import hashlib

from ..protocol.corpus import READING, DocumentInfo
from ..protocol.dataset import Task


def digest(*parts: str) -> str:
    """The sha256 (hex) of the parts joined by NUL: the hash every id is cut from."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def generation_custom_id(policy_fp: str, task: Task, doc: DocumentInfo) -> str:
    """The generation request's id. Where reading the document translated newlines (the WildTrace
    reference harness reads with universal newlines; batchrun before 0.2 sent \r\n as it was),
    the reading is part of the id: such a prompt differs from the one an older batchrun sent under
    the same id, so its answer must not be reused. Every other document keeps its id, and its
    answers."""
    if doc.newlines_translated:
        return "g-" + digest("gen", policy_fp, task.task_id, doc.sha256, task.question, READING)[:40]
    return "g-" + digest("gen", policy_fp, task.task_id, doc.sha256, task.question)[:40]


def judge_custom_id(judge_fp: str, gen_custom_id: str, answer: str, graded_sha256: str, *, answer_sha: str | None = None) -> str:
    """The judge request's id: its policy, the answer it grades and everything else it grades
    (question and rubric as the judge sees them: prompts.judge_graded_sha256). `answer_sha`:
    digest(answer), if the caller has it (the same answer goes to every judge of the panel)."""
    return "j-" + digest("judge", judge_fp, gen_custom_id, answer_sha or digest(answer), graded_sha256)[:40]
