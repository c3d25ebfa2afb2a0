"""What an emulator answered, recorded as sent, and the checks of tests/sdk_conformance.py picked
for each answer by provider, method and path.

    recorder = Recorder(emulator, monkeypatch)   # before the calls
    ...                                          # SDK calls, batchrun commands
    assert not report(recorder.take())           # one line per violation
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import anthropic.types as at
from anthropic.types.messages import DeletedMessageBatch, MessageBatch, MessageBatchIndividualResponse
from anthropic.types.shared import ErrorResponse as AnthropicErrorResponse
from google.genai import types as gt

from sdk_conformance import (
    AnthropicPage, CountTokens, Empty, GeminiModel, GoogleError, ListOperations, Operation, ResultLine, UploadedFile,
    anthropic_violations, gemini_violations, openai_body_violations, openai_error_violations, openai_line_violations,
    openai_list_violations,
)

# --------------------------------------------------------------------------- one recorded answer


@dataclass
class Answer:
    """One HTTP answer of the emulator, as sent (see tests/test_sdk_answers.py's recorder)."""

    provider: str
    method: str
    path: str
    status: int
    body: bytes
    # For a file download: whether the emulator wrote the file (a result file) and, for OpenAI,
    # the endpoint of the batch it belongs to.
    generated: bool = False
    endpoint: str = ""

    @property
    def kind(self) -> str:
        return classify(self)


_OPENAI = [
    ("GET", r".*/files/[^/]+/content", "file_content"),
    ("DELETE", r".*/files/[^/]+", "file_deleted"),
    ("GET", r".*/files", "file_list"),
    (".*", r".*/files(/[^/]+)?", "file"),
    ("GET", r".*/batches", "batch_list"),
    (".*", r".*/batches(/[^/]+(/cancel)?)?", "batch"),
    ("POST", r".*/chat/completions", "chat"),
    ("POST", r".*/responses", "response"),
]
_ANTHROPIC = [
    ("POST", r"/v1/messages", "message"),
    ("POST", r"/v1/messages/count_tokens", "count_tokens"),
    ("GET", r"/v1/models/[^/]+", "model"),
    ("GET", r"/v1/messages/batches", "batch_list"),
    ("GET", r"/v1/messages/batches/.+/results", "results"),
    ("DELETE", r"/v1/messages/batches/.+", "batch_deleted"),
    (".*", r"/v1/messages/batches(/.+?(/cancel)?)?", "batch"),
]
_GEMINI = [
    ("POST", r"/upload/.*", "upload"),
    ("GET", r"/(download/)?[^/]+/files/[^/:]+:download", "download"),
    ("POST", r"/[^/]+/models/.+:generateContent", "generate"),
    ("POST", r"/[^/]+/models/.+:countTokens", "count_tokens"),
    ("POST", r"/[^/]+/models/.+:batchGenerateContent", "batch"),
    ("GET", r"/[^/]+/models/[^/:]+", "model"),
    ("POST", r"/[^/]+/batches/[^/:]+:cancel", "empty"),
    ("DELETE", r".*", "empty"),
    ("GET", r"/[^/]+/batches", "batch_list"),
    ("GET", r"/[^/]+/batches/[^/]+", "batch"),
    ("GET", r"/[^/]+/files", "file_list"),
    ("GET", r"/[^/]+/files/[^/]+", "file"),
]


def classify(answer: Answer) -> str:
    if answer.status >= 400:
        return "error"
    # DashScope's compatible mode answers with OpenAI's objects (emulator/dashscope.py).
    table = {"openai": _OPENAI, "dashscope": _OPENAI, "anthropic": _ANTHROPIC, "gemini": _GEMINI}[answer.provider]
    for method, pattern, kind in table:
        if re.fullmatch(method, answer.method) and re.fullmatch(pattern, answer.path):
            return kind
    raise AssertionError(f"no check for {answer.provider} {answer.method} {answer.path}")


def _lines(body: bytes) -> list[str]:
    return [line for line in body.decode("utf-8").split("\n") if line]


def violations(answer: Answer) -> list[str]:
    """Every violation in one answer (each line of a result file checked on its own)."""
    kind, body = answer.kind, answer.body
    if answer.provider in ("openai", "dashscope"):
        if kind == "error":
            return openai_error_violations(json.loads(body))
        if kind == "file_content":
            if not answer.generated:
                return []  # the client's own upload, echoed
            return [f"line {i}: {v}" for i, line in enumerate(_lines(body), 1) for v in openai_line_violations(line, answer.endpoint)]
        if kind in ("batch_list", "file_list"):
            return openai_list_violations(kind.split("_")[0], json.loads(body))
        return openai_body_violations(kind, json.loads(body))
    if answer.provider == "anthropic":
        if kind == "results":
            return [f"line {i}: {v}" for i, line in enumerate(_lines(body), 1)
                    for v in anthropic_violations(MessageBatchIndividualResponse, line)]
        model = {
            "error": AnthropicErrorResponse, "message": at.Message, "count_tokens": at.MessageTokensCount,
            "model": at.ModelInfo, "batch_list": AnthropicPage, "batch_deleted": DeletedMessageBatch, "batch": MessageBatch,
        }[kind]
        return anthropic_violations(model, body)
    if kind == "download":
        if not answer.generated:
            return []
        return [f"line {i}: {v}" for i, line in enumerate(_lines(body), 1) for v in gemini_violations(ResultLine, line)]
    if kind == "upload" and not body:
        return []  # the resumable session's start and intermediate chunks answer with headers only
    model = {
        "error": GoogleError, "upload": UploadedFile, "generate": gt.GenerateContentResponse, "count_tokens": CountTokens,
        "model": GeminiModel, "empty": Empty, "batch_list": ListOperations, "batch": Operation, "file_list": gt.ListFilesResponse,
        "file": gt.File,
    }[kind]
    return gemini_violations(model, body)


# --------------------------------------------------------------------------- recording answers


class Recorder:
    """Every answer an emulator sends (the bytes after faults), captured where each provider module
    puts its last touches on a response (``Provider.outgoing``)."""

    def __init__(self, emulator: Any, monkeypatch: Any) -> None:
        from batchrun.emulator.anthropic import Anthropic
        from batchrun.emulator.gemini import Gemini
        from batchrun.emulator.openai import OpenAI

        self.core = emulator._core
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        for cls in (OpenAI, Anthropic, Gemini):
            monkeypatch.setattr(cls, "outgoing", self._wrap(cls.outgoing))

    def _wrap(self, original: Any) -> Any:
        def outgoing(provider: Any, ctx: Any, resp: Any) -> None:
            original(provider, ctx, resp)
            if provider.core is self.core and not ctx.path.startswith("/_emulator"):
                self._add(provider.name, ctx, resp)

        return outgoing

    def _add(self, provider: str, ctx: Any, resp: Any) -> None:
        body = resp.body
        generated, endpoint = False, ""
        if resp.file_path:
            with open(resp.file_path, "rb") as f:
                body = f.read(resp.file_length)
            file_id = re.search(r"files/([^/:]+)", ctx.path)
            rec = self.core.files.get(file_id.group(1)) if file_id else None
            generated = rec.generated if rec is not None else provider == "anthropic"  # results are generated
            if rec is not None:
                batch = next((b for b in self.core.batches.values()
                              if rec.id in (getattr(b, "output_file_id", None), getattr(b, "error_file_id", None))), None)
                endpoint = batch.endpoint if batch is not None else ""
        answer = Answer(provider, ctx.method, ctx.path, resp.status, bytes(body), generated, endpoint)
        with self._lock:
            self.answers.append(answer)

    def take(self) -> list[Answer]:
        with self._lock:
            answers, self.answers = self.answers, []
        return answers


def report(answers: list[Answer]) -> list[str]:
    """``provider METHOD path [status]: violation`` for every violation in ``answers``."""
    return [f"{a.provider} {a.method} {a.path} [{a.status}]: {v}" for a in answers for v in violations(a)]
