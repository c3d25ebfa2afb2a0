"""`batchrun probe ROUTE`: measure a model's real context window and suggest its caps in characters.

The protocol (spec §3) evaluates each model at its native window, with a cap in characters per
script (en / cjk), and says a NEW model's window must be probed, never inherited from an older
version. Two methods, chosen by what the provider offers (`Adapter.reports_window`):

- **tokens**: the provider states the model's input window in tokens (Gemini `models.get`
  `input_token_limit`, Anthropic `models.retrieve` `max_input_tokens`) and counts tokens without
  running the model (`count_tokens`, free). The probe counts the real generation prompt around a
  sample of the project's own longest document of each script, and around no document, so
  characters per token = sample characters / (tokens with - tokens without), and
  cap = (window - prompt tokens without a document) x characters per token.
- **search**: the provider states no window (OpenAI has no counting endpoint and no window in its
  model object; nor do most OpenAI-compatible providers). A binary search on document length: the
  real generation prompt around a prefix of the longest document of each script (repeated when the
  window is longer than the document) is sent online with a completion budget of 1 token. Lengths
  grow x4 from a small start while accepted; then the bracket [largest accepted, smallest
  rejected] narrows until it is within `precision` of the smallest rejected: by two steps just
  below and above the window where a refusal states the window and the prompt's tokens, else by
  halving. Every step's cost is estimated before it is sent (one token a character until an
  accepted step measured the document's ratio, then that ratio with a margin) and a step that
  could take the spend over `max_cost` is not sent. A refused request is not billed; an accepted
  one costs its input tokens and one output token at the route's online price.

The samples: the project's longest English document (one the protocol's CJK rule reads as en),
and its most CJK document among those the rule reads as cjk, provided its text is mostly CJK (a
share of CJK characters of at least MIN_CJK_SHARE). The rule (>20 ideographs in the first 4,000
characters) only decides which cap a document gets; an English report with 21 ideographs passes
it, and measured as the CJK sample it would make the cjk cap several times too high (issue 26:
118,358 characters against 31,400 from a Chinese document), so Chinese documents under that cap
would be sent and refused as too long. A project without a mostly-CJK document gets no cjk cap
suggested (and `--write` writes none): the route keeps the one it has.

The suggestion is the largest length known to fit: `caps = { en = ..., cjk = ... }`. A probe is
recorded in state.db (`probes`, m013) with its evidence, for audit, and `config_write` puts the
caps into the config file (probe_caps.py).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..base.errors import BatchrunError, ConfigError, DataError
from ..base.stop import checkpoint
from ..ledger.cost import fmt_money, online_cost
from ..ledger.inputs import Inputs, as_inputs
from ..protocol.config import Config, Route
from ..protocol.corpus import Corpus, read_document
from ..protocol.policy import generation_max_tokens
from ..protocol.prompts import generation_prompt
from ..providers import Adapter, ProbeAnswer, get_adapter

Script = Literal["en", "cjk"]
SCRIPTS: tuple[Script, ...] = ("en", "cjk")

DEFAULT_PRECISION = 0.02
# The search's first length and its ceiling, per script (characters): the start is cheap; the
# ceiling is 4x the protocol's default caps (a model with a longer window gets "at least" this).
START_CHARS = {"en": 40_000, "cjk": 12_000}
MAX_CHARS = {"en": 11_400_000, "cjk": 3_400_000}
GROWTH = 4
# Characters of a document counted for characters per token (tokens method).
SAMPLE_CHARS = 200_000
# Estimates must not be low, or a step could take the spend past --max-cost: until a step has
# measured the document's characters per token (usage of an accepted step, the same text), a
# step is estimated at one token per character (above what any tokenizer gives English or
# Chinese prose); after, at the measured ratio with this margin.
UNMEASURED_CHARS_PER_TOKEN = 1.0
ESTIMATE_MARGIN = 1.1
# A minimal completion: the most output an accepted step can be billed for (1 token, 16 on
# OpenAI's Responses API, whose minimum max_output_tokens is 16), so an estimate is never low.
OUTPUT_TOKENS = 16
# Attempts of one step that fails transiently (rate limit, overload, no answer).
TRANSIENT_ATTEMPTS = 3
# The CJK sample is mostly CJK text: at least this share of its non-space characters (in the part
# a probe reads, SAMPLE_CHARS) are CJK: ideographs (with extension A and compatibility ones),
# kana, Hangul, CJK punctuation and fullwidth forms, the text whose tokens the cjk cap is about.
MIN_CJK_SHARE = 0.5
_CJK_TEXT = re.compile("[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Sample:
    """The project document a script is probed with (its longest), and a question asked of it."""

    script: Script
    corpus_file: str
    chars: int
    task_id: str
    question: str
    path: Path
    cjk_share: float | None = None  # CJK characters / non-space characters of its first SAMPLE_CHARS (cjk samples)


@dataclass(frozen=True)
class Step:
    """One online request of a search."""

    script: Script
    chars: int  # document characters sent
    est_tokens: int
    est_cost: float | None
    outcome: str  # accepted | too_long | error | not sent (budget)
    input_tokens: int | None = None  # the provider's count (usage, or as its refusal states it)
    window: int | None = None  # the window a refusal states
    cost: float | None = 0.0
    message: str = ""


@dataclass(frozen=True)
class ScriptResult:
    script: Script
    cap: int | None  # suggested cap in characters; None: not measured (the route's cap is kept)
    sample: Sample | None
    largest_accepted: int | None = None
    smallest_rejected: int | None = None
    chars_per_token: float | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # tokens method: the counts it used
    note: str = ""
    reserved_chars: int = 0  # left free for the answer where max_tokens counts against the window


@dataclass(frozen=True)
class ProbeResult:
    route: str
    provider: str
    model: str
    method: Literal["tokens", "search"]
    precision: float
    max_cost: float | None
    window: int | None  # the window the provider states (tokens method)
    scripts: tuple[ScriptResult, ...]
    steps: tuple[Step, ...] = ()
    spent: float = 0.0
    dry_run: bool = False
    plan: tuple[str, ...] = ()  # --dry-run: what would be sent
    probed_at: float = field(default_factory=time.time)

    @property
    def caps(self) -> dict[str, int | None]:
        return {r.script: r.cap for r in self.scripts}

    @property
    def complete(self) -> bool:
        return all(r.cap is not None for r in self.scripts)

    def evidence(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("plan")
        for script in data["scripts"]:
            if script["sample"]:
                script["sample"].pop("path")  # the corpus_file names it; a local path is no evidence
        return data


def parse_precision(text: str) -> float:
    """--precision as "2%" or 0.02: the largest gap left between the largest accepted and the
    smallest rejected length, relative to the smallest rejected."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BatchrunError(f"--precision {text!r} is not a number.", "Pass a fraction or a percentage, e.g. --precision 2%.") from None
    if not 0.0005 <= value <= 0.5:
        raise BatchrunError(f"--precision {text!r} is out of range.", "Pass between 0.05% and 50%, e.g. --precision 2%.")
    return value


