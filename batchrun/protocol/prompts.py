"""The WildTrace protocol's two prompts, byte for byte (generation and judging).

The generation builder takes only the question text and the document: the gold answer, clues and
rubric cannot reach a model under test because nothing here can see them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

GENERATION_TEMPLATE = (
    "Answer using ONLY the document below. Include every specific detail from the text.\n\n"
    "Question: {question}\n\nDocument:\n{document}"
)
_GEN_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\nQuestion: "
_GEN_MIDDLE = "\n\nDocument:\n"

JUDGE_TEMPLATE = (
    "STRICT grader. Only award points for SPECIFIC details present.\n"
    "QUESTION: {question[:600]}\n"
    "RUBRIC:\n"
    "P1 ({points}pts): {correct_criterion[:260]}\n"
    "...\n"
    "RESPONSE:\n"
    "{response[:5000]}\n"
    'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
)
JUDGE_REPLY_LINE = 'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'

GENERATION_TEMPLATE_SHA256 = hashlib.sha256(GENERATION_TEMPLATE.encode()).hexdigest()
JUDGE_TEMPLATE_SHA256 = hashlib.sha256(JUDGE_TEMPLATE.encode()).hexdigest()


def generation_prompt(question: str, document: str) -> str:
    """The exact generation prompt. Concatenation, not str.format: braces in a question stay braces."""
    return _GEN_HEAD + question + _GEN_MIDDLE + document


def generation_prompt_overhead(question: str) -> int:
    """Characters the prompt adds around the document (for token estimates)."""
    return len(_GEN_HEAD) + len(question) + len(_GEN_MIDDLE)


class _RubricItem(Protocol):
    """A rubric item as the prompt reads it (dataset.RubricItem; read-only)."""

    @property
    def points(self) -> int | float: ...

    @property
    def criterion(self) -> str: ...


def format_points(points: int | float) -> str:
    # The reference harness interpolates the JSON value with Python's str(): 40 -> "40", 12.5 -> "12.5".
    return str(points)


# The judge sees the first 5000 characters of an answer (the harness: response[:5000]).
JUDGE_RESPONSE_CHARS = 5000


def judge_prompt(question: str, rubric: Sequence[_RubricItem], response: str) -> str:
    """The exact judge prompt: question[:600], rubric criteria [:260] each, response[:5000]."""
    lines = [
        "STRICT grader. Only award points for SPECIFIC details present.",
        f"QUESTION: {question[:600]}",
        "RUBRIC:",
    ]
    for i, item in enumerate(rubric, start=1):
        lines.append(f"P{i} ({format_points(item.points)}pts): {item.criterion[:260]}")
    lines.append("RESPONSE:")
    lines.append(response[:JUDGE_RESPONSE_CHARS])
    lines.append(JUDGE_REPLY_LINE)
    return "\n".join(lines)


def judge_prompt_chars(empty_prompt_chars: int, response: str) -> int:
    """`len(judge_prompt(question, rubric, response))`, given `len(judge_prompt(question, rubric,
    ""))`: the response is one line of the prompt, cut at JUDGE_RESPONSE_CHARS, so its length adds
    to the rest. collect measures a night's 14,000 answers without building each prompt."""
    return empty_prompt_chars + min(len(response), JUDGE_RESPONSE_CHARS)


def judge_graded_sha256(question: str, rubric: Sequence[_RubricItem]) -> str:
    """sha256 of everything a judge grades except the answer: the judge prompt with an empty
    response (question[:600], each criterion[:260] with its points). A change to any of it must
    re-judge (the protocol never mixes settings), and a change to nothing in it (a gold answer, a
    clue, the question beyond 600 characters) must not."""
    return hashlib.sha256(judge_prompt(question, rubric, "").encode()).hexdigest()
