"""Responders: what the emulator's "model" answers.

A responder is a callable ``responder(request: dict) -> str | dict``. The request dict is::

    {"provider": "openai" | "anthropic" | "gemini",
     "model": "gpt-x",              # bare model name (Gemini's "models/" prefix removed)
     "prompt": "...",               # text of the last user turn (the one to answer)
     "params": {...},               # the native request body (OpenAI line body, Anthropic
                                    # params, Gemini GenerateContentRequest)
     "custom_id": "..." | None}     # OpenAI/Anthropic custom_id, Gemini key; None online

and the reply is one of

* ``"text"`` - the answer (``""`` renders as an empty completion),
* ``{"refusal": "..."}`` - rendered as each provider's native refusal,
* ``{"error": {"status": 429, "message": "..."}}`` - a per-request failure.

``builtin_responder`` is deterministic and understands the two batchrun prompts:

* **Generation** (``"Answer using ONLY the document below. ..."``): extractive. The document is
  split into sentences (on ``.!?`` followed by whitespace, on ``。！？`` and on newlines); each
  sentence is scored by how many distinct question tokens it contains; the top ``k`` sentences
  (ties broken by position) are returned in document order. ``k = 1 + (stable_hash(model) >> 32) % 5``
  (the model as ``caps.normalise_model`` spells it: ``claude-opus-4-8`` and ``claude-opus-4.8``
  answer alike) and some models also drop every fourth word, so different models score differently on a
  leaderboard while the same request always gets the same answer. One pass over the document, no
  quadratic work: a 3 MB document takes well under a second.
* **Judge** (``"STRICT grader. ..."``): each rubric line ``P{i} ({points}pts): {criterion}`` earns
  its full points when at least 60 % of the criterion's content tokens occur in the RESPONSE
  section, else 0. The reply is exactly ``json.dumps({"points_awarded": [...], "total": N})``.
* Anything else: ``"OK"``.

Tokens ("content tokens"): the text is lower-cased; runs of CJK ideographs (U+4E00-U+9FFF) give
their character bigrams (a lone ideograph counts as itself); other runs of letters/digits count
when at least 3 characters long and not in ``STOPWORDS``. Digits are kept on purpose (years,
amounts and counts are the "specific details" a rubric asks for).

A user responder is given as a callable, ``"path/to/file.py:func"`` (loaded by path) or
``"package.module:func"`` (imported); see ``load_responder``.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from ..protocol.caps import normalise_model

Reply = str | dict
Responder = Callable[[dict], Reply]

GENERATION_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\n"
GENERATION_QUESTION = "Question: "
GENERATION_DOCUMENT = "\n\nDocument:\n"
JUDGE_HEAD = "STRICT grader. Only award points for SPECIFIC details present.\nQUESTION: "
JUDGE_RUBRIC = "\nRUBRIC:\n"
JUDGE_RESPONSE = "\nRESPONSE:\n"
JUDGE_REPLY = "\nReply JSON:"

# Criterion coverage needed for a rubric item to earn its points.
JUDGE_THRESHOLD = 0.6
# A chosen sentence longer than this is cut (a document without punctuation is one "sentence").
MAX_SENTENCE_CHARS = 1200

STOPWORDS = frozenset(
    """
    the and for are but not you all any can had her was one our out has have with this that from
    they will what which when where who whom why how does did its into about than then them there
    these those their were been being also such each other some more most only over under should
    would could may might must shall very just both few own same too yet per via upon onto
    your his she him hers ours mine theirs itself himself herself themselves
    mentions mention mentioned notes noted explains explained describes described identifies
    identified includes include included specifies specified correctly response answer question
    document details detail specific specifically states stated names lists gives provides says
    """.split()
)

_CJK_CHAR_RE = re.compile(r"[\u4e00-\u9fff]")
_TOKEN_RE = re.compile(r"([\u4e00-\u9fff]+)|([^\W_\u4e00-\u9fff]+)")
# Sentence boundaries: ASCII terminators followed by whitespace (so "4.2" and "e.g.x" stay whole),
# CJK terminators anywhere, and newlines. The terminator stays with its sentence; the group that
# matched is the separator (empty after a CJK terminator). The leading lookahead lets the regex
# engine skip quickly to candidate characters.
_BOUNDARY_RE = re.compile(r"(?=[.!?。！？\n])(?:[.!?](\s+)|[。！？]()|(\n+))")
_RUBRIC_LINE_RE = re.compile(r"^\s*P(\d+)\s*\(\s*([0-9]+(?:\.[0-9]+)?)\s*pts?\s*\)\s*:\s*(.*?)\s*$", re.M)


def content_tokens(text: str) -> set[str]:
    """The set of content tokens of ``text`` (see the module docstring)."""
    tokens: set[str] = set()
    for cjk, word in _TOKEN_RE.findall(text.lower()):
        if cjk:
            if len(cjk) == 1:
                tokens.add(cjk)
            else:
                tokens.update(cjk[i : i + 2] for i in range(len(cjk) - 1))
        elif len(word) >= 3 and word not in STOPWORDS:
            tokens.add(word)
    return tokens


def stable_hash(text: str) -> int:
    """A process-independent hash (Python's ``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def model_quality(model: str) -> tuple[int, bool]:
    """``(k, drop_words)`` for a model name: how many sentences it extracts, whether it drops words."""
    # Bits 32.. of the hash: spreads the demo's five model names over k = 1..5 (a leaderboard
    # with ties everywhere would not show anything).
    h = stable_hash(normalise_model(model or "")) >> 32
    return 1 + h % 5, (h >> 3) % 3 == 0


def _segments(document: str) -> tuple[list[int], list[int]]:
    """Start and end offsets of the raw segments between sentence boundaries (some may be blank)."""
    # Every alternative of _BOUNDARY_RE has one group, so lastindex names the one that matched.
    spans = [m.span(m.lastindex or 0) for m in _BOUNDARY_RE.finditer(document)]
    starts = [0] + [b for _, b in spans]
    ends = [a for a, _ in spans] + [len(document)]
    return starts, ends


_WORD_EDGE = r"[^\W_\u4e00-\u9fff]"


def _token_finder(tokens: set[str]) -> list[re.Pattern]:
    """Regexes that find whole occurrences of ``tokens`` (same token rules as content_tokens)."""
    words = sorted((t for t in tokens if not _CJK_CHAR_RE.match(t)), key=len, reverse=True)
    bigrams = sorted(t for t in tokens if len(t) == 2 and _CJK_CHAR_RE.match(t))
    singles = sorted(t for t in tokens if len(t) == 1 and _CJK_CHAR_RE.match(t))
    patterns = []
    if words:
        alternation = "|".join(map(re.escape, words))
        patterns.append(re.compile(rf"(?<!{_WORD_EDGE})(?:{alternation})(?!{_WORD_EDGE})", re.IGNORECASE))
    if bigrams:  # overlapping matches: a lookahead at every position
        patterns.append(re.compile("(?=(" + "|".join(bigrams) + "))"))
    if singles:  # a lone ideograph is a token only when it is a whole CJK run
        patterns.append(re.compile(r"(?<![\u4e00-\u9fff])(" + "|".join(singles) + r")(?![\u4e00-\u9fff])"))
    return patterns


def extractive_answer(question: str, document: str, model: str) -> str:
    """The top-k question-relevant sentences of ``document``, in document order.

    Equivalent to scoring every sentence by ``len(content_tokens(question) &
    content_tokens(sentence))`` but done with a few C-speed regex scans over the whole document:
    only occurrences of the question's tokens are visited, then mapped to their sentence.
    """
    k, drop_words = model_quality(model)
    starts, ends = _segments(document)
    hits: dict[int, set[str]] = {}
    for pattern in _token_finder(content_tokens(question)):
        group = 1 if pattern.groups else 0
        for m in pattern.finditer(document):
            index = bisect.bisect_right(starts, m.start()) - 1
            found = hits.get(index)
            if found is None:
                hits[index] = found = set()
            found.add(m.group(group).lower())
    # Rank by (number of distinct question tokens, position); blank segments never score and
    # are skipped when filling up with score-0 sentences.
    chosen = [index for _, index in sorted((-len(found), index) for index, found in hits.items())[:k]]
    index = 0
    while len(chosen) < k and index < len(starts):
        if index not in hits and document[starts[index] : ends[index]].strip():
            chosen.append(index)
        index += 1
    parts = [document[starts[i] : ends[i]].strip()[:MAX_SENTENCE_CHARS] for i in sorted(chosen)]
    answer = " ".join(parts)
    if drop_words:
        words = answer.split(" ")
        if len(words) > 3:
            answer = " ".join(w for i, w in enumerate(words) if i % 4 != 3)
    return answer


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if "." not in text else value


def judge_reply(prompt: str) -> str:
    """Grade the RESPONSE section of a judge prompt against its rubric lines."""
    rubric_at = prompt.find(JUDGE_RUBRIC)
    response_at = prompt.find(JUDGE_RESPONSE, rubric_at + 1 if rubric_at >= 0 else 0)
    if rubric_at < 0 or response_at < 0:
        return json.dumps({"points_awarded": [], "total": 0})
    reply_at = prompt.rfind(JUDGE_REPLY)
    if reply_at < response_at:
        reply_at = len(prompt)
    rubric = prompt[rubric_at + len(JUDGE_RUBRIC) : response_at]
    response_tokens = content_tokens(prompt[response_at + len(JUDGE_RESPONSE) : reply_at])
    awarded: list[int | float] = []
    for match in _RUBRIC_LINE_RE.finditer(rubric):
        points = _number(match.group(2))
        wanted = content_tokens(match.group(3))
        # A criterion with no content tokens is vacuously satisfied.
        covered = len(wanted & response_tokens) / len(wanted) if wanted else 1.0
        awarded.append(points if covered >= JUDGE_THRESHOLD else (0 if isinstance(points, int) else 0.0))
    total: int | float = sum(awarded)
    return json.dumps({"points_awarded": awarded, "total": total})


def builtin_responder(request: dict) -> Reply:
    """The default deterministic responder (see the module docstring)."""
    prompt = request.get("prompt") or ""
    if prompt.startswith(JUDGE_HEAD):
        return judge_reply(prompt)
    if prompt.startswith(GENERATION_HEAD):
        q_at = prompt.find(GENERATION_QUESTION, len(GENERATION_HEAD) - 2)
        d_at = prompt.find(GENERATION_DOCUMENT)
        if q_at >= 0 and d_at > q_at:
            question = prompt[q_at + len(GENERATION_QUESTION) : d_at]
            document = prompt[d_at + len(GENERATION_DOCUMENT) :]
            return extractive_answer(question, document, str(request.get("model") or ""))
    return "OK"


def load_responder(spec: Any) -> Responder:
    """Resolve a responder: None (built-in), a callable, ``"file.py:func"`` or ``"pkg.mod:func"``."""
    if spec is None or spec == "":
        return builtin_responder
    if callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"responder must be a callable or 'file.py:func' / 'package.module:func', got {spec!r}")
    target, _, func_name = spec.rpartition(":")
    if target.endswith(".py") or os.sep in target or "/" in target:
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise ValueError(f"responder file not found: {target}")
        module_name = "batchrun_emulator_responder_" + hashlib.sha256(path.encode()).hexdigest()[:12]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"cannot load responder file {target}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"responder {spec!r}: {func_name!r} is not a callable in {target}")
    return func