def cjk_share(text: str) -> float:
    """The share of CJK characters among the non-space characters of `text` (0 when it has none)."""
    solid = len(text) - len(_SPACE.findall(text))
    return len(_CJK_TEXT.findall(text)) / solid if solid else 0.0


def samples(corpus: Corpus) -> tuple[dict[Script, Sample], dict[Script, str]]:
    """The document each script is probed with, with the first question asked of it, and for a
    script without one, why: en, the longest document the CJK rule reads as en; cjk, among the
    documents it reads as cjk, the one whose text is most CJK (share to the percent, the longest
    among equals), if mostly CJK (MIN_CJK_SHARE)."""
    best: dict[Script, Sample] = {}
    rank: dict[str, tuple[float, int]] = {}
    candidates = 0
    most = 0.0
    for task in corpus.dataset.tasks:
        info = corpus.docs[task.corpus_file]
        path = corpus.paths[task.corpus_file]
        if not info.cjk:
            if "en" not in best or info.chars > best["en"].chars:
                best["en"] = Sample("en", task.corpus_file, info.chars, task.task_id, task.question, path)
            continue
        if task.corpus_file not in rank:
            candidates += 1
            share = cjk_share(read_document(path, where=f"corpus file {task.corpus_file}", limit=SAMPLE_CHARS))
            most = max(most, share)
            rank[task.corpus_file] = (round(share, 2), info.chars)
            if share >= MIN_CJK_SHARE and ("cjk" not in best or rank[task.corpus_file] > rank[best["cjk"].corpus_file]):
                best["cjk"] = Sample("cjk", task.corpus_file, info.chars, task.task_id, task.question, path, round(share, 4))
    absent: dict[Script, str] = {}
    if "en" not in best:
        absent["en"] = "no en document in the project"
    if "cjk" not in best:
        absent["cjk"] = (f"no mostly-CJK document in the project ({candidates} document(s) pass the protocol's CJK rule, but at "
                         f"most {most:.0%} of their characters are CJK, under the {MIN_CJK_SHARE:.0%} a sample needs)"
                         if candidates else "no CJK document in the project")
    return best, absent


