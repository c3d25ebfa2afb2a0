"""Why a route cannot finish, and what to do about it.

Only a real refusal or an empty answer is the model's failure (the WildTrace protocol). Every other
failure leaves the cell open, in one of two states that this module explains:

- **blocked**: the provider refused the request itself (a 400-class error), the key (401/403),
  or failed the batch at validation twice. Sending it again cannot help: the config must change.
  The diagnosis names the likely cause from the provider's message and the fix. Changing the
  route's config changes its policy fingerprint, so the fixed requests are planned afresh (and
  nothing already answered under the old policy is sent again); `batchrun retry` reopens
  requests whose config was right (a key fixed in the environment, a provider-side outage).
- **waiting**: transient failures (429, 5xx, timeouts, expired or cancelled batches) used up this
  run's retry budget. The next run resumes them with a fresh budget.

The messages are matched as text because the providers word the same problem differently and
none gives a stable code for all of them (OpenAI `unsupported_value` / `context_length_exceeded`,
Anthropic `invalid_request_error` "prompt is too long", Gemini 400 INVALID_ARGUMENT with the
token counts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..protocol.config import Config
from ..providers import TOO_LONG, UNKNOWN_MODEL
from .pending import current_requests_sql  # the one definition of "wanted by the current config"
from .store import Store


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str


@dataclass(frozen=True)
class Problem:
    """Open cells of one route that cannot move in this run, with the reason."""

    route: str  # the route whose requests fail (a judge route blocks the cells it grades)
    stage: str  # gen | judge
    state: str  # blocked | waiting
    requests: int
    kind: str  # the last failure's kind
    message: str  # the provider's last message (or batchrun's, for a batch without one)
    diagnosis: Diagnosis
    tasks: tuple[str, ...] = ()  # the cells' task ids, in dataset order

    def _cells(self) -> str:
        shown = ", ".join(self.tasks[:5]) + (f" and {len(self.tasks) - 5} more" if len(self.tasks) > 5 else "")
        return f" [{shown}]" if shown else ""

    def describe(self) -> str:
        what = "answers to judge" if self.stage == "judge" else "cell(s)"
        if self.state == "waiting":
            return (f"route {self.route!r}: {self.requests} {what}{self._cells()} used this run's retries after infrastructure "
                    f"failures (last: {self.message}). {self.diagnosis.fix}")
        return (f"route {self.route!r}: {self.requests} {what}{self._cells()} blocked: {self.diagnosis.cause} ({self.message}). "
                f"Fix: {self.diagnosis.fix}")

    def as_json(self) -> dict[str, object]:
        return {"route": self.route, "stage": self.stage, "state": self.state, "requests": self.requests, "kind": self.kind,
                "message": self.message, "cause": self.diagnosis.cause, "fix": self.diagnosis.fix, "tasks": list(self.tasks)}


def _has(text: str, *words: str) -> bool:
    return any(w in text for w in words)


def diagnose(route_name: str, kind: str, message: str, config: Config | None = None, error_type: str | None = None,
             *, then: str | None = None) -> Diagnosis:
    """The likely cause of a blocking failure and its fix, from the provider's message (and the
    adapter's classification, `error_type`, where it made one). `then`: what to run once the cause
    is fixed (default: `batchrun retry`, which reopens blocked cells)."""
    route = config.routes.get(route_name) if config is not None else None
    table = f'[routes."{route_name}"]'
    where = f" in {config.path}" if config is not None else ""
    retry = then or f"then run `batchrun retry --route {route_name}`"
    text = (message or "").lower()
    # Gemini answers a bad key with HTTP 400 INVALID_ARGUMENT "API key not valid" (reason
    # API_KEY_INVALID), not 401: the same fix as a refused key.
    if kind == "auth" or "api key not valid" in text or "api_key_invalid" in text:
        env = route.api_key_env if route is not None else "the route's api_key_env"
        return Diagnosis("the provider refused the API key", f"check the key in {env} for route {route_name!r}, {retry}.")
    if _has(text, "redirect to another host", "url on another host"):
        # netguard.ForeignHost's words: batchrun refused to send the key or a request elsewhere.
        return Diagnosis("the provider, or a proxy in front of it, sent a call to another host than the route's, "
                         "where batchrun sends no key and no request",
                         f"check base_url under {table}{where}: if the provider really moved, name its new address there "
                         f"(a proxy that redirects elsewhere is misconfigured or hostile), {retry}.")
    if kind == "batch_failed":
        return Diagnosis("the provider failed the batch at validation, twice",
                         f"fix what the provider's message names under {table}{where} (a changed policy re-plans the cells); "
                         f"if the provider was at fault, {retry}.")
    if "temperature" in text and _has(text, "unsupported", "not supported", "does not support", "deprecated",
                                      "not permitted", "extra inputs", "invalid", "not allowed"):
        return Diagnosis("the model rejects temperature",
                         f"set send_temperature = false under {table}{where} (spec §2: temperature is omitted for models "
                         "that reject it); the cells are planned afresh under the new policy.")
    if _has(text, "max_tokens", "max_completion_tokens", "max_output_tokens", "maxoutputtokens", "max output tokens") and _has(
            text, "too large", "exceed", "maximum", "must be less", "at most", "less than or equal", "up to"):
        return Diagnosis("the completion budget is above the model's output limit",
                         f"set max_tokens = <the model's output limit> under {table}{where}.")
    # The adapter recognised its provider's refusal (TOO_LONG); the words are the fallback for
    # results collected before it did.
    if error_type == TOO_LONG or _has(text, "context_length_exceeded", "context length", "context window", "prompt is too long",
                                      "maximum context", "too many tokens", "input token count",
                                      "exceeds the maximum number of tokens", "too long"):
        return Diagnosis("a document is longer than the model's context window: the route's caps are too high for this model "
                         "(a config problem, not the model's failure: the cells stay open, never scored 0)",
                         f"run `batchrun probe {route_name}` to measure the model's real window (spec §3: probe a new model's "
                         f"window, never inherit another model's caps), then `batchrun probe {route_name} --write` or lower "
                         f"caps = {{ en = ..., cjk = ... }} under {table}{where} by hand; the documents above the new cap "
                         "become out of context, the rest are planned afresh.")
    if _has(text, "unsupported parameter", "unrecognized request argument", "unknown parameter", "extra inputs are not permitted",
            "unknown name"):
        # A field the API does not take (OpenAI "Unsupported parameter" / "Unrecognized request
        # argument", Anthropic "Extra inputs are not permitted", Gemini "Unknown name"): batchrun
        # sends the fields of the route's provider kind, so the kind (or its base URL) is not the
        # API that serves this model; the message names the field, often the one it wants.
        return Diagnosis("the API does not take a parameter batchrun sends for this route's provider kind",
                         f"set provider (and base_url) under {table}{where} to the kind of API that serves this model: each "
                         "provider kind sends its own API's parameters (the provider's message names the one refused); "
                         "the cells are planned afresh under the new policy.")
    if error_type == UNKNOWN_MODEL or _has(text, "model_not_found", "does not exist", "unknown model", "invalid model", "no such model", "not found",
            "is not supported for") and "model" in text:
        model = f" {route.model!r}" if route is not None else ""
        fix = f"correct model under {table}{where} to the provider's model id."
        if config is not None and config.rehearsal:
            # The emulator's model tables hold the paper's models in each provider's id form, and
            # it plays one OpenAI-compatible provider (DashScope): a right id of another may be missing.
            fix += (" In this rehearsal the emulator serves only the ids of its model tables (batchrun/emulator/models.py): "
                    f"if the id is right for the route's real provider, start the emulator with --model {route.model if route else 'ID'}, "
                    "or check the route against its provider with `batchrun preflight` without --emulator.")
        return Diagnosis(f"the provider does not know the model{model}", fix)
    return Diagnosis("the provider rejected the request as invalid",
                     f"fix what the provider's message names under {table}{where} (a changed policy re-plans the cells); "
                     f"if the request was right, {retry}.")


def refused_call(route_name: str, failure: str, message: str, config: Config | None, *, batch_id: str,
                 host: str | None) -> tuple[str, str]:
    """(cause, fix) for a batch's status check or download that the provider refused: the route is
    blocked for the run, and the batch, still the provider's, is checked again by the next run
    (nothing is sent again)."""
    table = f'[routes."{route_name}"]'
    where = f" in {config.path}" if config is not None else ""
    again = f"the next run checks batch {batch_id} again (nothing is sent again)"
    text = (message or "").lower()
    # Gemini answers a bad key with 400 "API key not valid" (see diagnose): the key's fix too.
    if failure == "auth" or "api key not valid" in text or "api_key_invalid" in text:
        route = config.routes.get(route_name) if config is not None else None
        env = route.api_key_env if route is not None else "the route's api_key_env"
        return "the provider refused the API key", f"check the key in {env} for route {route_name!r}; {again}."
    if failure == "redirect":
        found = diagnose(route_name, "invalid", message, config)
        return found.cause, f"check base_url under {table}{where} (the batch was created at {host or 'its host'}); {again}."
    if failure == "not_found":
        return ("the provider does not know this batch",
                f"check base_url under {table}{where}: the batch was created at {host or 'its host'}, and only that host "
                f"knows it; {again}.")
    return ("the provider refused the call",
            f"check base_url and api_version under {table}{where} (the batch was created at {host or 'its host'}); {again}.")


def open_problems(store: Store, config: Config | None = None, *, requests: str = "request_status") -> list[Problem]:
    """Blocked and waiting requests the current config still wants, grouped by route.
    `requests`: "requests_now" where outputs.snapshot_cells has just evaluated request_status."""
    if requests not in ("request_status", "requests_now"):
        raise ValueError(requests)
    # blocking_id: each group's newest blocking failure (not a transient one that may have come
    # after it), found per request through the results index, not by reading the view again.
    # requests_now holds only the requests the current config wants (ledger.evaluate_requests
    # built it from them), so filtering it by current_requests_sql again changed nothing and cost
    # a second evaluation of that query (~0.3-0.45 s at 32 routes and 100k results). The order
    # of the rows within a task may differ without it; only each group's counts, maxima and its
    # tasks' first appearance in task order are read.
    wanted = "" if requests == "requests_now" else f"AND s.custom_id IN ({current_requests_sql()})"
    rows = store.rows(
        f"""SELECT s.route, s.stage, s.state, count(*) AS n, max(s.last_result_id) AS last_id,
                   json_group_array(s.task_id) AS tasks,
                   max(CASE WHEN s.state = 'blocked' THEN (
                       SELECT max(res.id) FROM results res
                       WHERE res.custom_id = s.custom_id AND res.kind IN ('invalid', 'auth', 'batch_failed')) END) AS blocking_id
            FROM (SELECT s.* FROM {requests} s JOIN tasks t ON t.task_id = s.task_id
                  WHERE s.state IN ('blocked', 'waiting') {wanted}
                  ORDER BY t.position) s
            GROUP BY s.route, s.stage, s.state ORDER BY s.state, s.route, s.stage""")
    problems = []
    for r in rows:
        last = store.one("SELECT kind, error_type, error_message FROM results WHERE id = ?",
                         [r["blocking_id"] if r["state"] == "blocked" else r["last_id"]])
        last = last or {"kind": "unknown", "error_type": None, "error_message": None}
        message = last["error_message"] or last["error_type"] or last["kind"]
        if r["state"] == "blocked":
            diagnosis = diagnose(r["route"], last["kind"], message, config, last["error_type"])
        else:
            diagnosis = Diagnosis("this run's retry budget is used up",
                                  "Run `batchrun refresh` again later: the next run resumes them with a fresh budget.")
        tasks = tuple(dict.fromkeys(json.loads(r["tasks"])))
        problems.append(Problem(r["route"], r["stage"], r["state"], r["n"], last["kind"], message, diagnosis, tasks))
    return problems
