"""Synthetic provider result lines and downloaded batches, for the benchmarks (standard library only).

`Lines` writes seeded result lines in each provider's native shape (OpenAI output.jsonl +
errors.jsonl, Anthropic results.jsonl, Gemini results.jsonl with `key`), of every kind batchrun
tells apart: ok answers (2-6 KB, about a fifth in Chinese), refusals, empty answers, transient
errors (429/5xx/overloaded), invalid requests (400) and judge verdicts (the bare object, fenced in
```json, with prose around it, or with no parseable total). An `expired` attempt has no line: its
batch ends `expired` and collect records the request as expired.

`mark_downloaded` puts a batch where `batchrun poll` leaves one that ended and was downloaded
(status, provider fields, timestamps, result files), so that `batchrun collect` reconciles it.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Sequence

EN_WORDS = ("the report states that clerk inspected harbor ledger on march with receipts signed by the "
            "council after river bridge repairs costing francs recorded in volume and witnessed by "
            "engineer at station seven whose journal notes the delay caused by flooding").split()
ZH_CHARS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
JUDGE_PROSE = ("The response names the clerk and the date but omits the amount. ",
               "Criterion 1 is satisfied; criterion 2 is only partly addressed. ",
               "Only the first rubric item is supported by specific details. ")
TRANSIENT = [(500, "The server had an error while processing your request."), (429, "Rate limit reached for requests."),
             (529, "Overloaded")]
INVALID = (400, "Invalid request: prompt is too long: 1203345 tokens > 1000000 maximum")
AUTH = (401, "Incorrect API key provided.")


class Lines:
    """Seeded provider-native result lines. `answer_pool` answers are made once and reused (the
    text of an answer does not matter to batchrun, only its size and script)."""

    def __init__(self, seed: int, answer_pool: int = 0):
        self.rng = random.Random(seed)
        self.now = 1_760_000_000
        self.pool = [self._answer() for _ in range(answer_pool)]

    def hexid(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"

    def answer(self) -> str:
        return self.rng.choice(self.pool) if self.pool else self._answer()

    def _answer(self) -> str:
        rng = self.rng
        target = rng.randint(2_000, 6_000)  # bytes
        if rng.random() < 0.2:
            return "".join(rng.choice(ZH_CHARS) for _ in range(target // 3))
        out, size = [], 0
        while size < target:
            s = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(8, 20))).capitalize() + f" ({rng.randint(1800, 2024)})."
            if rng.random() < 0.15:
                s += "\n\n- " + rng.choice(EN_WORDS) + ": \"" + rng.choice(EN_WORDS) + "\""
            out.append(s)
            size += len(s) + 1
        return " ".join(out)[:target]

    def verdict(self, rubric: Sequence[int], parseable: bool = True) -> str:
        rng = self.rng
        if not parseable:
            return "I cannot grade this response without the document."  # no parseable total
        awarded = [p if rng.random() < 0.6 else 0 for p in rubric]
        core = json.dumps({"points_awarded": awarded, "total": sum(awarded)})
        r = rng.random()
        if r < 0.70:
            return core
        if r < 0.90:
            return f"```json\n{core}\n```"
        return rng.choice(JUDGE_PROSE) + rng.choice(JUDGE_PROSE) + "\n" + core

    # -- one line ------------------------------------------------------------------------------

    def line(self, provider: str, model: str, custom_id: str, kind: str, text: str | None, prompt_chars: int) -> tuple[dict, bool]:
        """(line, goes to OpenAI's error file). kind: ok | refusal | empty | transient | invalid | auth."""
        in_tok = max(1, prompt_chars // 4)
        if kind in ("transient", "invalid", "auth"):
            status, message = INVALID if kind == "invalid" else AUTH if kind == "auth" else self.rng.choice(TRANSIENT)
            return self._error(provider, custom_id, status, message)
        text = "" if kind == "empty" else (text or "")
        out_tok = max(1, len(text) // 4)
        if provider == "openai":
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
            finish = "stop"
            if kind == "refusal":
                message = {"role": "assistant", "content": None, "refusal": "I can't help with that request.", "annotations": []}
            body = {
                "id": "chatcmpl-" + self.hexid(29), "object": "chat.completion", "created": self.now, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": {"prompt_tokens": in_tok, "completion_tokens": out_tok, "total_tokens": in_tok + out_tok,
                          "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                        "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
                "service_tier": "default", "system_fingerprint": "fp_" + self.hexid(10),
            }
            return {"id": "batch_req_" + self.hexid(32), "custom_id": custom_id,
                    "response": {"status_code": 200, "request_id": "req_" + self.hexid(32), "body": body}, "error": None}, False
        if provider == "anthropic":
            stop = "refusal" if kind == "refusal" else "end_turn"
            message = {
                "id": "msg_01" + self.hexid(22), "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}] if text else [], "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": in_tok, "output_tokens": out_tok, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "service_tier": "batch"},
            }
            return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}, False
        finish = "SAFETY" if kind == "refusal" else "STOP"
        response = {
            "candidates": [{"content": {"parts": [{"text": text}] if text else [], "role": "model"}, "finishReason": finish, "index": 0}],
            "usageMetadata": {"promptTokenCount": in_tok, "candidatesTokenCount": out_tok, "totalTokenCount": in_tok + out_tok,
                              "thoughtsTokenCount": 0, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": in_tok}]},
            "modelVersion": model, "responseId": self.hexid(22),
        }
        return {"key": custom_id, "response": response}, False

    def _error(self, provider: str, custom_id: str, status: int, message: str) -> tuple[dict, bool]:
        if provider == "openai":
            status = 500 if status == 529 else status
            body = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                              "param": None, "code": None}}
            return {"id": "batch_req_" + self.hexid(32), "custom_id": custom_id,
                    "response": {"status_code": status, "request_id": "req_" + self.hexid(32), "body": body}, "error": None}, True
        if provider == "anthropic":
            etype = {500: "api_error", 429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error",
                     401: "authentication_error"}[status]
            return {"custom_id": custom_id, "result": {"type": "errored", "error": {
                "type": "error", "error": {"type": etype, "message": message}, "request_id": "req_011C" + self.hexid(20)}}}, False
        status = 503 if status == 529 else status
        gstatus = {500: "INTERNAL", 503: "UNAVAILABLE", 429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED"}[status]
        return {"key": custom_id, "error": {"code": status, "message": message, "status": gstatus}}, False


def id_and_answer(obj: Any) -> tuple[str | None, str | None]:
    """(custom_id, answer text or None) of a line `Lines.line` wrote, read by its shape alone: the
    least any collect must take from a line (bench/ingest.py's floor). An error line has no answer."""
    if not isinstance(obj, dict):
        return None, None
    custom_id = obj.get("custom_id") or obj.get("key")
    response, result = obj.get("response"), obj.get("result")
    if isinstance(response, dict) and isinstance(response.get("body"), dict):  # a chat completion, or its error
        choices = response["body"].get("choices")
        return custom_id, (choices[0]["message"]["content"] if choices else None)
    if isinstance(response, dict) and response.get("candidates"):
        parts = response["candidates"][0]["content"]["parts"]
        return custom_id, (parts[0]["text"] if parts else "")
    if isinstance(result, dict) and isinstance(result.get("message"), dict):
        content = result["message"]["content"]
        return custom_id, (content[0]["text"] if content else "")
    return custom_id, None


def result_file_names(provider: str) -> list[str]:
    """The files `poll` downloads for a batch of this provider (OpenAI: output + error file)."""
    return ["output.jsonl", "errors.jsonl"] if provider == "openai" else ["results.jsonl"]


def write_result_files(folder: Path, provider: str, lines: Sequence[tuple[dict, bool]], dumps: Any = None) -> list[Path]:
    """Write a batch's downloaded result files; returns their paths (as poll records them)."""
    dumps = dumps or (lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")))
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / n for n in result_file_names(provider)]
    handles = [open(p, "w", encoding="utf-8", newline="\n") for p in paths]
    try:
        for obj, to_errors in lines:
            handles[1 if to_errors and len(handles) > 1 else 0].write(dumps(obj) + "\n")
    finally:
        for h in handles:
            h.close()
    return paths


def mark_downloaded(con: sqlite3.Connection, batch_id: str, files: Sequence[Path], *, provider_state: str = "done",
                    at: float | None = None, provider_batch_id: str | None = None) -> None:
    """Where poll leaves a batch that ended and whose results were downloaded (poll._follow),
    each file's sha256 recorded as poll records it: collect checks them before reading (resume.
    send_back_lost_result_files), and a benchmark that left them out would not time that."""
    at = time.time() if at is None else at
    raw_status = {"done": "completed", "expired": "expired"}.get(provider_state, provider_state)
    digests = []
    for f in files:
        with open(f, "rb") as fh:
            digests.append(hashlib.file_digest(fh, "sha256").hexdigest())
    con.execute(
        """UPDATE batches SET status = 'downloaded', provider_batch_id = coalesce(provider_batch_id, ?), provider_status = ?,
           provider_state = ?, quota = 0, submitted_at = coalesce(submitted_at, ?), ended_at = ?, downloaded_at = ?,
           download_attempts = 1, result_files_json = ?, result_files_sha256_json = ? WHERE id = ?""",
        [provider_batch_id or f"batch_{batch_id}", raw_status, provider_state, at - 3600, at, at,
         json.dumps([str(f) for f in files]), json.dumps(digests), batch_id])


# Every timestamp column batchrun writes (epoch seconds). document_files.mtime_ns is a file's
# own mtime, not a moment of batchrun's: never shifted.
TIMESTAMP_COLUMNS = {
    "runs": ("started_at", "ended_at"),
    "datasets": ("first_seen",),
    "policies": ("first_seen",),
    "cells": ("planned_at",),
    "requests": ("created_at",),
    "batches": ("created_at", "creating_at", "submitted_at", "ended_at", "downloaded_at", "collected_at"),
    "results": ("collected_at",),
    "reopens": ("created_at",),
    "accepted_failures": ("created_at",),
    "document_readings": ("measured_at",),
}


def age_state(con: sqlite3.Connection, seconds: float) -> None:
    """Move everything state.db recorded `seconds` into the past, as if the next command ran that
    much later (a retry's backoff is then over, as it would be the next night)."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, cols in TIMESTAMP_COLUMNS.items():
        if table in tables:
            con.execute(f"UPDATE {table} SET " + ", ".join(f"{c} = {c} - ?" for c in cols), [seconds] * len(cols))


def pick(rng: random.Random, mix: Sequence[tuple[str, float]]) -> str:
    """A kind drawn from (kind, share) pairs."""
    r = rng.random()
    for kind, share in mix:
        if r < share:
            return kind
        r -= share
    return mix[0][0]


def download_planned(state: Path, lines: Lines, gen_mix: Sequence[tuple[str, float]],
                     judge_mix: Sequence[tuple[str, float]]) -> tuple[list[Path], dict[str, int]]:
    """Play submit + poll for every planned batch of a state.db: each ends, its result lines (one
    per request, kinds drawn from the mixes; judge kinds ok | unparseable | transient) are written
    in the provider's shape beside its request file, and it is marked downloaded. Returns the
    result files and the kinds written ("gen ok": n, ...)."""
    con = sqlite3.connect(state)
    rubric = {tid: [int(i["points"]) for i in json.loads(rj)] for tid, rj in con.execute("SELECT task_id, rubric_json FROM tasks")}
    files: list[Path] = []
    kinds: dict[str, int] = {}
    with con:
        for bid, provider, model, stage, folder in con.execute(
                "SELECT id, provider, model, stage, dir FROM batches WHERE status = 'planned' ORDER BY seq").fetchall():
            out = []
            for cid, task_id, prompt_chars in con.execute(
                    """SELECT q.custom_id, q.task_id, q.prompt_chars FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
                       WHERE br.batch_id = ? ORDER BY br.position""", [bid]).fetchall():
                kind = pick(lines.rng, gen_mix if stage == "gen" else judge_mix)
                kinds[f"{stage} {kind}"] = kinds.get(f"{stage} {kind}", 0) + 1
                if stage == "gen":
                    out.append(lines.line(provider, model, cid, kind, lines.answer() if kind == "ok" else None, prompt_chars))
                elif kind == "transient":
                    out.append(lines.line(provider, model, cid, "transient", None, prompt_chars))
                else:
                    out.append(lines.line(provider, model, cid, "ok", lines.verdict(rubric[task_id], kind == "ok"), prompt_chars))
            written = write_result_files(Path(folder), provider, out)
            files += written
            mark_downloaded(con, bid, written)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return files, kinds