class _Texts:
    """Prompts around a document prefix of any length (the document repeated past its end)."""

    def __init__(self, sample: Sample):
        self.sample = sample
        self.text = read_document(sample.path, where=f"corpus file {sample.corpus_file}")
        if not self.text.strip():
            raise DataError(f"corpus file {sample.corpus_file} is empty.", "Probe with a project that has a non-empty document.")

    def document(self, chars: int) -> str:
        unit = self.text + "\n\n"
        return (unit * (chars // len(unit) + 1))[:chars]

    def prompt(self, chars: int) -> str:
        return generation_prompt(self.sample.question, self.document(chars))


def route_for(config: Config, name: str) -> Route:
    route = config.routes.get(name)
    if route is None:
        raise config.route_error(name, what="ROUTE")
    return route


def probe(
    config: Config | Inputs,
    route_name: str,
    *,
    max_cost: float | None = None,
    precision: float = DEFAULT_PRECISION,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda _: None,
    client: Any = None,
) -> ProbeResult:
    """Measure the route's model and suggest caps (see the module docstring). Sends nothing with
    `dry_run`; never spends more than `max_cost` (required when the search must send). `config`:
    the command's resolved inputs (a Config is resolved here, measuring every document)."""
    route = route_for(config if isinstance(config, Config) else config.config, route_name)
    inputs = as_inputs(None, config)
    config = inputs.config
    adapter = get_adapter(route.provider)
    found, absent = samples(inputs.require_corpus())
    if not found:
        raise DataError(f"The dataset {config.paths.dataset} names no document to probe with.",
                        "Probe from a project whose dataset has at least one English or CJK document.")
    base = ProbeResult(route.name, route.provider, route.model, "tokens" if adapter.reports_window else "search",
                       precision, max_cost, None, ())
    if dry_run:
        return replace(base, dry_run=True, plan=tuple(_plan(route, adapter, found, absent, precision)))
    if client is None:
        from ..providers.clients import make_client

        client = make_client(route)
    if adapter.reports_window:
        progress(f"route {route.name!r}: reading the window of {route.model} from the provider")
        window = adapter.input_token_limit(client, route)
        if window is not None:
            scripts = tuple(_by_tokens(config, route, adapter, client, window, found.get(s), s, progress, absent.get(s, ""))
                            for s in SCRIPTS)
            return _leave_room_for_the_answer(config, route, adapter, replace(base, window=window, scripts=scripts))
        progress(f"route {route.name!r}: the provider states no window for {route.model}; searching instead")
    if _price_unknown(route):
        raise ConfigError(f"Route {route.name!r} has no price, so the probe cannot estimate what its requests cost.",
                          f"Set price = {{ input = ..., output = ... }} under [routes.\"{route.name}\"] in {config.path}, "
                          "then run the probe again (see --dry-run for the plan).")
    if max_cost is None:
        raise BatchrunError(f"The probe of route {route.name!r} sends requests that cost money, and no --max-cost was given.",
                            f"Run `batchrun probe {route.name} --dry-run` to see the plan and its estimated cost, "
                            "then pass --max-cost USD.")
    return _search(config, route, adapter, client, found, absent, precision, max_cost, base, progress)


def _price_unknown(route: Route) -> bool:
    return online_cost(route, 1, OUTPUT_TOKENS) is None


# --- the tokens method -------------------------------------------------------------------------


def _not_measured(script: Script, why: str) -> ScriptResult:
    return ScriptResult(script, None, None, note=f"{why}: not measured, no {script} cap suggested")


def _by_tokens(config: Config, route: Route, adapter: Adapter, client: Any, window: int, sample: Sample | None,
               script: Script, progress: Callable[[str], None], absent: str) -> ScriptResult:
    if sample is None:
        return _not_measured(script, absent)
    texts = _Texts(sample)
    n = min(len(texts.text), SAMPLE_CHARS)
    with_doc = adapter.count_tokens(client, route, texts.prompt(n))
    without = adapter.count_tokens(client, route, texts.prompt(0))
    assert with_doc is not None and without is not None  # reports_window promises a counting endpoint
    progress(f"{script}: {n:,} characters of {sample.corpus_file} count {with_doc - without:,} tokens")
    if with_doc <= without:
        return ScriptResult(script, None, sample, note="the provider counted no tokens for the document: not measured")
    ratio = n / (with_doc - without)
    cap = math.floor((window - without) * ratio)
    if cap < 1:  # the prompt alone fills the stated window: no document fits (the config needs caps >= 1)
        return ScriptResult(script, None, sample, chars_per_token=round(ratio, 4),
                            note=f"the prompt alone ({without:,} tokens) fills the stated window ({window:,} tokens): not measured")
    return ScriptResult(script, cap, sample, chars_per_token=round(ratio, 4),
                        tokens={"window": window, "sample_chars": n, "prompt_with_sample": with_doc, "prompt_without_document": without})


# --- the search method -------------------------------------------------------------------------


class _Budget:
    def __init__(self, max_cost: float):
        self.max_cost = max_cost
        self.spent = 0.0

    def allows(self, cost: float) -> bool:
        return self.spent + cost <= self.max_cost + 1e-12


def _estimate(route: Route, prompt_chars: int, measured: float | None) -> tuple[int, float | None]:
    """(tokens, cost) of a step before it is sent: never below what it will likely cost."""
    ratio = measured / ESTIMATE_MARGIN if measured else UNMEASURED_CHARS_PER_TOKEN
    tokens = math.ceil(prompt_chars / ratio)
    return tokens, online_cost(route, tokens, OUTPUT_TOKENS)


def _search(config: Config, route: Route, adapter: Adapter, client: Any, found: dict[Script, Sample], absent: dict[Script, str],
            precision: float, max_cost: float, base: ProbeResult, progress: Callable[[str], None]) -> ProbeResult:
    budget = _Budget(max_cost)
    steps: list[Step] = []
    results = []
    for script in SCRIPTS:
        sample = found.get(script)
        if sample is None:
            results.append(_not_measured(script, absent[script]))
            continue
        results.append(_search_script(route, adapter, client, _Texts(sample), script, precision, budget, steps, progress))
    return _leave_room_for_the_answer(config, route, adapter,
                                      replace(base, method="search", scripts=tuple(results), steps=tuple(steps), spent=round(budget.spent, 6)))


def _leave_room_for_the_answer(config: Config, route: Route, adapter: Adapter, result: ProbeResult) -> ProbeResult:
    """Where the provider counts a request's max_tokens against the window, the measured length
    (a prompt sent with a budget of 1 token, or the stated window) would leave no room for the
    route's real answers: a document just under such a cap is refused as too long. The cap keeps
    max_tokens x (characters per token) free."""
    if not adapter.completion_in_window:
        return result
    answer_tokens = generation_max_tokens(config, route)
    scripts = []
    for r in result.scripts:
        if r.cap is None or not r.chars_per_token:
            scripts.append(r)
            continue
        reserve = math.ceil(answer_tokens * r.chars_per_token)
        note = (f"{r.note}; " if r.note else "") + (f"{reserve:,} characters left free for the answer "
                                                    f"(max_tokens {answer_tokens:,}, which the provider counts against the window)")
        cap = r.cap - reserve
        scripts.append(replace(r, cap=cap if cap >= 1 else None, reserved_chars=reserve,
                               note=note if cap >= 1 else note + ": no document fits, not measured"))
    return replace(result, scripts=tuple(scripts))


def _search_script(route: Route, adapter: Adapter, client: Any, texts: _Texts, script: Script, precision: float,
                   budget: _Budget, steps: list[Step], progress: Callable[[str], None]) -> ScriptResult:
    lo, hi = 0, None  # largest accepted, smallest rejected (characters)
    measured: float | None = None
    overhead = len(texts.prompt(0))
    chars = START_CHARS[script]
    hints: list[int] = []  # lengths just below and above where a refusal's stated counts put the window
    note = ""
    converged = False  # a cap is suggested only from a closed bracket (or the longest length sent)
    while True:
        est_tokens, estimated = _estimate(route, overhead + chars, measured)
        est_cost = estimated or 0.0  # the price is known: probe() checked
        if not budget.allows(est_cost):
            steps.append(Step(script, chars, est_tokens, est_cost, "not sent (budget)", cost=None))
            note = (f"stopped before precision: the next step ({chars:,} characters, estimated {fmt_money(est_cost)}) would take "
                    f"the spend over --max-cost {fmt_money(budget.max_cost)} ({fmt_money(budget.spent)} spent)")
            break
        answer = _send(adapter, client, route, texts.prompt(chars))
        cost = 0.0
        if answer.outcome == "accepted":
            tokens = answer.input_tokens if answer.input_tokens is not None else est_tokens
            cost = online_cost(route, tokens, answer.output_budget) or 0.0
            if answer.input_tokens:
                measured = (overhead + chars) / answer.input_tokens
        budget.spent += cost
        steps.append(Step(script, chars, est_tokens, est_cost, answer.outcome, answer.input_tokens, answer.window, cost,
                          answer.message[:300]))
        progress(f"{script}: {chars:,} characters: {answer.outcome.replace('_', ' ')}"
                 + (f" ({answer.input_tokens:,} tokens)" if answer.input_tokens else "") + f"; spent {fmt_money(budget.spent)}")
        if answer.outcome == "error":
            note = f"stopped: the provider refused a step for another reason than length (HTTP {answer.status}): {answer.message[:200]}"
            break
        if answer.outcome == "accepted":
            lo = chars
        else:
            hi = chars
            if answer.window and answer.input_tokens:
                # Where the provider states both counts (OpenAI, Anthropic, Gemini do), the window
                # is about window x (characters per token at this length): two steps around it
                # close the bracket, instead of halving it step by step.
                predicted = answer.window * (overhead + chars) / answer.input_tokens - overhead
                hints = [math.floor(predicted * (1 - precision / 3)), math.ceil(predicted * (1 + precision / 3))]
        if hi is None:
            if chars >= MAX_CHARS[script]:
                note = f"no rejection up to {chars:,} characters: the window is at least this long"
                converged = True
                break
            chars = min(chars * GROWTH, MAX_CHARS[script])
            continue
        if hi - lo <= precision * hi or hi - lo <= 1:
            converged = True
            break
        chars = next((h for h in hints if lo < h < hi), (lo + hi) // 2)
        hints = [h for h in hints if h != chars]
    # A search stopped early (an error, the budget) knows only a lower bound: writing it as the cap
    # would evaluate the model below its real window, so nothing is suggested for this script.
    cap = lo if lo > 0 and converged else None
    if cap is None and not note:
        note = f"even {hi:,} characters were refused as too long"
    elif cap is None and lo > 0:
        note += f"; no cap suggested: the window is at least {lo:,} characters (the largest accepted), probe again to close it"
    return ScriptResult(script, cap, texts.sample, largest_accepted=lo or None, smallest_rejected=hi,
                        chars_per_token=round(measured, 4) if measured else None, note=note)


def _send(adapter: Adapter, client: Any, route: Route, prompt: str) -> ProbeAnswer:
    """One step, tried again after a transient failure (429, 5xx, no answer): those are not
    answers about the length. A failed attempt is not billed."""
    from ..base.backoff import backoff, retry_base

    for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
        checkpoint()  # each step is paid: a stop swallowed where it landed sends no more (base/stop.py)
        answer = adapter.probe_call(client, route, prompt)
        transient = answer.status is None or answer.status in (408, 409, 429) or answer.status >= 500
        if answer.outcome != "error" or not transient or attempt == TRANSIENT_ATTEMPTS:
            return answer
        time.sleep(backoff(attempt, base=retry_base(), cap=30.0))
    raise AssertionError("unreachable")


# --- --dry-run ------------------------------------------------------------------------------------


def _plan(route: Route, adapter: Adapter, found: dict[Script, Sample], absent: dict[Script, str], precision: float) -> list[str]:
    lines = []
    if adapter.reports_window:
        lines.append(f"read {route.model}'s input window from the provider and count tokens of the real prompt around "
                     f"up to {SAMPLE_CHARS:,} characters of each sample (no completion: free); if the provider states "
                     "no window, search as below")
    unknown = _price_unknown(route)
    worst = 0.0
    for script in SCRIPTS:
        sample = found.get(script)
        if sample is None:
            lines.append(f"{script}: {absent[script]}: not measured, no {script} cap suggested")
            continue
        ratio = route.chars_per_token[0 if script == "en" else 1]
        overhead = len(generation_prompt(sample.question, ""))
        lines.append(f"{script}: prompt around a prefix of {sample.corpus_file} ({sample.chars:,} characters, repeated past its end), "
                     f"question of task {sample.task_id}; max_tokens 1; the first step estimated at 1 token a character, "
                     f"the next ones (here) at the route's {ratio} characters a token, once sent at the measured ratio")
        chars = START_CHARS[script]
        while True:
            tokens, cost = _estimate(route, overhead + chars, None if chars == START_CHARS[script] else ratio)
            worst += cost or 0.0
            lines.append(f"  grow: {chars:>10,} characters  ~{tokens:>9,} tokens  {fmt_money(cost):>10} if accepted")
            if chars >= MAX_CHARS[script]:
                break
            chars = min(chars * GROWTH, MAX_CHARS[script])
        halvings = math.ceil(math.log2((GROWTH - 1) / GROWTH / precision)) + 1
        top = _estimate(route, overhead + MAX_CHARS[script], ratio)[1]
        worst += halvings * (top or 0.0)
        lines.append(f"  then at most {halvings} halvings of the bracket to within {precision:.1%}, each at most {fmt_money(top)}; "
                     "the growth stops at the first refusal, and a refused request is not billed")
    lines.append("price unknown: set price = { input = ..., output = ... } on the route before a search"
                 if unknown else f"worst case (every request accepted, at the ceiling): {fmt_money(worst)}; "
                 "a search never sends a step that could take the spend over --max-cost")
    return lines
